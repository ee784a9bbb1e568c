"""The two A2A calls the backend makes, in the JSON-RPC 0.3 shape most AgentBeats agents speak.

Written on httpx directly: the backend only needs "send one text message" and "stream one text message and notice
the first answer", and the 0.3 wire shape is stable, whereas a2a-sdk 1.x's client speaks 1.0 by default.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx


class A2ADeliveryError(Exception):
    """The message did not reach the agent or the agent answered with an error; the text says which."""


@dataclass(frozen=True)
class A2AReply:
    """The first result of a call: its kind (message, task, status-update, artifact-update) and any text in it."""

    kind: str
    text: str
    raw: dict[str, Any]


def text_message_request(method: str, text: str) -> dict[str, Any]:
    """A JSON-RPC 0.3 request carrying one user text part."""
    return {
        "jsonrpc": "2.0",
        "id": str(uuid.uuid4()),
        "method": method,
        "params": {
            "message": {
                "kind": "message",
                "messageId": uuid.uuid4().hex,
                "role": "user",
                "parts": [{"kind": "text", "text": text}],
            }
        },
    }


def _texts(value: Any) -> list[str]:
    """Every text part found anywhere in a 0.3 result (message parts, status message, artifact parts)."""
    found: list[str] = []
    if isinstance(value, dict):
        if value.get("kind") == "text" and isinstance(value.get("text"), str):
            found.append(value["text"])
        for child in value.values():
            found.extend(_texts(child))
    elif isinstance(value, list):
        for child in value:
            found.extend(_texts(child))
    return found


def _reply_from_rpc(body: Any, url: str) -> A2AReply:
    """Turn a JSON-RPC response object into a reply, or raise A2ADeliveryError for an error object."""
    if not isinstance(body, dict):
        raise A2ADeliveryError(f"{url} answered something that is not a JSON-RPC object")
    if body.get("error") is not None:
        error = body["error"]
        if isinstance(error, dict):
            raise A2ADeliveryError(f"{url} answered JSON-RPC error {error.get('code')}: {error.get('message')}")
        raise A2ADeliveryError(f"{url} answered JSON-RPC error {error!r}")
    result = body.get("result")
    if not isinstance(result, dict):
        raise A2ADeliveryError(f"{url} answered without a result")
    kind = str(result.get("kind") or ("message" if "messageId" in result else "task" if "id" in result else "unknown"))
    return A2AReply(kind=kind, text="\n".join(_texts(result)), raw=result)


async def send_text(client: httpx.AsyncClient, url: str, text: str, *, timeout: float) -> A2AReply:
    """``message/send`` one text.

    Raises A2ADeliveryError (unreachable, HTTP or JSON-RPC error) or httpx.TimeoutException (no answer in time).
    """
    try:
        response = await client.post(url, json=text_message_request("message/send", text), timeout=timeout)
    except httpx.TimeoutException:
        raise
    except httpx.HTTPError as exc:
        raise A2ADeliveryError(f"{url} unreachable: {type(exc).__name__}: {exc or 'no detail'}") from exc
    if response.status_code != 200:
        raise A2ADeliveryError(f"{url} answered HTTP {response.status_code}")
    try:
        body = response.json()
    except ValueError as exc:
        raise A2ADeliveryError(f"{url} answered something that is not JSON") from exc
    return _reply_from_rpc(body, url)


async def _sse_data(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """The data of each server-sent event (multi-line data joined), ignoring comments and other fields."""
    data: list[str] = []
    async for line in lines:
        if line == "":
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if field == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


async def stream_text(
    client: httpx.AsyncClient, url: str, text: str, *, connect_timeout: float
) -> AsyncGenerator[A2AReply]:
    """``message/stream`` one text and yield every result as it arrives, until the agent ends the stream.

    The read has no timeout: the caller decides how long to wait for the first reply and cancels the iteration
    when the battle is over. Errors before the first reply raise A2ADeliveryError.
    """
    timeout = httpx.Timeout(connect=connect_timeout, read=None, write=connect_timeout, pool=connect_timeout)
    request = text_message_request("message/stream", text)
    try:
        async with client.stream(
            "POST", url, json=request, headers={"Accept": "text/event-stream"}, timeout=timeout
        ) as response:
            if response.status_code != 200:
                raise A2ADeliveryError(f"{url} answered HTTP {response.status_code}")
            content_type = response.headers.get("content-type", "")
            if "text/event-stream" not in content_type:
                # A server that ignores streaming and answers one JSON-RPC response is still an acknowledgement.
                body = json.loads(await response.aread())
                yield _reply_from_rpc(body, url)
                return
            async for data in _sse_data(response.aiter_lines()):
                try:
                    body = json.loads(data)
                except ValueError as exc:
                    raise A2ADeliveryError(f"{url} streamed an event that is not JSON") from exc
                yield _reply_from_rpc(body, url)
    except httpx.HTTPError as exc:
        raise A2ADeliveryError(f"{url} unreachable: {type(exc).__name__}: {exc or 'no detail'}") from exc

"""Talking to a white agent the way a green agent does, over both A2A wire formats.

``talk(base_url, "1.0")`` uses the a2a-sdk 1.x client (card resolver + ClientFactory, non-streaming SendMessage);
``talk(base_url, "0.3")`` posts raw 0.3 JSON-RPC ``message/send`` with httpx (what AgentBeats-era agents send).
Both return :class:`Answer` objects so tests read replies the same way.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers import get_message_text, new_data_part, new_text_part
from a2a.types.a2a_pb2 import Message, Role, SendMessageRequest, TaskState
from a2a.utils.errors import JSON_RPC_ERROR_CODE_MAP, A2AError

Wire = Literal["1.0", "0.3"]
ACTION = re.compile(r"<json>(.*?)</json>", re.DOTALL)


@dataclass
class Answer:
    """One white-agent answer: a Message, a Task (state, status text, artifact texts) or a JSON-RPC error."""

    kind: Literal["message", "task", "error"]
    text: str = ""
    task_state: str | None = None
    artifact_texts: list[str] = field(default_factory=list)
    error_code: int | None = None
    error_message: str = ""

    def action(self) -> dict[str, Any] | None:
        """The ``<json>`` action in the text (status message for tasks), or None."""
        match = ACTION.search(self.text)
        return json.loads(match.group(1)) if match else None


def _error_code(error: A2AError) -> int | None:
    """The JSON-RPC code the client's exception class stands for."""
    for cls in type(error).__mro__:
        if cls in JSON_RPC_ERROR_CODE_MAP:
            return JSON_RPC_ERROR_CODE_MAP[cls]
    return None


def arena_block(
    task_id: str, *, domain: str = "retail", split: str = "test", attempt: int = 1, index: int = 0
) -> dict[str, Any]:
    """The calibration metadata of one attempt."""
    return {
        "battle_id": "battle-test",
        "domain": domain,
        "split": split,
        "task_index": index,
        "task_id": task_id,
        "attempt": attempt,
        "calibration": True,
    }


def first_message(
    user_text: str,
    *,
    policy: str = "Be helpful.",
    tools: list[dict[str, Any]] | None = None,
    arena: dict[str, Any] | None = None,
) -> tuple[str, dict[str, Any], dict[str, Any] | None]:
    """(text, data part, metadata) of an attempt's first message, as the green agent builds it."""
    tools = tools or []
    reply_format = 'Reply with exactly one action: <json>{"name": ..., "arguments": {...}}</json>'
    text = f"{policy}\n\nTools:\n{json.dumps(tools)}\n\n{reply_format}\n\nUser message: {user_text}"
    data: dict[str, Any] = {"tools": tools, "policy": policy, "reply_format": reply_format}
    metadata = None
    if arena is not None:
        data["arena"] = arena
        metadata = {"arena": arena}
    return text, data, metadata


class Talker:
    """Sends one green-agent message per call to a white agent."""

    async def send(
        self,
        context_id: str,
        text: str,
        *,
        data: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> Answer:
        raise NotImplementedError


class _V1Talker(Talker):
    def __init__(self, http: httpx.AsyncClient, client: Any) -> None:
        self._http = http
        self._client = client

    async def send(self, context_id, text, *, data=None, metadata=None, timeout=None):  # type: ignore[no-untyped-def]
        parts = [new_text_part(text)]
        if data is not None:
            parts.append(new_data_part(data))
        message = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), context_id=context_id, parts=parts)
        if metadata:
            message.metadata.update(metadata)
        try:
            answers = [item async for item in self._client.send_message(SendMessageRequest(message=message))]
        except A2AError as error:  # the client raises the JSON-RPC error as an A2AError subclass
            return Answer(kind="error", error_code=_error_code(error), error_message=str(error))
        assert len(answers) == 1, answers
        item = answers[0]
        payload = item.WhichOneof("payload")
        if payload == "message":
            return Answer(kind="message", text=get_message_text(item.message))
        assert payload == "task", payload
        task = item.task
        return Answer(
            kind="task",
            text=get_message_text(task.status.message),
            task_state=TaskState.Name(task.status.state),
            artifact_texts=["\n".join(p.text for p in a.parts if p.HasField("text")) for a in task.artifacts],
        )


class _V03Talker(Talker):
    def __init__(self, http: httpx.AsyncClient, url: str) -> None:
        self._http = http
        self._url = url

    async def send(self, context_id, text, *, data=None, metadata=None, timeout=None):  # type: ignore[no-untyped-def]
        parts: list[dict[str, Any]] = [{"kind": "text", "text": text}]
        if data is not None:
            parts.append({"kind": "data", "data": data})
        message: dict[str, Any] = {
            "kind": "message",
            "role": "user",
            "messageId": str(uuid.uuid4()),
            "contextId": context_id,
            "parts": parts,
        }
        if metadata:
            message["metadata"] = metadata
        body = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": "message/send", "params": {"message": message}}
        response = await self._http.post(self._url, json=body, timeout=timeout or 60.0)
        response.raise_for_status()
        reply = response.json()
        if "error" in reply:
            return Answer(
                kind="error", error_code=reply["error"].get("code"), error_message=reply["error"].get("message", "")
            )
        result = reply["result"]
        if result.get("kind") == "message":
            return Answer(kind="message", text="\n".join(p["text"] for p in result["parts"] if p.get("kind") == "text"))
        assert result.get("kind") == "task", result
        status_parts = (result["status"].get("message") or {}).get("parts", [])
        return Answer(
            kind="task",
            text="\n".join(p["text"] for p in status_parts if p.get("kind") == "text"),
            task_state=result["status"]["state"],
            artifact_texts=[
                "\n".join(p["text"] for p in a["parts"] if p.get("kind") == "text") for a in result.get("artifacts", [])
            ],
        )


@contextlib.asynccontextmanager
async def talk(base_url: str, wire: Wire = "1.0") -> AsyncIterator[Talker]:
    """A :class:`Talker` for the white agent at ``base_url`` using the ``wire`` format."""
    async with httpx.AsyncClient(timeout=60.0) as http:
        if wire == "1.0":
            card = await A2ACardResolver(http, base_url).get_agent_card()
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
            yield _V1Talker(http, client)
        else:
            yield _V03Talker(http, base_url.rstrip("/") + "/")


def failed_state(answer: Answer) -> bool:
    """True for a Task in state failed, whichever wire format named it."""
    return answer.kind == "task" and answer.task_state in ("TASK_STATE_FAILED", "failed")


def completed_state(answer: Answer) -> bool:
    """True for a Task in state completed, whichever wire format named it."""
    return answer.kind == "task" and answer.task_state in ("TASK_STATE_COMPLETED", "completed")

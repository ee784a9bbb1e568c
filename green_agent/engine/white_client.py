"""The green agent's A2A client for the white agent: one call per turn, every failure classified.

Why a module of its own: the failure taxonomy depends on telling apart "the white agent was slow" (timeout), "we
could not talk to it" (communication error) and "it told us it failed" (reported failure). The a2a-sdk raises a
zoo of exceptions (httpx errors wrapped in ``A2AClientError``, JSON-RPC errors mapped to ``A2AError`` subclasses,
``ValueError``/pydantic errors for malformed replies); :class:`WhiteAgentClient` turns every one of them into one of
three exception classes, all :class:`WhiteAgentError`, so the attempt loop never sees an SDK exception.

Decisions (documented because they shape the failure breakdown):

* **JSON-RPC errors are communication errors** (:class:`WhiteAgentCommunicationError`, ``kind="jsonrpc"``), also
  -32603 "internal error" that an a2a-sdk server returns when the agent's executor raises. Only a *Task* that the
  agent deliberately put in ``failed``, ``rejected``, ``canceled`` or ``auth_required`` state is a
  :class:`WhiteAgentReportedFailure` (the seed's ``white_agent_error``).
* Replies: a Message, or a Task in ``completed`` / ``input_required`` (or unspecified) state. The reply text is the
  task's status-message text followed by its artifacts' text; when a task has neither, the last agent message of
  its history. A Task still ``submitted``/``working`` (an agent that returned early) is polled with ``GetTask``
  until it settles, within the same turn time limit.
* Data parts are returned as the SDK decodes them: **numbers come back as floats** (protobuf ``Struct`` stores
  doubles; ``3`` arrives as ``3.0``). Non-object data parts are wrapped as ``{"value": ...}``.
* Every turn sends a NEW message id and the context id the caller gives (one per attempt); a task id is never sent
  (reusing a finished task fails with -32004), and the context id the agent echoes is only reported.
* The agent card is fetched once, lazily on the first :meth:`WhiteAgentClient.send` (or eagerly with
  :meth:`WhiteAgentClient.connect`); a failed fetch is not cached, so each attempt against an unreachable agent
  fails on its own as a communication error. The SDK picks the 0.3 (legacy ``message/send``) or 1.0
  (``SendMessage`` + ``A2A-Version: 1.0``) transport from the card.
* ``metadata`` is sent both as the message's metadata and as the request's metadata: agents built on different
  SDK versions read one or the other.
* When you pass your own ``httpx_client``, the a2a-sdk's ``ClientFactory`` sets its default ``A2A-Version``
  header (``setdefault``; the 0.3 transport overrides it per request). Reply bodies are capped by the transport of
  :mod:`green_agent.engine.capped_transport`; a reply over the cap is :class:`WhiteAgentReplyTooLarge`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import uuid
from types import TracebackType
from typing import Any, Literal, Self, TypeVar

import httpx
from a2a.client import (
    A2ACardResolver,
    A2AClientError,
    A2AClientTimeoutError,
    AgentCardResolutionError,
    Client,
    ClientCallContext,
    ClientConfig,
    ClientFactory,
)
from a2a.helpers import get_data_parts, get_text_parts, new_data_part
from a2a.types.a2a_pb2 import (
    AgentCard,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.errors import JSON_RPC_ERROR_CODE_MAP, A2AError
from google.protobuf.json_format import MessageToDict
from google.protobuf.struct_pb2 import Struct
from pydantic import BaseModel, ConfigDict, Field

from green_agent.engine.capped_transport import ReplyTooLarge, capped_http_client
from green_agent.engine.card_cache import CardCache
from green_agent.engine.costs import AGENT_USAGE_KEY
from green_agent.engine.white_errors import (  # re-exported: callers name them from the client
    WhiteAgentCommunicationError as WhiteAgentCommunicationError,
)
from green_agent.engine.white_errors import (
    WhiteAgentError as WhiteAgentError,
)
from green_agent.engine.white_errors import (
    WhiteAgentReplyTooLarge as WhiteAgentReplyTooLarge,
)
from green_agent.engine.white_errors import (
    WhiteAgentReportedFailure as WhiteAgentReportedFailure,
)
from green_agent.engine.white_errors import (
    WhiteAgentTimeout as WhiteAgentTimeout,
)
from green_agent.text_safety import clean_json, clean_text

logger = logging.getLogger(__name__)
_E = TypeVar("_E", bound=BaseException)

DEFAULT_MAX_REPLY_BYTES = 1_048_576
"""Reply cap of a client that makes its own HTTP pool (battles pass theirs, capped at ``max_reply_bytes``)."""

_FAILURE_STATES = frozenset(
    {
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_REJECTED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_AUTH_REQUIRED,
    }
)
_PENDING_STATES = frozenset({TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING})
_JSONRPC_CODE_IN_MESSAGE = re.compile(r"JSON-RPC Error (-?\d+)")
_SDK_OWN_ERRORS = ("Invalid", "HTTP", "SSE", "JSON Decode", "Failed", "Network", "Client Request")
"""Prefixes of the messages the SDK writes itself (as opposed to an agent's JSON-RPC error message)."""


def state_name(state: int) -> str:
    """``TASK_STATE_INPUT_REQUIRED`` -> ``"input_required"`` (stable, readable, version independent)."""
    try:
        name: str = TaskState.Name(state)
        return name.removeprefix("TASK_STATE_").lower()
    except ValueError:
        return f"unknown_{state}"


class WhiteReply(BaseModel):
    """What the white agent answered in one turn (content only; the caller parses the action)."""

    model_config = ConfigDict(frozen=True)

    text: str
    """All text of the reply, parts joined with newlines (see the module docstring for Tasks)."""
    data_parts: list[dict[str, Any]] = Field(default_factory=list)
    """Data parts of the reply (numbers as floats)."""
    kind: Literal["message", "task"]
    task_state: str | None = None
    """For Task replies: ``completed``, ``input_required``, ... (see :func:`state_name`)."""
    echoed_context_id: str | None = None
    """The context id the agent put on its reply (diagnostics only; never reused)."""
    task_id: str | None = None
    reported_usage: Any = None
    """The raw value of the reply's ``arena/usage`` metadata (unvalidated: green_agent/engine/costs.py checks it)."""


def _cause_of_type(error: BaseException, kind: type[_E]) -> _E | None:
    """The first exception of type ``kind`` in ``error``'s cause/context chain."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _classify(error: Exception, *, url: str, timeout_s: float) -> WhiteAgentError:
    """Map any exception raised while sending a turn to one of our three classes."""
    if isinstance(error, WhiteAgentError):
        return error
    too_large = _cause_of_type(error, ReplyTooLarge)
    if too_large is not None:
        return WhiteAgentReplyTooLarge(
            f"the reply from {url} is larger than the limit of {too_large.max_bytes} bytes (max_reply_bytes)",
            max_bytes=too_large.max_bytes,
            head=too_large.head,
        )
    if isinstance(error, RecursionError):
        return WhiteAgentCommunicationError(
            f"invalid A2A reply from {url}: JSON nested too deeply", kind="invalid_response"
        )
    if isinstance(error, AgentCardResolutionError):
        return WhiteAgentCommunicationError(
            f"agent card of {url} unreachable or invalid: {error.message}",
            kind="card",
            status_code=error.status_code,
        )
    cause = _cause_of_type(error, httpx.HTTPError)  # the httpx exception an SDK exception wraps, if any
    if isinstance(error, (A2AClientTimeoutError, TimeoutError)) or isinstance(cause, httpx.TimeoutException):
        return WhiteAgentTimeout(f"no reply from {url} within the turn limit of {timeout_s:g} s", timeout_s=timeout_s)
    if isinstance(cause, httpx.HTTPStatusError):
        status = cause.response.status_code
        return WhiteAgentCommunicationError(f"{url} answered HTTP {status}", kind="http_status", status_code=status)
    if isinstance(cause, httpx.ConnectError):
        return WhiteAgentCommunicationError(
            f"cannot connect to {url} (connection refused or host unreachable): {cause}", kind="connect"
        )
    if isinstance(cause, httpx.TransportError):
        return WhiteAgentCommunicationError(
            f"connection to {url} failed mid-request (reset or closed): {type(cause).__name__}: {cause}",
            kind="network",
        )
    if isinstance(error, A2AError) and type(error) in JSON_RPC_ERROR_CODE_MAP:
        code = JSON_RPC_ERROR_CODE_MAP[type(error)]
        return WhiteAgentCommunicationError(
            f"{url} answered JSON-RPC error {code} ({type(error).__name__}): {error.message}",
            kind="jsonrpc",
            jsonrpc_code=code,
        )
    if isinstance(error, A2AClientError):
        match = _JSONRPC_CODE_IN_MESSAGE.search(error.message)
        if match:
            return WhiteAgentCommunicationError(
                f"{url} answered {error.message}", kind="jsonrpc", jsonrpc_code=int(match.group(1))
            )
        if error.__cause__ is None and error.__context__ is None and not error.message.startswith(_SDK_OWN_ERRORS):
            # The 0.3 transport turns a JSON-RPC error with a non-A2A code into a bare A2AClientError(message).
            return WhiteAgentCommunicationError(f"{url} answered a JSON-RPC error: {error.message}", kind="jsonrpc")
        return WhiteAgentCommunicationError(
            f"invalid A2A exchange with {url}: {error.message}", kind="invalid_response"
        )
    if isinstance(error, (ValueError, TypeError, KeyError, json.JSONDecodeError)):
        # The SDK raises these for bodies that are not A2A replies (pydantic ValidationError is a ValueError).
        return WhiteAgentCommunicationError(
            f"invalid A2A reply from {url}: {type(error).__name__}: {error}", kind="invalid_response"
        )
    return WhiteAgentCommunicationError(
        f"unexpected error talking to {url}: {type(error).__name__}: {error}", kind="unexpected"
    )


def _data_dicts(parts: Any) -> list[dict[str, Any]]:
    """Data parts as dicts, every string cleaned of lone surrogates (see :mod:`green_agent.text_safety`)."""
    return [clean_json(d) if isinstance(d, dict) else {"value": clean_json(d)} for d in get_data_parts(parts)]


def _texts(parts: Any) -> list[str]:
    return [clean_text(t) for t in get_text_parts(parts)]


def _reported_usage(*metadata: Struct) -> Any:
    """What the agent reported under AGENT_USAGE_KEY in the first metadata that has the key (None: none has)."""
    found = next((m.fields[AGENT_USAGE_KEY] for m in metadata if AGENT_USAGE_KEY in m.fields), None)
    return None if found is None else clean_json(MessageToDict(found))


def _reply_from_message(message: Message) -> WhiteReply:
    return WhiteReply(
        text="\n".join(_texts(message.parts)),
        data_parts=_data_dicts(message.parts),
        kind="message",
        echoed_context_id=message.context_id or None,
        task_id=message.task_id or None,
        reported_usage=_reported_usage(message.metadata),
    )


def _task_content(task: Task) -> tuple[str, list[dict[str, Any]]]:
    """Text and data of a Task: status message, then artifacts; else the last agent message of its history."""
    texts: list[str] = []
    data: list[dict[str, Any]] = []
    if task.status.HasField("message"):
        texts.extend(_texts(task.status.message.parts))
        data.extend(_data_dicts(task.status.message.parts))
    for artifact in task.artifacts:
        texts.extend(_texts(artifact.parts))
        data.extend(_data_dicts(artifact.parts))
    if not texts and not data:
        agent_messages = [m for m in task.history if m.role == Role.ROLE_AGENT]
        if agent_messages:
            texts.extend(_texts(agent_messages[-1].parts))
            data.extend(_data_dicts(agent_messages[-1].parts))
    return "\n".join(t for t in texts if t), data


def _reply_from_task(task: Task) -> WhiteReply:
    text, data = _task_content(task)
    state = state_name(task.status.state)
    if task.status.state in _FAILURE_STATES:
        shown = text if len(text) <= 500 else text[:500] + "..."
        raise WhiteAgentReportedFailure(
            f"the white agent answered with a Task in state {state}" + (f": {shown}" if shown else ""),
            task_state=state,
            text=text,
            task_id=task.id or None,
        )
    return WhiteReply(
        text=text,
        data_parts=data,
        kind="task",
        task_state=state,
        echoed_context_id=task.context_id or None,
        task_id=task.id or None,
        reported_usage=_reported_usage(task.status.message.metadata, task.metadata),
    )


class WhiteAgentClient:
    """Sends one turn at a time to a white agent over A2A (async context manager; safe for concurrent sends).

    One client serves a whole battle: attempts running concurrently each pass their own ``context_id``.
    """

    def __init__(
        self,
        url: str,
        *,
        httpx_client: httpx.AsyncClient | None = None,
        turn_timeout_s: float,
        card_timeout_s: float = 10.0,
        poll_interval_s: float = 0.05,
        cards: CardCache | None = None,
    ) -> None:
        if turn_timeout_s <= 0:
            raise ValueError(f"turn_timeout_s must be > 0, got {turn_timeout_s}")
        self._url = url.rstrip("/")
        self._turn_timeout_s = turn_timeout_s
        self._card_timeout_s = card_timeout_s
        self._poll_interval_s = poll_interval_s
        self._cards = cards  # the battle's cache: one card fetch per battle, not per attempt
        self._external_httpx = httpx_client
        self._httpx: httpx.AsyncClient | None = httpx_client
        self._card: AgentCard | None = None
        self._client: Client | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    async def __aenter__(self) -> Self:
        if self._httpx is None:
            self._httpx = capped_http_client(
                max_bytes=DEFAULT_MAX_REPLY_BYTES, max_connections=8, timeout_s=self._turn_timeout_s
            )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Release the HTTP client (only the one we created; a caller-provided client stays open)."""
        if self._closed:
            return
        self._closed = True
        if self._client is not None:
            try:
                await self._client.close()
            except Exception:  # closing must never mask the caller's outcome
                logger.debug("closing the a2a client failed", exc_info=True)
        if self._httpx is not None and self._external_httpx is None:
            await self._httpx.aclose()

    async def connect(self) -> AgentCard:
        """Resolve the agent card and build the SDK client now (idempotent). Raises WhiteAgentCommunicationError."""
        await self._ensure_client()
        assert self._card is not None
        return self._card

    async def _ensure_client(self) -> Client:
        if self._client is not None:
            return self._client
        if self._closed:
            raise RuntimeError("WhiteAgentClient is closed")
        if self._httpx is None:
            raise RuntimeError("use WhiteAgentClient as an async context manager (async with ...)")
        async with self._lock:
            if self._client is not None:
                return self._client
            try:
                resolver = A2ACardResolver(self._httpx, self._url)
                fetch = functools.partial(resolver.get_agent_card, http_kwargs={"timeout": self._card_timeout_s})
                card = await (self._cards.get(self._url, fetch) if self._cards is not None else fetch())
                client = ClientFactory(ClientConfig(httpx_client=self._httpx, streaming=False)).create(card)
            except Exception as error:
                classified = _classify(error, url=self._url, timeout_s=self._turn_timeout_s)
                if isinstance(classified, WhiteAgentCommunicationError) and classified.kind != "card":
                    classified = WhiteAgentCommunicationError(
                        f"agent card of {self._url} unusable: {classified.detail}", kind="card"
                    )
                elif isinstance(classified, WhiteAgentTimeout):
                    classified = WhiteAgentCommunicationError(
                        f"agent card of {self._url} not served within {self._card_timeout_s:g} s", kind="card"
                    )
                raise classified from error
            self._card, self._client = card, client
            logger.debug(
                "white agent %s: card %r, interfaces %s",
                self._url,
                card.name,
                [(i.protocol_binding, i.protocol_version, i.url) for i in card.supported_interfaces],
            )
            return client

    async def send(
        self,
        *,
        context_id: str,
        text: str,
        data: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> WhiteReply:
        """Send one user message in ``context_id`` and return the agent's reply.

        Raises :class:`WhiteAgentTimeout`, :class:`WhiteAgentCommunicationError` or
        :class:`WhiteAgentReportedFailure`; never an a2a-sdk or httpx exception. ``data`` and ``metadata`` must be
        JSON-serialisable (a TypeError/ValueError otherwise: that is a harness bug, not the agent's fault).
        """
        if not context_id:
            raise ValueError("context_id must be a non-empty string")
        message = Message(
            role=Role.ROLE_USER,
            message_id=str(uuid.uuid4()),
            context_id=context_id,
            parts=[Part(text=text)],
        )
        if data is not None:
            message.parts.append(new_data_part(json.loads(json.dumps(data))))
        request = SendMessageRequest()
        if metadata:
            plain = json.loads(json.dumps(metadata))
            message.metadata.update(plain)
            request.metadata.update(plain)
        request.message.CopyFrom(message)  # protobuf copies: the message must be complete first

        client = await self._ensure_client()
        call_context = ClientCallContext(timeout=self._turn_timeout_s)
        try:
            async with asyncio.timeout(self._turn_timeout_s):
                reply = await self._exchange(client, request, call_context)
        except WhiteAgentError:
            raise
        except Exception as error:
            raise _classify(error, url=self._url, timeout_s=self._turn_timeout_s) from error
        logger.debug(
            "white agent %s context %s: %s reply, %d chars, %d data parts",
            self._url,
            context_id,
            reply.kind,
            len(reply.text),
            len(reply.data_parts),
        )
        return reply

    async def _exchange(
        self, client: Client, request: SendMessageRequest, call_context: ClientCallContext
    ) -> WhiteReply:
        last: StreamResponse | None = None
        async for event in client.send_message(request, context=call_context):
            last = event
            if event.HasField("message"):
                break
        if last is None:
            raise WhiteAgentCommunicationError(f"{self._url} sent no reply", kind="invalid_response")
        payload = last.WhichOneof("payload")
        if payload == "message":
            return _reply_from_message(last.message)
        if payload != "task":
            raise WhiteAgentCommunicationError(
                f"{self._url} replied with a {payload} event instead of a Message or Task", kind="invalid_response"
            )
        task = last.task
        delay = self._poll_interval_s
        while task.status.state in _PENDING_STATES:
            # An agent that returned its task before finishing it: wait for it to settle (bounded by the turn limit).
            if not task.id:
                break
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
            task = await client.get_task(GetTaskRequest(id=task.id), context=call_context)
        return _reply_from_task(task)

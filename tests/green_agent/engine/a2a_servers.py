"""Small A2A white agents for the client tests, served on loopback by :mod:`tests.support.servers`.

* :func:`sdk_agent` -- a real a2a-sdk 1.3 server (0.3 compatibility on) whose executor runs a scripted behaviour;
  its card advertises protocol 1.0 or only 0.3. Every request's JSON-RPC method and ``A2A-Version`` header are
  recorded (to see which wire the client chose), and every message the executor receives.
* :func:`legacy_agent` -- a hand-written agent that speaks only A2A 0.3 JSON-RPC (``message/send``,
  ``tasks/get``), with a 0.3-style card (``url``, ``protocolVersion``, no ``supportedInterfaces``), like agents
  built on a2a-sdk 0.2/0.3. Its handler returns 0.3 JSON results, or an HTTP status to answer with.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from a2a.helpers import get_data_parts, get_text_parts, new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Message
from google.protobuf.json_format import MessageToDict
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.servers import serve_app_factory

Behaviour = Callable[[RequestContext, EventQueue, "AgentRecord"], Awaitable[None]]


@dataclass(frozen=True)
class Received:
    """One message as the white agent's executor saw it."""

    context_id: str | None
    task_id: str | None
    message_id: str
    text: str
    data: list[Any]
    message_metadata: dict[str, Any]
    request_metadata: dict[str, Any]


@dataclass
class AgentRecord:
    """What a test agent saw: executor inputs, JSON-RPC methods and A2A-Version headers of the HTTP requests."""

    received: list[Received] = field(default_factory=list)
    methods: list[str] = field(default_factory=list)
    versions: list[str | None] = field(default_factory=list)
    wire_messages: list[dict[str, Any]] = field(default_factory=list)
    """The ``params.message`` objects exactly as they came over the wire (before the SDK fills in ids)."""
    release: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the test ends: behaviours that hang wait on it, so the server can stop cleanly."""


class _ScriptedExecutor(AgentExecutor):
    def __init__(self, behaviour: Behaviour, record: AgentRecord) -> None:
        self._behaviour = behaviour
        self._record = record

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        assert message is not None
        self._record.received.append(
            Received(
                context_id=context.context_id,
                task_id=message.task_id or None,
                message_id=message.message_id,
                text="\n".join(get_text_parts(message.parts)),
                data=get_data_parts(message.parts),
                message_metadata=MessageToDict(message.metadata),
                request_metadata=context.metadata,
            )
        )
        await self._behaviour(context, event_queue, self._record)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None


# ----------------------------------------------------------------------------------------------- behaviours


def _agent_message(context: RequestContext, text: str, data: Any = None) -> Message:
    from a2a.helpers import new_data_part, new_text_message

    message = new_text_message(text, context_id=context.context_id)
    if data is not None:
        message.parts.append(new_data_part(data))
    return message


def reply_message(text: str, data: Any = None) -> Behaviour:
    """Answer with one Message."""

    async def behaviour(context: RequestContext, queue: EventQueue, record: AgentRecord) -> None:
        await queue.enqueue_event(_agent_message(context, text, data))

    return behaviour


async def echo(context: RequestContext, queue: EventQueue, record: AgentRecord) -> None:
    """Answer with a Message naming the context id and repeating the text (isolation checks)."""
    assert context.message is not None
    said = "\n".join(get_text_parts(context.message.parts))
    await queue.enqueue_event(_agent_message(context, f"{context.context_id}|{said}"))


def reply_task(state: str, status_text: str | None, artifact_text: str | None = None, data: Any = None) -> Behaviour:
    """Answer with a Task that ends in ``state`` (completed, failed, rejected, canceled, input_required)."""

    async def behaviour(context: RequestContext, queue: EventQueue, record: AgentRecord) -> None:
        assert context.message is not None
        task = new_task_from_user_message(context.message)
        await queue.enqueue_event(task)
        updater = TaskUpdater(queue, task.id, task.context_id)
        await updater.start_work()
        if artifact_text is not None:
            await updater.add_artifact([new_text_part(artifact_text)], name="reply")
        parts = [new_text_part(status_text)] if status_text is not None else []
        if data is not None:
            from a2a.helpers import new_data_part

            parts.append(new_data_part(data))
        message = updater.new_agent_message(parts) if parts else None
        finish = {
            "completed": updater.complete,
            "failed": updater.failed,
            "rejected": updater.reject,
            "canceled": updater.cancel,
            "input_required": updater.requires_input,
        }[state]
        await finish(message)

    return behaviour


async def crash(context: RequestContext, queue: EventQueue, record: AgentRecord) -> None:
    """The executor raises: the SDK answers JSON-RPC -32603."""
    raise RuntimeError("the agent crashed")


async def hang(context: RequestContext, queue: EventQueue, record: AgentRecord) -> None:
    """Never answer while the test runs (then answer, so the server shuts down cleanly)."""
    await record.release.wait()
    await queue.enqueue_event(_agent_message(context, "too late"))


# ----------------------------------------------------------------------------------------------- servers


def _wire_recorder(app: Any, record: AgentRecord) -> Any:
    """ASGI wrapper noting the JSON-RPC method and A2A-Version header of every POST, then replaying the body."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        messages = []
        body = b""
        while True:
            message = await receive()
            messages.append(message)
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        record.versions.append(headers.get("a2a-version"))
        with contextlib.suppress(ValueError, AttributeError):
            payload = json.loads(body)
            record.methods.append(payload.get("method"))
            record.wire_messages.append((payload.get("params") or {}).get("message") or {})
        replay = iter(messages)

        async def replay_receive() -> Any:
            try:
                return next(replay)
            except StopIteration:
                return await receive()

        await app(scope, replay_receive, send)

    return wrapped


def _card(url: str, protocol_version: str) -> AgentCard:
    return AgentCard(
        name="test white agent",
        description="scripted agent for client tests",
        version="1.0.0",
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        capabilities=AgentCapabilities(streaming=False),
        skills=[AgentSkill(id="answer", name="answer", description="answers", tags=["test"])],
        supported_interfaces=[
            AgentInterface(protocol_binding="JSONRPC", protocol_version=protocol_version, url=url + "/")
        ],
    )


@contextlib.asynccontextmanager
async def sdk_agent(behaviour: Behaviour, *, protocol_version: str = "1.0") -> AsyncIterator[tuple[str, AgentRecord]]:
    """Serve an a2a-sdk agent running ``behaviour``; yield its base URL and record."""
    record = AgentRecord()

    def factory(url: str) -> Any:
        card = _card(url, protocol_version)
        handler = DefaultRequestHandler(
            agent_executor=_ScriptedExecutor(behaviour, record), task_store=InMemoryTaskStore(), agent_card=card
        )
        routes = create_agent_card_routes(card) + create_jsonrpc_routes(handler, rpc_url="/", enable_v0_3_compat=True)
        return _wire_recorder(Starlette(routes=routes), record)

    try:
        async with serve_app_factory(factory, graceful_shutdown_s=1) as base_url:
            try:
                yield base_url, record
            finally:
                record.release.set()
    finally:
        record.release.set()


LegacyHandler = Callable[[str, dict[str, Any]], Any]
"""``(method, params) -> result dict`` or ``Response`` (sent as is); may be async."""


@dataclass
class LegacyRecord:
    """What the legacy agent saw."""

    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    versions: list[str | None] = field(default_factory=list)


def legacy_message(text: str, context_id: str | None) -> dict[str, Any]:
    """A 0.3 agent Message."""
    return {
        "kind": "message",
        "messageId": f"m-{text[:8]}",
        "role": "agent",
        "parts": [{"kind": "text", "text": text}],
        **({"contextId": context_id} if context_id else {}),
    }


@contextlib.asynccontextmanager
async def legacy_agent(handler: LegacyHandler) -> AsyncIterator[tuple[str, LegacyRecord]]:
    """Serve a hand-written A2A 0.3-only agent; yield its base URL and record."""
    record = LegacyRecord()

    def factory(url: str) -> Any:
        card = {
            "name": "legacy agent",
            "description": "speaks A2A 0.3 only",
            "url": url + "/",
            "version": "0.1.0",
            "protocolVersion": "0.3.0",
            "preferredTransport": "JSONRPC",
            "capabilities": {"streaming": False},
            "defaultInputModes": ["text"],
            "defaultOutputModes": ["text"],
            "skills": [{"id": "s", "name": "s", "description": "s", "tags": []}],
        }

        async def get_card(request: Request) -> Response:
            return JSONResponse(card)

        async def rpc(request: Request) -> Response:
            record.versions.append(request.headers.get("a2a-version"))
            body = await request.json()
            method, params = body.get("method"), body.get("params") or {}
            record.calls.append((method, params))
            if method not in ("message/send", "tasks/get"):
                error = {"code": -32601, "message": f"Method not found: {method}"}
                return JSONResponse({"jsonrpc": "2.0", "id": body.get("id"), "error": error})
            result = handler(method, params)
            if asyncio.iscoroutine(result):
                result = await result
            if isinstance(result, Response):
                return result
            return JSONResponse({"jsonrpc": "2.0", "id": body.get("id"), "result": result})

        return Starlette(
            routes=[
                Route("/.well-known/agent-card.json", get_card, methods=["GET"]),
                Route("/", rpc, methods=["POST"]),
            ]
        )

    async with serve_app_factory(factory, graceful_shutdown_s=1) as base_url:
        yield base_url, record

"""Stand-ins for the other side of the battle protocol, for tests, the ingestion benchmark and demos:
a fake A2A agent (JSON-RPC 0.3: message/send and message/stream), a fake AgentBeats launcher, and a runner that
serves any ASGI app on a free loopback port.

They follow the wire formats of the AgentBeats notes exactly, so a backend that works with them works with real
agents; behaviours (late acknowledgement, JSON-RPC errors, launchers that never report ready or fail) are knobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
import uvicorn
from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp


class _QuietServer(uvicorn.Server):
    """uvicorn without its signal handlers: the embedding program (test runner, benchmark) keeps its own."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serve_app(app: ASGIApp, *, host: str = "127.0.0.1", shutdown_grace_s: int = 3) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn on a free port of ``host`` (lifespan included) and yield its base URL; the
    server is stopped (and its lifespan shut down) when the block exits."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=shutdown_grace_s,
        log_config=None,
    )
    server = _QuietServer(config)

    async def run() -> None:
        try:
            await server.serve(sockets=[sock])
        except SystemExit as exc:  # uvicorn exits this way when the lifespan fails to start
            raise RuntimeError(f"uvicorn exited with code {exc.code}") from None

    task = asyncio.create_task(run())
    try:
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("the server stopped before it started")
            await asyncio.sleep(0.01)
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError, RuntimeError):
            await task
        sock.close()


def _agent_message(text: str) -> dict[str, Any]:
    return {
        "kind": "message",
        "messageId": uuid.uuid4().hex,
        "role": "agent",
        "parts": [{"kind": "text", "text": text}],
    }


def _message_text(params: Any) -> str:
    message = params.get("message") if isinstance(params, dict) else None
    parts = message.get("parts") if isinstance(message, dict) else None
    if not isinstance(parts, list):
        return ""
    return "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict) and p.get("kind", "text") == "text")


BattleStartHandler = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass
class FakeA2AAgent:
    """An A2A agent in the 0.3 JSON-RPC shape that records what it receives.

    ``on_battle_start`` runs in the background after the acknowledgement (a green agent reporting progress);
    ``ack_delay_s`` delays the battle_start acknowledgement; ``rpc_error`` answers every call with a JSON-RPC error.
    """

    name: str = "fake-agent"
    ack_delay_s: float = 0.0
    rpc_error: bool = False
    on_battle_start: BattleStartHandler | None = None
    received: list[Any] = field(default_factory=list)
    """Each received text, parsed as JSON when it is JSON."""
    methods: list[str] = field(default_factory=list)
    _background: set[asyncio.Task[None]] = field(default_factory=set)

    def messages_of_type(self, kind: str) -> list[dict[str, Any]]:
        """Received JSON messages with ``type == kind`` (battle_info, battle_start)."""
        return [m for m in self.received if isinstance(m, dict) and m.get("type") == kind]

    async def wait_for(self, kind: str, count: int = 1) -> list[dict[str, Any]]:
        """Wait until ``count`` messages of a type arrived (callers bound the wait with their own timeout)."""
        while len(self.messages_of_type(kind)) < count:
            await asyncio.sleep(0.01)
        return self.messages_of_type(kind)

    async def aclose(self) -> None:
        """Cancel background handlers still running."""
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    @property
    def app(self) -> Starlette:
        """The agent's ASGI app: card at /.well-known/agent-card.json, JSON-RPC at /."""

        async def card(request: Request) -> JSONResponse:
            return JSONResponse(
                {
                    "name": self.name,
                    "description": f"{self.name} (fake A2A agent for tests)",
                    "url": str(request.url).split("/.well-known/")[0] + "/",
                    "version": "1.0.0",
                    "protocolVersion": "0.3.0",
                    "preferredTransport": "JSONRPC",
                    "capabilities": {"streaming": True},
                    "defaultInputModes": ["text/plain"],
                    "defaultOutputModes": ["text/plain"],
                    "skills": [],
                }
            )

        async def rpc(request: Request) -> Response:
            body = await request.json()
            method = body.get("method")
            rpc_id = body.get("id")
            self.methods.append(str(method))
            text = _message_text(body.get("params"))
            try:
                parsed: Any = json.loads(text)
            except ValueError:
                parsed = text
            self.received.append(parsed)
            if self.rpc_error:
                return JSONResponse(
                    {"jsonrpc": "2.0", "id": rpc_id, "error": {"code": -32603, "message": "fake failure"}}
                )
            is_start = isinstance(parsed, dict) and parsed.get("type") == "battle_start"
            if is_start and self.on_battle_start is not None:
                handler = self.on_battle_start

                async def run_later() -> None:
                    if self.ack_delay_s:
                        await asyncio.sleep(self.ack_delay_s)
                    await handler(parsed)

                task = asyncio.create_task(run_later())
                self._background.add(task)
                task.add_done_callback(self._background.discard)
            reply = {"jsonrpc": "2.0", "id": rpc_id, "result": _agent_message(f"{self.name}: received")}
            if method == "message/stream":
                delay = self.ack_delay_s if is_start else 0.0

                async def events() -> AsyncIterator[dict[str, str]]:
                    if delay:
                        await asyncio.sleep(delay)
                    yield {"data": json.dumps(reply)}

                return EventSourceResponse(events(), ping=0)
            if method == "message/send":
                return JSONResponse(reply)
            return JSONResponse(
                {"jsonrpc": "2.0", "id": rpc_id, "error": {"code": -32601, "message": "Method not found"}}
            )

        return Starlette(
            routes=[
                Route("/.well-known/agent-card.json", card, methods=["GET"]),
                Route("/", rpc, methods=["POST"]),
            ]
        )


LauncherMode = Literal["ready", "never_ready", "error"]


@dataclass
class FakeLauncher:
    """An AgentBeats launcher: ``POST /reset`` records the request and, in mode "ready", reports the agent ready
    with ``PUT {backend_url}/agents/{agent_id} {"ready": true}``; ``GET /status`` says the agent runs."""

    mode: LauncherMode = "ready"
    resets: list[dict[str, Any]] = field(default_factory=list)
    _background: set[asyncio.Task[None]] = field(default_factory=set)

    async def aclose(self) -> None:
        """Wait for (or cancel) ready reports still in flight."""
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    @property
    def app(self) -> Starlette:
        """The launcher's ASGI app."""

        async def reset(request: Request) -> Response:
            body = await request.json()
            self.resets.append(body)
            if self.mode == "error":
                return JSONResponse({"error": "fake launcher failure"}, status_code=500)
            if self.mode == "ready":

                async def report() -> None:
                    async with httpx.AsyncClient(trust_env=False) as client:
                        await client.put(f"{body['backend_url']}/agents/{body['agent_id']}", json={"ready": True})

                task = asyncio.create_task(report())
                self._background.add(task)
                task.add_done_callback(self._background.discard)
            return JSONResponse({"status": "ok"})

        async def status(request: Request) -> JSONResponse:
            return JSONResponse({"status": "server up, with agent running"})

        return Starlette(routes=[Route("/reset", reset, methods=["POST"]), Route("/status", status, methods=["GET"])])

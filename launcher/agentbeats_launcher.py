"""An AgentBeats launcher for one agent: restart it on demand and tell the backend when it is ready.

Why: the AgentBeats backend resets every agent before a battle by POSTing ``{launcher}/reset``; the launcher restarts
its agent process, waits until the agent card answers and then PUTs ``{"ready": true}`` to
``{backend_url}/agents/{agent_id}``. The backend also polls ``GET /status`` (``POST /agents/check_launcher``) and
treats the launcher as online only when the JSON answer's ``status`` field equals
``"server up, with agent running"``, exactly as the platform's own launcher answers (a JSON object with ``status``
and ``pid``). The tau-bench-agents project's launchers add ``GET /health``, ``POST /launch`` and
``POST /terminate``; we answer those too so their scripts work against ours.

Improvements over the reference launchers: ``/reset`` answers promptly and the readiness wait + backend PUT run in
the background (the reference slept 2 s inside the request, blocking its event loop); readiness means the agent
card answers, not "some time passed"; the agent runs in its own process group and is stopped with the launcher.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from launcher.errors import NotYet
from launcher.processes import (
    DEFAULT_GRACE_S,
    ManagedProcess,
    ProcessError,
    start_process,
    stop_process,
    wait_until_ready,
)

logger = logging.getLogger(__name__)

STATUS_RUNNING = "server up, with agent running"
STATUS_STOPPED = "server up, no agents running"
AGENT_CARD_PATH = "/.well-known/agent-card.json"


class ResetRequest(BaseModel):
    """The backend's reset signal (``backend_url`` is optional so manual resets work without a backend)."""

    model_config = ConfigDict(extra="allow")

    signal: str
    agent_id: str | None = None
    backend_url: str | None = None
    extra_args: dict[str, Any] = Field(default_factory=dict)


def extra_args_to_argv(extra_args: dict[str, Any]) -> list[str]:
    """``{"flag": True, "name": "x"}`` -> ``["--flag", "--name=x"]`` (the platform launcher's convention)."""
    argv: list[str] = []
    for name, value in extra_args.items():
        if value is True:
            argv.append(f"--{name}")
        elif value is False or value is None:
            continue
        else:
            argv.append(f"--{name}={value}")
    return argv


@dataclass
class AgentLauncher:
    """Owns one agent process: start, restart, stop, readiness, backend notification.

    ``agent_argv`` is the command given at startup; ``agent_url`` is where the agent's card is served
    (``{agent_url}/.well-known/agent-card.json``).
    """

    agent_argv: list[str]
    agent_url: str
    log_dir: Path
    name: str = "agent"
    ready_timeout_s: float = 60.0
    grace_s: float = DEFAULT_GRACE_S
    notify_attempts: int = 4
    notify_backoff_s: float = 0.5
    process: ManagedProcess | None = field(default=None, init=False)
    last_error: str | None = field(default=None, init=False)
    ready: bool = field(default=False, init=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False, repr=False)
    _background: set[asyncio.Task[None]] = field(default_factory=set, init=False, repr=False)

    @property
    def card_url(self) -> str:
        return self.agent_url.rstrip("/") + AGENT_CARD_PATH

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.running

    def status_payload(self) -> dict[str, Any]:
        """The ``GET /status`` body (same shape as the AgentBeats platform launcher)."""
        if self.process is not None and self.process.running:
            return {"status": STATUS_RUNNING, "pid": self.process.pid}
        return {"status": STATUS_STOPPED}

    async def _stop_locked(self) -> None:
        if self.process is not None:
            await stop_process(self.process, self.grace_s)
            self.process = None
        self.ready = False

    async def start(self, extra_args: dict[str, Any] | None = None) -> ManagedProcess:
        """Start the agent if it is not running (no readiness wait)."""
        async with self._lock:
            if self.process is not None and self.process.running:
                return self.process
            return self._spawn(extra_args or {})

    def _spawn(self, extra_args: dict[str, Any]) -> ManagedProcess:
        self.ready = False
        self.last_error = None
        argv = [*self.agent_argv, *extra_args_to_argv(extra_args)]
        self.process = start_process(self.name, argv, log_dir=self.log_dir)
        return self.process

    async def restart(self, extra_args: dict[str, Any] | None = None) -> ManagedProcess:
        """Stop the agent (if running) and start it again."""
        async with self._lock:
            await self._stop_locked()
            return self._spawn(extra_args or {})

    async def stop(self) -> None:
        """Stop the agent; cancel pending readiness waits."""
        for task in list(self._background):
            task.cancel()
        async with self._lock:
            await self._stop_locked()

    async def wait_ready(self, proc: ManagedProcess) -> None:
        """Wait until the card answers; records :attr:`ready` / :attr:`last_error`."""
        try:
            await wait_until_ready(proc, self.card_url, timeout_s=self.ready_timeout_s)
        except ProcessError as error:
            self.last_error = str(error)
            logger.error("%s", error)
            raise
        if proc is self.process:
            self.ready = True

    async def notify_backend(self, backend_url: str, agent_id: str) -> bool:
        """PUT ``{"ready": true}`` to the backend, retried with backoff; False when it never accepted."""
        url = f"{backend_url.rstrip('/')}/agents/{agent_id}"
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(NotYet),
            stop=stop_after_attempt(self.notify_attempts),
            wait=wait_exponential(multiplier=self.notify_backoff_s),  # notify_backoff_s, doubling after each attempt
            reraise=True,
        )
        async with httpx.AsyncClient(timeout=10.0) as client:
            try:
                async for attempt in retrying:
                    with attempt:
                        return await self._put_ready(client, url, agent_id, attempt.retry_state.attempt_number)
            except NotYet:
                pass
        return False

    @staticmethod
    async def _put_ready(client: httpx.AsyncClient, url: str, agent_id: str, attempt: int) -> bool:
        """One PUT: True when accepted, False when refused (4xx other than 429); :class:`NotYet` to try again."""
        try:
            response = await client.put(url, json={"ready": True})
        except httpx.HTTPError as error:
            logger.warning("could not reach the backend at %s (attempt %d): %s", url, attempt, error)
            raise NotYet from error
        if response.status_code < 400:
            logger.info("told the backend %s is ready", agent_id)
            return True
        if 400 <= response.status_code < 500 and response.status_code != 429:
            logger.error("backend refused ready for %s: HTTP %d", agent_id, response.status_code)
            return False
        logger.warning("backend answered HTTP %d (attempt %d)", response.status_code, attempt)
        raise NotYet

    async def _ready_then_notify(self, proc: ManagedProcess, backend_url: str | None, agent_id: str | None) -> None:
        try:
            await self.wait_ready(proc)
        except ProcessError:
            return  # never claim readiness for an agent that did not come up
        if backend_url and agent_id and not await self.notify_backend(backend_url, agent_id):
            self.last_error = f"could not tell the backend at {backend_url} that agent {agent_id} is ready"

    def spawn_background(self, proc: ManagedProcess, backend_url: str | None, agent_id: str | None) -> None:
        task = asyncio.create_task(self._ready_then_notify(proc, backend_url, agent_id))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def drain(self) -> None:
        """Wait for pending background work (tests, orderly shutdown)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)


def _json_error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def build_launcher_app(launcher: AgentLauncher, *, autostart: bool = True) -> Starlette:
    """The launcher's Starlette app; the agent starts with the app (``autostart``) and stops with it."""

    async def reset(request: Request) -> Response:
        try:
            payload = ResetRequest.model_validate(await request.json())
        except (ValueError, ValidationError) as error:
            return _json_error(400, f"invalid reset request: {error}")
        if payload.signal != "reset":
            return _json_error(400, f"unsupported signal {payload.signal!r}; expected 'reset'")
        try:
            proc = await launcher.restart(payload.extra_args)
        except OSError as error:
            launcher.last_error = f"could not start the agent: {error}"
            return _json_error(500, launcher.last_error)
        launcher.spawn_background(proc, payload.backend_url, payload.agent_id)
        return JSONResponse({"status": "restarting", "pid": proc.pid, "agent_url": launcher.agent_url})

    async def status(_: Request) -> Response:
        return JSONResponse(launcher.status_payload())

    async def health(_: Request) -> Response:
        return JSONResponse(
            {
                "status": "ok",
                "agent_running": launcher.running,
                "agent_ready": launcher.ready and launcher.running,
                "agent_url": launcher.agent_url,
                "pid": launcher.process.pid if launcher.running and launcher.process else None,
                "last_error": launcher.last_error,
            }
        )

    async def launch(_: Request) -> Response:
        already = launcher.running
        try:
            proc = await launcher.start()
            await launcher.wait_ready(proc)
        except (OSError, ProcessError) as error:
            return _json_error(500, str(error))
        return JSONResponse(
            {
                "status": "already_running" if already else "launched",
                "agent_url": launcher.agent_url,
                "agent_name": launcher.name,
                "pid": proc.pid,
            }
        )

    async def terminate(_: Request) -> Response:
        was_running = launcher.running
        await launcher.stop()
        return JSONResponse({"status": "terminated" if was_running else "not_running"})

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        if autostart:
            proc = await launcher.start()
            launcher.spawn_background(proc, None, None)
        try:
            yield
        finally:
            await launcher.stop()

    return Starlette(
        routes=[
            Route("/reset", reset, methods=["POST"]),
            Route("/status", status, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/launch", launch, methods=["POST"]),
            Route("/terminate", terminate, methods=["POST"]),
        ],
        lifespan=lifespan,
    )


def run_launcher(
    agent_argv: Sequence[str],
    *,
    agent_url: str,
    host: str = "127.0.0.1",
    port: int,
    log_dir: Path,
    name: str = "agent",
    autostart: bool = True,
    ready_timeout_s: float = 60.0,
    log_level: str = "warning",
) -> None:
    """Serve a launcher until SIGINT/SIGTERM (uvicorn's handlers), then stop the agent."""
    launcher = AgentLauncher(
        agent_argv=list(agent_argv),
        agent_url=agent_url,
        log_dir=log_dir,
        name=name,
        ready_timeout_s=ready_timeout_s,
    )
    app = build_launcher_app(launcher, autostart=autostart)
    _ReadyServer(uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False)).run()


class _ReadyServer(uvicorn.Server):
    """uvicorn, saying once it listens: ``arena launcher ready: URL``."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's start-up, then one ready line with the URL on standard error (once it listens)."""
        await super().startup(sockets=sockets)
        if self.started:
            port = self.servers[0].sockets[0].getsockname()[1] if self.servers else self.config.port
            url = f"http://{self.config.host}:{port}"
            print(f"arena launcher ready: {url} (POST /launch, GET /status, GET /health)", file=sys.stderr, flush=True)

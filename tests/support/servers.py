"""Run an ASGI app with uvicorn on 127.0.0.1 and a free port inside a test.

Why: end-to-end tests must use the real HTTP stack (A2A clients, the openai client) and every server a test starts
must be stopped by that test. The socket is bound before uvicorn starts (port 0, so no race for the port), the app's
lifespan runs, and leaving the ``async with`` block stops the server and waits for it.

    async with serve_app(app) as base_url:             # "http://127.0.0.1:PORT"
        ...
    async with serve_app_factory(make_app) as base_url:  # make_app(base_url) -> app, for apps that must know their URL
        ...

Requests still running at exit (e.g. a deliberately hanging handler) are cancelled after ``graceful_shutdown_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import uvicorn

ASGIApp = Callable[..., Any]


class ServerExited(RuntimeError):
    """uvicorn stopped with SystemExit (it does so when startup fails)."""


class _TestServer(uvicorn.Server):
    """A uvicorn server that leaves the test runner's signal handlers alone."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serve_app_factory(
    factory: Callable[[str], ASGIApp],
    *,
    graceful_shutdown_s: int = 2,
    startup_timeout_s: float = 30.0,
    log_level: str = "warning",
) -> AsyncIterator[str]:
    """Bind a free loopback port, build the app with ``factory(base_url)``, serve it; yield the base URL.

    The base URL has no trailing slash. Raises RuntimeError when the server fails to start (e.g. lifespan error).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Without TCP_NODELAY small responses wait for delayed ACKs: ~40 ms per request on loopback.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}"
    try:
        app = factory(base_url)
        config = uvicorn.Config(
            app,
            log_level=log_level,
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=graceful_shutdown_s,
            log_config=None,
        )
        server = _TestServer(config)

        async def run() -> None:
            # uvicorn exits with SystemExit when startup fails; inside a task that would escape to the event loop.
            try:
                await server.serve(sockets=[sock])
            except SystemExit as error:
                raise ServerExited(f"uvicorn exited with code {error.code}") from None

        serve_task = asyncio.create_task(run())
        try:
            async with asyncio.timeout(startup_timeout_s):
                while not server.started:
                    if serve_task.done():
                        break
                    await asyncio.sleep(0.01)
            if not server.started:
                with contextlib.suppress(Exception):
                    await serve_task
                raise RuntimeError(f"server for {base_url} failed to start")
            yield base_url
        finally:
            server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError, ServerExited):
                await serve_task
    finally:
        sock.close()


@contextlib.asynccontextmanager
async def serve_app(app: ASGIApp, **options: Any) -> AsyncIterator[str]:
    """Serve a ready-made ASGI app on a free loopback port; yield ``http://127.0.0.1:PORT``."""
    async with serve_app_factory(lambda _base_url: app, **options) as base_url:
        yield base_url

"""Reading request bodies, bounded: the route helpers and the ASGI backstop under every route and mounted app.

Why: ``await request.body()`` buffers whatever arrives, and a chunked body has no Content-Length to refuse up front.
Every body is read here with its cap (a 413 naming the setting, see :class:`~battle_backend.battles.json_limits.
BodyTooLarge`) and then parsed by :func:`~battle_backend.battles.json_limits.parse_json`; a big body is parsed in a
worker thread so a large result does not stall the event loop.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import anyio.to_thread
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from battle_backend.battles.json_limits import OFFLOAD_BYTES, BodyTooLarge, JsonLimits, parse_json
from battle_backend.settings import BackendSettings

logger = logging.getLogger(__name__)


# --- reading bodies -------------------------------------------------------------------------------------------
def declared_length(headers: Headers) -> int | None:
    """The Content-Length header as an int (None when absent or unreadable; the server already refused those)."""
    value = headers.get("content-length")
    if value is None or not value.strip().isdigit():
        return None
    return int(value.strip())


async def read_body(request: Request, *, limit: int, setting: str) -> bytes:
    """The whole body, refused with 413 as soon as it is known to exceed ``limit`` bytes: at once when the
    Content-Length says so, else while the (possibly chunked) stream is read, without reading further."""
    declared = declared_length(request.headers)
    if declared is not None and declared > limit:
        raise BodyTooLarge(limit, setting)
    received = bytearray()
    async for chunk in request.stream():
        if len(received) + len(chunk) > limit:
            raise BodyTooLarge(limit, setting)
        received += chunk
    return bytes(received)


async def read_json(request: Request, settings: BackendSettings, *, limit: int, setting: str) -> Any:
    """Read (bounded) and parse (bounded) a JSON body; big bodies are parsed in a worker thread."""
    raw = await read_body(request, limit=limit, setting=setting)
    limits = JsonLimits.from_settings(settings)
    if len(raw) >= OFFLOAD_BYTES:
        return await anyio.to_thread.run_sync(functools.partial(parse_json, raw, limits))
    return parse_json(raw, limits)


# --- the backstop for every route -----------------------------------------------------------------------------
BodyCap = Callable[[Scope], tuple[int, str]]
"""(limit in bytes, name of its setting) for a request, from its scope (the path, in practice)."""


class BodyLimitMiddleware:
    """Pure ASGI: no request body larger than its cap is ever buffered, whichever route or mounted app (MCP)
    reads it. Routes read with :func:`read_body` and the same cap; this guarantees it for everything else.

    A declared Content-Length over the cap is answered 413 without calling the app. Otherwise the receive
    channel counts bytes and raises :class:`BodyTooLarge` when the cap is crossed (the app's ApiError handler
    renders it); should a mounted app swallow that error and answer something else, its answer is replaced by the
    413.
    """

    def __init__(self, app: ASGIApp, *, cap: BodyCap) -> None:
        self.app = app
        self.cap = cap

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit, setting = self.cap(scope)

        async def refuse() -> None:
            error = BodyTooLarge(limit, setting)
            await JSONResponse({"detail": error.detail}, status_code=413)(scope, receive, send)

        declared = declared_length(Headers(scope=scope))
        if declared is not None and declared > limit:
            await refuse()
            return
        received = 0
        exceeded = False
        started = False
        replaced = False

        async def limited_receive() -> Message:
            nonlocal received, exceeded
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    exceeded = True
                    raise BodyTooLarge(limit, setting)
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started, replaced
            if replaced:
                return
            if message["type"] == "http.response.start":
                if exceeded and not started and message.get("status") != 413:
                    replaced = True
                    logger.info(
                        "%s %s: body over %d bytes; answer replaced by 413",
                        scope.get("method"),
                        scope.get("path"),
                        limit,
                    )
                    await refuse()
                    return
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:
            if not exceeded:
                raise
            # The app failed because its body was cut off (a mounted app may turn our BodyTooLarge into its own
            # error, or into "response already started"): the answer is the 413, sent now or already.
            if not started and not replaced:
                await refuse()
            elif started:
                logger.info(
                    "%s %s: body over %d bytes after the answer began", scope.get("method"), scope.get("path"), limit
                )

"""`create_app(settings)`: the Starlette application (API, live updates, web page) with its lifespan.

The lifespan opens the store (schema created or migrated), starts the scheduler (which recovers battles a previous
process left running), runs the MCP session manager of the AgentBeats platform tools (``/mcp/``, ``/sse``) and tears
all of it down on shutdown; nothing lives at module level. Middleware, outermost first: security headers on every
response, then the body-size ceiling (`body_limits.BodyLimitMiddleware`) in front of every route and mounted app.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Scope

from battle_backend.battles.api_models import ApiError
from battle_backend.battles.runs_home import RunsHome
from battle_backend.battles.scheduler import BattleScheduler
from battle_backend.battles.service import BattleService
from battle_backend.context import BackendContext
from battle_backend.http.body import BodyCap, BodyLimitMiddleware
from battle_backend.http.mcp_platform import MCP_PATH, MESSAGES_PATH, PlatformMcp
from battle_backend.http.routes_api import api_routes
from battle_backend.http.routes_leases import lease_routes
from battle_backend.http.routes_live import live_routes
from battle_backend.http.routes_web import web_routes
from battle_backend.http.security import SecurityHeadersMiddleware
from battle_backend.live.hub import BattleChange, LiveHub
from battle_backend.settings import BackendSettings
from battle_backend.store.factory import make_store
from battle_backend.store.protocol import BattleStore, StoreNotice, StoreUnavailable, WriteFailed
from battle_backend.store.records import BattleState
from battle_backend.views.live_feeds import LiveFeeds
from battle_backend.views.rendering import Renderer

logger = logging.getLogger(__name__)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)


async def _store_unavailable(request: Request, exc: Exception) -> Response:
    """503 with Retry-After for a database that cannot be reached (reads) or could not commit (writes that reach
    no route-level handling): nothing was stored, a retry is safe."""
    assert isinstance(exc, StoreUnavailable | WriteFailed)
    logger.warning("%s %s: %s", request.method, request.url.path, exc)
    detail = "the battle store is unavailable right now (database unreachable); nothing was changed, retry shortly"
    return JSONResponse({"detail": detail}, status_code=503, headers={"Retry-After": "1"})


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code in (204, 304):
        return Response(status_code=exc.status_code, headers=exc.headers)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)


def body_cap(settings: BackendSettings) -> BodyCap:
    """The byte cap of each request: ``max_result_bytes`` for ``POST /battles/{id}`` (a result carries the whole
    battle) and the MCP transports (report_on_battle_end carries the same), ``max_request_bytes`` for the rest."""
    large = (settings.max_result_bytes, "max_result_bytes")
    small = (settings.max_request_bytes, "max_request_bytes")

    def cap(scope: Scope) -> tuple[int, str]:
        path = str(scope.get("path", ""))
        if path.startswith((MCP_PATH, MESSAGES_PATH)) or (path.startswith("/battles/") and path.count("/") == 2):
            return large
        return small

    return cap


class NoticeBridge:
    """Other replicas' changes into this replica's hub, as if they had been made here: a battle change reaches the
    live views and the scheduler, a ready report wakes the battle flows waiting for that agent. After a lost LISTEN
    connection (``resync``) every battle is marked changed, read from the store in a task of its own."""

    def __init__(self, store: BattleStore, hub: LiveHub) -> None:
        self._store = store
        self._hub = hub
        self._tasks: set[asyncio.Task[None]] = set()

    def __call__(self, notice: StoreNotice) -> None:
        if notice.kind == "battle":
            self._hub.publish(BattleChange(notice.key, BattleState(notice.state) if notice.state else None))
        elif notice.kind == "agent_ready":
            self._hub.agent_ready(notice.key)
        elif notice.kind == "resync":
            task = asyncio.create_task(self._resync(), name="battle-store-resync")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _resync(self) -> None:
        try:
            battles = await self._store.list_battles(include_events=False)
        except Exception:
            logger.exception("battle store: could not re-read the battles after a lost LISTEN connection")
            return
        for battle in battles:
            self._hub.publish(BattleChange(battle.battle_id, battle.state))

    async def aclose(self) -> None:
        """Stop re-reads still running (the app's shutdown)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def create_app(settings: BackendSettings | None = None, *, runs_home: RunsHome | None = None) -> Starlette:
    """The whole backend as one ASGI app; serve it with uvicorn (see ``python -m battle_backend``). ``runs_home``:
    the runs home of ``arena view runs/`` (an import file's section), served at /ui/runs."""
    settings = settings or BackendSettings()
    platform_mcp = PlatformMcp(settings)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        store = make_store(settings)
        await store.open()
        http = httpx.AsyncClient(timeout=settings.http_timeout_s, trust_env=False)
        hub = LiveHub()
        bridge = NoticeBridge(store, hub)
        store.set_notice_handler(bridge)
        service = BattleService(store, hub, settings, http)
        scheduler = BattleScheduler(service, settings, http)
        renderer = Renderer()
        feeds = LiveFeeds(store, hub, renderer)
        context = BackendContext(
            settings=settings,
            store=store,
            hub=hub,
            service=service,
            scheduler=scheduler,
            renderer=renderer,
            http=http,
            feeds=feeds,
            runs_home=runs_home,
        )
        app.state.backend = context
        await scheduler.start()
        logger.info(
            "battle backend ready (%s, replica %s, %d concurrent battles)",
            store.description,
            store.replica_id,
            settings.max_concurrent_battles,
        )
        try:
            async with platform_mcp.run(context):
                yield
        finally:
            store.set_notice_handler(None)
            await bridge.aclose()
            await scheduler.stop()
            await feeds.aclose()
            await hub.aclose()
            await http.aclose()
            await store.close()

    return Starlette(
        routes=[*api_routes(), *lease_routes(), *live_routes(), *web_routes(), *platform_mcp.routes()],
        middleware=[
            Middleware(SecurityHeadersMiddleware),
            Middleware(BodyLimitMiddleware, cap=body_cap(settings)),
        ],
        exception_handlers={
            ApiError: _api_error,
            HTTPException: _http_error,
            StoreUnavailable: _store_unavailable,
            WriteFailed: _store_unavailable,
        },
        lifespan=lifespan,
    )

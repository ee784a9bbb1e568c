"""The AgentBeats HTTP API: same paths, bodies and status codes (FastAPI-style error bodies).

Every body is read through `body_limits` (a byte cap enforced while reading, bounded JSON) before a pydantic model
sees it: ``max_request_bytes`` for everything but battle events, ``max_result_bytes`` for ``POST /battles/{id}``
(whose event is then held to ``max_event_bytes`` or ``max_result_bytes`` by the service, once its kind is known).
A result whose detail declares Arena's schema ("schema": "arena.battle-result/1") must match the backend's copy of
docs/summary.schema.json: 422 naming the JSON path of the first problem otherwise; other results are taken as posted.
"""

from __future__ import annotations

from typing import Any

import anyio
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from battle_backend.battles.api_models import (
    AgentRegistration,
    AgentUpdate,
    ApiError,
    BattleCreate,
    BattleEvent,
    LauncherCheck,
    check_arena_result,
    validate_data,
)
from battle_backend.context import BackendContext
from battle_backend.http.body import declared_length, read_json
from battle_backend.http.security import presented_token


def backend(request: Request) -> BackendContext:
    """The app's context (set by the lifespan)."""
    context: BackendContext = request.app.state.backend
    return context


async def _body(request: Request, model: type[BaseModel]) -> Any:
    """A bounded JSON body (``max_request_bytes``) validated by ``model``: 413, 400 or 422 naming the field."""
    settings = backend(request).settings
    data = await read_json(request, settings, limit=settings.max_request_bytes, setting="max_request_bytes")
    return validate_data(model, data)


def _flag(request: Request, name: str, default: bool) -> bool:
    value = request.query_params.get(name)
    if value is None:
        return default
    if value.lower() in ("1", "true", "yes"):
        return True
    if value.lower() in ("0", "false", "no"):
        return False
    raise ApiError(422, [{"type": "bool_parsing", "loc": ["query", name], "msg": "Input should be true or false"}])


async def health(request: Request) -> JSONResponse:
    """Liveness, plus how busy this replica's scheduler is and which store it uses (never the database password)."""
    ctx = backend(request)
    return JSONResponse(
        {
            "status": "ok",
            "running_battles": ctx.scheduler.running_count,
            "max_concurrent_battles": ctx.settings.max_concurrent_battles,
            "require_token": ctx.settings.require_token,
            "store": "postgresql" if ctx.store.shared else "sqlite",
            "replica_id": ctx.store.replica_id,
        }
    )


# --- agents -------------------------------------------------------------------------------------------------
async def agents_collection(request: Request) -> Response:
    """GET: every agent. POST: register one (201; 400 when its card cannot be fetched)."""
    ctx = backend(request)
    if request.method in ("GET", "HEAD"):
        return JSONResponse([agent.to_api() for agent in await ctx.service.list_agents()])
    body: AgentRegistration = await _body(request, AgentRegistration)
    agent = await ctx.service.register_agent(body)
    return JSONResponse(agent.to_api(), status_code=201)


async def agent_item(request: Request) -> Response:
    """GET one agent; PUT {"ready": bool} (204); DELETE (204, 409 while locked)."""
    ctx = backend(request)
    agent_id = request.path_params["agent_id"]
    if request.method in ("GET", "HEAD"):
        return JSONResponse((await ctx.service.get_agent(agent_id)).to_api())
    if request.method == "PUT":
        update: AgentUpdate = await _body(request, AgentUpdate)
        await ctx.service.set_ready(agent_id, update.ready)
        return Response(status_code=204)
    await ctx.service.delete_agent(agent_id)
    return Response(status_code=204)


async def check_launcher(request: Request) -> JSONResponse:
    """AgentBeats' launcher liveness check (always 200; ``online`` says the answer)."""
    body: LauncherCheck = await _body(request, LauncherCheck)
    return JSONResponse(await backend(request).service.check_launcher(body.launcher_url))


# --- battles ------------------------------------------------------------------------------------------------
async def battles_collection(request: Request) -> Response:
    """GET: every battle (``?history=false`` leaves out interact_history). POST: create one (201, queued)."""
    ctx = backend(request)
    if request.method in ("GET", "HEAD"):
        include = _flag(request, "history", True)
        positions = await ctx.service.queue_positions()
        battles = await ctx.service.list_battles(include_events=include)
        return JSONResponse(
            [b.to_api(queue_position=positions.get(b.battle_id), include_history=include) for b in battles]
        )
    body: BattleCreate = await _body(request, BattleCreate)
    battle = await ctx.service.create_battle(body, str(request.base_url))
    positions = await ctx.service.queue_positions()
    return JSONResponse(battle.to_api(queue_position=positions.get(battle.battle_id)), status_code=201)


async def battle_item(request: Request) -> Response:
    """GET one battle with its interact_history; POST an event or the result (204)."""
    ctx = backend(request)
    battle_id = request.path_params["battle_id"]
    if request.method in ("GET", "HEAD"):
        battle = await ctx.service.get_battle(battle_id)
        positions = await ctx.service.queue_positions()
        return JSONResponse(battle.to_api(queue_position=positions.get(battle_id)))
    settings = ctx.settings
    token = presented_token(request.headers)
    await ctx.service.precheck_token(battle_id, token)
    posted: dict[str, Any] = await read_json(
        request, settings, limit=settings.max_result_bytes, setting="max_result_bytes"
    )
    event: BattleEvent = validate_data(BattleEvent, posted)
    if event.is_result and token is not None:
        # An Arena result must match the published schema (422 naming the JSON path). Only for the holder of the
        # battle's token (checked above; a result without one is refused by post_event anyway), and in a worker
        # thread: the check walks the whole result.
        await anyio.to_thread.run_sync(check_arena_result, event)
    await ctx.service.post_event(battle_id, event, posted, token, size_hint=declared_length(request.headers))
    return Response(status_code=204)


def api_routes() -> list[Route]:
    """The AgentBeats API routes (the fixed paths before the parameterised ones)."""
    return [
        Route("/health", health, methods=["GET"]),
        Route("/agents/check_launcher", check_launcher, methods=["POST"]),
        Route("/agents", agents_collection, methods=["GET", "POST"]),
        Route("/agents/{agent_id}", agent_item, methods=["GET", "PUT", "DELETE"]),
        Route("/battles", battles_collection, methods=["GET", "POST"]),
        Route("/battles/{battle_id}", battle_item, methods=["GET", "POST"]),
    ]

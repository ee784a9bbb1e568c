"""The AgentBeats HTTP API: same paths, bodies and status codes (FastAPI-style error bodies)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from battle_backend.api_models import (
    AgentRegistration,
    AgentUpdate,
    ApiError,
    BattleCreate,
    BattleEvent,
    LauncherCheck,
    parse_json_body,
    validate_body,
    validate_data,
)
from battle_backend.context import BackendContext
from battle_backend.security import presented_token


def backend(request: Request) -> BackendContext:
    """The app's context (set by the lifespan)."""
    return request.app.state.backend  # type: ignore[no-any-return]


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
    """Liveness, plus how busy the scheduler is."""
    ctx = backend(request)
    return JSONResponse(
        {
            "status": "ok",
            "running_battles": ctx.scheduler.running_count,
            "max_concurrent_battles": ctx.settings.max_concurrent_battles,
            "require_token": ctx.settings.require_token,
        }
    )


# --- agents -------------------------------------------------------------------------------------------------
async def agents_collection(request: Request) -> Response:
    """GET: every agent. POST: register one (201; 400 when its card cannot be fetched)."""
    ctx = backend(request)
    if request.method in ("GET", "HEAD"):
        return JSONResponse([agent.to_api() for agent in await ctx.service.list_agents()])
    body: AgentRegistration = validate_body(AgentRegistration, await request.body())
    agent = await ctx.service.register_agent(body)
    return JSONResponse(agent.to_api(), status_code=201)


async def agent_item(request: Request) -> Response:
    """GET one agent; PUT {"ready": bool} (204); DELETE (204, 409 while locked)."""
    ctx = backend(request)
    agent_id = request.path_params["agent_id"]
    if request.method in ("GET", "HEAD"):
        return JSONResponse((await ctx.service.get_agent(agent_id)).to_api())
    if request.method == "PUT":
        update: AgentUpdate = validate_body(AgentUpdate, await request.body())
        await ctx.service.set_ready(agent_id, update.ready)
        return Response(status_code=204)
    await ctx.service.delete_agent(agent_id)
    return Response(status_code=204)


async def check_launcher(request: Request) -> JSONResponse:
    """AgentBeats' launcher liveness check (always 200; ``online`` says the answer)."""
    body: LauncherCheck = validate_body(LauncherCheck, await request.body())
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
    body: BattleCreate = validate_body(BattleCreate, await request.body())
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
    posted: dict[str, Any] = parse_json_body(await request.body())
    event: BattleEvent = validate_data(BattleEvent, posted)
    await ctx.service.post_event(battle_id, event, posted, presented_token(request.headers))
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

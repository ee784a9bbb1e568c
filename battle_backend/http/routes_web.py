"""The web page: battle list, agent registration and battle creation forms, the live battle page.

Forms post as plain HTML forms (no script needed) and go through the same service as the JSON API, so the same
validation and the same errors apply; an error re-renders the list with the message. Form bodies are read with the
``max_request_bytes`` cap (and the parser's field limits), and the battle form's ``config`` JSON is parsed with the
same bounds as a JSON body (`body_limits`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Message

from battle_backend.battles.api_models import AgentRegistration, ApiError, BattleCreate, validation_error
from battle_backend.battles.json_limits import JsonLimits, parse_json
from battle_backend.context import BackendContext
from battle_backend.http.body import read_body
from battle_backend.http.routes_attempts import attempt_routes
from battle_backend.http.routes_live import participant_agents
from battle_backend.http.routes_runs import runs_routes
from battle_backend.store.records import BattleRecord, BattleState
from battle_backend.views.attempt_filter import AttemptFilter, FilterOptions, filter_options
from battle_backend.views.progress import LiveProgress, live_progress
from battle_backend.views.rendering import STATIC_DIR, result_view

MAX_FORM_FIELDS = 64
"""Both forms have about a dozen fields."""


async def _form(request: Request) -> FormData:
    """The form, read with the ``max_request_bytes`` cap (413 beyond), then parsed from memory."""
    ctx: BackendContext = request.app.state.backend
    raw = await read_body(request, limit=ctx.settings.max_request_bytes, setting="max_request_bytes")
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return {"type": "http.disconnect"}
        replayed = True
        return {"type": "http.request", "body": raw, "more_body": False}

    return await Request(request.scope, replay).form(max_files=0, max_fields=MAX_FORM_FIELDS)


def _error_text(error: ApiError) -> str:
    """A 422 list or a detail string as one readable line."""
    if isinstance(error.detail, list):
        parts = []
        for item in error.detail:
            loc = ".".join(str(p) for p in item.get("loc", [])[1:]) or "form"
            parts.append(f"{loc}: {item.get('msg')}")
        return "; ".join(parts)
    return str(error.detail)


async def _index(
    ctx: BackendContext, *, notice: str | None = None, form_error: str | None = None, status: int = 200
) -> HTMLResponse:
    agents = await ctx.service.list_agents()
    battles = list(reversed(await ctx.service.list_battles()))
    requirement_names = sorted(
        {
            str(req.get("name"))
            for agent in agents
            if agent.is_green
            for req in agent.register_info.get("participant_requirements") or []
            if isinstance(req, dict)
        }
    )
    html = ctx.renderer.render(
        "index.html",
        agents=agents,
        battles=battles,
        agent_names={agent.agent_id: agent.alias for agent in agents},
        queue=await ctx.service.queue_positions(),
        requirement_names=requirement_names,
        notice=notice,
        form_error=form_error,
        runs_home=ctx.runs_home,
    )
    return HTMLResponse(html, status_code=status)


async def index(request: Request) -> HTMLResponse:
    """The battle list and the forms."""
    ctx: BackendContext = request.app.state.backend
    notice = None
    registered = request.query_params.get("registered")
    if registered:
        agent = await ctx.store.get_agent(registered)
        if agent is not None:
            notice = f"Agent {agent.alias} registered ({agent.agent_id})."
    return await _index(ctx, notice=notice)


def _filter_options(battle: BattleRecord, progress: LiveProgress) -> FilterOptions:
    """The tasks and categories of both grids (the final one and the live one)."""
    view = result_view(battle)
    rows: list[tuple[str, list[Any]]] = [(row.task_key, list(row.cells)) for row in view.grid] if view else []
    rows += [(row.task_key, list(row.cells)) for row in progress.rows]
    return filter_options(
        (task for task, _ in rows), (cell.category for _, cells in rows for cell in cells if cell is not None)
    )


async def battle_page(request: Request) -> Response:
    """One battle: status, live progress, attempt filter, result views, timeline (live over SSE).
    ``?outcome=&category=&task=`` filter the attempt grids without script."""
    ctx: BackendContext = request.app.state.backend
    battle = await ctx.store.get_battle(request.path_params["battle_id"])
    if battle is None:
        return HTMLResponse(ctx.renderer.render("not_found.html", what="battle"), status_code=404)
    agents = await participant_agents(ctx, battle)
    attempt_filter = AttemptFilter.from_query(request.query_params)
    progress = live_progress(battle.events, now=datetime.now(UTC), running=battle.state is BattleState.RUNNING)
    return HTMLResponse(
        ctx.renderer.render(
            "battle.html",
            battle=battle,
            events=battle.events,
            last_seq=battle.events[-1].seq if battle.events else 0,
            event_html=[ctx.renderer.event_html(event) for event in battle.events],
            status_html=ctx.renderer.status_html(battle, agents, started_calibration=progress.calibration),
            progress_html=ctx.renderer.progress_html(battle, progress, attempt_filter=attempt_filter),
            result_html=ctx.renderer.result_html(
                battle, started_calibration=progress.calibration, attempt_filter=attempt_filter
            ),
            flt=attempt_filter,
            options=_filter_options(battle, progress),
        )
    )


def _requirements(text: str) -> list[dict[str, Any]]:
    """Lines of ``name role required|optional``."""
    requirements = []
    for number, line in enumerate(text.splitlines(), start=1):
        words = line.split()
        if not words:
            continue
        if len(words) not in (2, 3) or (len(words) == 3 and words[2] not in ("required", "optional")):
            raise ApiError(422, f"participant_requirements line {number}: write 'name role required|optional'")
        requirements.append({"name": words[0], "role": words[1], "required": len(words) == 2 or words[2] == "required"})
    return requirements


async def register_form(request: Request) -> Response:
    """POST /ui/agents: register from the form, then back to the list."""
    ctx: BackendContext = request.app.state.backend
    try:
        form = await _form(request)
        is_green = form.get("is_green") == "true"
        data: dict[str, Any] = {
            "alias": str(form.get("alias") or ""),
            "agent_url": str(form.get("agent_url") or ""),
            "launcher_url": str(form.get("launcher_url") or ""),
            "is_green": is_green,
        }
        if is_green:
            data["participant_requirements"] = _requirements(str(form.get("participant_requirements") or ""))
            if form.get("battle_timeout"):
                data["battle_timeout"] = str(form.get("battle_timeout"))
        try:
            body = AgentRegistration.model_validate(data)
        except ValidationError as exc:
            raise validation_error(exc) from exc
        agent = await ctx.service.register_agent(body)
    except ApiError as error:
        return await _index(
            ctx, form_error=f"Could not register the agent: {_error_text(error)}", status=error.status_code
        )
    return RedirectResponse(f"/?registered={agent.agent_id}", status_code=303)


async def battle_form(request: Request) -> Response:
    """POST /ui/battles: create from the form, then open the battle page."""
    ctx: BackendContext = request.app.state.backend
    try:
        form = await _form(request)
        opponents = []
        for i in range(3):
            name = str(form.get(f"opponent_name_{i}") or "").strip()
            agent_id = str(form.get(f"opponent_agent_{i}") or "").strip()
            if name or agent_id:
                opponents.append({"name": name, "agent_id": agent_id})
        config_text = str(form.get("config") or "").strip()
        config = (
            parse_json(
                config_text.encode("utf-8", "surrogatepass"),
                JsonLimits.from_settings(ctx.settings),
                loc=("body", "config"),
            )
            if config_text
            else {}
        )
        try:
            body = BattleCreate.model_validate(
                {"green_agent_id": str(form.get("green_agent_id") or ""), "opponents": opponents, "config": config}
            )
        except ValidationError as exc:
            raise validation_error(exc) from exc
        battle = await ctx.service.create_battle(body, str(request.base_url))
    except ApiError as error:
        return await _index(
            ctx, form_error=f"Could not create the battle: {_error_text(error)}", status=error.status_code
        )
    return RedirectResponse(f"/ui/battles/{battle.battle_id}", status_code=303)


def web_routes() -> list[Route | Mount]:
    """Pages, form handlers and the static files."""
    return [
        Route("/", index, methods=["GET"]),
        Route("/ui", lambda request: RedirectResponse("/", status_code=307), methods=["GET"]),
        Route("/ui/battles/{battle_id}", battle_page, methods=["GET"]),
        *attempt_routes(),
        *runs_routes(),
        Route("/ui/agents", register_form, methods=["POST"]),
        Route("/ui/battles", battle_form, methods=["POST"]),
        Mount("/static", app=StaticFiles(directory=str(STATIC_DIR)), name="static"),
    ]

"""The attempt viewer: one attempt of a battle, its failure explanation above its conversation, and the raw JSONL.

``/ui/battles/{battle_id}/attempts/{task_key:path}/{attempt}`` and the same path + ``/trajectory.jsonl``. The task
key keeps its slashes (``retail/test/7``), hence the ``path`` convertor; the attempt number ends the path, so the
two routes never overlap. The attempt is up to nine ASCII digits, at most ``MAX_ATTEMPT_NUMBER``; anything else is a
404 (never an ``int()`` of an unbounded run of digits). Everything shown comes from the stored verified events and
the result (:mod:`attempt_data`), is bounded and escaped (:mod:`trajectory_view`, :mod:`explanation_view`); the JSONL
is served as a download, never as a page.
"""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from battle_backend.battles.facts import battle_facts, events_say_calibration
from battle_backend.context import BackendContext
from battle_backend.http.routes_tasks import task_routes
from battle_backend.store.records import BattleRecord
from battle_backend.views.attempt_checks import checks_view, malformed_reply_view, scenario_view
from battle_backend.views.attempt_data import MAX_ATTEMPT_NUMBER, AttemptData, attempt_path, find_attempt
from battle_backend.views.divergence import task_path
from battle_backend.views.explanation import explanation_view
from battle_backend.views.trajectory import trajectory_view

_UNSAFE_FILENAME = re.compile(r"[^A-Za-z0-9._-]+")
_ATTEMPT_NUMBER = re.compile(r"[0-9]{1,9}")


def _not_found(ctx: BackendContext, what: str, *, detail: str = "", back_url: str = "") -> HTMLResponse:
    return HTMLResponse(
        ctx.renderer.render("not_found.html", what=what, detail=detail, back_url=back_url), status_code=404
    )


def _attempt_missing(ctx: BackendContext, battle: BattleRecord, request: Request) -> HTMLResponse:
    task_key, number = request.path_params["task_key"], request.path_params["attempt"][:40]
    return _not_found(
        ctx,
        "attempt",
        detail=f"Battle {battle.battle_id} has no record of attempt {number} of {task_key}: no attempt_finished "
        "event and no result entry names it (yet).",
        back_url=f"/ui/battles/{battle.battle_id}",
    )


def attempt_number(raw: str) -> int | None:
    """The attempt number of a path segment: ASCII digits, at most as many as :data:`MAX_ATTEMPT_NUMBER` has (a
    4301-digit number would make ``int()`` raise past Python's conversion limit); None for anything else."""
    if _ATTEMPT_NUMBER.fullmatch(raw) is None:
        return None
    number = int(raw)
    return number if number <= MAX_ATTEMPT_NUMBER else None


async def _load(request: Request) -> tuple[BattleRecord, AttemptData] | HTMLResponse:
    """The battle and the attempt the path names, or the 404 page saying which of the two is unknown."""
    ctx: BackendContext = request.app.state.backend
    battle = await ctx.store.get_battle(request.path_params["battle_id"])
    if battle is None:
        return _not_found(ctx, "battle")
    number = attempt_number(request.path_params["attempt"])
    if number is None:
        return _attempt_missing(ctx, battle, request)
    data = find_attempt(battle, request.path_params["task_key"], number)
    if data is None:
        return _attempt_missing(ctx, battle, request)
    return battle, data


async def attempt_page(request: Request) -> Response:
    """The viewer: header, failure explanation, conversation, prev/next, link to the raw JSONL."""
    ctx: BackendContext = request.app.state.backend
    loaded = await _load(request)
    if isinstance(loaded, Response):
        return loaded
    battle, data = loaded
    task_key, number = data.key
    html = ctx.renderer.render(
        "attempt.html",
        battle=battle,
        header=data.header,
        explanation=explanation_view(data.explanation),
        trajectory=trajectory_view(data.trajectory),
        malformed=malformed_reply_view(data.malformed_reply),
        scenario=scenario_view(data.scenario),
        checks=checks_view(data.checks),
        previous=data.previous,
        next=data.next,
        jsonl_url=attempt_path(battle.battle_id, task_key, number) + "/trajectory.jsonl",
        divergence_url=task_path(battle.battle_id, task_key),  # the task's attempts side by side
        facts=battle_facts(battle, started_calibration=events_say_calibration(battle.events)),
    )
    return HTMLResponse(html)


def jsonl_filename(battle_id: str, task_key: str, attempt: int) -> str:
    """A download name made of safe characters only (the parts come from agents)."""
    stem = _UNSAFE_FILENAME.sub("_", f"{battle_id[:8]}_{task_key}_{attempt}").strip("._") or "attempt"
    return f"{stem[:150]}.jsonl"


async def attempt_jsonl(request: Request) -> Response:
    """The raw JSONL: the attempt's event detail without the trajectory, then one line per message, as posted."""
    loaded = await _load(request)
    if isinstance(loaded, Response):
        return loaded
    battle, data = loaded
    body = "".join(line + "\n" for line in data.jsonl_lines())
    filename = jsonl_filename(battle.battle_id, *data.key)
    return Response(
        body.encode("utf-8", "replace"),
        media_type="application/x-ndjson",
        headers={
            "Content-Disposition": f'attachment; filename="{filename}"',
            "Cache-Control": "no-store",
        },
    )


def attempt_routes() -> list[Route]:
    """The viewer and its JSONL (the JSONL first: its path is the viewer's plus a suffix)."""
    # the attempt is matched as text and parsed by attempt_number: Starlette's int convertor calls int() on any run
    # of digits, and one past Python's 4300-digit limit raised (a 500)
    base = "/ui/battles/{battle_id}/attempts/{task_key:path}/{attempt}"
    return [
        Route(base + "/trajectory.jsonl", attempt_jsonl, methods=["GET"]),
        Route(base, attempt_page, methods=["GET"]),
        *task_routes(),  # a task's attempts side by side (/ui/battles/{battle_id}/tasks/{task_key})
    ]

"""The runs home of ``arena view runs/`` (GET /ui/runs) and its compare view (GET /ui/runs/compare?run=A&run=B).

Both pages exist only when the backend was started with a runs-home import file (``runs_home`` in the context);
otherwise they answer 404 saying how to get one. The data is in memory and small (checked when it was imported):
filtering, sorting and rendering happen in a worker thread all the same, so a large home never holds the loop.
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from battle_backend.context import BackendContext
from battle_backend.views import runs_home as views

MAX_PICKED = 16
"""More ``run`` parameters than this are not read (two are needed)."""


def _not_found(ctx: BackendContext) -> HTMLResponse:
    html = ctx.renderer.render(
        "not_found.html",
        what="runs home",
        detail="This backend shows no folder of runs: start one with `arena view runs/` (any folder of run "
        "directories).",
    )
    return HTMLResponse(html, status_code=404)


async def runs_home_page(request: Request) -> HTMLResponse:
    """Every run of the folder: filter (text, domain, status), sort (date, score, name), pick two to compare."""
    ctx: BackendContext = request.app.state.backend
    home = ctx.runs_home
    if home is None:
        return _not_found(ctx)
    query = views.HomeQuery.from_query(request.query_params)

    def render() -> str:
        return ctx.renderer.render(
            "runs_home.html",
            home=home,
            runs=views.shown_runs(home, query),
            query=query,
            domains=views.domains_of(home),
            statuses=views.statuses_of(home),
            sorts=views.SORTS,
            v=views,
        )

    return HTMLResponse(await asyncio.to_thread(render))


async def runs_compare_page(request: Request) -> HTMLResponse:
    """The statistics of ``arena compare`` for two runs of the home, or its refusal, or how to get them."""
    ctx: BackendContext = request.app.state.backend
    home = ctx.runs_home
    if home is None:
        return _not_found(ctx)
    picked = request.query_params.getlist("run")[:MAX_PICKED]

    def render() -> tuple[str, int]:
        view = views.compare_view(home, picked)
        if isinstance(view, str):
            return ctx.renderer.render("runs_compare.html", home=home, problem=view, view=None, v=views), 400
        return ctx.renderer.render("runs_compare.html", home=home, problem=None, view=view, v=views), 200

    html, status = await asyncio.to_thread(render)
    return HTMLResponse(html, status_code=status)


def runs_routes() -> list[Route]:
    return [
        Route("/ui/runs", runs_home_page, methods=["GET"]),
        Route("/ui/runs/compare", runs_compare_page, methods=["GET"]),
    ]

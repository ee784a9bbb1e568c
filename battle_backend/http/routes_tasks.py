"""The divergence view of a task: ``/ui/battles/{battle_id}/tasks/{task_key:path}``, the task's attempts side by
side (battle_backend/views/divergence.py). The task key keeps its slashes (``retail/test/7``), hence the ``path``
convertor; a key that is too long, has a ``.`` or ``..`` segment, or names no attempt of the battle is a 404. The view
is built and rendered in a worker thread (CPU over the stored events, up to 64 columns of hostile text)."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from battle_backend.battles.tolerant import MAX_NAME_CHARS
from battle_backend.context import BackendContext
from battle_backend.views.divergence import divergence_view


async def task_page(request: Request) -> Response:
    """The task's attempts side by side, the first divergence marked."""
    ctx: BackendContext = request.app.state.backend
    battle = await ctx.store.get_battle(request.path_params["battle_id"])
    if battle is None:
        return HTMLResponse(ctx.renderer.render("not_found.html", what="battle"), status_code=404)
    task_key: str = request.path_params["task_key"]
    view = await asyncio.to_thread(divergence_view, battle, task_key) if len(task_key) <= MAX_NAME_CHARS else None
    if view is None:
        html = ctx.renderer.render(
            "not_found.html",
            what="task",
            detail=f"Battle {battle.battle_id} has no attempt of task {task_key[:200]} (yet).",
            back_url=f"/ui/battles/{battle.battle_id}",
        )
        return HTMLResponse(html, status_code=404)
    html = await asyncio.to_thread(ctx.renderer.render, "task.html", battle=battle, view=view)
    return HTMLResponse(html)


def task_routes() -> list[Route]:
    """The task page."""
    return [Route("/ui/battles/{battle_id}/tasks/{task_key:path}", task_page, methods=["GET"])]

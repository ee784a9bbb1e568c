"""Live updates: WebSocket /ws/battles (AgentBeats' message shapes) and SSE per battle for the web page.

Both read from the store after a change notification, so a client that falls behind gets the latest state in one
message instead of a backlog, and the SSE stream can resume exactly (events carry their sequence number as id).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from battle_backend.api_models import ApiError
from battle_backend.context import BackendContext
from battle_backend.progress_view import LiveProgress, ProgressTracker
from battle_backend.records import AgentRecord, BattleRecord, BattleState
from battle_backend.rendering import timeline_payload

SSE_BATCH = 200


def _non_negative_int(value: str | None, loc: list[str]) -> int:
    if value is None or value == "":
        return 0
    try:
        number = int(value)
    except ValueError as exc:
        raise ApiError(422, [{"type": "int_parsing", "loc": loc, "msg": "Input should be a valid integer"}]) from exc
    if number < 0:
        raise ApiError(422, [{"type": "greater_than_equal", "loc": loc, "msg": "Input should be >= 0"}])
    return number


async def participant_agents(ctx: BackendContext, battle: BattleRecord) -> dict[str, AgentRecord]:
    """The battle's agents by id (deleted ones are simply absent)."""
    agents: dict[str, AgentRecord] = {}
    for agent_id in battle.participant_ids:
        agent = await ctx.store.get_agent(agent_id)
        if agent is not None:
            agents[agent_id] = agent
    return agents


async def _fold_delivered(ctx: BackendContext, battle_id: str, last: int, tracker: ProgressTracker) -> None:
    """Fold the events up to ``last`` (the client has them already) into ``tracker``, in bounded batches."""
    folded = 0
    while folded < last:
        batch = await ctx.store.list_events(battle_id, after_seq=folded, limit=SSE_BATCH)
        if not batch:
            return
        for event in batch:
            if event.seq <= last:
                tracker.add(event)
        folded = batch[-1].seq


async def battle_events(request: Request) -> EventSourceResponse:
    """SSE: ``battle_event`` (id = seq; data = {seq, html, event}) for every event after ``since`` or the
    ``Last-Event-ID`` header, ``battle_state`` on each state change, ``battle_progress`` (data = {html, done,
    total, done_text, pass1_text, eta_text}: the progress box, see progress_view) whenever it changed, ``end`` once
    the battle is over and drained. ``event`` is the stored payload, except that an attempt's trajectory is
    replaced by a stub (the attempt viewer shows it)."""
    ctx: BackendContext = request.app.state.backend
    battle_id = request.path_params["battle_id"]
    since = _non_negative_int(request.query_params.get("since"), ["query", "since"])
    header = request.headers.get("last-event-id")
    resume = _non_negative_int(header, ["header", "Last-Event-ID"]) if header and header.isdigit() else 0
    await ctx.service.get_battle(battle_id, include_events=False)  # 404 before the stream starts

    async def stream() -> AsyncIterator[ServerSentEvent]:
        last = max(since, resume)
        last_state: tuple[Any, ...] | None = None
        last_progress: str | None = None
        tracker = ProgressTracker()
        await _fold_delivered(ctx, battle_id, last, tracker)
        with ctx.hub.subscribe(battle_id) as sub:
            while True:
                while True:
                    events = await ctx.store.list_events(battle_id, after_seq=last, limit=SSE_BATCH)
                    for event in events:
                        tracker.add(event)
                        data = {
                            "seq": event.seq,
                            "html": ctx.renderer.event_html(event),
                            "event": timeline_payload(event.payload),
                        }
                        yield ServerSentEvent(data=json.dumps(data), event="battle_event", id=str(event.seq))
                    if events:
                        last = events[-1].seq
                    if len(events) < SSE_BATCH:
                        break
                battle = await ctx.store.get_battle(battle_id, include_events=False)
                if battle is None:
                    return
                progress = tracker.snapshot(now=datetime.now(UTC), running=battle.state is BattleState.RUNNING)
                state = (
                    battle.state,
                    battle.error,
                    battle.started_at,
                    battle.battle_timeout,
                    json.dumps(battle.result, default=str),
                    progress.calibration,
                )
                if state != last_state:
                    last_state = state
                    agents = await participant_agents(ctx, battle)
                    data = {
                        "state": battle.state.value,
                        "status_html": ctx.renderer.status_html(
                            battle, agents, started_calibration=progress.calibration
                        ),
                        "result_html": ctx.renderer.result_html(battle, started_calibration=progress.calibration),
                    }
                    yield ServerSentEvent(data=json.dumps(data), event="battle_state")
                # In a worker thread: a big battle's strip is thousands of cells, re-rendered after every event.
                progress_html = await asyncio.to_thread(ctx.renderer.progress_html, battle, progress)
                if progress_html != last_progress:
                    last_progress = progress_html
                    yield ServerSentEvent(
                        data=json.dumps(_progress_data(progress, progress_html)), event="battle_progress"
                    )
                if battle.state.is_terminal and last >= battle.last_seq:
                    yield ServerSentEvent(data="{}", event="end")
                    return
                await sub.wait()

    return EventSourceResponse(
        stream(),
        ping=ctx.settings.sse_ping_interval_s,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def _progress_data(progress: LiveProgress, html: str) -> dict[str, Any]:
    """The ``battle_progress`` data: the rendered box plus its counters as text (for the page's live region)."""
    return {
        "html": html,
        "done": progress.done,
        "total": progress.total,
        "done_text": progress.done_text,
        "pass1_text": progress.pass1_text,
        "eta_text": progress.eta_text,
    }


def _list_api(battle: BattleRecord) -> dict[str, Any]:
    """A battle as the list's WebSocket sends it: the AgentBeats record with each attempt's posted trajectory (up to
    256 KB each, for the attempt viewer) replaced by a stub, so one update of a big battle is not megabytes per tab."""
    body = battle.to_api()
    body["interact_history"] = [timeline_payload(payload) for payload in body.get("interact_history", [])]
    return body


async def battle_row_html(ctx: BackendContext, battle: BattleRecord) -> str:
    """The battle list's row of one battle, with the agents' aliases (what a reload would show)."""
    agents = await participant_agents(ctx, battle)
    return ctx.renderer.render(
        "_battle_row.html",
        battle=battle,
        agent_names={agent_id: agent.alias for agent_id, agent in agents.items()},
        queue=await ctx.service.queue_positions(),
    )


async def _until_disconnect(websocket: WebSocket) -> None:
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return


async def battles_ws(websocket: WebSocket) -> None:
    """AgentBeats' /ws/battles: ``battles_update`` with every battle on connect, then ``battle_update`` with the
    full battle whenever one changes (coalesced when changes come faster than the client reads). Each
    ``battle_update`` also carries ``row_html``, the list's server-rendered row (aliases, not ids), which the page
    inserts as it is; AgentBeats clients ignore the extra key."""
    ctx: BackendContext = websocket.app.state.backend
    await websocket.accept()
    with ctx.hub.subscribe(None) as sub:
        closed = asyncio.create_task(_until_disconnect(websocket))
        try:
            battles = await ctx.service.list_battles(include_events=True)
            await websocket.send_text(
                json.dumps({"type": "battles_update", "battles": [_list_api(b) for b in battles]})
            )
            while True:
                changed = asyncio.create_task(sub.wait())
                done, _ = await asyncio.wait({changed, closed}, return_when=asyncio.FIRST_COMPLETED)
                if closed in done:
                    changed.cancel()
                    return
                for battle_id in sorted(changed.result()):
                    battle = await ctx.store.get_battle(battle_id, include_events=True)
                    if battle is not None:
                        message = {
                            "type": "battle_update",
                            "battle": _list_api(battle),
                            "row_html": await battle_row_html(ctx, battle),
                        }
                        await websocket.send_text(json.dumps(message))
        except (WebSocketDisconnect, RuntimeError):
            return
        finally:
            closed.cancel()


def live_routes() -> list[Route | WebSocketRoute]:
    """SSE and WebSocket routes."""
    return [
        Route("/battles/{battle_id}/events", battle_events, methods=["GET"]),
        WebSocketRoute("/ws/battles", battles_ws),
    ]

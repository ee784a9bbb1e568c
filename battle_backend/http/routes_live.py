"""Live updates: WebSocket /ws/battles (AgentBeats' message shapes) and SSE per battle for the web page.

Both are fed by the shared live feeds (`live_feeds`): the store is read and the HTML rendered once per change for
every open page, off the write path and off the event loop, and a client that falls behind catches up from the store
(the SSE stream resumes exactly: events carry their sequence number as id) instead of holding a backlog.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from sse_starlette import EventSourceResponse
from starlette.requests import Request
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from battle_backend.battles.api_models import ApiError
from battle_backend.context import BackendContext
from battle_backend.store.records import AgentRecord, BattleRecord
from battle_backend.views import live_feeds
from battle_backend.views.live_feeds import EVENT_BATCH, LiveMessage, event_messages
from battle_backend.views.rendering import timeline_payload

logger = logging.getLogger(__name__)

SSE_BATCH = EVENT_BATCH
END = LiveMessage("end", "{}")


MAX_SEQ = 2**53
"""The largest sequence number a client may name (``since``, ``Last-Event-ID``)."""


def _non_negative_int(value: str | None, loc: list[str]) -> int:
    if value is None or value == "":
        return 0
    try:
        number = int(value)
    except ValueError as exc:
        raise ApiError(422, [{"type": "int_parsing", "loc": loc, "msg": "Input should be a valid integer"}]) from exc
    if number < 0:
        raise ApiError(422, [{"type": "greater_than_equal", "loc": loc, "msg": "Input should be >= 0"}])
    if number > MAX_SEQ:  # a database integer holds no more (SQLite raised OverflowError: a 500)
        raise ApiError(422, [{"type": "less_than_equal", "loc": loc, "msg": f"Input should be <= {MAX_SEQ}"}])
    return number


async def participant_agents(ctx: BackendContext, battle: BattleRecord) -> dict[str, AgentRecord]:
    """The battle's agents by id (deleted ones are simply absent)."""
    return await live_feeds.participant_agents(ctx.store, battle)


def _chunk(messages: list[LiveMessage]) -> bytes:
    """Several SSE messages as one chunk: one send for a whole batch, each message encoded once for every viewer."""
    return b"".join(message.sse_bytes for message in messages)


async def battle_events(request: Request) -> EventSourceResponse:
    """SSE: ``battle_event`` (id = seq; data = {seq, html, event}) for every event after ``since`` or the
    ``Last-Event-ID`` header, ``battle_state`` on each state change, ``battle_progress`` (data = {html, done,
    total, done_text, pass1_text, eta_text}: the progress box, see progress_view) whenever it changed, ``end`` once
    the battle is over and drained. ``event`` is the stored payload, except that an attempt's trajectory is
    replaced by a stub (the attempt viewer shows it).

    The live part comes from the battle's shared feed (`live_feeds`): built once for every open page. This stream
    first sends, from the store, what the viewer has not seen up to where the feed is, then what the feed offers;
    when it falls too far behind, its backlog is dropped and it catches up from the store again."""
    ctx: BackendContext = request.app.state.backend
    battle_id = request.path_params["battle_id"]
    since = _non_negative_int(request.query_params.get("since"), ["query", "since"])
    header = request.headers.get("last-event-id")
    resume = _non_negative_int(header, ["header", "Last-Event-ID"]) if header and header.isdigit() else 0
    await ctx.service.get_battle(battle_id, include_events=False)  # 404 before the stream starts

    async def stream() -> AsyncIterator[bytes]:
        last = max(since, resume)
        async with ctx.feeds.watch_battle(battle_id) as (feed, viewer):
            while True:
                snapshot = feed.snapshot(viewer)
                while last < snapshot.position:  # catch up from the store, up to where the feed is
                    batch = await ctx.store.list_events(
                        battle_id, after_seq=last, limit=min(SSE_BATCH, snapshot.position - last)
                    )
                    batch = [event for event in batch if event.seq <= snapshot.position]
                    if not batch:
                        break
                    yield _chunk(await event_messages(ctx.renderer, batch))
                    last = batch[-1].seq
                latest = [message for message in (snapshot.state, snapshot.progress) if message is not None]
                if snapshot.ended:
                    latest.append(END)
                if latest:
                    yield _chunk(latest)
                if snapshot.ended or snapshot.gone:
                    return
                while (messages := await viewer.take()) is not None:
                    out: list[LiveMessage] = []
                    over = False
                    for message in messages:
                        if message.event == "battle_event":
                            if message.seq <= last:
                                continue
                            last = message.seq
                        elif message.event == "gone":
                            over = True
                            break
                        out.append(message)
                        if message.event == "end":
                            over = True
                            break
                    if out:
                        yield _chunk(out)
                    if over:
                        return

    return EventSourceResponse(
        stream(),
        ping=ctx.settings.sse_ping_interval_s,
        send_timeout=ctx.settings.live_send_timeout_s,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def _list_api(battle: BattleRecord) -> dict[str, Any]:
    """A battle as the list's WebSocket sends it: the AgentBeats record with each attempt's posted trajectory (up to
    256 KB each, for the attempt viewer) replaced by a stub, so one update of a big battle is not megabytes per tab."""
    body = battle.to_api()
    body["interact_history"] = [timeline_payload(payload) for payload in body.get("interact_history", [])]
    return body


async def battle_row_html(ctx: BackendContext, battle: BattleRecord) -> str:
    """The battle list's row of one battle, with the agents' aliases (what a reload would show); rendered in a
    worker thread."""
    agents = await participant_agents(ctx, battle)
    queue = await ctx.service.queue_positions()
    names = {agent_id: agent.alias for agent_id, agent in agents.items()}
    return await asyncio.to_thread(
        ctx.renderer.render, "_battle_row.html", battle=battle, agent_names=names, queue=queue
    )


async def battle_update_text(ctx: BackendContext, battle_id: str) -> str | None:
    """The ``battle_update`` message of one battle as JSON text (None when it is gone); serialised in a worker
    thread, since the battle comes with all its events."""
    battle = await ctx.store.get_battle(battle_id, include_events=True)
    if battle is None:
        return None
    row_html = await battle_row_html(ctx, battle)
    return await asyncio.to_thread(
        lambda: json.dumps({"type": "battle_update", "battle": _list_api(battle), "row_html": row_html})
    )


async def _battles_update_text(ctx: BackendContext) -> str:
    battles = await ctx.service.list_battles(include_events=True)
    return await asyncio.to_thread(
        lambda: json.dumps({"type": "battles_update", "battles": [_list_api(b) for b in battles]})
    )


async def _until_disconnect(websocket: WebSocket) -> None:
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return


async def battles_ws(websocket: WebSocket) -> None:
    """AgentBeats' /ws/battles: ``battles_update`` with every battle on connect, then ``battle_update`` with the
    full battle whenever one changes (from the shared list feed: coalesced, at most a few per second per battle).
    Each ``battle_update`` also carries ``row_html``, the list's server-rendered row (aliases, not ids), which the
    page inserts as it is; AgentBeats clients ignore the extra key. A client that falls too far behind gets a fresh
    ``battles_update`` instead of its backlog; one whose socket takes longer than ``live_send_timeout_s`` to accept
    a message is disconnected."""
    ctx: BackendContext = websocket.app.state.backend
    await websocket.accept()
    timeout = ctx.settings.live_send_timeout_s

    async def build(battle_id: str) -> str | None:
        return await battle_update_text(ctx, battle_id)

    async with ctx.feeds.watch_list(build) as viewer:
        closed = asyncio.create_task(_until_disconnect(websocket))
        try:
            async with asyncio.timeout(timeout):
                await websocket.send_text(await _battles_update_text(ctx))
            while True:
                taking = asyncio.create_task(viewer.take())
                done, _ = await asyncio.wait({taking, closed}, return_when=asyncio.FIRST_COMPLETED)
                if closed in done:
                    taking.cancel()
                    return
                messages = taking.result()
                if messages is None:  # fell behind: the whole list again instead of the backlog
                    viewer.overflowed = False
                    messages = [LiveMessage("battles_update", await _battles_update_text(ctx))]
                for message in messages:
                    async with asyncio.timeout(timeout):
                        await websocket.send_text(message.data)
        except TimeoutError:
            logger.info("battle list WebSocket: the client stopped reading; disconnected")
            with contextlib.suppress(Exception):
                await websocket.close(code=1013)
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

"""Live views: WebSocket /ws/battles in AgentBeats' shapes and the per-battle SSE stream the page uses."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect

from tests.battle_backend.conftest import Arena, progress, result


@dataclass(frozen=True)
class Sse:
    """One server-sent event."""

    event: str
    id: str | None
    data: str


async def read_sse(response: httpx.Response) -> AsyncIterator[Sse]:
    """Parse a text/event-stream response into events (comments and pings skipped)."""
    event, event_id, data = "message", None, []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield Sse(event=event, id=event_id, data="\n".join(data))
            event, event_id, data = "message", None, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            event = value
        elif name == "id":
            event_id = value
        elif name == "data":
            data.append(value)


async def next_update(
    ws: ClientConnection, battle_id: str, predicate: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """Read WebSocket messages until a battle_update for ``battle_id`` satisfies ``predicate``."""
    async with asyncio.timeout(30):
        while True:
            message = json.loads(await ws.recv())
            if (
                message["type"] == "battle_update"
                and message["battle"]["battle_id"] == battle_id
                and predicate(message["battle"])
            ):
                return message["battle"]  # type: ignore[no-any-return]


async def test_websocket_pushes_battle_updates(arena: Arena) -> None:
    green, white = await arena.pair()
    ws_url = arena.backend.url.replace("http://", "ws://") + "/ws/battles"
    async with connect(ws_url) as ws:
        first = json.loads(await ws.recv())
        assert first == {"type": "battles_update", "battles": []}
        battle_id = await arena.battle(green, ("white_agent", white))
        queued = await next_update(ws, battle_id, lambda b: True)
        assert queued["green_agent_id"] == green.agent_id
        await arena.started(green, battle_id)
        await arena.post(battle_id, progress("pushed to the socket"))
        seen = await next_update(
            ws, battle_id, lambda b: any(e.get("message") == "pushed to the socket" for e in b["interact_history"])
        )
        assert seen["state"] == "running"
        await arena.post(battle_id, result("white_agent"))
        finished = await next_update(ws, battle_id, lambda b: b["state"] == "finished")
        assert finished["result"]["winner"] == "white_agent"
        assert "battle_token" not in json.dumps(finished)


async def test_websocket_sends_existing_battles_on_connect(arena: Arena) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    async with connect(arena.backend.url.replace("http://", "ws://") + "/ws/battles") as ws:
        first = json.loads(await ws.recv())
        assert first["type"] == "battles_update"
        assert [b["battle_id"] for b in first["battles"]] == [battle_id]


async def test_sse_streams_events_with_their_sequence_and_ends_after_the_result(arena: Arena) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    collected: list[Sse] = []

    async def listen() -> None:
        async with arena.client.stream("GET", f"/battles/{battle_id}/events", params={"since": 0}) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            async for sse in read_sse(response):
                collected.append(sse)
                if sse.event == "end":
                    return

    listener = asyncio.create_task(listen())
    for i in range(3):
        assert (await arena.post(battle_id, progress(f"live {i}", markdown_content="**md**"))).status_code == 204
    assert (await arena.post(battle_id, result("draw"))).status_code == 204
    async with asyncio.timeout(30):
        await listener
    events = [s for s in collected if s.event == "battle_event"]
    seqs = [int(s.id or 0) for s in events]
    assert seqs == list(range(1, len(seqs) + 1))
    payloads = [json.loads(s.data) for s in events]
    assert [p["seq"] for p in payloads] == seqs
    live = [p for p in payloads if str(p["event"].get("message", "")).startswith("live")]
    assert [p["event"]["message"] for p in live] == ["live 0", "live 1", "live 2"]
    assert "<strong>md</strong>" in live[0]["html"]
    states = [json.loads(s.data)["state"] for s in collected if s.event == "battle_state"]
    assert states[0] == "running" and states[-1] == "finished"
    assert collected[-1].event == "end"


async def test_sse_resumes_after_last_event_id(arena: Arena) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    await arena.post(battle_id, progress("one"))
    await arena.post(battle_id, progress("two"))
    await arena.post(battle_id, result("draw"))
    total = (await arena.get(battle_id))["event_count"]
    async with arena.client.stream(
        "GET", f"/battles/{battle_id}/events", headers={"Last-Event-ID": str(total - 1)}
    ) as response:
        events = [s async for s in read_sse(response) if s.event == "battle_event"]
    assert [int(s.id or 0) for s in events] == [total]
    assert json.loads(events[0].data)["event"]["is_result"] is True


async def test_sse_for_unknown_battle_is_404(arena: Arena) -> None:
    response = await arena.client.get("/battles/nope/events")
    assert response.status_code == 404
    assert (await arena.client.get("/battles/nope/events", params={"since": "x"})).status_code == 422

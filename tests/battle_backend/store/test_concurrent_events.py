"""Concurrent posting: every event is its own row, committed before its 204 (group commit), so none is lost or
duplicated."""

from __future__ import annotations

import asyncio

import httpx

from tests.battle_backend.conftest import Arena, progress

POSTERS = 20
EVENTS_EACH = 15


async def test_twenty_concurrent_posters_lose_no_event(arena: Arena) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    before = (await arena.get(battle_id))["event_count"]

    async def poster(number: int) -> list[int]:
        statuses = []
        async with httpx.AsyncClient(base_url=arena.backend.url, trust_env=False, timeout=30) as client:
            for i in range(EVENTS_EACH):
                response = await client.post(
                    f"/battles/{battle_id}", json=progress(f"p{number}-e{i}", poster=number, index=i)
                )
                statuses.append(response.status_code)
        return statuses

    statuses = await asyncio.gather(*(poster(n) for n in range(POSTERS)))
    assert all(status == 204 for batch in statuses for status in batch)
    battle = await arena.get(battle_id)
    posted = [(e["poster"], e["index"]) for e in battle["interact_history"] if "poster" in e]
    assert sorted(posted) == [(n, i) for n in range(POSTERS) for i in range(EVENTS_EACH)]
    for n in range(POSTERS):  # each poster's events keep their order
        assert [i for p, i in posted if p == n] == list(range(EVENTS_EACH))
    events = await arena.backend.ctx.store.list_events(battle_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert battle["event_count"] >= before + POSTERS * EVENTS_EACH


async def test_concurrent_results_finish_the_battle_exactly_once(arena: Arena) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    winners = ["white_agent", "green_agent"] * 5
    responses = await asyncio.gather(
        *(arena.post(battle_id, {"is_result": True, "winner": w, "message": "r", "detail": {}}) for w in winners)
    )
    assert sorted(r.status_code for r in responses) == [204] + [400] * 9
    battle = await arena.get(battle_id)
    assert sum(1 for e in battle["interact_history"] if e.get("is_result")) == 1
    white_record = (await arena.client.get(f"/agents/{white.agent_id}")).json()
    assert len(white_record["elo"]["battle_history"]) == 1
    assert white_record["elo"]["rating"] in (1015, 985)

"""Two backend replicas on one PostgreSQL database (a real server the test run starts), driven through their HTTP
APIs as agents and browsers would: events posted to both land in one ordered history, one result is accepted, a
live client on one replica sees what was posted to the other, no battle runs twice, a pool of green agents runs
battles in parallel, and a stopped replica's battle is taken over.

Waits are bounded only to turn a hang into a failure; nothing asserts on durations.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from websockets.asyncio.client import connect

from battle_backend.store.postgres.store import PostgresStore
from tests.battle_backend.conftest import Arena, Registered, RunningBackend, progress, result, run_backend, wait_until
from tests.battle_backend.views.test_live_updates import read_sse

POSTERS = 20
EVENTS_PER_POSTER = 100


@contextlib.asynccontextmanager
async def two_replicas(tmp_path: Path, url: str, **overrides: Any) -> AsyncIterator[tuple[Arena, RunningBackend]]:
    """Replica A (with the fake agents' Arena around it) and replica B, both on the database at ``url``."""
    async with (
        run_backend(tmp_path / "unused-a.sqlite3", db_url=url, **overrides) as first,
        run_backend(tmp_path / "unused-b.sqlite3", db_url=url, **overrides) as second,
        contextlib.AsyncExitStack() as stack,
    ):
        assert first.ctx.store.replica_id != second.ctx.store.replica_id
        for running in (first, second):
            health = (await running.client.get("/health")).json()
            assert health["store"] == "postgresql" and health["replica_id"] == running.ctx.store.replica_id
        yield Arena(backend=first, stack=stack), second


async def _async(value: Any) -> Any:
    return value


async def _battle_on(arena: Arena) -> tuple[Registered, Registered, str, str]:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    token = arena.green_token(battle_id)
    assert token is not None
    return green, white, battle_id, token


async def test_posts_to_both_replicas_keep_one_order_and_one_result(tmp_path: Path, postgres_url: str) -> None:
    async with two_replicas(tmp_path, postgres_url) as (arena, other):
        _, _, battle_id, token = await _battle_on(arena)
        clients = [arena.client, other.client]
        headers = {"X-Battle-Token": token}

        async def poster(number: int) -> list[int]:
            client = clients[number % 2]  # half the posters on each replica
            statuses = []
            for n in range(EVENTS_PER_POSTER):
                event = progress(f"poster {number} event {n}", detail={"poster": number, "n": n})
                event["event_id"] = f"{battle_id}:p{number}:{n}"
                response = await client.post(f"/battles/{battle_id}", json=event, headers=headers)
                statuses.append(response.status_code)
            return statuses

        statuses = await asyncio.gather(*(poster(number) for number in range(POSTERS)))
        assert {status for batch in statuses for status in batch} == {204}

        async def post_result(client: httpx.AsyncClient, number: int) -> int:
            body = result("white_agent", detail={"from": number})
            body["event_id"] = f"{battle_id}:result:{number}"
            response = await client.post(f"/battles/{battle_id}", json=body, headers=headers)
            return response.status_code

        results = await asyncio.gather(*(post_result(clients[n % 2], n) for n in range(10)))
        assert sorted(results) == [204] + [400] * 9  # one result, whichever replica got it first

        for client in clients:  # both replicas answer the same battle
            battle = (await client.get(f"/battles/{battle_id}")).json()
            assert battle["state"] == "finished"
            history = battle["interact_history"]
            posted = [e["detail"] for e in history if e.get("reported_by") == "green" and not e["is_result"]]
            assert len(posted) == POSTERS * EVENTS_PER_POSTER  # none lost, none twice
            for number in range(POSTERS):  # each poster's events in the order it posted them
                assert [d["n"] for d in posted if d["poster"] == number] == list(range(EVENTS_PER_POSTER))
            assert [e["is_result"] for e in history].count(True) == 1 and history[-1]["is_result"]
            assert battle["event_count"] == len(history)
        white = (await other.client.get(f"/agents/{arena.agents[1].agent_id}")).json()
        assert white["elo"]["rating"] == 1015 and len(white["elo"]["battle_history"]) == 1


async def test_a_live_client_on_one_replica_sees_every_event_posted_to_the_other(
    tmp_path: Path, postgres_url: str
) -> None:
    async with two_replicas(tmp_path, postgres_url) as (arena, other):
        _, _, battle_id, token = await _battle_on(arena)
        headers = {"X-Battle-Token": token}
        ws_url = arena.backend.url.replace("http://", "ws://") + "/ws/battles"
        seen_on_ws: set[str] = set()
        seen_on_sse: list[int] = []
        async with (
            connect(ws_url, max_size=None) as ws,
            arena.client.stream("GET", f"/battles/{battle_id}/events") as sse,
        ):
            assert json.loads(await ws.recv())["type"] == "battles_update"
            sse_events = read_sse(sse)

            async def ws_until(message: str) -> None:
                while message not in seen_on_ws:
                    update = json.loads(await ws.recv())
                    if update["type"] == "battle_update" and update["battle"]["battle_id"] == battle_id:
                        seen_on_ws.update(str(e.get("message")) for e in update["battle"]["interact_history"])

            async def sse_until(seq: int) -> None:
                while not seen_on_sse or seen_on_sse[-1] < seq:
                    event = await anext(sse_events)
                    if event.event == "battle_event":
                        seen_on_sse.append(int(json.loads(event.data)["seq"]))

            async with asyncio.timeout(60):
                for n in range(20):  # one at a time: each reaches replica A's live views before the next is posted
                    message = f"posted to replica B #{n}"
                    response = await other.client.post(f"/battles/{battle_id}", json=progress(message), headers=headers)
                    assert response.status_code == 204
                    seq = (await other.client.get(f"/battles/{battle_id}?history=false")).json()["event_count"]
                    await asyncio.gather(ws_until(message), sse_until(seq))
                burst = [f"burst to replica B #{n}" for n in range(100)]  # then a burst: coalesced, never lost
                for message in burst:
                    await other.client.post(f"/battles/{battle_id}", json=progress(message), headers=headers)
                await other.client.post(f"/battles/{battle_id}", json=result("draw"), headers=headers)
                total = (await other.client.get(f"/battles/{battle_id}?history=false")).json()["event_count"]
                await asyncio.gather(ws_until(burst[-1]), sse_until(total))
        assert {f"posted to replica B #{n}" for n in range(20)} | set(burst) <= seen_on_ws
        assert seen_on_sse == list(range(seen_on_sse[0], total + 1))  # every sequence number once, in order


async def test_two_replicas_never_run_the_same_battle(tmp_path: Path, postgres_url: str) -> None:
    async with two_replicas(tmp_path, postgres_url) as (arena, other):
        pairs = [await arena.pair() for _ in range(6)]
        battle_ids = []
        for number, (green, white) in enumerate(pairs):  # created on both replicas; both schedulers race for each
            client = arena.client if number % 2 == 0 else other.client
            body = {
                "green_agent_id": green.agent_id,
                "opponents": [{"name": "white_agent", "agent_id": white.agent_id}],
            }
            response = await client.post("/battles", json=body)
            assert response.status_code == 201, response.text
            battle_ids.append(response.json()["battle_id"])
        for (green, _), battle_id in zip(pairs, battle_ids, strict=True):
            await arena.started(green, battle_id)
        await asyncio.sleep(0.5)  # room for a second (wrong) start to show up before counting
        owners = set()
        for (green, white), battle_id in zip(pairs, battle_ids, strict=True):
            history = (await arena.get(battle_id))["interact_history"]
            assert [e["message"] for e in history].count("Battle started") == 1
            assert len([m for m in green.fake.messages_of_type("battle_start") if m["battle_id"] == battle_id]) == 1
            assert len(white.fake.messages_of_type("battle_info")) == 1
            stored = await arena.backend.ctx.store.get_battle(battle_id, include_events=False)
            assert stored is not None
            owners.add(stored.owner)
        mine = set(arena.backend.ctx.scheduler._active)
        theirs = set(other.ctx.scheduler._active)
        assert not mine & theirs and mine | theirs == set(battle_ids)
        assert owners <= {arena.backend.ctx.store.replica_id, other.ctx.store.replica_id}


async def test_a_green_agent_pool_runs_queued_battles_in_parallel(tmp_path: Path, postgres_url: str) -> None:
    async with two_replicas(tmp_path, postgres_url) as (arena, other):
        members = [await arena.agent(f"green-{n}", green=True) for n in range(2)]  # their servers and launchers
        pooled = []  # the same two servers registered again, as members of one pool
        for n in range(2):
            body = {
                "alias": f"pooled-{n}",
                "agent_url": members[n].url,
                "launcher_url": members[n].launcher_url,
                "is_green": True,
                "participant_requirements": [{"role": "blue_agent", "name": "white_agent", "required": True}],
                "pool": "tau-retail",
            }
            response = await arena.client.post("/agents", json=body)
            assert response.status_code == 201, response.text
            pooled.append(response.json()["agent_id"])
        different = await arena.client.post(
            "/agents",
            json={
                "alias": "odd",
                "agent_url": members[0].url,
                "launcher_url": "",
                "is_green": True,
                "participant_requirements": [],
                "pool": "tau-retail",
            },
        )
        assert different.status_code == 400 and "participant_requirements differ" in different.text
        whites = [await arena.agent(f"white-{n}") for n in range(3)]
        battle_ids = []
        for number, white in enumerate(whites):
            client = arena.client if number % 2 == 0 else other.client
            body = {"green_pool": "tau-retail", "opponents": [{"name": "white_agent", "agent_id": white.agent_id}]}
            response = await client.post("/battles", json=body)
            assert response.status_code == 201, response.text
            battle_ids.append(response.json()["battle_id"])

        async def running() -> list[dict[str, Any]] | None:
            battles = [await arena.get(b) for b in battle_ids]
            return battles if sum(b["state"] == "running" for b in battles) == 2 else None

        battles = await wait_until(running)
        first_two = [b for b in battles if b["state"] == "running"]
        assert {b["green_agent_id"] for b in first_two} == set(pooled)  # one battle on each member
        waiting = next(b for b in battles if b["state"] == "queued")
        assert waiting["queue_position"] == 1 and waiting["green_pool"] == "tau-retail"
        page = await other.client.get("/")
        assert "#1 in queue" in page.text and "pool tau-retail" in page.text
        done = first_two[0]
        token = await wait_until(lambda: _async(arena.green_token(done["battle_id"])))  # battle_start received
        finished = await other.client.post(
            f"/battles/{done['battle_id']}", json=result("draw"), headers={"X-Battle-Token": token}
        )
        assert finished.status_code == 204
        third = await arena.wait_state(waiting["battle_id"], "running")
        assert third["green_agent_id"] == done["green_agent_id"]  # the member that came free


async def test_a_stopped_replicas_battle_is_taken_over_and_times_out(tmp_path: Path, postgres_url: str) -> None:
    async with contextlib.AsyncExitStack() as outer:
        async with contextlib.AsyncExitStack() as inner:
            first = await inner.enter_async_context(
                run_backend(tmp_path / "a.sqlite3", db_url=postgres_url, replica_lease_s=1.0)
            )
            arena = Arena(backend=first, stack=inner)
            green, white = await arena.pair(battle_timeout=4.0)
            battle_id = await arena.battle(green, ("white_agent", white))
            await arena.started(green, battle_id)

            async def deadline_set() -> bool:
                battle = await first.ctx.store.get_battle(battle_id, include_events=False)
                return battle is not None and battle.deadline_at is not None

            await wait_until(deadline_set)
            stored = await first.ctx.store.get_battle(battle_id, include_events=False)
            assert stored is not None and stored.owner == first.ctx.store.replica_id
            survivor = await outer.enter_async_context(
                run_backend(tmp_path / "b.sqlite3", db_url=postgres_url, replica_lease_s=1.0)
            )
            assert survivor.ctx.scheduler.running_count == 0  # A is alive: its battle is not B's
        # replica A stopped (cleanly, so it retired at once): B takes the battle over and its timeout fires there

        async def finished() -> dict[str, Any] | None:
            battle = (await survivor.client.get(f"/battles/{battle_id}")).json()
            return battle if battle["state"] == "finished" else None

        battle = await wait_until(finished)
        assert battle["result"]["winner"] == "draw" and battle["result"]["reason"] == "timeout"
        messages = [e["message"] for e in battle["interact_history"]]
        assert "Another backend replica took this battle over: it goes on, its timeout is re-armed" in messages
        assert messages.count("Battle started") == 1
        taken = await survivor.ctx.store.get_battle(battle_id, include_events=False)
        assert taken is not None and taken.owner == survivor.ctx.store.replica_id


async def test_ids_and_names_no_text_column_can_hold_are_refused_or_not_found(
    tmp_path: Path, postgres_url: str
) -> None:
    """NUL characters and lone surrogates in ids (URL paths), keys and names: PostgreSQL text cannot hold them, so
    they must be answered as on SQLite (not found, or a 4xx naming the field), never as a server error."""
    async with two_replicas(tmp_path, postgres_url) as (arena, _):
        _, _, battle_id, token = await _battle_on(arena)
        client = arena.client
        for path in ("/battles/%00", "/battles/a%00b", "/agents/%00", "/battles/%ED%A0%80"):
            assert (await client.get(path)).status_code == 404, path
        assert (await client.put("/agents/%00", json={"ready": True})).status_code == 404
        assert (await client.delete("/agents/%00")).status_code == 404
        assert (await client.post("/battles/%00", json=progress("x"))).status_code == 404
        keyed = progress("x")
        keyed["event_id"] = "key\u0000"
        refused = await client.post(f"/battles/{battle_id}", json=keyed, headers={"X-Battle-Token": token})
        assert refused.status_code == 422 and "event_id" in refused.text
        body = {"alias": "g", "agent_url": arena.agents[0].url, "launcher_url": "", "is_green": True}
        body |= {"participant_requirements": [], "pool": "p\u0000"}
        refused = await client.post("/agents", json=body)
        assert refused.status_code == 422 and "pool" in refused.text
        refused = await client.post("/battles", json={"green_pool": "p\u0000", "opponents": []})
        assert refused.status_code == 422 and "green_pool" in refused.text
        # text an agent provoked ends up in a battle's error: a NUL in it must not keep the battle from failing
        assert await arena.backend.ctx.service.fail(battle_id, "agent said: \u0000 boom")
        failed = await arena.get(battle_id)
        assert failed["state"] == "error" and failed["error"] == "agent said: \ufffd boom"
        page = await client.get(f"/ui/battles/{battle_id}")
        assert page.status_code == 200


async def test_a_takeover_that_fails_half_way_is_completed_on_the_next_pass(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replica taking battles over fails on one of them (a database error while reading it): that battle is
    still its own and not running there, so the next pass picks it up; it must never stay running for ever."""
    battle_ids: list[str] = []
    async with contextlib.AsyncExitStack() as stack:
        first = await stack.enter_async_context(
            run_backend(tmp_path / "a.sqlite3", db_url=postgres_url, replica_lease_s=1.0)
        )
        arena = Arena(backend=first, stack=stack)
        for _ in range(2):
            green, white = await arena.pair(battle_timeout=4.0)
            battle_id = await arena.battle(green, ("white_agent", white))
            await arena.started(green, battle_id)
            battle_ids.append(battle_id)

        async def deadlines_set() -> bool:
            battles = [await first.ctx.store.get_battle(b, include_events=False) for b in battle_ids]
            return all(b is not None and b.deadline_at is not None for b in battles)

        await wait_until(deadlines_set)
    # replica A stopped (retired); the survivor's first read of a battle it takes over fails once
    failures = {"left": 1}
    original = PostgresStore.get_battle

    async def flaky_get_battle(self: PostgresStore, battle_id: str, *, include_events: bool = True) -> Any:
        if battle_id in battle_ids and failures["left"] > 0:
            failures["left"] -= 1
            raise psycopg.OperationalError("connection lost (injected)")
        return await original(self, battle_id, include_events=include_events)

    monkeypatch.setattr(PostgresStore, "get_battle", flaky_get_battle)
    async with run_backend(tmp_path / "b.sqlite3", db_url=postgres_url, replica_lease_s=1.0) as survivor:

        async def both_finished() -> bool:
            states = [(await survivor.client.get(f"/battles/{b}")).json()["state"] for b in battle_ids]
            return states == ["finished", "finished"]

        await wait_until(both_finished)
        assert failures["left"] == 0

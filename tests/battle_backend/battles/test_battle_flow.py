"""State transitions of the battle flow: launcher failures, ready timeout, battle timeout, late and failing green
agents, and several battles at once."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.battle_backend.conftest import Arena, arena_on, progress, result, run_backend
from tests.battle_backend.http.test_api_agents import closed_port_url


async def test_launcher_error_puts_the_battle_in_error_and_unlocks(arena: Arena) -> None:
    green = await arena.agent("green", green=True)
    white = await arena.agent("white", launcher="error")
    battle_id = await arena.battle(green, ("white_agent", white))
    battle = await arena.wait_state(battle_id, "error")
    assert "Failed to reset opponent 'white_agent'" in battle["error"]
    assert "HTTP 500" in battle["error"]
    for agent in (green, white):
        record = (await arena.client.get(f"/agents/{agent.agent_id}")).json()
        assert record["status"] == "unlocked"
        assert record["elo"]["battle_history"][-1]["result"] == "error"
    assert (await arena.post(battle_id, progress("after error"))).status_code == 400


async def test_unreachable_launcher_gives_a_clear_reason(arena: Arena) -> None:
    green = await arena.agent("green", green=True, launcher_url=closed_port_url())
    white = await arena.agent("white")
    battle_id = await arena.battle(green, ("white_agent", white))
    battle = await arena.wait_state(battle_id, "error")
    assert "Failed to reset green agent green" in battle["error"]
    assert "unreachable" in battle["error"]
    assert any("Battle error" in str(e.get("message")) for e in battle["interact_history"])
    assert (await arena.client.get(f"/agents/{white.agent_id}")).json()["status"] == "unlocked"


async def test_agents_that_never_report_ready_time_out(db_path: Path) -> None:
    async with (
        run_backend(db_path, ready_timeout_s=0.3, ready_poll_interval_s=0.05) as backend,
        arena_on(backend) as arena,
    ):
        green = await arena.agent("green", green=True)
        white = await arena.agent("white", launcher="never_ready")
        battle_id = await arena.battle(green, ("white_agent", white))
        battle = await arena.wait_state(battle_id, "error")
        assert "Not all agents ready after 0.3 seconds" in battle["error"]
        assert "white_agent" in battle["error"]
        assert white.fake.received == []  # no battle_info before everyone is ready


async def test_battle_timeout_finishes_as_draw_and_refuses_later_results(arena: Arena) -> None:
    green = await arena.agent("green", green=True, battle_timeout=0.5)
    white = await arena.agent("white")
    battle_id = await arena.battle(green, ("white_agent", white))
    battle = await arena.wait_state(battle_id, "finished")
    assert battle["result"]["winner"] == "draw"
    assert battle["result"]["reason"] == "timeout"
    assert battle["battle_timeout"] == 0.5
    assert any("timed out" in str(e.get("message")) for e in battle["interact_history"])
    assert (await arena.post(battle_id, result("white_agent"))).status_code == 400
    white_record = (await arena.client.get(f"/agents/{white.agent_id}")).json()
    assert white_record["elo"]["rating"] == 1000
    assert white_record["elo"]["battle_history"][-1]["result"] == "draw"
    assert white_record["status"] == "unlocked"


async def test_default_battle_timeout_applies_without_a_registered_one(db_path: Path) -> None:
    async with run_backend(db_path, battle_timeout_default_s=0.4) as backend, arena_on(backend) as arena:
        green, white = await arena.pair()
        battle_id = await arena.battle(green, ("white_agent", white))
        battle = await arena.wait_state(battle_id, "finished")
        assert battle["result"]["winner"] == "draw" and battle["battle_timeout"] == 0.4


async def test_late_acknowledgement_is_not_an_error(db_path: Path) -> None:
    reported = asyncio.Event()

    async with run_backend(db_path, green_ack_timeout_s=0.2) as backend, arena_on(backend) as arena:

        async def report(message: dict[str, object]) -> None:
            await arena.post(str(message["battle_id"]), progress("reported after a slow start"))
            reported.set()

        green = await arena.agent("green", green=True, ack_delay_s=0.8, on_battle_start=report)
        white = await arena.agent("white")
        battle_id = await arena.battle(green, ("white_agent", white))
        await arena.wait_message(battle_id, "has not acknowledged battle_start")
        assert (await arena.get(battle_id))["state"] == "running"
        async with asyncio.timeout(30):
            await reported.wait()
        await arena.wait_message(battle_id, "Green agent acknowledged battle_start")
        assert (await arena.post(battle_id, result("white_agent"))).status_code == 204
        battle = await arena.get(battle_id)
        assert battle["state"] == "finished" and "error" not in battle


async def test_green_agent_answering_with_an_error_fails_the_battle(arena: Arena) -> None:
    green = await arena.agent("green", green=True, rpc_error=True)
    white = await arena.agent("white")
    battle_id = await arena.battle(green, ("white_agent", white))
    battle = await arena.wait_state(battle_id, "error")
    assert "did not accept battle_info" in battle["error"] and "JSON-RPC error" in battle["error"]


async def test_battles_run_concurrently_up_to_the_limit(db_path: Path) -> None:
    async with run_backend(db_path, max_concurrent_battles=2) as backend, arena_on(backend) as arena:
        pairs = [await arena.pair() for _ in range(3)]
        ids = [await arena.battle(green, ("white_agent", white)) for green, white in pairs]
        await arena.started(pairs[0][0], ids[0])
        await arena.started(pairs[1][0], ids[1])
        assert (await arena.get(ids[2]))["state"] == "queued"
        assert (await arena.get(ids[2]))["queue_position"] == 1
        assert backend.ctx.scheduler.running_count == 2
        assert (await arena.post(ids[0], result("draw"))).status_code == 204
        await arena.started(pairs[2][0], ids[2])
        assert (await arena.get(ids[1]))["state"] == "running"


async def test_queued_battle_waits_for_busy_agents_without_blocking_others(db_path: Path) -> None:
    async with run_backend(db_path, max_concurrent_battles=2) as backend, arena_on(backend) as arena:
        blockers = [await arena.pair() for _ in range(2)]
        blocker_ids = [await arena.battle(g, ("white_agent", w)) for g, w in blockers]
        for (green, _), battle_id in zip(blockers, blocker_ids, strict=True):
            await arena.started(green, battle_id)
        green, white = await arena.pair()
        other_green, other_white = await arena.pair()
        first = await arena.battle(green, ("white_agent", white))
        second = await arena.battle(green, ("white_agent", white))  # same agents, created while they were free
        third = await arena.battle(other_green, ("white_agent", other_white))
        assert (await arena.post(blocker_ids[0], result("draw"))).status_code == 204
        await arena.started(green, first)
        assert (await arena.post(blocker_ids[1], result("draw"))).status_code == 204
        await arena.started(other_green, third)  # the busy second battle did not block the third
        assert (await arena.get(second))["state"] == "queued"
        assert (await arena.post(first, result("draw"))).status_code == 204
        await arena.started(green, second)


async def test_result_for_a_queued_battle_is_refused_and_the_battle_still_runs(db_path: Path) -> None:
    """Nobody holds a queued battle's token yet (it is made when the battle starts), so nobody can decide it early:
    the result is refused and the battle runs when its turn comes."""
    async with run_backend(db_path, max_concurrent_battles=1) as backend, arena_on(backend) as arena:
        green_a, white_a = await arena.pair()
        green_b, white_b = await arena.pair()
        first = await arena.battle(green_a, ("white_agent", white_a))
        await arena.started(green_a, first)
        second = await arena.battle(green_b, ("white_agent", white_b))
        assert (await arena.post(second, result("white_agent"))).status_code == 401
        assert (await arena.get(second))["state"] == "queued"
        assert (await arena.post(first, result("draw"))).status_code == 204
        start = await arena.started(green_b, second)
        assert (await arena.post(second, result("green_agent"))).status_code == 204
        assert start["battle_token"] and (await arena.get(second))["state"] == "finished"

"""Shares of the operator's provider cap (green_agent/provider_limits.py, issue 27 and issue 29): the service's
ProviderLimits hands its battles' worker processes shares whose sum never exceeds its part of the cap (every process
keeps one slot), a pool divides the cap by its members, and a share that shrinks or grows under waiting callers
neither strands them nor lets more calls through than the new share. Orders and counts only, never durations."""

from __future__ import annotations

import asyncio

from green_agent.engine.config import BattleConfig, UserSimulatorConfig
from green_agent.provider_limits import ProviderLimiter, ProviderLimits
from tests.green_agent.provider_support import Probe, settle

LLM = UserSimulatorConfig(kind="llm", base_url="http://127.0.0.1:9/v1", model="m")


def test_worker_shares_of_every_battle_sum_to_the_cap() -> None:
    limits = ProviderLimits(max_concurrency=32)
    told: dict[str, list[int]] = {"a": [], "b": []}
    a = limits.hold_workers(2, told["a"].append)
    assert (a.slots, limits.per_process) == (16, 1)  # one battle: today's cap // N each; the server keeps one slot
    b = limits.hold_workers(2, told["b"].append)
    assert (a.slots, b.slots) == (8, 8) and told["a"] == [16, 8]  # the first battle's workers were told to shrink
    assert 2 * a.slots + 2 * b.slots <= 32
    a.release()
    assert (b.slots, told["b"]) == (16, [8, 16])  # its workers grow back when the other battle's stop
    a.release()  # idempotent
    b.release()
    assert limits.per_process == 32  # nothing over workers: the serving process has the whole cap again


def test_every_process_keeps_one_slot_when_there_are_more_processes_than_slots() -> None:
    limits = ProviderLimits(max_concurrency=3)
    shares = [limits.hold_workers(2, lambda _slots: None) for _ in range(2)]
    assert [s.slots for s in shares] == [1, 1] and limits.per_process == 1  # 5 in flight at most: documented


def test_a_pool_divides_the_cap_between_its_members() -> None:
    limits = ProviderLimits(max_concurrency=10)
    limits.set_divisor(2)
    assert (limits.part, limits.per_process) == (5, 5)
    held = limits.hold_workers(2, lambda _slots: None)
    assert (held.slots, limits.per_process) == (2, 1)
    limits.set_divisor(20)
    assert (limits.part, held.slots, limits.per_process) == (1, 1, 1)
    limits.set_divisor(0)  # nonsense from a count: read as alone
    assert limits.part == 10


async def test_a_shrunk_share_lets_calls_in_flight_finish_and_starts_no_new_one_above_it() -> None:
    limits = ProviderLimits(max_concurrency=4)
    limiter = limits.limiter(None, "m")
    gate = Probe()
    calls = [asyncio.create_task(limiter.run(gate.call)) for _ in range(8)]
    await settle()
    assert gate.running == 4
    limits.set_divisor(4)  # one slot from now on
    assert limiter.cap == 1
    gate.release.set()
    gate.release = asyncio.Event()
    await settle()
    assert gate.running == 1  # the four finished; only one new call started
    gate.release.set()
    assert await asyncio.gather(*calls) == ["ok"] * 8
    assert gate.peak == 4 and limiter.in_flight == 0


async def test_a_grown_share_serves_waiting_callers_at_once() -> None:
    limits = ProviderLimits(max_concurrency=4)
    limits.set_divisor(4)
    limiter = limits.limiter(None, "m")
    gate = Probe()
    calls = [asyncio.create_task(limiter.run(gate.call)) for _ in range(6)]
    await settle()
    assert gate.running == 1
    limits.set_divisor(1)  # no call finished: the waiters are served by the resize itself (no deadlock)
    await settle()
    assert gate.running == 4
    gate.release.set()
    assert await asyncio.gather(*calls) == ["ok"] * 6
    assert limiter.in_flight == 0 and not limiter._waiters


async def test_a_battles_own_cap_follows_the_share() -> None:
    limits = ProviderLimits(max_concurrency=8)
    battle = limits.for_user(BattleConfig(user_simulator=LLM, provider_max_concurrency=4))
    assert battle is not None and battle.allowed == 4
    gate = Probe()
    calls = [asyncio.create_task(battle.run(gate.call)) for _ in range(6)]
    await settle()
    assert gate.running == 4
    limits.set_divisor(2)  # half the cap: half the battle's
    assert battle.allowed == 2
    gate.release.set()
    gate.release = asyncio.Event()
    await settle()
    assert gate.running == 2
    limits.set_divisor(1)
    gate.release.set()
    assert await asyncio.gather(*calls) == ["ok"] * 6


async def test_a_cancelled_waiter_of_a_resized_limiter_leaks_no_slot() -> None:
    limiter = ProviderLimiter("p", max_concurrency=1)
    gate = Probe()
    first = asyncio.create_task(limiter.run(gate.call))
    waiting = asyncio.create_task(limiter.run(gate.call))
    await settle()
    limiter.resize(2)  # hands the slot to the waiter ...
    waiting.cancel()  # ... which is cancelled before it runs: the slot is passed on, not lost
    await asyncio.gather(waiting, return_exceptions=True)
    gate.release.set()
    assert await first == "ok"
    assert limiter.in_flight == 0

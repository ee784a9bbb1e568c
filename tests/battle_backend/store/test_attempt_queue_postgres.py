"""The attempt queue on a shared PostgreSQL (issue 29): a database restart mid-battle, and two backend replicas
with concurrent leasers that never hand one attempt to two live leases (randomized), plus NOTIFY wake-ups.

Nothing asserts on durations; waits are bounded only to turn a hang into a failure.
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from battle_backend.store.attempt_records import AttemptState, Lease, RecordStatus
from battle_backend.store.postgres.store import PostgresStore
from battle_backend.store.protocol import StoreUnavailable, WriteFailed
from tests.battle_backend.store.attempt_queue_support import (
    BOUND_S,
    KEY,
    POOL,
    TOKEN,
    publish,
    running_pool_battle,
    specs,
)
from tests.battle_backend.store.test_store_contract import open_replicas
from tests.support.postgres import PostgresServer, _stop_process

T = TypeVar("T")


def _restart(server: PostgresServer) -> None:
    """Fast shutdown of the postmaster, then the same data directory started again on the same port (so the
    stores' URL stays valid). Uses the helper's internals: a restart is not part of its public API."""
    port = server.port
    proc = server._proc
    assert proc is not None
    _stop_process(proc, server.stop_timeout_s)
    server._proc = None
    error = server._try_start(port)
    assert error is None, error


async def _retrying(call: Callable[[], Awaitable[T]]) -> T:
    """``call`` until the database answers (WriteFailed / StoreUnavailable while it is down or reconnecting)."""
    async with asyncio.timeout(BOUND_S):
        while True:
            try:
                return await call()
            except (WriteFailed, StoreUnavailable):
                await asyncio.sleep(0.1)


@pytest.mark.timeout(240)
async def test_leasing_continues_after_a_database_restart_mid_battle(postgres_bin: Any) -> None:
    with PostgresServer(fast=True, bin_dir=postgres_bin) as server:
        store = PostgresStore(server.create_database(), lease_s=60.0)
        await store.open()
        try:
            battle_id = await running_pool_battle(store)
            await publish(store, battle_id, specs(5, 2))
            before = await store.attempts.lease(POOL, KEY, "w1", limit=3, ttl_s=120.0)
            for lease in before[:2]:
                await store.attempts.record(POOL, KEY, lease.ref, {"reward": lease.attempt})
            held = before[2]  # a lease held across the restart

            await asyncio.to_thread(_restart, server)

            await _retrying(lambda: store.attempts.heartbeat(POOL, KEY, held.ref, 120.0))
            assert (
                await _retrying(lambda: store.attempts.record(POOL, KEY, held.ref, {"reward": held.attempt}))
            ).status in (
                RecordStatus.RECORDED,
                RecordStatus.DUPLICATE,
            )
            while True:

                async def next_lease() -> list[Lease]:
                    leases: list[Lease] = await store.attempts.lease(POOL, KEY, "w2", limit=2, ttl_s=120.0)
                    return leases

                leases = await _retrying(next_lease)
                if not leases:
                    break
                for lease in leases:
                    await _retrying(
                        functools.partial(store.attempts.record, POOL, KEY, lease.ref, {"reward": lease.attempt})
                    )

            stored = await _retrying(lambda: store.attempts.list_attempts(battle_id, presented_token=TOKEN))
            assert [a.state for a in stored] == [AttemptState.DONE] * 10
            assert [a.result for a in stored] == [{"reward": a} for _t in range(5) for a in range(2)]
            assert all([h.outcome for h in a.history] == ["recorded"] for a in stored)
        finally:
            await store.close()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", [1, 2])
async def test_two_replicas_never_hand_one_attempt_to_two_live_leases(postgres_url: str, seed: int) -> None:
    rng = random.Random(seed)
    async with open_replicas(postgres_url, 2) as (a, b):
        battles = [await running_pool_battle(a, alias=f"g{i}") for i in range(2)]
        for battle_id in battles:
            await publish(a, battle_id, specs(15, 2), max_requeues=100)
        held: dict[tuple[str, str, int], str] = {}
        """Attempts some worker holds a live lease on right now (TTLs are long: no lease expires in this test)."""
        violations: list[str] = []
        recorded: list[tuple[str, str, int]] = []

        async def worker(name: str, store: Any, wrng: random.Random) -> None:
            while True:
                leases = await store.attempts.lease(POOL, KEY, name, limit=wrng.randint(1, 3), ttl_s=600.0)
                if not leases:
                    info = [await store.attempts.queue_info(bid) for bid in battles]
                    if all(i is not None and i.counts["done"] == 30 for i in info):
                        return
                    await store.attempts.wait_for_work(POOL, 0.1)
                    continue
                for lease in leases:
                    key = (lease.battle_id, lease.task_key, lease.attempt)
                    if key in held:
                        violations.append(f"{key} leased by {name} while {held[key]} holds it")
                    held[key] = name
                for lease in leases:
                    await asyncio.sleep(wrng.random() * 0.003)
                    key = (lease.battle_id, lease.task_key, lease.attempt)
                    if wrng.random() < 0.2:
                        del held[key]  # before the call: once it commits, anyone may lease the attempt again
                        await store.attempts.report_infra_error(POOL, KEY, lease.ref, "flaky sandbox")
                    else:
                        outcome = await store.attempts.record(POOL, KEY, lease.ref, {"by": name})
                        assert outcome.status is RecordStatus.RECORDED
                        recorded.append(key)
                        del held[key]

        async with asyncio.timeout(180):
            await asyncio.gather(*(worker(f"w{i}", (a, b)[i % 2], random.Random(rng.random())) for i in range(6)))
        assert violations == []
        assert sorted(recorded) == sorted(set(recorded)) and len(recorded) == 60
        for battle_id in battles:
            for attempt in await b.attempts.list_attempts(battle_id, presented_token=TOKEN):
                assert attempt.state is AttemptState.DONE
                generations = [h.generation for h in attempt.history]
                assert generations == list(range(1, attempt.generation + 1))
                assert [h.outcome for h in attempt.history] == ["infra_error"] * (len(generations) - 1) + ["recorded"]


async def test_a_publish_on_one_replica_wakes_a_waiter_on_the_other(postgres_url: str) -> None:
    async with open_replicas(postgres_url, 2) as (a, b):
        a.attempts.poll_s = 3600.0  # only the NOTIFY can end the wait before the bound
        battle_id = await running_pool_battle(b)
        waiter = asyncio.create_task(a.attempts.wait_for_work(POOL, 3600.0))
        await asyncio.sleep(0)  # the waiter is registered
        await publish(b, battle_id, specs(1, 1))
        async with asyncio.timeout(BOUND_S):
            await waiter
        assert len(await a.attempts.lease(POOL, KEY, "w", limit=5, ttl_s=30.0)) == 1

"""The pool's live members on both stores (issues 27 and 29): every lease and heartbeat call records its worker, a
member is listed within the window and dropped after it, a worker with another key is neither recorded nor told the
pool's members, and a page's counts and attempts come from one transaction.

SQLite's clock is moved by hand; PostgreSQL's is the database's, so there the window is a second and the test polls
for the member to drop out with a generous bound. Nothing asserts on durations.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from battle_backend.store.attempt_errors import PoolKeyRejected
from battle_backend.store.attempt_queue_rules import MAX_MEMBERS_LISTED
from battle_backend.store.attempt_records import PoolMembers
from battle_backend.store.postgres import pool_members as postgres_members
from battle_backend.store.protocol import TokenRejected
from battle_backend.store.sqlite import pool_members as sqlite_members
from tests.battle_backend.store.attempt_queue_support import (
    KEY,
    POOL,
    TOKEN,
    clock_of,
    eventually,
    publish,
    running_pool_battle,
    specs,
)


async def test_lease_callers_are_members_within_the_window_and_dropped_after_it(store: Any) -> None:
    clock = clock_of(store)
    battle_id = await running_pool_battle(store)
    await publish(store, battle_id, specs(1, 1))
    assert (await store.attempts.members(POOL, KEY, 90.0)).count == 0
    [lease] = await store.attempts.lease(POOL, KEY, "w1", limit=1, ttl_s=600.0)
    assert await store.attempts.lease(POOL, KEY, "w2", limit=1, ttl_s=600.0) == []  # nothing left: still a member
    found = await store.attempts.members(POOL, KEY, 90.0)
    assert (found.pool, found.count, sorted(found.worker_ids)) == (POOL, 2, ["w1", "w2"])
    if clock is not None:
        clock.now += 60.0
        await store.attempts.heartbeat(POOL, KEY, lease.ref, 600.0)  # a busy member leases nothing: it heartbeats
        clock.now += 60.0  # w2 last called 120 s ago, w1 60 s ago
        assert (await store.attempts.members(POOL, KEY, 90.0)).worker_ids == ["w1"]
        assert (await store.attempts.members(POOL, KEY, 3600.0)).count == 2
        return

    async def only_w1() -> PoolMembers | None:  # PostgreSQL: now() moves on its own
        await store.attempts.heartbeat(POOL, KEY, lease.ref, 600.0)
        found = await store.attempts.members(POOL, KEY, 1.0)
        return found if found.worker_ids == ["w1"] else None

    await asyncio.sleep(1.0)
    assert (await eventually(only_w1)).count == 1


async def test_a_worker_with_another_key_is_not_a_member_and_is_not_told_the_members(store: Any) -> None:
    battle_id = await running_pool_battle(store)
    await publish(store, battle_id, specs(1, 1))
    await store.attempts.lease(POOL, KEY, "w1", limit=1, ttl_s=600.0)
    assert await store.attempts.lease(POOL, "a guessed key", "intruder", limit=1, ttl_s=600.0) == []
    with pytest.raises(PoolKeyRejected, match="not the one its attempts were published with"):
        await store.attempts.members(POOL, "a guessed key", 90.0)
    found = await store.attempts.members(POOL, KEY, 90.0)
    assert (found.count, found.worker_ids) == (1, ["w1"])  # the intruder was not recorded


async def test_members_of_a_pool_without_battles_yet_are_counted_per_key(store: Any) -> None:
    await store.attempts.lease("pool-b", "key-b", "early", limit=1, ttl_s=60.0)
    assert (await store.attempts.members("pool-b", "key-b", 90.0)).worker_ids == ["early"]
    assert (await store.attempts.members("pool-b", "other key", 90.0)).count == 0  # another key sees only its own


async def test_an_answer_lists_a_bounded_number_of_members(store: Any) -> None:
    await running_pool_battle(store)
    for n in range(MAX_MEMBERS_LISTED + 3):
        await store.attempts.lease("pool-big", "key", f"w{n:04d}", limit=1, ttl_s=60.0)
    found = await store.attempts.members("pool-big", "key", 90.0)
    assert found.count == MAX_MEMBERS_LISTED + 3 and len(found.worker_ids) == MAX_MEMBERS_LISTED


async def test_a_page_and_its_counts_come_from_one_read(store: Any) -> None:
    battle_id = await running_pool_battle(store)
    await publish(store, battle_id, specs(2, 2))
    [lease] = await store.attempts.lease(POOL, KEY, "w1", limit=1, ttl_s=600.0)
    await store.attempts.record(POOL, KEY, lease.ref, {"reward": 1.0})
    info, attempts = await store.attempts.attempts_page(battle_id, presented_token=TOKEN, offset=0, limit=2)
    assert info.counts == {"available": 3, "leased": 0, "done": 1, "failed": 0}
    assert [(a.task_key, a.attempt, a.state.value) for a in attempts] == [
        ("retail/0", 0, "done"),
        ("retail/0", 1, "available"),
    ]
    with pytest.raises(TokenRejected):
        await store.attempts.attempts_page(battle_id, pool_key="another key")


async def test_members_of_pools_without_battles_are_bounded_across_pools(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Anyone may call lease on a pool nobody published to, with any key: each call used to add a row for an hour
    (unbounded across pool names and keys). Rows of such pools are bounded in all (the least recently seen go);
    the members of a pool with a published battle are never the ones dropped."""
    bound = 8
    for module in (sqlite_members, postgres_members):
        monkeypatch.setattr(module, "MAX_UNPUBLISHED_MEMBERS", bound, raising=False)
    clock = clock_of(store)
    battle_id = await running_pool_battle(store)
    await publish(store, battle_id, specs(1, 1))
    await store.attempts.lease(POOL, KEY, "member", limit=1, ttl_s=600.0)
    for n in range(3 * bound):
        if clock is not None:
            clock.now += 0.01
        await store.attempts.lease(f"flood-{n}", f"key-{n}", f"w{n}", limit=1, ttl_s=60.0)
    counts = [(await store.attempts.members(f"flood-{n}", f"key-{n}", 90.0)).count for n in range(3 * bound)]
    assert sum(counts) <= bound, counts
    assert counts[-1] == 1  # the latest caller is counted
    assert (await store.attempts.members(POOL, KEY, 90.0)).worker_ids == ["member"]


async def test_members_of_one_pool_and_key_are_bounded(store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows of one (pool, key) are bounded too: beyond the bound the least recently seen go, the latest stay."""
    bound = 8
    for module in (sqlite_members, postgres_members):
        monkeypatch.setattr(module, "MAX_MEMBERS_PER_POOL", bound)
    clock = clock_of(store)
    battle_id = await running_pool_battle(store)
    await publish(store, battle_id, specs(1, 1))
    for n in range(3 * bound):
        if clock is not None:
            clock.now += 0.01
        await store.attempts.lease(POOL, KEY, f"w{n:02d}", limit=1, ttl_s=600.0)
    found = await store.attempts.members(POOL, KEY, 3600.0)
    assert found.count == bound
    assert sorted(found.worker_ids) == [f"w{n:02d}" for n in range(2 * bound, 3 * bound)]

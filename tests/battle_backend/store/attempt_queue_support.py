"""Helpers of the attempt-queue tests: a running pool battle, a clock a test moves, and expiry without timed asserts.

SQLite's queue takes its clock from the store (a test replaces it and moves it past a lease's end); PostgreSQL's is
the database's ``now()``, so there a test uses short lease times and polls for the effect with a generous bound.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from battle_backend.store.attempt_records import AttemptSpec, Lease
from battle_backend.store.protocol import StartOutcome
from battle_backend.store.sqlite.store import SQLiteStore

T = TypeVar("T")
POOL, KEY, TOKEN = "pool-a", "pool-a-key", "battle-token"
BOUND_S = 60.0
"""How long a poll may take before the test fails (only turns a hang into a failure)."""


class Clock:
    """A clock a test moves by hand."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def clock_of(store: Any) -> Clock | None:
    """A hand-moved clock installed in an SQLite store's queue; None for PostgreSQL (the database's clock)."""
    if isinstance(store, SQLiteStore):
        clock = Clock()
        store.attempts.clock = clock
        return clock
    return None


def ttl_for(clock: Clock | None) -> float:
    """A lease time that ends soon on PostgreSQL (real time) and whenever the test says on SQLite."""
    return 30.0 if clock is not None else 0.3


async def running_pool_battle(store: Any, *, pool: str = POOL, token: str = TOKEN, alias: str = "g") -> str:
    """A started battle of ``pool`` (a green member of it and one white agent)."""
    green = await store.create_agent(
        {"alias": alias, "is_green": True, "pool": pool, "participant_requirements": []}, {"name": alias}
    )
    white = await store.create_agent({"alias": f"{alias}-w", "is_green": False}, {"name": f"{alias}-w"})
    battle = await store.create_battle(
        green.agent_id,
        [{"name": "white_agent", "agent_id": white.agent_id, "role": "blue_agent"}],
        {"k": 1},
        None,
        green_pool=pool,
    )
    assert await store.start_battle(battle.battle_id, token) is StartOutcome.STARTED
    return str(battle.battle_id)


def specs(tasks: int, k: int) -> list[AttemptSpec]:
    """``tasks`` x ``k`` attempts, payload naming them."""
    return [AttemptSpec(f"retail/{t}", a, {"task": t, "attempt": a}) for t in range(tasks) for a in range(k)]


async def publish(
    store: Any,
    battle_id: str,
    attempts: list[AttemptSpec],
    *,
    pool: str = POOL,
    key: str = KEY,
    token: str = TOKEN,
    max_requeues: int = 2,
    owner_ttl_s: float = 60.0,
) -> Any:
    return await store.attempts.publish(
        battle_id,
        presented_token=token,
        pool=pool,
        pool_key=key,
        owner_worker="owner",
        attempts=attempts,
        max_requeues=max_requeues,
        owner_ttl_s=owner_ttl_s,
    )


async def eventually(probe: Callable[[], Awaitable[T | None]], *, bound_s: float = BOUND_S) -> T:
    """The first non-None (and non-empty) answer of ``probe``, polled; fails after ``bound_s``."""
    async with asyncio.timeout(bound_s):
        while True:
            value = await probe()
            if value:
                return value
            await asyncio.sleep(0.05)


async def lease_after_expiry(
    store: Any, clock: Clock | None, worker: str, ttl_s: float, *, pool: str = POOL, key: str = KEY, limit: int = 1
) -> list[Lease]:
    """Leases for ``worker`` once earlier leases of ``ttl_s`` have expired (the clock moved, or polled for)."""
    if clock is not None:
        clock.now += ttl_s + 1.0
        leases: list[Lease] = await store.attempts.lease(pool, key, worker, limit=limit, ttl_s=ttl_s)
        return leases

    async def probe() -> list[Lease]:
        found: list[Lease] = await store.attempts.lease(pool, key, worker, limit=limit, ttl_s=ttl_s)
        return found

    return await eventually(probe)

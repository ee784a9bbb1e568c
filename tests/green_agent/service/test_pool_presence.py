"""A pool member's provider share follows the pool's live members (issues 27 and 29), against a real backend process
(SQLite; also PostgreSQL): two members of one pool each get cap // 2, a third brings it to cap // 3, a member that
has not leased yet counts itself, leaving gives the whole cap back, and a wrong pool key is refused and changes
nothing. Waits are bounded only to turn a hang into a failure; nothing asserts on durations."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import cast

import pytest

from green_agent.provider_limits import ProviderLimits
from green_agent.service.attempt_lease_client import AttemptLeaseClient, LeaseBackendDown, PoolRefused
from green_agent.service.outbox import RetryPolicy
from green_agent.service.pool_presence import PoolPresence
from green_agent.wire.attempt_leases import AttemptIn, MembersResponse
from tests.green_agent.service.pool_support import pool_backend

POOL, KEY = "pool-a", "the pool's shared secret"
CAP = 8
FAST_RETRY = RetryPolicy(initial_delay_s=0.05, max_delay_s=0.5)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return str(tmp_path / "backend.sqlite3")


def _client(url: str, key: str = KEY) -> AttemptLeaseClient:
    return AttemptLeaseClient(url, POOL, key, retry=FAST_RETRY, outage_s=30)


async def test_two_members_each_get_half_the_cap_and_a_third_brings_it_to_a_third(
    tmp_path: Path, database: str
) -> None:
    async with (
        pool_backend(tmp_path, database) as backend,
        _client(backend.url) as owner,
        _client(backend.url) as one,
        _client(backend.url) as two,
        _client(backend.url) as three,
    ):
        battle_id, token = await backend.battle()
        attempts = [AttemptIn(task_key="airline/0", attempt=0, payload={})]
        await owner.publish(battle_id, token, owner_worker="owner", attempts=attempts)
        limits = [ProviderLimits(max_concurrency=CAP) for _ in range(3)]
        presences = [
            PoolPresence(client, lim, worker_id=f"w{n}", every_s=0.1)
            for n, (client, lim) in enumerate(zip((one, two, three), limits, strict=True))
        ]
        assert await presences[0].refresh() == 1  # not seen yet: it counts itself
        assert limits[0].per_process == CAP
        await one.lease("w0", limit=1, ttl_s=60)
        await two.lease("w1", limit=1, ttl_s=60)  # every lease call makes its worker a member
        async with presences[0], presences[1]:
            async with asyncio.timeout(60):
                while [lim.per_process for lim in limits[:2]] != [CAP // 2, CAP // 2]:
                    await asyncio.sleep(0.05)
            assert presences[0].members == presences[1].members == 2
            await three.lease("w2", limit=1, ttl_s=60)
            assert await presences[2].refresh() == 3
            async with asyncio.timeout(60):
                while [lim.per_process for lim in limits] != [CAP // 3] * 3:
                    await asyncio.sleep(0.05)
            assert limits[0].limiter(None, "m").cap == CAP // 3  # what a call waits for
        assert limits[0].per_process == limits[1].per_process == CAP  # left the pool: the whole cap again


async def test_a_wrong_pool_key_is_refused_and_the_share_stays(tmp_path: Path) -> None:
    async with (
        pool_backend(tmp_path, str(tmp_path / "backend.sqlite3")) as backend,
        _client(backend.url) as owner,
        _client(backend.url, key="a guessed key") as intruder,
    ):
        battle_id, token = await backend.battle()
        await owner.publish(battle_id, token, owner_worker="owner", attempts=[AttemptIn(task_key="t/0", attempt=0)])
        await owner.lease("w0", limit=1, ttl_s=60)
        await owner.lease("w1", limit=1, ttl_s=60)
        limits = ProviderLimits(max_concurrency=CAP)
        presence = PoolPresence(intruder, limits, worker_id="x", every_s=0.1)
        with pytest.raises(PoolRefused):
            await presence.refresh()
        assert limits.per_process == CAP and presence.members is None


class GoneBackend:
    """The member count once (two members), then a backend that cannot be reached."""

    pool = POOL

    def __init__(self) -> None:
        self.calls = 0

    async def members(self, *, window_s: float, deadline: float | None = None) -> MembersResponse:
        self.calls += 1
        if self.calls == 1:
            return MembersResponse(pool=POOL, window_s=window_s, count=2, worker_ids=["w0", "w1"])
        raise LeaseBackendDown("members", None, "connection refused")


async def test_an_unreachable_backend_keeps_the_last_count_until_the_member_leaves() -> None:
    backend, limits = GoneBackend(), ProviderLimits(max_concurrency=CAP)
    async with PoolPresence(cast(AttemptLeaseClient, backend), limits, worker_id="w0", every_s=0.01) as presence:
        async with asyncio.timeout(60):
            while backend.calls < 3:  # answered once, then down twice
                await asyncio.sleep(0.01)
        assert (presence.members, limits.divisor, limits.per_process) == (2, 2, CAP // 2)  # not shrunk by an outage
    assert (limits.divisor, limits.per_process) == (1, CAP)

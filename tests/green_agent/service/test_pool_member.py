"""Pool members (issue 29) against a real backend process on loopback (SQLite; the drain also on PostgreSQL), with
fake ``run_attempt`` callables: a queue drained by three members with every attempt recorded exactly once, a member
stopped without cleanup whose attempts are leased again after the TTL, a slow attempt kept alive by heartbeats well
past its TTL, a member whose heartbeat is refused dropping its result, infrastructure errors requeued then failed,
and the client's refusals naming what the backend refused.

Waits are bounded (``asyncio.timeout``) only to turn a hang into a failure; nothing asserts on durations.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from green_agent.service.attempt_lease_client import (
    AttemptLeaseClient,
    AttemptQueueMissing,
    LeaseLost,
    PoolRefused,
)
from green_agent.service.outbox import RetryPolicy
from green_agent.service.pool_member import PoolMember
from green_agent.wire.attempt_leases import AttemptIn, HeartbeatResponse, LeaseOut
from tests.green_agent.service.pool_member_process import KEY_ENV
from tests.green_agent.service.pool_support import REPO, PoolBackend, pool_backend, settled

POOL, KEY = "pool-a", "the pool's shared secret"
LIMIT_S = 120.0
FAST_RETRY = RetryPolicy(initial_delay_s=0.05, max_delay_s=0.5)


def _attempts(tasks: int, k: int) -> list[AttemptIn]:
    return [AttemptIn(task_key=f"airline/{t}", attempt=a, payload={"index": t}) for t in range(tasks) for a in range(k)]


def outcome(task_key: str, attempt: int) -> float:
    """The fake agent's reward: a function of the task and the attempt number only (as in a real battle)."""
    return float((int(task_key.rsplit("/", 1)[1]) * 7 + attempt * 3) % 5 < 3)


def _client(backend: PoolBackend, key: str = KEY, pool: str = POOL) -> AttemptLeaseClient:
    return AttemptLeaseClient(backend.url, pool, key, retry=FAST_RETRY, outage_s=30)


@contextlib.asynccontextmanager
async def _running(*members: PoolMember) -> AsyncIterator[list[asyncio.Task[None]]]:
    tasks = [asyncio.create_task(member.run(), name=f"member-{member.worker_id}") for member in members]
    try:
        yield tasks
    finally:
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for result in results:
            assert result is None or isinstance(result, asyncio.CancelledError), result


def _fake_run(
    in_flight: dict[str, int], most: dict[str, int], pause_s: float = 0.01
) -> Callable[[LeaseOut], Coroutine[Any, Any, dict[str, Any]]]:
    async def run_attempt(lease: LeaseOut) -> dict[str, Any]:
        in_flight[lease.worker_id] = in_flight.get(lease.worker_id, 0) + 1
        most[lease.worker_id] = max(most.get(lease.worker_id, 0), in_flight[lease.worker_id])
        try:
            await asyncio.sleep(pause_s)
            return {"reward": outcome(lease.task_key, lease.attempt), "by": lease.worker_id}
        finally:
            in_flight[lease.worker_id] -= 1

    return run_attempt


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return str(tmp_path / "backend.sqlite3")


async def test_three_members_drain_a_40_by_4_queue_recording_each_attempt_once(tmp_path: Path, database: str) -> None:
    async with pool_backend(tmp_path, database) as backend, _client(backend) as owner:
        battle_id, token = await backend.battle()
        published = await owner.publish(battle_id, token, owner_worker="owner", attempts=_attempts(40, 4))
        assert (published.added, published.already) == (160, 0)
        in_flight: dict[str, int] = {}
        most: dict[str, int] = {}
        clients = [_client(backend) for _ in range(3)]
        members = [
            PoolMember(client, f"w{n}", _fake_run(in_flight, most), capacity=4, ttl_s=30, wait_s=2)
            for n, client in enumerate(clients)
        ]
        try:
            async with _running(*members):
                attempts = await settled(owner, battle_id, token, 160, limit_s=LIMIT_S)
        finally:
            for client in clients:
                await client.aclose()
    assert len(attempts) == 160 and {a.state for a in attempts} == {"done"}
    assert len({(a.task_key, a.attempt) for a in attempts}) == 160
    for a in attempts:
        assert [h.outcome for h in a.history] == ["recorded"], a
        assert a.result == {"reward": outcome(a.task_key, a.attempt), "by": a.recorded_by}
    assert sum(m.counts.recorded for m in members) == 160
    assert sum(m.counts.leased for m in members) == 160
    assert all(m.counts.duplicates == m.counts.dropped == m.counts.infra_errors == 0 for m in members)
    assert all(m.most_held <= 4 and most.get(m.worker_id, 0) <= 4 for m in members)
    assert all(m.holding == 0 for m in members)


async def test_a_member_stopped_mid_attempt_has_its_attempts_leased_again_and_finished_by_another(
    tmp_path: Path,
) -> None:
    started, cancelled = asyncio.Event(), 0
    held: list[LeaseOut] = []

    async def hang(lease: LeaseOut) -> dict[str, Any]:
        nonlocal cancelled
        held.append(lease)
        if len(held) == 3:
            started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled += 1
            raise
        raise AssertionError("unreachable")

    async with pool_backend(tmp_path, str(tmp_path / "b.sqlite3")) as backend, _client(backend) as owner:
        battle_id, token = await backend.battle()
        await owner.publish(battle_id, token, owner_worker="owner", attempts=_attempts(4, 2))
        async with _client(backend) as dying_client, _client(backend) as other_client:
            dying = PoolMember(dying_client, "dying", hang, capacity=3, ttl_s=1.0, wait_s=1)
            async with _running(dying):
                async with asyncio.timeout(LIMIT_S):
                    await started.wait()
            assert cancelled == 3 and dying.holding == 0  # no orphan attempt left running
            other = PoolMember(other_client, "other", _fake_run({}, {}), capacity=2, ttl_s=30, wait_s=1)
            async with _running(other):
                attempts = await settled(owner, battle_id, token, 8, limit_s=LIMIT_S)
    taken = {(lease.task_key, lease.attempt) for lease in held}
    assert len(taken) == 3
    for a in attempts:
        assert a.state == "done" and a.recorded_by == "other"
        if (a.task_key, a.attempt) in taken:
            assert [(h.worker_id, h.outcome) for h in a.history] == [("dying", "expired"), ("other", "recorded")]
            assert a.generation == 2 and a.requeues == 1
        else:
            assert [(h.worker_id, h.outcome) for h in a.history] == [("other", "recorded")]
    assert other.counts.recorded == 8 and dying.counts.recorded == 0


async def test_a_member_killed_with_sigkill_has_its_attempts_finished_by_another(tmp_path: Path) -> None:
    """The member runs in a process of its own, killed with SIGKILL while it holds three attempts."""
    holding = tmp_path / "holding.txt"
    async with pool_backend(tmp_path, str(tmp_path / "b.sqlite3")) as backend, _client(backend) as owner:
        battle_id, token = await backend.battle()
        await owner.publish(battle_id, token, owner_worker="owner", attempts=_attempts(4, 2))
        argv = [sys.executable, "-m", "tests.green_agent.service.pool_member_process", backend.url, POOL, "doomed"]
        argv += ["3", "1.0", str(holding)]
        proc = backend.group.start("doomed-member", argv, env={**os.environ, KEY_ENV: KEY}, cwd=REPO)
        try:
            async with asyncio.timeout(LIMIT_S):
                while len(holding.read_text().splitlines() if holding.exists() else []) < 3:
                    assert proc.running, proc.stderr_tail()
                    await asyncio.sleep(0.05)
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            await backend.group.stop(proc)
        assert proc.popen.returncode == -signal.SIGKILL
        taken = {(key, int(n)) for key, n in (line.split() for line in holding.read_text().splitlines())}
        async with _client(backend) as other_client:
            other = PoolMember(other_client, "other", _fake_run({}, {}), capacity=2, ttl_s=30, wait_s=1)
            async with _running(other):
                attempts = await settled(owner, battle_id, token, 8, limit_s=LIMIT_S)
    assert len(taken) == 3
    for a in attempts:
        assert a.state == "done" and a.recorded_by == "other"
        expected = [("doomed", "expired")] if (a.task_key, a.attempt) in taken else []
        assert [(h.worker_id, h.outcome) for h in a.history] == [*expected, ("other", "recorded")]
    assert other.counts.recorded == 8


async def test_a_slow_attempt_is_kept_alive_by_heartbeats_well_past_its_ttl(tmp_path: Path) -> None:
    beats = 0

    class CountingClient(AttemptLeaseClient):
        async def heartbeat(self, lease: LeaseOut, ttl_s: float, *, deadline: float | None = None) -> HeartbeatResponse:
            nonlocal beats
            answer = await super().heartbeat(lease, ttl_s, deadline=deadline)
            beats += 1
            return answer

    ttl_s = 3.0
    enough = asyncio.Event()
    other_runs: list[LeaseOut] = []

    async def slow(lease: LeaseOut) -> dict[str, Any]:
        async with asyncio.timeout(LIMIT_S):
            while beats < 14:  # 14 beats a sixth of the TTL apart: the attempt outlives its TTL at least twice
                await asyncio.sleep(0.1)
        enough.set()
        return {"reward": 1.0}

    async def must_not_run(lease: LeaseOut) -> dict[str, Any]:
        other_runs.append(lease)
        return {"reward": 0.0}

    async with pool_backend(tmp_path, str(tmp_path / "b.sqlite3")) as backend, _client(backend) as owner:
        battle_id, token = await backend.battle()
        await owner.publish(battle_id, token, owner_worker="owner", attempts=_attempts(1, 1))
        async with (
            CountingClient(backend.url, POOL, KEY, retry=FAST_RETRY) as slow_client,
            _client(backend) as other_client,
        ):
            worker = PoolMember(slow_client, "slow", slow, capacity=1, ttl_s=ttl_s, heartbeat_every_s=ttl_s / 6)
            watcher = PoolMember(other_client, "watcher", must_not_run, capacity=1, ttl_s=ttl_s, wait_s=0.5)
            async with _running(worker, watcher):
                attempts = await settled(owner, battle_id, token, 1, limit_s=LIMIT_S)
    assert enough.is_set() and other_runs == []
    (only,) = attempts
    assert only.generation == 1 and only.requeues == 0 and only.recorded_by == "slow"
    assert [(h.worker_id, h.outcome) for h in only.history] == [("slow", "recorded")]
    assert worker.counts.recorded == 1


async def test_a_member_whose_heartbeat_is_refused_stops_and_drops_its_result(tmp_path: Path) -> None:
    gate, waiting = asyncio.Event(), asyncio.Event()
    stopped = asyncio.Event()

    class GatedClient(AttemptLeaseClient):
        """Its first heartbeat is held back until the test lets it go (after another worker took the lease)."""

        async def heartbeat(self, lease: LeaseOut, ttl_s: float, *, deadline: float | None = None) -> HeartbeatResponse:
            waiting.set()
            await gate.wait()
            return await super().heartbeat(lease, ttl_s, deadline=None)

    async def run_until_stopped(lease: LeaseOut) -> dict[str, Any]:
        try:
            await gate.wait()
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            stopped.set()
            raise
        return {"reward": 1.0}

    async with pool_backend(tmp_path, str(tmp_path / "b.sqlite3")) as backend, _client(backend) as owner:
        battle_id, token = await backend.battle()
        await owner.publish(battle_id, token, owner_worker="owner", attempts=_attempts(1, 1))
        async with GatedClient(backend.url, POOL, KEY, retry=FAST_RETRY) as gated, _client(backend) as thief:
            member = PoolMember(gated, "loser", run_until_stopped, capacity=1, ttl_s=0.5, wait_s=1)
            async with _running(member):
                async with asyncio.timeout(LIMIT_S):
                    await waiting.wait()
                    taken: list[LeaseOut] = []
                    while not taken:  # the loser's lease runs out; the thief leases the attempt again
                        taken = await thief.lease("thief", limit=1, ttl_s=30, wait_s=5)
                    gate.set()
                    await stopped.wait()
                    while member.holding:
                        await asyncio.sleep(0.05)
            with pytest.raises(LeaseLost) as refused:
                await gated.record(taken[0].model_copy(update={"generation": 1, "worker_id": "loser"}), {"x": 1})
            assert refused.value.reason == "fenced" and refused.value.status == 409
            recorded = await thief.record(taken[0], {"reward": 0.0, "by": "thief"})
            assert recorded.status == "recorded"
    assert member.counts.dropped == 1 and member.counts.recorded == 0
    assert [(h.worker_id, h.outcome) for h in recorded.attempt.history] == [("loser", "expired"), ("thief", "recorded")]
    assert recorded.attempt.result == {"reward": 0.0, "by": "thief"}


async def test_infrastructure_errors_are_requeued_then_failed_with_their_history(tmp_path: Path) -> None:
    async def broken(lease: LeaseOut) -> dict[str, Any]:
        raise RuntimeError(f"sandbox died on {lease.task_key} with {KEY}")

    async with pool_backend(tmp_path, str(tmp_path / "b.sqlite3")) as backend, _client(backend) as owner:
        battle_id, token = await backend.battle()
        await owner.publish(battle_id, token, owner_worker="owner", attempts=_attempts(2, 1), max_requeues=1)
        async with _client(backend) as client:
            member = PoolMember(client, "w", broken, capacity=2, ttl_s=30, wait_s=0.5)
            async with _running(member):
                attempts = await settled(owner, battle_id, token, 2, limit_s=LIMIT_S)
    assert {a.state for a in attempts} == {"failed"}
    for a in attempts:
        assert [h.outcome for h in a.history] == ["infra_error", "infra_error"]
        assert a.error is not None and "sandbox died" in a.error and KEY not in a.error  # the key never leaves
    assert member.counts.infra_errors == 4 and member.counts.recorded == 0


async def test_refusals_name_what_the_backend_refused(tmp_path: Path) -> None:
    async with pool_backend(tmp_path, str(tmp_path / "b.sqlite3")) as backend, _client(backend) as owner:
        battle_id, token = await backend.battle()
        await owner.publish(battle_id, token, owner_worker="owner", attempts=_attempts(1, 1))
        async with _client(backend, key="not the key") as wrong_key, _client(backend, pool="pool-b") as wrong_pool:
            assert await wrong_key.lease("w", limit=1, ttl_s=5) == []  # another key sees no attempts
            with pytest.raises(PoolRefused) as denied:
                await wrong_key.read(battle_id)
            assert denied.value.status in (401, 403)
            assert "not the key" not in str(denied.value)
            (lease,) = await owner.lease("w", limit=1, ttl_s=5)
            with pytest.raises(PoolRefused):
                await wrong_pool.record(lease, {"reward": 1.0})
            with pytest.raises(AttemptQueueMissing):
                await owner.read("no-such-battle", token=token)
            first = await owner.record(lease, {"reward": 1.0})
            again = await owner.record(lease, {"reward": 0.0})
            assert (first.status, again.status) == ("recorded", "duplicate")
            assert again.attempt.result == {"reward": 1.0}
            with pytest.raises(LeaseLost) as lost:
                await owner.heartbeat(lease, 5)
            assert lost.value.reason in ("not_leased", "fenced") and "heartbeat" in str(lost.value)

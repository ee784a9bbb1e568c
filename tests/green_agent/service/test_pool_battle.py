"""Issue 29, end to end: one battle worked by a pool of three green agents through two backend replicas on a real
PostgreSQL, surviving ``kill -9`` of a member and then of its owner.

Set-up (tests/support/pool_battle.py): PostgreSQL on 127.0.0.1 (the session's server, a fresh database), two
``battle_backend`` replicas on it, the reference flaky agent (replay with seeded faults: an attempt's outcome depends
only on its task and attempt number, so the figures are worth comparing) behind the delay proxy of
benchmarks/bench_latency_hiding.py, and ``arena-green --pool ...`` processes:

- the single-agent run first: one green agent in no pool runs the battle's config (retail/test, 40 tasks x k = 4,
  calibration, scripted user) through the first replica, against the agent without the delay;
- then the pool: A (the owner: the battle is created for it, through the first replica, its pool backend), B and C
  (leasing through the second replica). Once B holds attempts, ``kill -9`` of B (its whole process tree); once more
  attempts are done and A holds some, ``kill -9`` of A. C takes the battle over (owner_ttl_s) and finishes it.

Then: the backend has the battle finished with one result; the store holds 160 attempts, each ``done`` with exactly
one ``recorded`` lease, and the leases the killed agents held are ``expired``; the result posted (and C's run
directory's summary.json) equal the single-agent run's figures: pass^k and the whole summary, per-attempt outcomes,
n, the failure breakdown. Every process the test starts is stopped by it (also on failure).

Waits are bounded only to turn a hang into a failure with a clear message; nothing asserts on durations.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from green_agent.wire.attempt_leases import AttemptOut
from tests.support.pool_battle import Green, PoolCluster, pool_cluster

TASKS, K = 40, 4
CONFIG: dict[str, Any] = {
    "mode": "all",
    "domain": "retail",
    "split": "test",
    "k": K,
    "calibration": True,
    "concurrency": 24,
    "attempt_timeout_s": 1800,
    "turn_timeout_s": 600,
    "tool_timeout_s": 60,
}
FAULTS = {"skip_action": 0.15, "wrong_argument": 0.1, "malformed_reply": 0.1, "drop_final": 0.1}
SEED = 7
DELAY_S = 0.5
"""Seconds the proxy holds every A2A call of the pooled battle: it lasts long enough to kill agents mid-way."""
CAPACITY = 8
BATTLE_LIMIT_S = 1500.0
"""Upper bound on one battle on a loaded 2-core machine, takeover included (only turns a hang into a failure)."""


def task_key(attempt: dict[str, Any]) -> tuple[str, int]:
    """An AttemptResult JSON's (task key, attempt number): ``domain/split/index`` as AttemptResult.task_key."""
    return f"{attempt['domain']}/{attempt['split'] or '-'}/{attempt['task_index']}", int(attempt["attempt"])


def outcomes(result: dict[str, Any]) -> list[tuple[tuple[str, int], str, str | None, float | None]]:
    """(task and attempt, outcome, failure category, reward) of every attempt of a BattleResult's JSON, sorted."""
    return sorted(
        (task_key(a), a["outcome"], (a.get("failure") or {}).get("category"), a["reward"]) for a in result["attempts"]
    )


def held_by(attempts: list[AttemptOut], green: Green) -> set[tuple[str, int]]:
    return {(a.task_key, a.attempt) for a in attempts if a.state == "leased" and a.leased_by == green.worker_id}


def done(attempts: list[AttemptOut]) -> int:
    return sum(1 for a in attempts if a.state == "done")


async def kill_while_holding(cluster: PoolCluster, battle_id: str, green: Green, min_done: int) -> set[tuple[str, int]]:
    """Once ``min_done`` attempts are done and ``green`` holds attempts, ``kill -9`` it; returns the attempts it
    still held after it died (read after the kill: those can only end by expiring)."""

    async def ready() -> bool | None:
        state = (await cluster.battle(battle_id))["state"]
        if state in ("finished", "error"):  # e.g. run by its owner alone: waiting longer would not help
            raise AssertionError(f"battle {battle_id} is {state} before {green.worker_id} held an attempt")
        attempts = await cluster.attempts(battle_id)
        if done(attempts) == TASKS * K:
            raise AssertionError(f"every attempt was done before {green.worker_id} held one: slow the agent down")
        return True if done(attempts) >= min_done and held_by(attempts, green) else None

    await cluster.wait_for(
        f"{green.worker_id} to hold attempts with {min_done} done", ready, limit_s=BATTLE_LIMIT_S, every_s=0.5
    )
    cluster.kill(green)
    held = held_by(await cluster.attempts(battle_id), green)
    assert held, f"{green.worker_id} recorded everything it held before it died: kill it earlier"
    return held


async def single_agent_run(cluster: PoolCluster, white_url: str) -> dict[str, Any]:
    """The battle's config on one green agent in no pool (through the first replica); the result it posted."""
    single = await cluster.start_green("single", pool_backend=None)
    battle_id = await cluster.start_battle(single, white_url, CONFIG, backend=cluster.backends[0])
    battle = await cluster.wait_finished(battle_id, limit_s=BATTLE_LIMIT_S, backend=cluster.backends[0])
    await cluster.stop(single)
    result: dict[str, Any] = battle["result"]["detail"]
    assert result.get("status") == "completed" and len(result["attempts"]) == TASKS * K, str(result)[:2000]
    return result


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(3600)  # processes, two battles and a takeover on a loaded 2-core machine
async def test_a_pool_battle_survives_kill_9_of_a_member_and_its_owner(tmp_path: Path, postgres_url: str) -> None:
    async with pool_cluster(tmp_path) as cluster:
        first, second = await cluster.start_backends(postgres_url, replicas=2)
        white = await cluster.start_white(kind="flaky", seed=SEED, fault_rates=FAULTS, delay_s=DELAY_S)
        single = await single_agent_run(cluster, white.direct_url)
        assert {category for _, _, category, _ in outcomes(single)} > {None}  # the faults really happened

        owner = await cluster.start_green("a", pool_backend=first, capacity=CAPACITY)
        member = await cluster.start_green("b", pool_backend=second, capacity=CAPACITY)
        survivor = await cluster.start_green("c", pool_backend=second, capacity=CAPACITY)
        battle_id = await cluster.start_battle(owner, white.delayed_url, CONFIG, backend=first)

        held_by_member = await kill_while_holding(cluster, battle_id, member, min_done=TASKS * K // 8)
        held_by_owner = await kill_while_holding(cluster, battle_id, owner, min_done=TASKS * K * 3 // 8)
        battle = await cluster.wait_finished(battle_id, limit_s=BATTLE_LIMIT_S)

        # The store: every attempt done, recorded exactly once; the killed agents' leases expired, then re-leased.
        attempts = await cluster.attempts(battle_id, backend=first)
        assert len(attempts) == TASKS * K
        assert len({(a.task_key, a.attempt) for a in attempts}) == TASKS * K
        assert Counter(a.state for a in attempts) == {"done": TASKS * K}
        for attempt in attempts:
            recorded = [h for h in attempt.history if h.outcome == "recorded"]
            assert len(recorded) == 1, (attempt.task_key, attempt.attempt, attempt.history)
            assert recorded[0].worker_id == attempt.recorded_by
            assert recorded[0].generation == attempt.generation  # the last lease recorded; none after it
        by_key = {(a.task_key, a.attempt): a for a in attempts}
        for dead, held in ((member, held_by_member), (owner, held_by_owner)):
            for key in held:
                history = by_key[key].history
                assert any(h.worker_id == dead.worker_id and h.outcome == "expired" for h in history), history
                assert by_key[key].recorded_by != dead.worker_id
        assert {a.recorded_by for a in attempts} <= {owner.worker_id, member.worker_id, survivor.worker_id}
        assert any(a.recorded_by == survivor.worker_id for a in attempts if (a.task_key, a.attempt) in held_by_owner)

        # The result: posted once, by the member that took the battle over, equal to the single-agent run's.
        results = [event for event in battle["interact_history"] if event.get("is_result")]
        assert len(results) == 1
        pooled: dict[str, Any] = battle["result"]["detail"]
        assert pooled["battle_id"] == battle_id and pooled["status"] == "completed"
        assert len(pooled["attempts"]) == TASKS * K
        assert outcomes(pooled) == outcomes(single)
        assert pooled["summary"] == single["summary"]  # pass^k / pass@k per j with intervals, n, per-task figures
        assert pooled["failure_breakdown"] == single["failure_breakdown"]
        assert pooled["infrastructure_errors"] == single["infrastructure_errors"] == 0
        assert pooled["config"] == single["config"]

        # The new owner's run directory is the durable record: the same summary, each attempt journaled once.
        on_disk = json.loads(survivor.summary(battle_id).read_text(encoding="utf-8"))
        assert on_disk["summary"] == pooled["summary"] and outcomes(on_disk) == outcomes(pooled)
        journal = (survivor.runs_dir / battle_id / "attempts.jsonl").read_text(encoding="utf-8").splitlines()
        journaled = Counter(task_key(json.loads(line)) for line in journal if line)
        assert len(journaled) == TASKS * K and set(journaled.values()) == {1}

"""The owner of a pooled battle (issue 29) against a real backend process on SQLite, with fake members recording
scripted results: every attempt published, collected and journaled exactly once, the summary the results say;
results that do not validate, name another attempt, or an attempt failed in the harness on every try are harness
errors (excluded from n), never the agent's; trajectories written into the owner's run directory as a local
attempt's; a resumed owner publishes only what its run directory lacks; a battle reporting nowhere is not pooled;
attempts are published as the battle starts them, so no more than its concurrency are out at once (members hold no
more, the store lists no more published and not done) and a budget stop leaves nothing more for members to lease.

Waits are bounded (``asyncio.timeout``) only to turn a hang into a failure; nothing asserts on durations.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from green_agent.engine.attempt_runner import AttemptPlan
from green_agent.engine.battle import Battle
from green_agent.engine.events import BattleEvent
from green_agent.engine.results import FailureCategory, FaultAuthor
from green_agent.engine.tau.scoring import ScoringPool
from green_agent.service.attempt_lease_client import AttemptLeaseClient, AttemptQueueMissing, LeaseBackendDown
from green_agent.service.backend_target import BackendTarget
from green_agent.service.pool_owner import PoolOwner, pool_runners
from green_agent.statistics import summarize_trials
from green_agent.wire.attempt_leases import AttemptsResponse, LeaseOut
from tests.green_agent.service.pool_owner_support import (
    KEY,
    POOL,
    WHITE,
    Misbehaviour,
    client,
    config,
    fake_run,
    journal,
    members,
    record_of,
    reward,
    settings,
)
from tests.green_agent.service.pool_support import pool_backend

LIMIT_S = 180.0


async def test_an_owner_collects_every_attempt_once_and_blames_bad_results_on_the_harness(tmp_path: Path) -> None:
    cfg = config(tasks=10, k=2)
    misbehave: dict[tuple[int, int], Misbehaviour] = {(1, 1): "invalid", (2, 2): "raise", (3, 1): "other_attempt"}
    owners: list[PoolOwner] = []
    async with pool_backend(tmp_path, str(tmp_path / "backend.sqlite3")) as backend, client(backend) as lease_client:
        battle_id, token = await backend.battle()

        def runners(plan: AttemptPlan) -> PoolOwner:
            owners.append(PoolOwner(plan, settings(backend, "owner"), token, max_requeues=1, idle_s=0.1))
            return owners[-1]

        runs = [fake_run(f"member-{n}", misbehave) for n in range(2)]
        scoring = ScoringPool(max_workers=1, warm=False)
        battle = Battle(battle_id, WHITE, cfg, scoring=scoring, runs_dir=tmp_path / "runs", attempt_runners=runners)
        async with members(backend, runs) as pool, asyncio.timeout(LIMIT_S):
            result = await battle.run()
        stored = await lease_client.read(battle_id, token=token, limit=100)
    assert battle.run_dir is not None
    assert owners[0].published is not None and (owners[0].published.added, owners[0].published.already) == (20, 0)
    assert stored.counts.get("done") == 19 and stored.counts.get("failed") == 1, stored.counts
    assert sum(m.counts.recorded for m in pool) == 19
    lines = journal(battle.run_dir)
    assert len(lines) == 20 and len(set(lines)) == 20  # every attempt journaled exactly once
    bad = {(f"retail/test/{i}", a) for i, a in misbehave}
    by_key = {(a.task_key, a.attempt): a for a in result.attempts}
    for key in bad:
        attempt = by_key[key]
        assert attempt.outcome == "infra_error" and attempt.trial_outcome is None, attempt
        assert attempt.failure is not None and attempt.failure.category == FailureCategory.HARNESS_ERROR
        assert attempt.failure.fault_author == FaultAuthor.HARNESS and attempt.failure.is_infrastructure
    assert "does not validate" in str(by_key[("retail/test/1", 1)].failure)
    assert "failed in the harness on 2 tries" in str(by_key[("retail/test/2", 2)].failure)
    assert "sandbox would not start" in str(by_key[("retail/test/2", 2)].failure)
    assert "attempt 2, not 1" in str(by_key[("retail/test/3", 1)].failure)
    assert result.infrastructure_errors == 3
    trials: dict[str, list[bool | None]] = {f"retail/test/{i}": [] for i in range(10)}
    for i in range(10):
        for a in (1, 2):
            trials[f"retail/test/{i}"].append(None if (i, a) in misbehave else reward(i, a) == 1.0)
    assert result.summary == summarize_trials(trials, k_max=2, seed=cfg.seed)
    good = by_key[("retail/test/4", 2)]
    assert good.outcome == ("success" if reward(4, 2) else "failure")
    assert good.trajectory_file == "trajectories/retail-test-0004-attempt02.jsonl"  # the member's path is ignored
    written = (battle.run_dir / good.trajectory_file).read_text(encoding="utf-8").splitlines()
    assert json.loads(written[0])["attempt"]["context_id"] == "ctx-4-2"
    assert [json.loads(line) for line in written[1:]] == [record_of(4, 2)]
    assert by_key[("retail/test/1", 1)].trajectory_file is None


async def test_a_resumed_owner_publishes_only_what_its_run_directory_lacks(tmp_path: Path) -> None:
    cfg = config(tasks=6, k=2, concurrency=2)
    owners: list[PoolOwner] = []
    async with pool_backend(tmp_path, str(tmp_path / "backend.sqlite3")) as backend:
        battle_id, token = await backend.battle()

        def runners(plan: AttemptPlan) -> PoolOwner:
            owners.append(PoolOwner(plan, settings(backend, "owner"), token, idle_s=0.1))
            return owners[-1]

        holder: list[Battle] = []

        async def interrupt_after_three(event: BattleEvent) -> None:
            if event.type == "attempt_finished" and event.data.get("done") == 3:
                holder[0].request_interrupt()

        scoring = ScoringPool(max_workers=1, warm=False)
        runs_dir = tmp_path / "runs"
        first = Battle(
            battle_id, WHITE, cfg, scoring=scoring, runs_dir=runs_dir, sinks=[interrupt_after_three],
            attempt_runners=runners,
        )  # fmt: skip
        holder.append(first)
        async with members(backend, [fake_run("member-0", pause_s=0.05)]), asyncio.timeout(LIMIT_S):
            interrupted = await first.run()
            assert interrupted.status == "interrupted"
            assert first.run_dir is not None
            carried = set(journal(first.run_dir))
            assert 3 <= len(carried) < 12
            resumed = Battle(
                battle_id, WHITE, cfg, scoring=scoring, runs_dir=runs_dir, resume=True, attempt_runners=runners
            )
            result = await resumed.run()
    first_added = owners[0].published.added if owners[0].published else 0
    assert len(carried) <= first_added < 12  # published as the battle started them, not all on enter
    assert owners[1].published is not None and owners[0].published is not None
    assert owners[0].published.already == 0 and first_added + owners[1].published.added == 12
    assert owners[1].published.already <= first_added - len(carried)  # the rest the store held is collected
    assert {(ref.key, a) for ref, a in owners[1].plan.attempts}.isdisjoint(carried)
    lines = journal(first.run_dir)
    assert len(lines) == 12 and len(set(lines)) == 12
    assert result.status == "completed" and len(result.attempts) == 12 and result.infrastructure_errors == 0


def test_only_a_battle_reporting_with_its_token_to_the_pools_backend_is_pooled(tmp_path: Path) -> None:
    from green_agent.service.pool_settings import PoolSettings

    cfg = config(tasks=1, k=2)
    mcp = cfg.model_copy(update={"tool_mode": "mcp"})
    pool = PoolSettings(name="p", backend_url="http://127.0.0.1:8000/", key="the-secret-key", worker_id="w")
    assert pool_runners(None, BackendTarget("http://127.0.0.1:8000", "token"), cfg, cfg) is None
    assert pool_runners(pool, None, cfg, cfg) is None
    assert pool_runners(pool, BackendTarget("http://127.0.0.1:8000", None), cfg, cfg) is None
    assert pool_runners(pool, BackendTarget("http://127.0.0.1:9000", "token"), cfg, cfg) is None
    assert pool_runners(pool, BackendTarget("http://127.0.0.1:8000", "token"), cfg, cfg) is not None
    assert pool_runners(pool, BackendTarget("http://127.0.0.1:8000", "token"), mcp, cfg) is None  # members refuse it
    assert "the-secret-key" not in repr(pool)


class _UnreadableQueue(AttemptLeaseClient):
    """Publishes for real; reading the attempts fails as the backend going away would (``outage``), or answers that
    the queue holds nothing."""

    def __init__(self, url: str, *, outage: bool) -> None:
        super().__init__(url, POOL, KEY)
        self._outage = outage

    async def read(
        self, battle_id: str, *, token: str | None = None, offset: int = 0, limit: int = 50
    ) -> AttemptsResponse:
        if self._outage:
            raise LeaseBackendDown("read", None, "no answer after 9 tries")
        empty: dict[str, Any] = {
            "battle_id": battle_id,
            "pool": POOL,
            "owner_worker": None,
            "counts": {},
            "attempts": [],
        }
        return AttemptsResponse.model_validate({**empty, "next_offset": None})


@pytest.mark.parametrize(("outage", "why"), [(True, "could not be read"), (False, "does not hold this attempt")])
async def test_a_queue_that_cannot_be_read_ends_the_attempts_as_harness_errors_not_a_hang(
    tmp_path: Path, outage: bool, why: str
) -> None:
    cfg = config(tasks=2, k=2)
    async with pool_backend(tmp_path, str(tmp_path / "backend.sqlite3")) as backend:
        battle_id, token = await backend.battle()
        async with _UnreadableQueue(backend.url, outage=outage) as unreadable:

            def runners(plan: AttemptPlan) -> PoolOwner:
                return PoolOwner(plan, settings(backend, "owner"), token, client=unreadable, idle_s=0.1)

            battle = Battle(
                battle_id, WHITE, cfg, scoring=ScoringPool(max_workers=1, warm=False), runs_dir=tmp_path / "runs",
                attempt_runners=runners,
            )  # fmt: skip
            async with asyncio.timeout(LIMIT_S):
                result = await battle.run()
    assert result.status == "completed" and len(result.attempts) == 4 and result.infrastructure_errors == 4
    for attempt in result.attempts:
        assert attempt.failure is not None and attempt.failure.fault_author == FaultAuthor.HARNESS
        assert why in attempt.failure.detail


def _peak_tracked(
    run: Callable[[LeaseOut], Coroutine[Any, Any, dict[str, Any]]], live: list[int]
) -> Callable[[LeaseOut], Coroutine[Any, Any, dict[str, Any]]]:
    """``run`` counting the attempts members hold at once: live[0] now, live[1] the most so far."""

    async def tracked(lease: LeaseOut) -> dict[str, Any]:
        live[0] += 1
        live[1] = max(live[1], live[0])
        try:
            return await run(lease)
        finally:
            live[0] -= 1

    return tracked


async def test_a_pooled_battle_never_has_more_attempts_out_than_its_concurrency(tmp_path: Path) -> None:
    cfg = config(tasks=10, k=2, concurrency=3)  # two members of capacity 4: 8 could run at once
    live = [0, 0]
    open_peak = 0
    async with pool_backend(tmp_path, str(tmp_path / "backend.sqlite3")) as backend, client(backend) as lease_client:
        battle_id, token = await backend.battle()

        def runners(plan: AttemptPlan) -> PoolOwner:
            return PoolOwner(plan, settings(backend, "owner"), token, idle_s=0.05)

        async def watch_counts() -> None:
            nonlocal open_peak
            while True:
                with contextlib.suppress(AttemptQueueMissing):  # nothing published yet
                    counts = (await lease_client.read(battle_id, token=token, limit=1)).counts
                    open_peak = max(open_peak, counts.get("available", 0) + counts.get("leased", 0))
                await asyncio.sleep(0.01)

        runs = [_peak_tracked(fake_run(f"member-{n}", pause_s=0.05), live) for n in range(2)]
        battle = Battle(
            battle_id, WHITE, cfg, scoring=ScoringPool(max_workers=1, warm=False), runs_dir=tmp_path / "runs",
            attempt_runners=runners,
        )  # fmt: skip
        async with members(backend, runs), asyncio.timeout(LIMIT_S):
            watcher = asyncio.create_task(watch_counts())
            try:
                result = await battle.run()
            finally:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
        stored = await lease_client.read(battle_id, token=token, limit=100)
    assert result.status == "completed" and len(result.attempts) == 20 and result.infrastructure_errors == 0
    assert {state: n for state, n in stored.counts.items() if n} == {"done": 20}
    assert 1 <= live[1] <= 3, live  # members never held more than the battle's concurrency at once
    assert 1 <= open_peak <= 3, open_peak  # nor did the store hold more published and not done


async def test_a_budget_stop_publishes_nothing_more(tmp_path: Path) -> None:
    cfg = config(tasks=10, k=2, concurrency=2, max_cost_usd=0.3)  # each attempt costs 0.1: stops after 3
    async with pool_backend(tmp_path, str(tmp_path / "backend.sqlite3")) as backend, client(backend) as lease_client:
        battle_id, token = await backend.battle()

        def runners(plan: AttemptPlan) -> PoolOwner:
            return PoolOwner(plan, settings(backend, "owner"), token, idle_s=0.05)

        battle = Battle(
            battle_id, WHITE, cfg, scoring=ScoringPool(max_workers=1, warm=False), runs_dir=tmp_path / "runs",
            attempt_runners=runners,
        )  # fmt: skip
        async with members(backend, [fake_run("member-0", pause_s=0.05, cost_usd=0.1)]), asyncio.timeout(LIMIT_S):
            result = await battle.run()
        stored = await lease_client.read(battle_id, token=token, limit=100)
    assert result.budget_stop is not None and result.budget_stop.reason == "max_cost_usd"
    assert 3 <= len(result.attempts) <= 4, len(result.attempts)  # the third spends it; one more may be in flight
    assert battle.run_dir is not None and len(journal(battle.run_dir)) == len(result.attempts)
    # Only the attempts the battle started were published: all done and collected, none left for members to lease.
    assert {state: n for state, n in stored.counts.items() if n} == {"done": len(result.attempts)}, stored.counts
    assert {(a.task_key, a.attempt) for a in stored.attempts} == {(a.task_key, a.attempt) for a in result.attempts}


def test_a_pool_agents_battle_reporting_elsewhere_says_why_it_is_not_pooled(caplog: pytest.LogCaptureFixture) -> None:
    """A battle of a pool agent that reports to another address than --pool-backend (another replica, localhost
    against 127.0.0.1) runs unpooled: the operator is told, naming both addresses, not left guessing."""
    from green_agent.service.pool_settings import PoolSettings

    cfg = config(tasks=1, k=2)
    pool = PoolSettings(name="p", backend_url="http://127.0.0.1:8000/", key="the-secret-key", worker_id="w")
    with caplog.at_level(logging.WARNING, logger="green_agent.service.pool_owner"):
        assert pool_runners(pool, BackendTarget("http://localhost:8000", "token"), cfg, cfg) is None
    [record] = [r for r in caplog.records if r.name == "green_agent.service.pool_owner"]
    assert record.levelno == logging.WARNING
    assert "http://localhost:8000" in record.getMessage() and "http://127.0.0.1:8000/" in record.getMessage()
    assert "the-secret-key" not in record.getMessage()

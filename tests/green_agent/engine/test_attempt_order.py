"""Attempts start longest expected first (issue 27), with the numbers of task order; certify keeps its order."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

import green_agent.engine.battle as battle_module
from green_agent.engine.attempt_order import attempt_order, expected_turns
from green_agent.engine.battle import Battle
from green_agent.engine.config import BattleConfig
from green_agent.engine.results import AttemptResult, BattleResult
from green_agent.engine.run_store import AttemptKey
from green_agent.engine.tau.scoring import ScoringPool
from green_agent.engine.tau.tasks import TaskRef, select_tasks
from tests.support.servers import serve_app_factory
from white_agent.app import create_white_agent_app, make_agent

FAULTS = {"skip_action": 0.15, "wrong_argument": 0.1, "malformed_reply": 0.1, "crash": 0.1, "drop_final": 0.1}
TURNS = {0: 6, 1: 7, 2: 7, 3: 7, 4: 6, 5: 9, 6: 7, 7: 14}
"""Retail/test tasks 0-7: A2A replies the replay agent takes (gold actions + its final statement)."""


def config(**extra: Any) -> BattleConfig:
    fields = {"domain": "retail", "split": "test", "task_index": list(TURNS), "k": 2, "calibration": True}
    return BattleConfig.model_validate({**fields, "concurrency": 1, **extra})


def task_order(
    refs: Sequence[TaskRef],
    k: int,
    carried: dict[AttemptKey, AttemptResult],
    *,
    mandated: Sequence[str] | None = None,
) -> list[tuple[TaskRef, int]]:
    """The schedule before issue 27's fix: task order (certify's order when mandated)."""
    by_key = {ref.key: ref for ref in refs}
    ordered = [by_key[key] for key in mandated] if mandated is not None else list(refs)
    return [(ref, a) for ref in ordered for a in range(1, k + 1) if (ref.key, a) not in carried]


@asynccontextmanager
async def flaky_agent() -> AsyncIterator[str]:
    agent = make_agent("flaky", seed=7, fault_rates=FAULTS)
    async with serve_app_factory(lambda url: create_white_agent_app(agent, url + "/")) as url:
        yield url


def started(battle: Battle) -> list[tuple[str, int]]:
    return [(str(e.data["task_key"]), int(e.data["attempt"])) for e in battle.events if e.type == "attempt_started"]


def test_the_estimate_is_the_replay_agents_turns() -> None:
    refs = select_tasks(config())
    assert [expected_turns(ref) for ref in refs] == list(TURNS.values())


def test_longest_first_keeps_ties_and_attempts_in_task_order() -> None:
    refs = select_tasks(config())
    order = [(ref.index, a) for ref, a in attempt_order(refs, 2, {})]
    assert order == [(index, a) for index in (7, 5, 1, 2, 3, 6, 0, 4) for a in (1, 2)]


def test_a_mandated_order_is_kept_exactly() -> None:
    refs = select_tasks(config())
    mandated = [refs[i].key for i in (4, 0, 6, 2)]
    order = attempt_order(refs, 2, {}, mandated=mandated)
    assert [(ref.key, a) for ref, a in order] == [(key, a) for key in mandated for a in (1, 2)]


async def test_a_resume_runs_the_missing_attempts_and_orders_by_observed_turns(tmp_path: Path) -> None:
    cfg = config(task_index=[0, 7], concurrency=2)
    async with ScoringPool(max_workers=1) as scoring, flaky_agent() as url:
        done = await Battle("done", url, cfg, scoring=scoring, runs_dir=tmp_path).run()
    refs = select_tasks(config())
    by_index = {a.task_index: a for a in done.attempts if a.attempt == 1}
    long_one = by_index[0].model_copy(update={"steps": 30})  # task 0 took 30 turns last time: it goes first now
    carried = {(long_one.task_key, 1): long_one, (by_index[7].task_key, 1): by_index[7]}
    order = [(ref.index, a) for ref, a in attempt_order(refs, 2, carried)]
    assert order[:2] == [(0, 2), (7, 2)]
    assert len(order) == 16 - 2 and not {(0, 1), (7, 1)} & set(order)


async def test_longest_first_starts_long_tasks_first_with_the_numbers_of_task_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = config(concurrency=1)  # one in flight: attempts start exactly in schedule order
    results: dict[str, BattleResult] = {}
    battles: dict[str, Battle] = {}
    async with ScoringPool(max_workers=1) as scoring, flaky_agent() as url:
        battles["lpt"] = Battle("lpt", url, cfg, scoring=scoring, runs_dir=tmp_path)
        results["lpt"] = await battles["lpt"].run()
        by_key = {ref.key: ref.index for ref in select_tasks(cfg)}
        assert [(by_key[key], a) for key, a in started(battles["lpt"])][:4] == [(7, 1), (7, 2), (5, 1), (5, 2)]
        monkeypatch.setattr(battle_module, "attempt_order", task_order)
        battles["tasks"] = Battle("tasks", url, cfg, scoring=scoring, runs_dir=tmp_path)
        results["tasks"] = await battles["tasks"].run()
    lpt, tasks = results["lpt"], results["tasks"]
    assert [by_key[key] for key, _ in started(battles["tasks"])][:4] == [0, 0, 1, 1]
    # Same attempts, same outcomes, same statistics: an outcome depends on (task, attempt), not on when it ran.
    assert {a.failure.category.value for a in lpt.attempts if a.failure} != set()  # the faults really happened
    assert [
        (a.task_key, a.attempt, a.outcome, a.reward, a.steps, a.failure and a.failure.category) for a in lpt.attempts
    ] == [
        (a.task_key, a.attempt, a.outcome, a.reward, a.steps, a.failure and a.failure.category) for a in tasks.attempts
    ]
    assert lpt.summary == tasks.summary
    assert lpt.failure_breakdown == tasks.failure_breakdown
    assert lpt.infrastructure_errors == tasks.infrastructure_errors


async def test_certify_starts_its_seeded_order(tmp_path: Path) -> None:
    cfg = config(certify="pass^2>=0.5", concurrency=1)
    async with ScoringPool(max_workers=1) as scoring, flaky_agent() as url:
        battle = Battle("certify", url, cfg, scoring=scoring, runs_dir=tmp_path)
        await battle.run()
    assert battle._certify is not None
    order = battle._certify.order
    seen = list(dict.fromkeys(key for key, _ in started(battle)))
    assert seen == order[: len(seen)] and seen

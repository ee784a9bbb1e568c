"""Calibration: the replay agent performs every task's gold actions, so every attempt must score 1.0. Anything
else is a harness bug (parsing, recording, scoring or the scripted user), except a task tau2's own data makes
impossible (green_agent.engine.tau.gold_gaps), which the result must list with its reason.

Telecom is dual control: 28 of its 40 test tasks need the customer to act on their own phone, so a 1.0 there also
shows that the replay agent asks for the user's actions and the scripted user performs them through tau2's
user-tool path.

Each sweep is also the issue-15 agreement check: every attempt is re-scored from the run directory with tau2's
unmodified ``evaluate_simulation`` and must get the reward and RewardInfo the battle recorded
(tests/green_agent/engine/test_scoring_agreement.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from green_agent.engine.results import BattleResult
from green_agent.engine.tau.gold_gaps import GOLD_GAPS
from tests.green_agent.engine.test_scoring_agreement import rescore_with_tau2
from tests.green_agent.service.conftest import assess, white_agent

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.slow]


async def _assert_tau2_agrees(data: dict[str, Any], runs_dir: Path, attempts: int) -> None:
    """Every attempt was scored by tau2 in the battle, and tau2 re-scoring it from the run gives the same verdict."""
    result = BattleResult.model_validate(data)
    agreement = await asyncio.to_thread(rescore_with_tau2, result, runs_dir / result.battle_id)
    print(f"{result.battle_id} vs tau2: {agreement}")  # shown with -s: the counts for the record
    assert agreement.disagreements == []
    assert (agreement.scored, agreement.unscored, agreement.infra_errors) == (attempts, 0, 0)


@pytest.mark.parametrize(
    ("domain", "split", "tasks"), [("retail", "test", 40), ("airline", "test", 20), ("telecom", "test", 40)]
)
async def test_calibration_scores_one_on_every_test_task(
    green_url: str, runs_dir: Path, domain: str, split: str, tasks: int
) -> None:
    config = {"mode": "all", "domain": domain, "split": split, "k": 2, "calibration": True, "concurrency": 8}
    async with white_agent("replay") as white:
        outcome = await assess(green_url, white, config)
    assert outcome.state == "completed" and outcome.result is not None, outcome.error
    await _assert_tau2_agrees(outcome.result, runs_dir, tasks * 2)
    attempts = outcome.result["attempts"]
    assert len(attempts) == tasks * 2
    failed = [(a["task_id"], a["attempt"], a["failure"]) for a in attempts if a["outcome"] != "success"]
    assert failed == []
    assert all(a["reward"] == 1.0 for a in attempts)
    macro = {row["j"]: row for row in outcome.result["summary"]["macro"]}
    assert macro[2]["pass_hat_mean"] == 1.0 and macro[2]["coverage"] == tasks
    assert "gold_gaps" not in outcome.result  # written only when there is one


async def test_mock_calibration_fails_only_the_listed_gold_gaps(green_url: str, runs_dir: Path) -> None:
    config = {"mode": "all", "domain": "mock", "split": "base", "k": 2, "calibration": True, "concurrency": 8}
    async with white_agent("replay") as white:
        outcome = await assess(green_url, white, config)
    assert outcome.state == "completed" and outcome.result is not None, outcome.error
    await _assert_tau2_agrees(outcome.result, runs_dir, 9 * 2)
    attempts = outcome.result["attempts"]
    assert len(attempts) == 9 * 2
    listed = {task_id for domain, task_id in GOLD_GAPS if domain == "mock"}
    failed = {a["task_id"] for a in attempts if a["outcome"] != "success"}
    assert failed == listed == {"update_task_with_history_and_env_assertions"}
    assert all(a["reward"] == 1.0 for a in attempts if a["task_id"] not in listed)
    gaps = outcome.result["gold_gaps"]
    assert [(gap["task_key"], gap["task_id"]) for gap in gaps] == [
        ("mock/base/7", "update_task_with_history_and_env_assertions")
    ]
    assert "no gold actions" in gaps[0]["reason"]
    assert outcome.markdown is not None
    assert "Tasks whose gold solution cannot pass (tau2's data)" in outcome.markdown
    assert "Known tau2 data gap, expected to fail" in outcome.markdown

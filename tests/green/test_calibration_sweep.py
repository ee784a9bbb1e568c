"""Calibration: the replay agent performs every task's gold actions, so every attempt must score 1.0. Anything
else is a harness bug (parsing, recording, scoring or the scripted user), except a task tau2's own data makes
impossible (green_agent.engine.tau.gold_gaps), which the result must list with its reason.

Telecom is dual control: 28 of its 40 test tasks need the customer to act on their own phone, so a 1.0 there also
shows that the replay agent asks for the user's actions and the scripted user performs them through tau2's
user-tool path."""

from __future__ import annotations

import pytest

from green_agent.engine.tau.gold_gaps import GOLD_GAPS
from tests.green.conftest import assess, white_agent

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.slow]


@pytest.mark.parametrize(
    ("domain", "split", "tasks"), [("retail", "test", 40), ("airline", "test", 20), ("telecom", "test", 40)]
)
async def test_calibration_scores_one_on_every_test_task(green_url: str, domain: str, split: str, tasks: int) -> None:
    config = {"mode": "all", "domain": domain, "split": split, "k": 2, "calibration": True, "concurrency": 8}
    async with white_agent("replay") as white:
        outcome = await assess(green_url, white, config)
    assert outcome.state == "completed", outcome.error
    attempts = outcome.result["attempts"]
    assert len(attempts) == tasks * 2
    failed = [(a["task_id"], a["attempt"], a["failure"]) for a in attempts if a["outcome"] != "success"]
    assert failed == []
    assert all(a["reward"] == 1.0 for a in attempts)
    macro = {row["j"]: row for row in outcome.result["summary"]["macro"]}
    assert macro[2]["pass_hat_mean"] == 1.0 and macro[2]["coverage"] == tasks
    assert "gold_gaps" not in outcome.result  # written only when there is one


async def test_mock_calibration_fails_only_the_listed_gold_gaps(green_url: str) -> None:
    config = {"mode": "all", "domain": "mock", "split": "base", "k": 2, "calibration": True, "concurrency": 8}
    async with white_agent("replay") as white:
        outcome = await assess(green_url, white, config)
    assert outcome.state == "completed", outcome.error
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
    assert "Tasks whose gold solution cannot pass (tau2's data)" in outcome.markdown
    assert "Known tau2 data gap, expected to fail" in outcome.markdown

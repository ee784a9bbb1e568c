"""Calibration: the replay agent performs every task's gold actions, so every attempt must score 1.0. Anything
else is a harness bug (parsing, recording, scoring or the scripted user)."""

from __future__ import annotations

import pytest

from tests.green.conftest import assess, white_agent

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.slow]


@pytest.mark.parametrize(("domain", "tasks"), [("retail", 40), ("airline", 20)])
async def test_calibration_scores_one_on_every_test_task(green_url: str, domain: str, tasks: int) -> None:
    config = {"mode": "all", "domain": domain, "split": "test", "k": 2, "calibration": True, "concurrency": 8}
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

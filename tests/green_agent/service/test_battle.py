"""Battles end to end through the green agent's A2A interface: failure categories produced on purpose by the
flaky agent, time limits, unreachable agents, config errors, context isolation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.green_agent.service.conftest import assess, white_agent

pytestmark = pytest.mark.asyncio(loop_scope="session")

# retail/test index 9 (tau2 task 36): several write actions and two communicate_info strings, so every fault
# has something to act on.
TASK = {"domain": "retail", "split": "test", "task_id": 9}


def _attempts(outcome: Any) -> list[dict[str, Any]]:
    assert outcome.state == "completed", outcome.error
    attempts: list[dict[str, Any]] = outcome.result["attempts"]
    return attempts


@pytest.mark.parametrize(
    ("fault", "category"),
    [
        ("skip_action", "task_incomplete"),
        ("wrong_argument", "task_incomplete"),
        ("malformed_reply", "format_error"),
        ("no_reply", "timeout"),
        ("crash", "communication_error"),
        ("report_failure", "white_agent_error"),
        ("drop_final", "missing_outputs"),
        ("partial_final", "incomplete_outputs"),
        ("task_reply", None),
    ],
)
async def test_each_fault_gives_its_category(green_url: str, fault: str, category: str | None) -> None:
    config = {**TASK, "k": 2, "calibration": True, "turn_timeout_s": 1.0}
    async with white_agent("flaky", seed=1, fault_rates={fault: 1.0}) as white:
        outcome = await assess(green_url, white, config)
    attempts = _attempts(outcome)
    assert len(attempts) == 2
    for attempt in attempts:
        if category is None:  # an A2A Task instead of a Message is a valid reply: the attempt must succeed
            assert attempt["outcome"] == "success", attempt
        else:
            assert attempt["outcome"] == "failure", attempt
            assert attempt["failure"]["category"] == category
            assert attempt["failure"]["fault_author"] == "white_agent"
    assert outcome.result is not None and outcome.result["infrastructure_errors"] == 0


async def test_max_steps_is_a_timeout_with_the_reason(green_url: str) -> None:
    async with white_agent("replay") as white:
        outcome = await assess(green_url, white, {**TASK, "k": 2, "calibration": True, "max_steps": 1})
    for attempt in _attempts(outcome):
        assert attempt["failure"]["category"] == "timeout"
        assert "max_steps (1)" in attempt["failure"]["detail"]
        assert attempt["termination_reason"] == "max_steps"
        assert attempt["steps"] == 1


async def test_unreachable_white_agent_completes_with_communication_errors(green_url: str) -> None:
    outcome = await assess(green_url, "http://127.0.0.1:9", {**TASK, "k": 2})
    attempts = _attempts(outcome)
    assert [a["failure"]["category"] for a in attempts] == ["communication_error"] * 2
    assert outcome.result is not None
    macro = {row["j"]: row for row in outcome.result["summary"]["macro"]}
    assert macro[2]["pass_hat_mean"] == 0.0


async def test_calibration_replay_scores_one_and_is_marked(green_url: str, runs_dir: Path) -> None:
    async with white_agent("replay") as white:
        outcome = await assess(green_url, white, {"domain": "airline", "task_id": [0, 1], "k": 2, "calibration": True})
    attempts = _attempts(outcome)
    assert all(a["outcome"] == "success" and a["reward"] == 1.0 for a in attempts)
    assert outcome.result is not None and outcome.result["calibration"] is True
    assert outcome.markdown is not None and "CALIBRATION" in outcome.markdown
    run_dir = runs_dir / outcome.result["battle_id"]
    assert (run_dir / "summary.json").is_file() and (run_dir / "summary.md").is_file()
    trajectories = sorted((run_dir / "trajectories").glob("*.jsonl"))
    assert len(trajectories) == 4
    header = json.loads(trajectories[0].read_text().splitlines()[0])
    assert header["attempt"]["outcome"] == "success"


async def test_without_calibration_the_replay_agent_learns_nothing(green_url: str) -> None:
    async with white_agent("replay") as white:
        outcome = await assess(green_url, white, {**TASK, "k": 2})
    assert all(a["outcome"] == "failure" for a in _attempts(outcome))


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"k": 3}, "k must be even"),
        ({"domain": "banking"}, "known domains"),
        ({"domain": "retail", "task_id": 400}, "valid 0..39"),
        (
            {"user_simulator": {"kind": "llm", "api_key_env": "ARENA_TEST_UNSET_KEY"}},
            "user_simulator.api_key_env: set by the green agent's operator",
        ),
        (
            {"user_simulator": {"base_url": "http://127.0.0.1:9/v1"}},
            "user_simulator.base_url: set by the green agent's",
        ),
        ({"pass_k_config": {"k": 2}, "user_simulator": {"model": "x"}}, "user_simulator.model: set by the green agent"),
        ({"k": 66}, "k: Input should be less than or equal to 64"),
        ({"concurrency": 200}, "concurrency: at most 16 attempts in flight"),
    ],
)
async def test_bad_config_fails_the_task_naming_the_field(green_url: str, config: dict[str, Any], message: str) -> None:
    outcome = await assess(green_url, "http://127.0.0.1:9", config)
    assert outcome.state == "failed"
    assert message in (outcome.error or "")
    # A config problem found when the battle selects its tasks is the config's, not the harness's.
    assert (outcome.error or "").startswith("configuration error:"), outcome.error

"""Telecom's dual control through the green agent's A2A interface: the customer acts on their own phone.

The replay agent asks for each of the user's gold actions in words (naming the user tool and its arguments) and the
scripted user performs them through tau2's user-tool path, so a calibration attempt scores 1.0 (MCP tool mode:
tests/green_agent/service/mcp/test_mcp_battles.py); the flaky agent's faults reach the user's actions too (a skipped
or garbled request leaves the phone wrong).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.green_agent.service.conftest import assess, white_agent

pytestmark = pytest.mark.asyncio(loop_scope="session")

# telecom/test 0: two device actions (toggle_data_saver_mode, toggle_roaming), scored on environment assertions only.
USER_ONLY = {"domain": "telecom", "split": "test", "task_id": 0}
# telecom/test 10: the agent's and the customer's actions interleaved (airplane mode, payment request, payment, ...).
MIXED = {"domain": "telecom", "split": "test", "task_id": 10}


def _attempts(outcome: Any) -> list[dict[str, Any]]:
    assert outcome.state == "completed", outcome.error
    attempts: list[dict[str, Any]] = outcome.result["attempts"]
    return attempts


def _trajectory(runs_dir: Path, attempt: dict[str, Any]) -> list[dict[str, Any]]:
    path = runs_dir / attempt["battle_id"] / attempt["trajectory_file"]
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


async def test_replay_asks_and_the_scripted_user_acts(green_url: str, runs_dir: Path) -> None:
    config = {**MIXED, "k": 2, "calibration": True}
    async with white_agent("replay") as white:
        outcome = await assess(green_url, white, config)
    attempts = _attempts(outcome)
    assert [a["reward"] for a in attempts] == [1.0, 1.0]
    calls = [
        (call["requestor"], call["name"])
        for message in _trajectory(runs_dir, attempts[0])
        for call in message.get("tool_calls") or []
    ]
    assert calls == [
        ("user", "toggle_airplane_mode"),
        ("assistant", "send_payment_request"),
        ("user", "make_payment"),
        ("assistant", "resume_line"),
        ("user", "reboot_device"),
    ]


@pytest.mark.parametrize(
    ("fault", "category"),
    [
        ("skip_action", "task_incomplete"),
        ("wrong_argument", "task_incomplete"),
        ("malformed_reply", "format_error"),
        ("crash", "communication_error"),
        ("report_failure", "white_agent_error"),
        ("task_reply", None),
        ("drop_final", None),  # telecom scores no communicate_info: nothing to drop
    ],
)
async def test_flaky_faults_in_telecom(green_url: str, runs_dir: Path, fault: str, category: str | None) -> None:
    config = {**USER_ONLY, "k": 2, "calibration": True, "turn_timeout_s": 5.0}
    async with white_agent("flaky", seed=1, fault_rates={fault: 1.0}) as white:
        outcome = await assess(green_url, white, config)
    attempts = _attempts(outcome)
    assert len(attempts) == 2
    for attempt in attempts:
        if category is None:
            assert attempt["outcome"] == "success", attempt
            continue
        assert attempt["outcome"] == "failure", attempt
        assert attempt["failure"]["category"] == category
        assert attempt["failure"]["fault_author"] == "white_agent"
        if category == "task_incomplete":
            assert "database" not in attempt["failure"]["detail"]  # telecom is scored on assertions, not the DB
            assert attempt["breakdown"]["env_assertions_met"] < attempt["breakdown"]["env_assertions_total"]
    assert outcome.result is not None and outcome.result["infrastructure_errors"] == 0
    if fault in ("skip_action", "wrong_argument"):
        user_calls = [
            call
            for message in _trajectory(runs_dir, attempts[0])
            for call in message.get("tool_calls") or []
            if call["requestor"] == "user"
        ]
        names = [call["name"] for call in user_calls]
        if fault == "skip_action":  # the last device action is never asked for
            assert names == ["toggle_data_saver_mode"]
        else:  # asked for with an argument the tool does not take; the customer did as told
            assert names == ["toggle_data_saver_mode", "toggle_roaming"]
            assert user_calls[1]["arguments"] == {"unexpected_argument": "x"}

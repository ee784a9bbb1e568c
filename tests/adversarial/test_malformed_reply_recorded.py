"""The reply that failed, end to end (issue 26): a real battle on the green agent subprocess against the hostile agent
over A2A; every format_error attempt records what the agent sent, bounded, in summary.json, summary.md and its
trajectory file (a reply with no action: its text; a reply over max_reply_bytes: the first bytes of its body)."""

from __future__ import annotations

import pytest

from tests.adversarial.conftest import battle_config
from tests.adversarial.harness import (
    MB,
    GreenAgent,
    assert_completed,
    assert_no_infrastructure_errors,
    check_trajectory_file,
    failure_of,
    run_battle,
    trajectory_paths,
)
from tests.adversarial.hostile_agent import MALFORMED_TEXT, HostileAgent, big_respond, malformed


@pytest.mark.timeout(180)
async def test_a_reply_without_an_action_is_recorded(green: GreenAgent, hostile: HostileAgent) -> None:
    hostile.set_behaviour(malformed(MALFORMED_TEXT + "\x1b[2J<b>bold</b>"))
    outcome = await run_battle(green, hostile.served_url, battle_config())
    attempts = assert_completed(outcome, green, attempts=2)
    assert_no_infrastructure_errors(attempts)
    for attempt in attempts:
        assert failure_of(attempt)[0] == "format_error"
        reply = attempt["malformed_reply"]
        assert reply["text"] == MALFORMED_TEXT + "\ufffd[2J<b>bold</b>" and reply["source"] == "reply"
        assert reply["step"] == 1 and not reply["truncated"]
    summary_md = (green.run_dir(outcome.battle_id) / "summary.md").read_text(encoding="utf-8")
    assert summary_md.count(f"Reply that is not an action (turn {attempts[0]['malformed_reply']['turn']}") == 2
    assert "\x1b" not in summary_md
    for path in trajectory_paths(green, outcome.battle_id):
        last = check_trajectory_file(path)[-1]
        assert last["format_error"] is True and last["content"].startswith(MALFORMED_TEXT)


@pytest.mark.timeout(240)
async def test_a_reply_over_the_byte_cap_keeps_its_first_bytes(green: GreenAgent, hostile: HostileAgent) -> None:
    hostile.set_behaviour(big_respond(2 * MB))
    outcome = await run_battle(green, hostile.served_url, battle_config(), timeout_s=150)
    attempts = assert_completed(outcome, green, attempts=2)
    for attempt in attempts:
        assert failure_of(attempt)[0] == "format_error"
        reply = attempt["malformed_reply"]
        assert reply["source"] == "http_body" and reply["truncated"] and reply["text"].startswith('{"')
        assert "AAAA" in reply["text"] and len(reply["text"]) == 4096

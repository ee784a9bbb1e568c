"""Hostile replies end to end: whatever the white agent answers, the attempt is the agent's failure (never an
infrastructure error), the battle completes, and the green agent stays responsive with bounded memory.

Each test runs a real battle (k=2) on the green agent subprocess against the hostile agent and asserts the affected
attempts' category AND fault author, that the battle completed with a result and summary.json, and that no attempt
was blamed on the infrastructure.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.adversarial.conftest import battle_config
from tests.adversarial.harness import (
    MB,
    GreenAgent,
    HealthPoller,
    RssSampler,
    assert_completed,
    assert_no_infrastructure_errors,
    check_trajectory_file,
    failure_of,
    mentions_reply_limit,
    run_battle,
    trajectory_paths,
)
from tests.adversarial.hostile_agent import (
    PATHOLOGICAL_UNITS,
    HostileAgent,
    big_respond,
    deep_nesting_action,
    endless_stream,
    huge_integer_action,
    malformed,
    pathological_reply,
    raw_surrogate_in_text,
    sleep_then,
    surrogate_in_respond,
    surrogate_in_tool_argument,
)

RSS_BOUND = 300 * MB
"""Endless stream: the green agent's main process may grow by at most this much over its idle baseline."""
RSS_KILL = 500 * MB
"""Endless stream safety valve: above baseline + this the green agent is killed (the test has failed)."""


def _agent_failures(attempts: list[dict[str, Any]], category: str) -> None:
    """Every attempt failed with ``category``, blamed on the white agent."""
    seen = [failure_of(a)[:2] for a in attempts]
    assert all(a["outcome"] == "failure" for a in attempts), [(a["outcome"], failure_of(a)) for a in attempts]
    assert seen == [(category, "white_agent")] * len(attempts), [failure_of(a) for a in attempts]


@pytest.mark.timeout(180)
async def test_malformed_reply_is_the_agents_format_error(green: GreenAgent, hostile: HostileAgent) -> None:
    """Control: a reply without an action is the agent's format_error (the harness's own sanity check)."""
    hostile.set_behaviour(malformed())
    outcome = await run_battle(green, hostile.served_url, battle_config())
    attempts = assert_completed(outcome, green, attempts=2)
    assert_no_infrastructure_errors(attempts)
    _agent_failures(attempts, "format_error")
    assert len({r.context_id for r in hostile.message_turns()}) == 2, "each attempt must use a fresh context"


@pytest.mark.timeout(180)
async def test_sleep_past_the_turn_limit_is_the_agents_timeout(green: GreenAgent, hostile: HostileAgent) -> None:
    hostile.set_behaviour(sleep_then(12.0))
    outcome = await run_battle(green, hostile.served_url, battle_config(turn_timeout_s=2.0))
    attempts = assert_completed(outcome, green, attempts=2)
    assert_no_infrastructure_errors(attempts)
    _agent_failures(attempts, "timeout")
    for attempt in attempts:
        assert "turn" in failure_of(attempt)[2].lower(), failure_of(attempt)
        assert attempt["duration_s"] < 10, attempt["duration_s"]


@pytest.mark.timeout(180)
async def test_action_with_a_5000_digit_integer_is_the_agents_format_error(
    green: GreenAgent, hostile: HostileAgent
) -> None:
    hostile.set_behaviour(huge_integer_action(5000))
    outcome = await run_battle(green, hostile.served_url, battle_config())
    attempts = assert_completed(outcome, green, attempts=2)
    assert_no_infrastructure_errors(attempts)
    _agent_failures(attempts, "format_error")


@pytest.mark.timeout(180)
async def test_action_nested_5000_levels_is_the_agents_format_error(green: GreenAgent, hostile: HostileAgent) -> None:
    hostile.set_behaviour(deep_nesting_action(5000))
    outcome = await run_battle(green, hostile.served_url, battle_config())
    attempts = assert_completed(outcome, green, attempts=2)
    assert_no_infrastructure_errors(attempts)
    _agent_failures(attempts, "format_error")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", sorted(PATHOLOGICAL_UNITS))
async def test_pathological_400kb_reply_is_parsed_quickly_off_the_loop(
    green: GreenAgent, hostile: HostileAgent, kind: str
) -> None:
    hostile.set_behaviour(pathological_reply(kind))
    async with HealthPoller(green, interval_s=0.02, timeout_s=2.0) as health:
        outcome = await run_battle(green, hostile.served_url, battle_config(), timeout_s=120, unresponsive_s=10)
    attempts = assert_completed(outcome, green, attempts=2)
    durations = [a["duration_s"] for a in attempts]
    print(f"\n[pathological {kind}] attempt durations {durations} s; {health.summary()}")
    assert_no_infrastructure_errors(attempts)
    _agent_failures(attempts, "format_error")
    # Off the loop: every /health poll is answered within the poller's 2 s limit while the reply is parsed (a hang
    # guard, not a speed goal; the speed goals, attempts under 10 s and /health under 1 s, are in
    # benchmarks/bench_pathological_parse.py).
    assert health.failures == 0, health.summary()


@pytest.mark.timeout(240)
async def test_10mb_reply_is_the_agents_format_error_naming_the_limit(green: GreenAgent, hostile: HostileAgent) -> None:
    """A valid respond action of 10 MB: only the reply cap (max_reply_bytes, default 1 MiB) refuses it."""
    hostile.set_behaviour(big_respond(10 * MB))
    outcome = await run_battle(green, hostile.served_url, battle_config(), timeout_s=150)
    attempts = assert_completed(outcome, green, attempts=2)
    assert_no_infrastructure_errors(attempts)
    _agent_failures(attempts, "format_error")
    for attempt in attempts:
        detail = failure_of(attempt)[2]
        assert mentions_reply_limit(detail), f"the detail does not mention the reply limit: {detail[:300]!r}"


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_endless_chunked_stream_keeps_the_green_agents_memory_bounded(
    green_factory: Any, hostile: HostileAgent
) -> None:
    """An endless fast chunked reply (64 KB chunks, no content-length) to both attempts at once: the green agent's
    main process RSS stays under baseline + 300 MB, and the attempts are the agent's format_error naming the limit."""
    green: GreenAgent = green_factory()
    baseline = green.main_rss()
    baseline_tree = green.tree_rss()
    hostile.set_behaviour(endless_stream(64 * 1024))
    with RssSampler(green, interval_s=0.05, kill_above=baseline + RSS_KILL) as rss:
        try:
            outcome = await run_battle(green, hostile.served_url, battle_config(turn_timeout_s=20.0), timeout_s=120)
        except AssertionError:
            if not rss.killed:
                raise
            outcome = None
    print(
        f"\n[endless stream] main RSS baseline {baseline / MB:.0f} MB, peak {rss.peak_main / MB:.0f} MB "
        f"(+{(rss.peak_main - baseline) / MB:.0f} MB, bound +{RSS_BOUND / MB:.0f} MB); tree baseline "
        f"{baseline_tree / MB:.0f} MB, peak {rss.peak_tree / MB:.0f} MB; {len(rss.samples)} samples; "
        f"the hostile agent pushed {hostile.stream_bytes / MB:.1f} MB in {hostile.streams_started} streams"
        + ("; the green agent was KILLED by the safety valve" if rss.killed else "")
    )
    assert not rss.killed, (
        f"the green agent's RSS passed baseline + {RSS_KILL / MB:.0f} MB while reading an "
        f"endless reply (it reads without a cap)"
    )
    assert rss.peak_main - baseline < RSS_BOUND, f"peak RSS grew by {(rss.peak_main - baseline) / MB:.0f} MB"
    assert outcome is not None
    attempts = assert_completed(outcome, green, attempts=2)
    assert_no_infrastructure_errors(attempts)
    _agent_failures(attempts, "format_error")
    for attempt in attempts:
        detail = failure_of(attempt)[2]
        assert mentions_reply_limit(detail), f"the detail does not mention the reply limit: {detail[:300]!r}"


SURROGATE_CASES = {
    "respond_content": surrogate_in_respond,
    "tool_argument": surrogate_in_tool_argument,
    "raw_in_text": raw_surrogate_in_text,
}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("case", sorted(SURROGATE_CASES))
async def test_lone_surrogates_never_break_the_attempt_or_its_trajectory(
    green: GreenAgent, hostile: HostileAgent, case: str
) -> None:
    """Turn 1 carries a lone surrogate (escaped in the action JSON, in a tool argument, or raw in the text part);
    turn 2 is malformed. The attempt must go on past turn 1 (surrogates replaced) and end as the agent's
    format_error at step 2, and every trajectory file must be valid UTF-8 JSON lines without lone surrogates."""
    hostile.set_behaviour(SURROGATE_CASES[case]())
    outcome = await run_battle(green, hostile.served_url, battle_config())
    attempts = assert_completed(outcome, green, attempts=2)
    assert_no_infrastructure_errors(attempts)
    _agent_failures(attempts, "format_error")
    second_turns = {r.context_id for r in hostile.message_turns() if r.turn == 2}
    assert len(second_turns) == 2, "each attempt must go on to a second turn after the surrogate"
    assert all(a["steps"] >= 2 for a in attempts), [a["steps"] for a in attempts]
    paths = trajectory_paths(green, outcome.battle_id)
    assert len(paths) == 2, paths
    for path in paths:
        check_trajectory_file(path)
        assert "SURROGATE-MARKER" in path.read_text(encoding="utf-8"), f"{path.name} lacks the surrogate turn"

"""The divergence of a task's attempts (green_agent/engine/divergence.py): turns, the first turn where passing and
failing attempts part, the flip rate, and the battle's summary of them. Properties over generated attempts."""

from __future__ import annotations

from itertools import combinations
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from green_agent.engine.divergence import (
    MAX_LISTED_TASKS,
    MAX_TURNS,
    NO_TURN,
    REPLY,
    TaskConsistency,
    first_divergence,
    flip_rate,
    summarize_consistency,
    turn_signatures,
)

TURN = st.sampled_from(["reply", "call:a", "call:b", "call:c"])
TURNS = st.lists(TURN, max_size=8)


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [{"id": "x", "name": name, "arguments": arguments}]}


def test_turns_are_the_agent_messages_only_with_calls_named_by_name_and_arguments() -> None:
    messages: list[Any] = [
        {"role": "assistant", "content": "Hi! How can I help you today?"},
        {"role": "user", "content": "cancel order 7"},
        _call("cancel_order", order_id="7", reason="no longer needed"),
        {"role": "tool", "content": "{}", "tool_call_id": "x"},
        "not a message",
        {"role": "assistant", "content": "Done."},
    ]
    turns = turn_signatures(messages)
    assert len(turns) == 3
    assert turns[0] == turns[2] == REPLY
    assert turns[1].startswith("call:")


def test_argument_order_does_not_matter_values_and_names_do() -> None:
    (same,) = turn_signatures([_call("f", a=1, b=2)])
    assert turn_signatures([_call("f", b=2, a=1)]) == [same]
    assert turn_signatures([_call("f", a=1, b=3)]) != [same]
    assert turn_signatures([_call("g", a=1, b=2)]) != [same]


def test_replies_are_the_same_turn_whatever_their_wording() -> None:
    a = turn_signatures([{"role": "assistant", "content": "Your refund is $45."}])
    b = turn_signatures([{"role": "assistant", "content": "I refunded 50 dollars"}])
    assert a == b == [REPLY]


def test_turns_are_bounded_whatever_the_conversation() -> None:
    huge = [_call("f", blob="x" * 10_000, i=i) for i in range(MAX_TURNS + 50)]
    turns = turn_signatures(huge)
    assert len(turns) == MAX_TURNS
    assert all(len(turn) < 40 for turn in turns)


def test_hostile_tool_calls_do_not_raise() -> None:
    odd: list[Any] = [
        {"role": "assistant", "tool_calls": ["not a call", {"name": ["list"], "arguments": float("nan")}]},
        {"role": "assistant", "tool_calls": {"a": 1}},
        {"role": "assistant", "tool_calls": [{"name": "f", "arguments": {1: object()}}]},
    ]
    assert len(turn_signatures(odd)) == 3


@settings(deadline=None)  # no timed assertions: a loaded machine must not fail an example
@given(turns=TURNS, n_pass=st.integers(1, 4), n_fail=st.integers(1, 4))
def test_identical_attempts_never_diverge(turns: list[str], n_pass: int, n_fail: int) -> None:
    numbers = range(1, n_pass + n_fail + 1)
    passed = {n: n <= n_pass for n in numbers}
    assert first_divergence(dict.fromkeys(numbers, turns), passed) is None


@settings(deadline=None)  # no timed assertions: a loaded machine must not fail an example
@given(attempts=st.lists(st.tuples(TURNS, st.booleans()), min_size=1, max_size=6))
def test_the_marker_is_the_first_turn_where_a_passing_and_a_failing_attempt_differ(
    attempts: list[tuple[list[str], bool]],
) -> None:
    turns = {n: t for n, (t, _) in enumerate(attempts, start=1)}
    passed = {n: ok for n, (_, ok) in enumerate(attempts, start=1)}
    found = first_divergence(turns, passed)

    def at(n: int, i: int) -> str:
        return turns[n][i] if i < len(turns[n]) else NO_TURN

    pairs = [(p, f) for p in passed if passed[p] for f in passed if not passed[f]]
    longest = max(len(t) for t in turns.values())
    differing = [i for i in range(longest) if any(at(p, i) != at(f, i) for p, f in pairs)]
    if not differing:
        assert found is None
        return
    assert found is not None
    assert found.turn == differing[0] + 1
    assert passed[found.passing_attempt] and not passed[found.failing_attempt]
    assert at(found.passing_attempt, differing[0]) != at(found.failing_attempt, differing[0])
    earlier = [(p, f) for p, f in pairs if at(p, differing[0]) != at(f, differing[0])]
    assert (found.passing_attempt, found.failing_attempt) == min(earlier)


@settings(deadline=None)  # no timed assertions: a loaded machine must not fail an example
@given(attempts=st.lists(st.tuples(TURNS, st.booleans()), min_size=1, max_size=6))
def test_no_divergence_without_both_outcomes(attempts: list[tuple[list[str], bool]]) -> None:
    turns = {n: t for n, (t, _) in enumerate(attempts, start=1)}
    all_pass = dict.fromkeys(turns, True)
    all_fail = dict.fromkeys(turns, False)
    assert first_divergence(turns, all_pass) is None
    assert first_divergence(turns, all_fail) is None


def test_an_attempt_that_ended_earlier_differs_at_the_turn_after_its_end() -> None:
    found = first_divergence({1: ["call:a"], 2: ["call:a", "reply"]}, {1: True, 2: False})
    assert found is not None and (found.turn, found.passing_attempt, found.failing_attempt) == (2, 1, 2)


def test_attempts_without_known_turns_or_outcome_are_not_compared() -> None:
    assert first_divergence({1: ["reply"]}, {1: True, 2: False}) is None
    assert first_divergence({1: ["reply"], 2: ["call:a"]}, {1: True}) is None


@settings(deadline=None)  # no timed assertions: a loaded machine must not fail an example
@given(outcomes=st.lists(st.booleans(), max_size=12))
def test_flip_rate_is_the_share_of_pairs_with_different_outcomes(outcomes: list[bool]) -> None:
    rate = flip_rate(outcomes)
    if len(outcomes) < 2:
        assert rate is None
        return
    pairs = list(combinations(outcomes, 2))
    expected = sum(1 for a, b in pairs if a != b) / len(pairs)
    assert rate is not None and abs(rate - expected) < 1e-12
    assert 0.0 <= rate <= 1.0
    assert (rate == 0.0) == (len(set(outcomes)) == 1)


def test_flip_rate_figures() -> None:
    assert flip_rate([True, False]) == 1.0
    assert flip_rate([True, True, False, False]) == 4 / 6
    assert flip_rate([True, True, True, False]) == 0.5
    assert flip_rate([True] * 4) == 0.0


def _task(key: str, rate: float | None) -> TaskConsistency:
    return TaskConsistency(task_key=key, task_id=key, attempts=4, successes=2, flip_rate=rate)


def test_summary_lists_mixed_tasks_least_consistent_first_and_bounded() -> None:
    tasks = [_task(f"d/s/{i:04d}", 0.5 if i % 2 else 0.667) for i in range(MAX_LISTED_TASKS + 30)]
    tasks += [_task("d/s/steady", 0.0), _task("d/s/once", None)]
    summary = summarize_consistency(tasks)
    assert summary is not None
    assert summary.tasks == MAX_LISTED_TASKS + 31
    assert summary.mixed_tasks == MAX_LISTED_TASKS + 30
    assert len(summary.least_consistent) == MAX_LISTED_TASKS and summary.not_listed == 30
    rates = [t.flip_rate for t in summary.least_consistent]
    assert rates == sorted(rates, key=lambda r: -(r or 0.0))
    assert summary.least_consistent[0].task_key == "d/s/0000"
    assert "d/s/steady" not in {t.task_key for t in summary.least_consistent}


def test_no_summary_when_no_task_has_two_attempts() -> None:
    assert summarize_consistency([_task("d/s/0", None)]) is None
    assert summarize_consistency([]) is None

"""Certify's within-task stop for pass^k claims (green_agent/statistics/certify_stop.py, issue 28): the skip rule,
the observation a stopped task gives the sequence, and a summary that stays unbiased under the stop."""

from __future__ import annotations

import itertools
import math

import pytest

from green_agent.statistics import summarize_trials
from green_agent.statistics.certification import ordered_observations
from green_agent.statistics.certify_stop import (
    SKIP_REASON,
    attempts_to_skip,
    first_failure,
    first_failure_summary,
    leading_successes,
    stopped_task_value,
    task_stop_record,
)

K = 4


def test_the_skip_rule_skips_every_unrecorded_attempt_after_a_failure() -> None:
    assert attempts_to_skip({}, K) == []
    assert attempts_to_skip({1: True, 2: True}, K) == []
    assert attempts_to_skip({1: False}, K) == [2, 3, 4]
    assert attempts_to_skip({1: True, 2: False}, K) == [3, 4]
    assert attempts_to_skip({1: True, 2: None}, K) == []  # a harness error is not the agent's failure
    assert attempts_to_skip({1: None, 2: False}, K) == [3, 4]
    assert attempts_to_skip({1: True, 3: False}, K) == [2, 4]  # attempt 2 dropped (--retry-infra): not re-run
    assert attempts_to_skip({1: True, 2: True, 3: True, 4: False}, K) == []
    assert first_failure({3: False, 1: True, 2: False}) == 2


def test_a_stopped_task_enters_the_sequence_as_its_pass_k_indicator() -> None:
    assert stopped_task_value([False], K) == 0.0
    assert stopped_task_value([True, True, False], K) == 0.0
    assert stopped_task_value([True] * K, K) == 1.0
    assert stopped_task_value([True, True], K) is None  # not known yet: the sequence waits on it
    assert stopped_task_value([True, None, True, True], K) is None  # 3 scored: halts as before
    assert leading_successes([True, None, True, False, True]) == (2, True)
    order = ["a", "b", "c", "d"]
    outcomes = {"a": [True] * K, "b": [False], "c": [True, True], "d": [False]}
    assert ordered_observations(order, outcomes, K, K, stop_at_failure=True) == ([1.0, 0.0], "c")
    # Without the stop (the old rule) a one-attempt task is incomplete: the sequence waits on "b" forever.
    assert ordered_observations(order, outcomes, K, K) == ([1.0], "b")


def test_the_record_lists_skipped_attempts_with_the_reason() -> None:
    stop = task_stop_record({"a": {1: True, 2: False}, "b": {1: True, 2: True}, "c": {1: True}}, K)
    assert stop.attempts_skipped == 2 and stop.tasks_stopped == 1 and stop.tasks_cut == 2
    (skipped,) = stop.skipped
    assert (skipped.task_key, skipped.failed_attempt, skipped.attempts, skipped.reason) == ("a", 2, [3, 4], SKIP_REASON)
    assert "certify_task_failed" in stop.note and "not failures of the agent" in stop.note


def test_the_summary_counts_a_stopped_task_as_zero_in_pass_k_and_reads_pass_j_from_leading_passes() -> None:
    trials: dict[str, list[bool | None]] = {
        "a": [True] * K,
        "b": [False],
        "c": [True, False],
        "d": [True, True, True, False],
        "e": [],
    }
    summary = first_failure_summary(trials, K, seed=0, note="stopped")
    hats = [m.pass_hat_mean for m in summary.macro]
    assert hats == pytest.approx([3 / 4, 2 / 4, 2 / 4, 1 / 4])  # "e" never ran: out of every j
    assert [m.coverage for m in summary.macro] == [4, 4, 4, 4]
    assert summary.macro[0].pass_at_mean == pytest.approx(3 / 4)
    assert all(m.pass_at_mean is None and m.pass_at_ci_low is None for m in summary.macro[1:])  # not estimable
    assert summary.interval_note is not None and summary.interval_note.endswith("stopped")
    task_c = summary.task("c")
    assert task_c is not None and task_c.pass_hat == (1.0, 0.0, 0.0, 0.0) and (task_c.n, task_c.c) == (2, 1)
    # The usual summary leaves the tasks stopped early out of pass^4 (n < 4): 1 of 2, the bias this one removes.
    naive = summarize_trials(trials, k_max=K)
    assert naive.macro[K - 1].pass_hat_mean == 0.5 and naive.macro[K - 1].coverage == 2
    low, high = summary.macro[K - 1].pass_hat_ci_low, summary.macro[K - 1].pass_hat_ci_high
    assert low is not None and high is not None and low < 0.25 < high


def test_a_task_cut_by_the_battles_stop_is_known_only_up_to_its_attempts() -> None:
    trials: dict[str, list[bool | None]] = {"a": [True, True], "b": [False], "c": [True] * K}
    summary = first_failure_summary(trials, K, seed=0)
    assert [m.coverage for m in summary.macro] == [3, 3, 2, 2]
    assert [m.pass_hat_mean for m in summary.macro] == pytest.approx([2 / 3, 2 / 3, 1 / 2, 1 / 2])


@pytest.mark.parametrize("p", [0.2, 0.5, 0.9])
def test_leading_pass_indicators_are_unbiased_under_the_stop_and_the_run_mean_is_not(p: float) -> None:
    """Exact expectation over every outcome sequence of one task (attempts after a failure not run)."""
    expected = [0.0] * K
    run_mean = 0.0
    for outcomes in itertools.product([True, False], repeat=K):
        chance = math.prod(p if o else 1 - p for o in outcomes)
        run = list(outcomes[: outcomes.index(False) + 1]) if False in outcomes else list(outcomes)
        summary = first_failure_summary({"t": list(run)}, K, seed=0)
        for j in range(K):
            value = summary.macro[j].pass_hat_mean
            assert value is not None
            expected[j] += chance * value
        run_mean += chance * sum(run) / len(run)
    assert expected == pytest.approx([p**j for j in range(1, K + 1)])
    assert not math.isclose(run_mean, p, abs_tol=1e-3)  # pass^1 over the attempts run would be biased

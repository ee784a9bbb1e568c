"""Sequential certification (issue 28): order, observations, decisions and their agreement with the sequence."""

from __future__ import annotations

import numpy as np
import pytest

from green_agent.statistics import betting_confidence_sequence
from green_agent.statistics.certification import (
    build_certification,
    certification_order,
    certify_values,
    ordered_observations,
    parse_certify_claim,
    sequential_decisions,
    task_value,
)


def test_claim_parses_and_names_the_form() -> None:
    assert parse_certify_claim("pass^4>=0.8") == (4, 0.8)
    assert parse_certify_claim(" pass^1 >= .5 ") == (1, 0.5)
    with pytest.raises(ValueError, match=r"pass\^4>=0\.8"):
        parse_certify_claim("pass@4>0.8")


def test_order_is_seeded_and_independent_of_input_order() -> None:
    keys = [f"retail/{i}" for i in range(20)]
    first = certification_order(keys, 7)
    assert first == certification_order(list(reversed(keys)), 7)
    assert sorted(first) == sorted(keys)
    assert first != certification_order(keys, 8)


def test_observations_enter_in_order_only() -> None:
    order = ["a", "b", "c"]
    outcomes = {"a": [True, True], "c": [True, True], "b": [True]}  # c finished before b: it must wait
    values, waiting = ordered_observations(order, outcomes, k=2, j=2)
    assert values == [1.0] and waiting == "b"
    outcomes["b"] = [True, False]
    values, waiting = ordered_observations(order, outcomes, k=2, j=2)
    assert values == [1.0, 0.0, 1.0] and waiting is None


def test_too_few_scored_attempts_halt_the_sequence() -> None:
    assert task_value([True, None, True, True], 4) is None
    assert task_value([True, None, True, True], 2) == 1.0
    values, waiting = ordered_observations(["a", "b"], {"a": [None, True], "b": [True, True]}, k=2, j=2)
    assert values == [] and waiting == "a"


def test_decisions_agree_with_the_confidence_sequence() -> None:
    rng = np.random.default_rng(3)
    for _ in range(30):
        x = (rng.random(40) < rng.uniform(0.2, 0.9)).astype(float)
        for threshold in (0.3, 0.5, 0.7):
            code, used = sequential_decisions(x, threshold)
            cs = betting_confidence_sequence(x[: used[0]])
            if code[0] == 1:
                assert cs.low[-1] >= threshold - 1e-5
            elif code[0] == -1:
                assert cs.high[-1] <= threshold + 1e-5
            else:
                assert used[0] == 40 and cs.low[-1] <= threshold + 1e-5 <= cs.high[-1] + 2e-5


def test_clear_cases_decide_early() -> None:
    assert certify_values([1.0] * 15, threshold=0.5, confidence=0.95, budget_exhausted=False) == "certified"
    assert certify_values([0.0] * 15, threshold=0.5, confidence=0.95, budget_exhausted=False) == "refuted"
    assert certify_values([1.0, 0.0], threshold=0.5, confidence=0.95, budget_exhausted=False) is None
    assert certify_values([1.0, 0.0], threshold=0.5, confidence=0.95, budget_exhausted=True) == "inconclusive"


def test_error_rate_at_the_threshold_is_bounded_where_peeking_is_not() -> None:
    """Truth exactly at the threshold: any decision is wrong. The sequence decides <= alpha (+ MC error) of the time;
    re-checking a fixed-sample normal interval after every task does not."""
    rng = np.random.default_rng(11)
    x = (rng.random((2000, 60)) < 0.5).astype(float)
    code, _ = sequential_decisions(x, 0.5, 0.95)
    assert (code != 0).mean() <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / 2000)
    t = np.arange(1, 61)
    mean = np.cumsum(x, axis=1) / t
    half = 1.96 * np.sqrt(np.maximum(mean * (1 - mean), 1e-12) / t)
    peek = ((mean - half > 0.5) | (mean + half < 0.5))[:, 4:].any(axis=1)
    assert peek.mean() > 0.1


def test_summary_object_states_the_sequence_and_interval() -> None:
    cert = build_certification(
        claim="pass^4 >= 0.5",
        j=4,
        threshold=0.5,
        confidence=0.95,
        values=[1.0] * 12,
        decision="certified",
        tasks_budget=20,
        attempts_used=52,
        attempts_fixed_design=80,
        order_seed=0,
        order=[str(i) for i in range(20)],
        waiting_for=None,
    )
    assert cert.sequence_low is not None and cert.sequence_low > 0.5
    assert cert.interval_low is not None and cert.interval_low >= cert.sequence_low
    assert "not re-read" in cert.interval_note

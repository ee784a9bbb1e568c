"""compare_trials: pairing by task, paired differences and intervals, exact sign / McNemar test."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import binomtest

from green_agent.statistics import TrialsComparison, compare_trials, pass_hat_k

T, F = True, False


def test_tasks_on_one_side_only_are_listed_not_dropped_silently() -> None:
    result = compare_trials({"x": [T], "y": [F], "only_a": [T]}, {"x": [F], "y": [F], "only_b": [T], "zz": [F]})
    assert result.tasks_in_both == 2
    assert result.only_in_a == ["only_a"]
    assert result.only_in_b == ["only_b", "zz"]


def test_single_trial_outcomes_give_the_exact_mcnemar_p_value() -> None:
    a = {f"t{i}": [T] for i in range(10)}
    b = {f"t{i}": [F] for i in range(8)} | {"t8": [T], "t9": [T]}
    a["t9"] = [F]  # B better on t9, tie on t8
    result = compare_trials(a, b)
    sr = result.success_rate
    assert sr is not None and sr is result.per_j[0]
    assert (sr.a_better, sr.b_better, sr.ties) == (8, 1, 1)
    assert sr.sign_test_p_value == pytest.approx(0.0390625)
    assert sr.sign_test_p_value == pytest.approx(binomtest(8, 9, 0.5).pvalue)
    assert sr.pass_hat_diff == pytest.approx(0.7)
    assert sr.pass_hat_a == pytest.approx(0.9) and sr.pass_hat_b == pytest.approx(0.2)


def test_paired_differences_per_j() -> None:
    a = {"p": [T, T, T, F], "q": [T, F, F, F]}
    b = {"p": [T, F, F, F], "q": [T, T, F, F]}
    result = compare_trials(a, b, n_bootstrap=300)
    row = result.at(2)
    assert row is not None and row.tasks_paired == 2
    expected = ((pass_hat_k(4, 3, 2) - pass_hat_k(4, 1, 2)) + (pass_hat_k(4, 1, 2) - pass_hat_k(4, 2, 2))) / 2
    assert row.pass_hat_diff == pytest.approx(expected)
    assert row.pass_hat_a is not None and row.pass_hat_b is not None
    assert row.pass_hat_diff == pytest.approx(row.pass_hat_a - row.pass_hat_b)
    assert result.k_max == 4 and result.at(5) is None


def test_identical_agents_differ_by_zero_with_a_zero_width_interval_and_no_p_value() -> None:
    rng = np.random.default_rng(0)
    trials = {f"t{i}": [bool(x) for x in rng.random(5) < 0.6] for i in range(40)}
    result = compare_trials(trials, trials)
    for row in result.per_j:
        assert row.pass_hat_diff == 0.0
        assert (row.pass_hat_diff_ci_low, row.pass_hat_diff_ci_high) == (0.0, 0.0)
        assert row.sign_test_p_value is None and row.ties == 40


def test_clear_improvement_has_an_interval_above_zero() -> None:
    rng = np.random.default_rng(1)
    p = rng.random(200)
    a = {f"t{i}": [bool(x) for x in rng.random(4) < min(1.0, p[i] + 0.3)] for i in range(200)}
    b = {f"t{i}": [bool(x) for x in rng.random(4) < p[i]] for i in range(200)}
    row = compare_trials(a, b, seed=3).at(1)
    assert row is not None and row.pass_hat_diff_ci_low is not None
    assert row.pass_hat_diff_ci_low > 0
    assert row.sign_test_p_value is not None and row.sign_test_p_value < 1e-6
    assert -1.0 <= row.pass_hat_diff_ci_low <= row.pass_hat_diff_ci_high <= 1.0


def test_pairing_needs_enough_trials_on_both_sides() -> None:
    result = compare_trials({"x": [T, T, T], "y": [T, T, T]}, {"x": [T, None, T], "y": [F]})
    assert result.k_max == 2
    assert result.at(1).tasks_paired == 2  # type: ignore[union-attr]
    assert result.at(2).tasks_paired == 1  # type: ignore[union-attr]
    assert result.at(2).pass_hat_diff_ci_low is None  # type: ignore[union-attr]


def test_comparison_is_deterministic_and_json_safe() -> None:
    a = {"x": [T, F, T], "y": [F, F, T], "z": [T, T, T]}
    b = {"x": [F, F, T], "y": [T, F, T], "z": [T, F, T]}
    one, two = compare_trials(a, b, seed=9), compare_trials(a, b, seed=9)
    assert one == two
    text = json.dumps(one.model_dump(mode="json"))
    assert TrialsComparison.model_validate_json(text) == one


def test_no_common_tasks() -> None:
    result = compare_trials({"a": [T]}, {"b": [T]})
    assert result.k_max == 0 and result.per_j == [] and result.success_rate is None


def test_bad_input_names_the_side() -> None:
    with pytest.raises(ValueError, match=r"^b\['x'\]\[0\] must be True, False or None"):
        compare_trials({"x": [T]}, {"x": [1]})
    with pytest.raises(ValueError, match=r"^a must be a mapping"):
        compare_trials([T], {"x": [T]})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^k_max must be"):
        compare_trials({"x": [T]}, {"x": [T]}, k_max=0)
    with pytest.raises(ValueError, match=r"^confidence must be"):
        compare_trials({"x": [T]}, {"x": [T]}, confidence=0)

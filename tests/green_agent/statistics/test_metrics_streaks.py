"""The seed's order-dependent per-task metrics: strict first-k and the k/2 streak, with infrastructure errors."""

from __future__ import annotations

import numpy as np
import pytest

from green_agent.statistics import first_k_all_pass, has_success_streak, longest_success_streak, pass_hat_k

T, F = True, False


def test_vector_1011() -> None:
    attempts = [T, F, T, T]
    assert first_k_all_pass(attempts, 4) is False
    assert has_success_streak(attempts, 2) is True
    assert longest_success_streak(attempts) == 2
    assert sum(attempts) / len(attempts) == 0.75
    assert pass_hat_k(4, 3, 2) == 0.5


def test_vector_1010_has_no_streak_of_two() -> None:
    attempts = [T, F, T, F]
    assert has_success_streak(attempts, 2) is False
    assert longest_success_streak(attempts) == 1


def test_guide_examples() -> None:
    assert first_k_all_pass([T, T, T, T], 4) is True
    assert first_k_all_pass([F, T, T, T], 4) is False
    assert has_success_streak([F, T, T, F], 2) is True
    assert has_success_streak([T, F, F, T], 2) is False
    assert has_success_streak([F, F, T, T], 2) is True


def test_strict_with_exactly_k_attempts_equals_pass_hat_k_being_one() -> None:
    for bits in range(16):
        attempts = [bool(bits >> i & 1) for i in range(4)]
        assert first_k_all_pass(attempts, 4) == (pass_hat_k(4, sum(attempts), 4) == 1.0)


def test_strict_looks_at_the_first_k_only() -> None:
    assert first_k_all_pass([T, T, F, F], 2) is True
    assert first_k_all_pass([F, T, T, T], 2) is False


def test_infrastructure_errors_are_removed_before_order_based_metrics() -> None:
    assert has_success_streak([T, None, T], 2) is True
    assert longest_success_streak([T, None, None, T, F, T]) == 2
    assert first_k_all_pass([None, T, T], 2) is True
    assert first_k_all_pass([T, None, F, T], 2) is False


def test_too_few_counted_attempts_is_undefined_not_a_pass_or_a_failure() -> None:
    assert first_k_all_pass([T, None, T], 3) is None
    assert has_success_streak([T, None], 2) is None
    assert has_success_streak([], 1) is None
    assert first_k_all_pass([None, None], 1) is None


def test_window_of_length_zero_is_rejected_not_a_pass() -> None:
    with pytest.raises(ValueError, match=r"^length must be an integer >= 1, got 0"):
        has_success_streak([F, F], 0)


def test_longest_streak_of_nothing_is_zero() -> None:
    assert longest_success_streak([]) == 0
    assert longest_success_streak([None, F]) == 0


def test_numpy_bool_arrays_are_accepted() -> None:
    assert has_success_streak(np.array([True, True, False]), 2) is True
    assert first_k_all_pass((np.bool_(True), np.bool_(True)), 2) is True


@pytest.mark.parametrize("bad", [[1, 0, 1], [T, 0.0], [T, "yes"], [T, np.int64(1)]])
def test_non_boolean_outcomes_are_rejected_with_their_index(bad: list[object]) -> None:
    index = next(i for i, v in enumerate(bad) if type(v) is not bool)
    with pytest.raises(ValueError, match=rf"^outcomes\[{index}\] must be True, False or None"):
        longest_success_streak(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["TTF", {T, F}, {"a": T}, b"\x01"])
def test_unordered_or_textual_outcomes_are_rejected(bad: object) -> None:
    with pytest.raises(ValueError, match=r"^outcomes must be an ordered sequence"):
        first_k_all_pass(bad, 1)  # type: ignore[arg-type]


def test_bad_k_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"^k must be an integer >= 1"):
        first_k_all_pass([T], 0)
    with pytest.raises(ValueError, match=r"^k must be an integer"):
        first_k_all_pass([T], 1.0)  # type: ignore[arg-type]

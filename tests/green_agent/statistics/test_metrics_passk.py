"""pass@k and pass^k: the vectors of docs/metrics.md, exactness, unbiasedness, large n and bad input."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from green_agent.statistics import pass_at_k, pass_hat_k


def exact_pass_at(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def exact_pass_hat(n: int, c: int, k: int) -> Fraction:
    return Fraction(math.comb(c, k), math.comb(n, k))


# --- vectors from docs/metrics.md ----------------------------------------------------------------------------------


def test_pass_at_2_of_5_with_2_successes_is_0_7() -> None:
    assert pass_at_k(5, 2, 2) == 0.7


@pytest.mark.parametrize(("n", "k"), [(200, 10), (10, 3), (7, 7), (50, 1)])
def test_one_success_gives_pass_at_k_equal_k_over_n(n: int, k: int) -> None:
    assert pass_at_k(n, 1, k) == pytest.approx(k / n, rel=1e-15)


def test_pass_at_10_of_200_with_one_success_is_0_05() -> None:
    assert pass_at_k(200, 1, 10) == pytest.approx(0.05, rel=1e-15)


@pytest.mark.parametrize(("n", "k"), [(10, 3), (5, 2), (100, 40)])
def test_one_failure_gives_pass_hat_k_equal_n_minus_k_over_n(n: int, k: int) -> None:
    assert pass_hat_k(n, n - 1, k) == pytest.approx((n - k) / n, rel=1e-15)


def test_pass_hat_3_of_10_with_9_successes_is_0_7() -> None:
    assert pass_hat_k(10, 9, 3) == 0.7


def test_n4_c3_pass_hat_curve() -> None:
    assert [pass_hat_k(4, 3, j) for j in range(1, 5)] == [0.75, 0.5, 0.25, 0.0]


def test_attempts_1011_pass_hat_2_is_one_half_and_1010_is_one_sixth() -> None:
    assert pass_hat_k(4, 3, 2) == 0.5
    assert pass_hat_k(4, 2, 2) == pytest.approx(1 / 6, rel=1e-15)


def test_scores_10100_as_five_trials() -> None:
    outcomes = [1, 0, 1, 0, 0]
    n, c = len(outcomes), sum(outcomes)
    assert c / n == 0.4
    assert pass_at_k(n, c, 2) == 0.7
    assert pass_hat_k(n, c, 2) == pytest.approx(0.1, rel=1e-15)


# --- definition edges ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "c", "k"), [(0, 0, 1), (3, 3, 4), (3, 0, 4), (1, 1, 2)])
def test_fewer_trials_than_k_is_undefined_not_one(n: int, c: int, k: int) -> None:
    assert pass_at_k(n, c, k) is None
    assert pass_hat_k(n, c, k) is None


def test_k1_is_the_success_rate_exactly() -> None:
    for n in range(1, 30):
        for c in range(n + 1):
            assert pass_at_k(n, c, 1) == c / n
            assert pass_hat_k(n, c, 1) == c / n


def test_certain_outcomes() -> None:
    assert pass_at_k(6, 0, 3) == 0.0
    assert pass_hat_k(6, 6, 3) == 1.0
    assert pass_at_k(6, 4, 3) == 1.0  # n - c = 2 < k: every 3-subset holds a success
    assert pass_hat_k(6, 2, 3) == 0.0  # c < k


def test_small_n_values_are_the_correctly_rounded_exact_ratio() -> None:
    for n in range(1, 16):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == float(exact_pass_at(n, c, k))
                assert pass_hat_k(n, c, k) == float(exact_pass_hat(n, c, k))


@pytest.mark.parametrize(("n", "k", "p"), [(2, 2, 0.5), (5, 3, 0.3), (8, 4, 0.9), (16, 16, 0.7)])
def test_estimators_are_unbiased_over_the_binomial(n: int, k: int, p: float) -> None:
    pmf = [math.comb(n, c) * p**c * (1 - p) ** (n - c) for c in range(n + 1)]
    expected_hat = math.fsum(w * pass_hat_k(n, c, k) for c, w in enumerate(pmf))
    expected_at = math.fsum(w * pass_at_k(n, c, k) for c, w in enumerate(pmf))
    assert expected_hat == pytest.approx(p**k, abs=1e-12)
    assert expected_at == pytest.approx(1 - (1 - p) ** k, abs=1e-12)


def test_plug_in_is_biased_where_the_estimator_is_not() -> None:
    # n = 2, p = 1/2, k = 2: E[(c/n)^2] = 0.375 but p^2 = 0.25; pass^2 averages to 0.25.
    pmf = {0: 0.25, 1: 0.5, 2: 0.25}
    plug_in = sum(w * (c / 2) ** 2 for c, w in pmf.items())
    unbiased = sum(w * pass_hat_k(2, c, 2) for c, w in pmf.items())
    assert plug_in == 0.375
    assert unbiased == 0.25


# --- large n -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("c", "k"), [(1, 10), (3, 10), (500_000, 10), (999_990, 10), (7, 1)])
def test_large_n_pass_at_k_matches_exact_arithmetic(c: int, k: int) -> None:
    n = 10**6
    assert pass_at_k(n, c, k) == pytest.approx(float(exact_pass_at(n, c, k)), rel=1e-12)


@pytest.mark.parametrize(("c", "k"), [(999_997, 500_000), (999_000, 1000), (10**6 - 1, 999_999)])
def test_large_n_pass_hat_k_matches_exact_product(c: int, k: int) -> None:
    n = 10**6
    # C(c,k)/C(n,k) = prod_{m=0}^{n-c-1} (n-k-m)/(n-m): few terms when n - c is small.
    exact = Fraction(1)
    for m in range(n - c):
        exact *= Fraction(n - k - m, n - m)
    assert pass_hat_k(n, c, k) == pytest.approx(float(exact), rel=1e-10)


def test_tiny_pass_at_k_keeps_relative_precision() -> None:
    # One success in a million trials: pass@1 = 1e-6 and pass@2 = 2e-6 with full relative precision.
    assert pass_at_k(10**6, 1, 2) == pytest.approx(2e-6, rel=1e-12)


def test_large_n_large_k_stays_in_range() -> None:
    # n - c = 600,000 >= k: a genuine product of 400,000 terms, true value extremely close to 1.
    assert 0.999 < pass_at_k(10**6, 400_000, 600_000) <= 1.0
    # True value is about 1e-9700: underflows to 0.0, never NaN or negative.
    assert pass_hat_k(10**6, 900_000, 200_000) == 0.0
    # A mid-range value through the log path: C(999000, 1000) / C(10^6, 1000) ~ exp(-1000 * 1000 / 10^6 ...).
    mid = pass_hat_k(10**6, 999_000, 1000)
    assert 0.3 < mid < 0.4


def test_numpy_integers_are_accepted() -> None:
    assert pass_at_k(np.int64(5), np.int32(2), np.uint8(2)) == 0.7


# --- bad input -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fn", [pass_at_k, pass_hat_k])
@pytest.mark.parametrize(
    ("args", "name"),
    [
        ((-1, 0, 1), "n"),
        ((3, 4, 1), "c"),
        ((3, -1, 1), "c"),
        ((3, 1, 0), "k"),
        ((3, 1, -2), "k"),
        ((3.0, 1, 1), "n"),
        ((3, 1.5, 1), "c"),
        ((3, 1, 2.0), "k"),
        ((3, True, 1), "c"),
        (("3", 1, 1), "n"),
        ((3, 1, None), "k"),
        ((3, 1, float("nan")), "k"),
    ],
)
def test_bad_counts_raise_value_error_naming_the_argument(fn, args, name) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=rf"^{name} must be"):
        fn(*args)


def test_c_above_n_message_states_the_range() -> None:
    with pytest.raises(ValueError, match=r"c must be an integer in \[0, n\] = \[0, 3\], got 4"):
        pass_hat_k(3, 4, 1)

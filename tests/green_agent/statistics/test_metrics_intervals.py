"""Wilson interval vectors, standard error and the seeded bootstrap interval."""

from __future__ import annotations

import math

import numpy as np
import pytest

from green_agent.statistics import bootstrap_mean_interval, standard_error, wilson_interval


def test_wilson_7_of_10() -> None:
    interval = wilson_interval(7, 10)
    assert interval is not None
    assert round(interval.low, 4) == 0.3968
    assert round(interval.high, 4) == 0.8922
    assert interval.method == "wilson" and interval.confidence == 0.95


def test_wilson_0_of_5_starts_exactly_at_zero() -> None:
    interval = wilson_interval(0, 5)
    assert interval is not None
    assert interval.low == 0.0
    assert round(interval.high, 4) == 0.4345


def test_wilson_is_symmetric_under_swapping_successes_and_failures() -> None:
    for n in (1, 5, 17, 100):
        for s in range(n + 1):
            a, b = wilson_interval(s, n), wilson_interval(n - s, n)
            assert a is not None and b is not None
            assert a.low == pytest.approx(1 - b.high, abs=1e-12)
            assert a.high == pytest.approx(1 - b.low, abs=1e-12)
    full = wilson_interval(5, 5)
    assert full is not None and full.high == 1.0


def test_wilson_widens_with_confidence_and_narrows_with_n() -> None:
    narrow, wide = wilson_interval(30, 60, 0.8), wilson_interval(30, 60, 0.99)
    assert narrow is not None and wide is not None
    assert wide.low < narrow.low and wide.high > narrow.high
    small, big = wilson_interval(5, 10), wilson_interval(500, 1000)
    assert small is not None and big is not None
    assert big.high - big.low < small.high - small.low


def test_wilson_of_no_trials_is_undefined() -> None:
    assert wilson_interval(0, 0) is None


@pytest.mark.parametrize(
    ("args", "name"),
    [
        ((6, 5), "successes"),
        ((-1, 5), "successes"),
        ((1, -5), "n"),
        ((1.0, 5), "successes"),
        ((1, 5, 1.0), "confidence"),
        ((1, 5, 0.0), "confidence"),
        ((1, 5, float("nan")), "confidence"),
        ((1, 5, "0.95"), "confidence"),
    ],
)
def test_wilson_bad_input(args: tuple[object, ...], name: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name} must be"):
        wilson_interval(*args)  # type: ignore[arg-type]


def test_standard_error() -> None:
    assert standard_error([1.0, 0.0, 1.0, 0.0]) == pytest.approx(math.sqrt(1 / 3) / 2)
    assert standard_error([0.5]) is None
    assert standard_error([]) is None
    with pytest.raises(ValueError, match="finite"):
        standard_error([0.5, float("nan")])


def test_bootstrap_interval_is_seeded_and_reproducible() -> None:
    values = np.random.default_rng(3).random(200)
    a = bootstrap_mean_interval(values, seed=5)
    b = bootstrap_mean_interval(values, seed=5)
    c = bootstrap_mean_interval(values, seed=6)
    assert a == b
    assert a != c
    assert a is not None and a.low < float(np.mean(values)) < a.high
    assert a.method == "percentile_bootstrap"


def test_bootstrap_interval_is_close_to_the_normal_interval_for_many_values() -> None:
    values = np.random.default_rng(4).random(2000)
    interval = bootstrap_mean_interval(values, n_bootstrap=4000, seed=1)
    se = standard_error(values)
    assert interval is not None and se is not None
    assert interval.high - interval.low == pytest.approx(2 * 1.96 * se, rel=0.1)


def test_bootstrap_interval_is_clipped() -> None:
    interval = bootstrap_mean_interval([1.0, 1.0, 1.0, 0.99], low=0.0, high=0.995)
    assert interval is not None and interval.high <= 0.995


def test_bootstrap_needs_two_values_and_some_resamples() -> None:
    assert bootstrap_mean_interval([0.3]) is None
    assert bootstrap_mean_interval([0.3, 0.4], n_bootstrap=0) is None


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"n_bootstrap": -1}, "n_bootstrap"),
        ({"seed": -3}, "seed"),
        ({"confidence": 2}, "confidence"),
        ({"seed": 1.5}, "seed"),
    ],
)
def test_bootstrap_bad_arguments(kwargs: dict[str, object], name: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name} must be"):
        bootstrap_mean_interval([0.1, 0.2], **kwargs)  # type: ignore[arg-type]

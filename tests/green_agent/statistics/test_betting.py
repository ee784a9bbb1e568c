"""The betting interval and confidence sequence (green_agent.statistics.betting): degenerate samples, nesting,
the ratio target, validation, and a small seeded coverage check (deterministic: a fixed seed, a fixed count)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from green_agent.statistics import betting_bounds, betting_confidence_sequence, betting_interval

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("n", [1, 2, 5, 10, 30])
def test_all_pass_and_all_fail_give_one_sided_intervals_of_nonzero_width(n: int) -> None:
    ones = betting_interval([1.0] * n)
    zeros = betting_interval([0.0] * n)
    assert ones is not None and zeros is not None
    assert ones.high == 1.0 and ones.estimate == 1.0 and ones.low < 1.0
    assert zeros.low == 0.0 and zeros.estimate == 0.0 and zeros.high > 0.0
    # Mirror images: the method treats successes and failures alike.
    assert ones.low == pytest.approx(1.0 - zeros.high, abs=1e-6)


def test_more_tasks_narrow_the_interval_and_one_task_says_little() -> None:
    widths = []
    for n in (1, 5, 10, 30, 100):
        i = betting_interval([1.0] * n)
        assert i is not None
        widths.append(i.high - i.low)
    assert widths == sorted(widths, reverse=True) and widths[0] == 1.0
    assert betting_interval([]) is None


def test_binary_values_at_ten_tasks_are_wider_than_the_wilson_interval_would_claim() -> None:
    # 5 of 10 tasks at 1: a plausible interval, symmetric about 1/2 up to the seeded orders.
    i = betting_interval([1.0, 0.0] * 5)
    assert i is not None and 0.1 < i.low < 0.25 and 0.75 < i.high < 0.9


def test_weights_target_the_pooled_ratio() -> None:
    # Tasks with 4, 2 and 4 counted attempts: 3/4, 1/2, 4/4 -> pooled 8/10.
    x, n = np.array([0.75, 0.5, 1.0]), np.array([4.0, 2.0, 4.0])
    i = betting_interval(x, weights=n / n.max())
    assert i is not None and i.estimate == pytest.approx(0.8)
    assert i.low < 0.8 < i.high


def test_seeded_and_deterministic() -> None:
    values = [0.2, 0.9, 0.4, 1.0, 0.0, 0.7]
    assert betting_interval(values, seed=3) == betting_interval(values, seed=3)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"values": [0.5, 1.5]}, "values"),
        ({"values": [0.5, float("nan")]}, "values"),
        ({"values": [0.5], "confidence": 1.0}, "confidence"),
        ({"values": [0.5, 0.2], "weights": [1.0, 0.0]}, "weights"),
        ({"values": [0.5, 0.2], "weights": [1.0]}, "weights"),
        ({"values": [0.5], "permutations": 0}, "permutations"),
    ],
)
def test_bad_input_names_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        betting_interval(**kwargs)  # type: ignore[arg-type]


@SETTINGS
@given(st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=25))
def test_interval_properties(values: list[float]) -> None:
    narrow = betting_interval(values, confidence=0.8)
    mid = betting_interval(values, confidence=0.95)
    wide = betting_interval(values, confidence=0.99)
    assert narrow is not None and mid is not None and wide is not None
    for i in (narrow, mid, wide):
        assert 0.0 <= i.low <= i.estimate <= i.high <= 1.0
        assert i.high - i.low > 0.0
    # Nested: a higher confidence never gives a narrower interval.
    assert wide.low <= mid.low + 1e-7 <= narrow.low + 2e-7
    assert wide.high >= mid.high - 1e-7 >= narrow.high - 2e-7


@SETTINGS
@given(st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=25))
def test_confidence_sequence_properties(values: list[float]) -> None:
    cs = betting_confidence_sequence(values)
    assert len(cs.low) == len(cs.high) == len(cs.estimate) == len(values)
    assert all(0.0 <= lo <= hi <= 1.0 for lo, hi in zip(cs.low, cs.high, strict=True))
    # The running intersection: bounds never widen.
    assert list(cs.low) == sorted(cs.low) and list(cs.high) == sorted(cs.high, reverse=True)


def test_seeded_coverage_of_the_fixed_sample_interval() -> None:
    # 400 samples of 10 Bernoulli(0.3) values: a valid 90% interval misses about 40 times at most on average;
    # the seed makes the count a fixed number (betting intervals are conservative: far fewer misses).
    rng = np.random.default_rng(12345)
    samples = (rng.random((400, 10)) < 0.3).astype(float)
    bounds = betting_bounds(samples, confidence=0.9)
    misses = int(np.sum((bounds[:, 1] > 0.3) | (bounds[:, 2] < 0.3)))
    assert misses <= 40
    assert np.all(bounds[:, 2] - bounds[:, 1] > 0.0)


def test_confidence_sequence_covers_under_continuous_monitoring() -> None:
    # 200 sequences of 60 values from Beta(2, 5) (mean 2/7): the sequence must hold the mean at *every* time in
    # at least 95% of them (Ville's inequality), seeded.
    rng = np.random.default_rng(7)
    mean = 2.0 / 7.0
    ever_missed = 0
    for _ in range(200):
        cs = betting_confidence_sequence(rng.beta(2.0, 5.0, size=60))
        lows, highs = np.array(cs.low), np.array(cs.high)
        ever_missed += bool(np.any((lows > mean) | (highs < mean)))
    assert ever_missed <= 10

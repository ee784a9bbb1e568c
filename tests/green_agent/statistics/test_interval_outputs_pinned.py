"""Pins the exact outputs (bit for bit) of the betting intervals, the summary and the paired sign-flip test.

Performance work on these must not move a single result: the same inputs and seeds give the same floats. Each
case is reduced to a SHA-256 of the repr of its floats (repr round-trips a float64 exactly); the digests were taken
on the code before the vectorisation that followed this test.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import pytest

from green_agent.statistics import (
    betting_bounds,
    betting_confidence_sequence,
    paired_sign_flip_test,
    sign_flip_p_values,
    summarize_trials,
)
from green_agent.statistics.paired_test import Alternative, PairedTest


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def _floats(arr: np.ndarray) -> list[str]:
    return [repr(float(v)) for v in np.asarray(arr, dtype=np.float64).ravel()]


def _trials(tasks: int, trials: int, seed: int, ragged: bool = False) -> dict[str, list[bool | None]]:
    rng = np.random.default_rng(seed)
    p = rng.beta(0.7, 0.7, size=tasks)
    draws = rng.random((tasks, trials)) < p[:, None]
    infra = rng.random((tasks, trials)) < 0.01
    depth = rng.integers(1, trials + 1, size=tasks) if ragged else np.full(tasks, trials)
    return {
        f"retail/test/{i}": [None if infra[i, t] else bool(draws[i, t]) for t in range(int(depth[i]))]
        for i in range(tasks)
    }


def _summary_digest(trials: dict[str, list[bool | None]], seed: int = 0, confidence: float = 0.95) -> str:
    s = summarize_trials(trials, seed=seed, confidence=confidence)
    macro = [
        [m.pass_hat_mean, m.pass_hat_ci_low, m.pass_hat_ci_high, m.pass_at_mean, m.pass_at_ci_low, m.pass_at_ci_high]
        for m in s.macro
    ]
    micro = [s.micro.rate, s.micro.ci_low, s.micro.ci_high]
    return _digest([[repr(v) for v in row] for row in macro] + [[repr(v) for v in micro]])


SUMMARY_CASES = {
    "5x4": ((5, 4, 1, False, 0, 0.95), "76cb8707b25a46fcd7a386046b8eb49d2d1918561738438851746c812477b71b"),
    "30x8 ragged": ((30, 8, 2, True, 3, 0.9), "08d31c6ae55876c68db7e8e0411e25ee6d743fddef54716550a83f865b37e939"),
    "240x16": ((240, 16, 3, False, 0, 0.95), "4fe0f5ae60840064665cfb08ac4f622960bea742de66cacf04a93896af53ea5e"),
    "400x8 ragged": ((400, 8, 4, True, 5, 0.99), "c5a02ed9b117ebe09c5bf725abaf3af015f299b32ef3c8a6a3d2f9aa49a759f5"),
    "10000x16 (the benchmark's input)": (
        (10_000, 16, 7, False, 0, 0.95),
        "f9be44519d2a397cf4e1488178d67c9fc01c929c6edeb94f5744d662465f40df",
    ),
}


@pytest.mark.parametrize("name", list(SUMMARY_CASES))
def test_summary_intervals_are_pinned(name: str) -> None:
    (tasks, trials, seed, ragged, summary_seed, confidence), expected = SUMMARY_CASES[name]
    assert _summary_digest(_trials(tasks, trials, seed, ragged), summary_seed, confidence) == expected


def _bounds_case() -> str:
    rng = np.random.default_rng(11)
    out = []
    for rows, n in ((7, 3), (20, 40), (5, 300), (3, 2500)):
        x = rng.random((rows, n))
        x[0] = np.round(x[0])
        w = rng.uniform(0.1, 1.0, size=(rows, n))
        out += _floats(betting_bounds(x, seed=2))
        out += _floats(betting_bounds(x, weights=w, confidence=0.9, seed=5))
        out += _floats(betting_bounds(x[:, :1], seed=0))
    return _digest(out)


def _sequence_case() -> str:
    rng = np.random.default_rng(12)
    out: list[str] = []
    for n in (1, 17, 150):
        x = rng.random(n)
        cs = betting_confidence_sequence(x, confidence=0.95)
        out += [repr(v) for v in cs.low + cs.high + cs.estimate]
        cs = betting_confidence_sequence(np.round(x), weights=rng.uniform(0.2, 1.0, n), confidence=0.8)
        out += [repr(v) for v in cs.low + cs.high + cs.estimate]
    return _digest(out)


def _paired_tests(n: int, seed: int) -> list[PairedTest]:
    rng = np.random.default_rng(100 + n)
    d = np.clip(rng.normal(0.03, 0.3, size=n), -1.0, 1.0)
    d[: n // 4] = np.round(d[: n // 4])
    alternatives: tuple[tuple[Alternative, float], ...] = (("two-sided", 0.0), ("greater", -0.05), ("less", 0.02))
    out = [paired_sign_flip_test(d, alternative=a, null=null, seed=seed) for a, null in alternatives]
    out.append(paired_sign_flip_test(d, confidence=0.9, seed=seed + 1))
    return out


def _paired_case(n: int, seed: int, *, bounds: bool = True) -> str:
    """Digest of four tests; ``bounds`` False leaves the interval ends out (pinned to 1e-12 below instead)."""
    exclude = None if bounds else {"ci_low", "ci_high"}
    out = [t.model_dump(mode="json", exclude=exclude) for t in _paired_tests(n, seed)]
    return _digest(json.loads(json.dumps(out), parse_float=lambda s: repr(float(s))))


def _p_values_case() -> str:
    rng = np.random.default_rng(13)
    out = []
    for rows, n in ((6, 8), (4, 15), (5, 40), (3, 1000)):
        d = np.clip(rng.normal(0.0, 0.3, size=(rows, n)), -1.0, 1.0)
        out += _floats(sign_flip_p_values(d, null=0.01, seed=4))
    return _digest(out)


OTHER_CASES = {
    "betting_bounds": (_bounds_case, "868047ad8f09da22c5a0d04e9de1fece0050eb5f5f944c1d5c53e14d7ce37ae6"),
    "confidence sequence": (_sequence_case, "62a193d283c9254aea0f92b2d3cc0018e8cc060244bb16727baa4423f0c953df"),
    "paired exact n=12": (
        lambda: _paired_case(12, 0),
        "19997ad4755ba9e89cd245fec3fe442a0870f9cc3e8fd01d6937dcbaa87a53ba",
    ),
    "paired monte carlo n=30": (
        lambda: _paired_case(30, 3, bounds=False),
        "3535567c593b2217d5a78d472ed1e3abbe5ff54c6f99b4fdba88211fdbd8c28a",
    ),
    "paired monte carlo n=1000": (
        lambda: _paired_case(1000, 0, bounds=False),
        "5698e62ab0bf5e074de9895358c5788190d66a167d15ab7d65a649ac4e623ea1",
    ),
    "sign_flip_p_values": (_p_values_case, "de8f17a93cb52aa59e05aabe6135b5c98508ee7d26d348e3a48760483f2fb331"),
}


@pytest.mark.parametrize("name", list(OTHER_CASES))
def test_statistics_outputs_are_pinned(name: str) -> None:
    case, expected = OTHER_CASES[name]
    assert case() == expected


# Monte Carlo sign-flip interval ends: sums over ~500 random subsets of up to 1,000 tasks. Before the table look-up
# they came from BLAS (np.dot), whose last bits depend on the machine's kernel and thread count (seen: ~1e-14 between
# OPENBLAS_NUM_THREADS=1 and 2 on one machine), so these ends are pinned to 1e-12; every p-value, decision and count
# above is pinned exactly.
MONTE_CARLO_BOUNDS = {
    (30, 3): [
        (-0.13432938971134248, 0.04210752854291428),
        (-0.1201861254439715, 1.0),
        (-1.0, 0.02717549169831244),
        (-0.1210669187763825, 0.02712833195645574),
    ],
    (1000, 0): [
        (0.0017790317832295315, 0.03985655300389443),
        (0.004907022609705025, 1.0),
        (-1.0, 0.03676811145942724),
        (0.005056048776188533, 0.036790979764348926),
    ],
}


@pytest.mark.parametrize("case", list(MONTE_CARLO_BOUNDS))
def test_monte_carlo_interval_ends_are_pinned(case: tuple[int, int]) -> None:
    got = [(t.ci_low, t.ci_high) for t in _paired_tests(*case)]
    expected = MONTE_CARLO_BOUNDS[case]
    assert len(got) == len(expected)
    for (low, high), (want_low, want_high) in zip(got, expected, strict=True):
        assert low == pytest.approx(want_low, abs=1e-12)
        assert high == pytest.approx(want_high, abs=1e-12)


def test_monte_carlo_sums_do_not_depend_on_the_chunking() -> None:
    """The subset sums of a set are the same whatever other sets share its chunk (so callers agree bit for bit)."""
    from green_agent.statistics.paired_test import _byte_tables, _packed_sums, _random_packed

    rng = np.random.default_rng(14)
    d = rng.uniform(-1.0, 1.0, size=(3, 1001))
    packed = next(_random_packed(1001, 0, 20_000))
    whole = _packed_sums(_byte_tables(d), packed)
    parts = [_packed_sums(_byte_tables(d[r : r + 1]), packed[s : s + 7]) for r in range(3) for s in (0, 7, 14)]
    assert np.array_equal(np.vstack([np.hstack(parts[3 * r : 3 * r + 3]) for r in range(3)]), whole[:, :21])

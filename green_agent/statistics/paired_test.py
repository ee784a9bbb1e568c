"""Paired sign-flip (randomization) test on per-task differences, its inverted interval, and the MDE.

The test (Fisher's randomization test for paired data): under the null that on every task the difference d_i of
the metric (candidate minus baseline) is symmetric about delta (e.g. both runs come from the same agent, so which
run is "A" is a coin flip per task), flipping the sign of any subset S of the centred differences is as likely as
the observed data. The statistic is the sum of d_i - delta; flipping S changes it by -2 sum_{i in S} (d_i - delta),
so "the flipped statistic is at least the observed one" is exactly "mean_{i in S} d_i <= delta". Hence, with r_S
the mean of d over a non-empty flipped subset:

    p_greater(delta) = (#{S empty} + #{S: r_S <= delta}) / B        (evidence that the mean exceeds delta)
    p_less(delta)    = (#{S empty} + #{S: r_S >= delta}) / B

over all B = 2^n subsets (exact, up to :data:`EXACT_MAX_TASKS` tasks) or the identity plus B - 1 seeded random
subsets (Monte Carlo; the identity keeps the p-value valid). Both are monotone in delta, so the set of deltas a
test does not reject is an interval whose ends are order statistics of the r_S: the interval printed is exactly the
set of differences the printed test cannot reject, and "0 is outside the interval" is exactly "p <= alpha". The
level is exact (at most alpha, conservative only through the discreteness of small n) at any number of tasks.

Minimum detectable difference (MDE) at 80% power: (t_{n-1, 1-a} + t_{n-1, 0.8}) * sd(d) / sqrt(n) with a = alpha/2
for a two-sided test, where sd(d) is the standard deviation of the per-task differences (the paired design's own
noise, attempts and task heterogeneity together). ``None`` when no difference is detectable at all with n tasks
(the smallest attainable p-value, 1/2^n one-sided, exceeds alpha) or sd(d) is 0 (no spread to scale from).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from green_agent.statistics._validation import require_confidence, require_int, require_real

EXACT_MAX_TASKS = 20
"""Up to this many tasks every one of the 2^n sign patterns is enumerated (2^20 ~ 1M sums)."""
MONTE_CARLO_FLIPS = 20_000
"""Sign patterns drawn (seeded) above :data:`EXACT_MAX_TASKS` tasks."""
POWER = 0.8
_TIE = 1e-12
"""r_S within this of delta counts as a tie (both tails count ties: the conservative side)."""
_MAX_CELLS = 4_000_000

Alternative = Literal["two-sided", "greater", "less"]


class PairedTest(BaseModel):
    """One paired sign-flip test: the difference, its interval (the test inverted), p-value and MDE."""

    model_config = ConfigDict(frozen=True)

    tasks: int
    diff: float | None
    """Mean over tasks of candidate minus baseline; ``None`` without a paired task."""
    null: float
    """The difference the test is against (0, or -margin for non-inferiority)."""
    alternative: Alternative
    p_value: float | None
    confidence: float
    ci_low: float | None
    """Lower end of the differences the test does not reject (-1 for a "less" test)."""
    ci_high: float | None
    """Upper end (+1 for a "greater" test)."""
    rejected: bool
    """The test rejects its null at 1 - confidence (the same as: ``null`` lies outside [ci_low, ci_high])."""
    method: str
    """``sign_flip_exact`` (all 2^n patterns) or ``sign_flip_monte_carlo``."""
    patterns: int
    """Sign patterns used (2^n, or the identity plus the random ones)."""
    seed: int
    mde: float | None
    """Minimum detectable difference at 80% power for this test and this many tasks (module docstring)."""
    mde_note: str
    """Why the MDE is what it is (or why there is none)."""


def _random_packed(n: int, seed: int, flips: int) -> Iterator[np.ndarray]:
    """The B - 1 seeded random flip sets of the Monte Carlo test, packed: one row per set, one random byte per 8
    tasks (bit 7 - i of byte b flips task 8b + i; bits past task n - 1 are ignored), in chunks whose size depends on
    n only (so every caller sees the same sets); the identity is extra."""
    rng = np.random.default_rng(seed)
    chunk = max(1, _MAX_CELLS // (8 * n))
    width = (n + 7) // 8
    remaining = flips - 1
    while remaining > 0:
        size = min(chunk, remaining)
        yield rng.integers(0, 256, size=(size, width), dtype=np.uint8)
        remaining -= size


def _byte_tables(d: np.ndarray) -> np.ndarray:
    """For ``d`` (rows, n): shape (rows, width, 256), entry [r, b, v] = the sum of d[r, 8b + i] over the bits
    7 - i set in the byte v (tasks past n count 0). Summed in a fixed order (i = 0..7), so every machine agrees."""
    rows, n = d.shape
    width = (n + 7) // 8
    padded = np.zeros((rows, width * 8))
    padded[:, :n] = d
    padded = padded.reshape(rows, width, 8)
    byte = np.arange(256)
    tables = np.zeros((rows, width, 256))
    for i in range(8):
        bit = ((byte >> (7 - i)) & 1).astype(bool)
        tables += np.where(bit, padded[:, :, i : i + 1], 0.0)
    return tables


def _packed_counts(packed: np.ndarray, n: int) -> np.ndarray:
    """Tasks flipped per packed set (the bits past task n - 1 masked off), as float64 (exact integers)."""
    spare = 8 * packed.shape[1] - n
    bits = np.bitwise_count(packed).sum(axis=1, dtype=np.int64)
    if spare:
        bits -= np.bitwise_count(packed[:, -1] & np.uint8((1 << spare) - 1))
    counts: np.ndarray = bits.astype(np.float64)
    return counts


def _packed_sums(tables: np.ndarray, packed: np.ndarray) -> np.ndarray:
    """Subset sums, shape (rows, sets), by table look-up of each byte column (no BLAS: the
    result does not depend on the machine's BLAS kernel or thread count, and no 0/1 float matrix is built)."""
    # (rows, sets, width), C-contiguous, summed along its last axis: numpy's fixed (pairwise) order over the width
    # byte columns of one set, the same for every set, chunk size and caller.
    gathered = np.ascontiguousarray(tables[:, np.arange(packed.shape[1]), packed])
    sums: np.ndarray = gathered.sum(axis=-1)
    return sums


def _exact_sums(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sums and sizes of all 2^n subsets of the last axis of ``d`` (leading axes kept)."""
    sums = np.zeros((*d.shape[:-1], 1))
    sizes = np.zeros(1, dtype=np.int64)
    for i in range(d.shape[-1]):
        sums = np.concatenate([sums, sums + d[..., i : i + 1]], axis=-1)
        sizes = np.concatenate([sizes, sizes + 1])
    return sums, sizes


def _subset_means(d: np.ndarray, seed: int, flips: int) -> tuple[np.ndarray, int, int, str]:
    """(r_S over non-empty subsets, number of empty subsets, B, method)."""
    n = d.size
    if n <= EXACT_MAX_TASKS:
        sums, sizes = _exact_sums(d)
        nonempty = sizes > 0
        return sums[nonempty] / sizes[nonempty], 1, sums.size, "sign_flip_exact"
    means: list[np.ndarray] = []
    empty = 1  # the identity (no flip), plus any empty random set
    tables = _byte_tables(d[None, :])
    for packed in _random_packed(n, seed, flips):
        counts = _packed_counts(packed, n)
        sums = _packed_sums(tables, packed)[0]
        keep = counts > 0
        empty += int(np.sum(~keep))
        means.append(sums[keep] / counts[keep])
    return (np.concatenate(means) if means else np.empty(0)), empty, flips, "sign_flip_monte_carlo"


def sign_flip_p_values(
    diffs: np.ndarray | Sequence[Sequence[float]],
    *,
    null: float = 0.0,
    seed: int = 0,
    flips: int = MONTE_CARLO_FLIPS,
) -> np.ndarray:
    """One-sided p-values of the sign-flip test for many samples at once: shape (rows, 2) = (p_greater, p_less).

    Row i gives exactly what :func:`paired_sign_flip_test` gives for ``diffs[i]`` with the same ``null``, ``seed``
    and ``flips`` (the same sign patterns; a two-sided p-value is min(1, 2 min(p_greater, p_less))); for
    simulations of the decision's error rates and power.
    """
    null = require_real("null", null, low=-1.0, high=1.0)
    seed = require_int("seed", seed, minimum=0)
    flips = require_int("flips", flips, minimum=100)
    d = np.asarray(diffs, dtype=np.float64)
    if d.ndim != 2 or d.shape[1] == 0:
        raise ValueError(f"diffs must be two-dimensional (samples x tasks, at least one task), got shape {d.shape}")
    if not np.all(np.isfinite(d)) or d.min() < -1.0 or d.max() > 1.0:
        raise ValueError("diffs must be finite numbers in [-1, 1]")
    rows, n = d.shape
    out = np.empty((rows, 2))
    if n <= EXACT_MAX_TASKS:
        sizes = _exact_sums(np.zeros(n))[1]
        nonempty = sizes > 0
        chunk = max(1, _MAX_CELLS // (2**n))
        for start in range(0, rows, chunk):
            sums = _exact_sums(d[start : start + chunk])[0][:, nonempty]
            means = sums / sizes[nonempty]
            out[start : start + chunk, 0] = (1 + np.sum(means <= null + _TIE, axis=1)) / 2**n
            out[start : start + chunk, 1] = (1 + np.sum(means >= null - _TIE, axis=1)) / 2**n
        return out
    greater = np.ones(rows)  # the identity counts on both sides
    less = np.ones(rows)
    for packed in _random_packed(n, seed, flips):
        counts = _packed_counts(packed, n)
        keep = counts > 0
        greater += float(np.sum(~keep))
        less += float(np.sum(~keep))
        packed_kept = packed[keep]
        sizes_kept = counts[keep]
        chunk = max(1, _MAX_CELLS // max(1, int(keep.sum()) * ((n + 7) // 8)))
        for start in range(0, rows, chunk):
            means = _packed_sums(_byte_tables(d[start : start + chunk]), packed_kept) / sizes_kept
            greater[start : start + chunk] += np.sum(means <= null + _TIE, axis=1)
            less[start : start + chunk] += np.sum(means >= null - _TIE, axis=1)
    out[:, 0] = greater / flips
    out[:, 1] = less / flips
    return out


def _quantile_bound(sorted_means: np.ndarray, empty: int, total: int, alpha: float) -> float | None:
    """The (K+1)-th smallest r_S with K = floor(alpha * B) - empty: the smallest delta a one-sided test at
    ``alpha`` does not reject (``None``: it never rejects, the bound is the end of the range)."""
    k = math.floor(alpha * total + 1e-9) - empty
    if k < 0:
        return None
    if k >= sorted_means.size:
        return float(sorted_means[-1]) if sorted_means.size else None
    return float(sorted_means[k])


def minimum_detectable_difference(
    sd: float, tasks: int, *, confidence: float = 0.95, alternative: Alternative = "two-sided", power: float = POWER
) -> tuple[float | None, str]:
    """MDE of the paired test (module docstring) and a note saying how it was obtained or why there is none."""
    confidence = require_confidence("confidence", confidence)
    tasks = require_int("tasks", tasks, minimum=0)
    alpha = 1.0 - confidence
    tail = alpha / 2.0 if alternative == "two-sided" else alpha
    if tasks < 2 or 0.5**tasks > tail:
        return None, f"no difference is detectable with {tasks} task(s) at {confidence:g} (too few sign patterns)"
    if not sd > 0.0:
        return None, "every task's difference is the same: no spread to size a detectable difference from"
    from scipy.stats import t as student_t  # lazily: scipy.stats costs ~1 s to import

    df = tasks - 1
    mde = float((student_t.ppf(1.0 - tail, df) + student_t.ppf(power, df)) * sd / math.sqrt(tasks))
    return mde, f"{power:.0%} power, paired t approximation from the spread of the {tasks} per-task differences"


def paired_sign_flip_test(
    diffs: Sequence[float] | np.ndarray,
    *,
    confidence: float = 0.95,
    alternative: Alternative = "two-sided",
    null: float = 0.0,
    seed: int = 0,
    flips: int = MONTE_CARLO_FLIPS,
) -> PairedTest:
    """Sign-flip test of the mean of ``diffs`` (each in [-1, 1]; candidate minus baseline, one per task).

    ``alternative``: "two-sided" (alpha split over both tails; the interval is the equal-tailed one), "greater"
    (is the candidate better than ``null``?) or "less" (worse than ``null``?); the one-sided interval has its open
    end at +-1. Deterministic for a seed.
    """
    confidence = require_confidence("confidence", confidence)
    null = require_real("null", null, low=-1.0, high=1.0)
    seed = require_int("seed", seed, minimum=0)
    flips = require_int("flips", flips, minimum=100)
    if alternative not in ("two-sided", "greater", "less"):
        raise ValueError(f"alternative must be 'two-sided', 'greater' or 'less', got {alternative!r}")
    d = np.asarray(diffs, dtype=np.float64)
    if d.ndim != 1:
        raise ValueError(f"diffs must be one-dimensional, got shape {d.shape}")
    if not np.all(np.isfinite(d)) or (d.size and (d.min() < -1.0 or d.max() > 1.0)):
        raise ValueError("diffs must be finite numbers in [-1, 1]")
    n = int(d.size)
    alpha = 1.0 - confidence
    if n == 0:
        return PairedTest(
            tasks=0,
            diff=None,
            null=null,
            alternative=alternative,
            p_value=None,
            confidence=confidence,
            ci_low=None,
            ci_high=None,
            rejected=False,
            method="sign_flip_exact",
            patterns=0,
            seed=seed,
            mde=None,
            mde_note="no paired task",
        )
    means, empty, total, method = _subset_means(d, seed, flips)
    ascending = np.sort(means)
    p_greater = (empty + int(np.sum(means <= null + _TIE))) / total
    p_less = (empty + int(np.sum(means >= null - _TIE))) / total
    tail = alpha / 2.0 if alternative == "two-sided" else alpha
    low = _quantile_bound(ascending, empty, total, tail) if alternative != "less" else None
    high = _quantile_bound(ascending[::-1] * -1.0, empty, total, tail) if alternative != "greater" else None
    high = None if high is None else -high
    if alternative == "two-sided":
        p_value = min(1.0, 2.0 * min(p_greater, p_less))
        rejected = p_greater <= tail or p_less <= tail
    elif alternative == "greater":
        p_value, rejected = p_greater, p_greater <= tail
    else:
        p_value, rejected = p_less, p_less <= tail
    sd = float(np.std(d, ddof=1)) if n >= 2 else 0.0
    mde, note = minimum_detectable_difference(sd, n, confidence=confidence, alternative=alternative)
    return PairedTest(
        tasks=n,
        diff=float(np.mean(d)),
        null=null,
        alternative=alternative,
        p_value=p_value,
        confidence=confidence,
        ci_low=-1.0 if low is None else low,
        ci_high=1.0 if high is None else high,
        rejected=rejected,
        method=method,
        patterns=total,
        seed=seed,
        mde=mde,
        mde_note=note,
    )

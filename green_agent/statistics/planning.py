"""Planning a battle: how many tasks x attempts a question needs (pure, seeded simulation; no I/O).

Two questions, both answered by simulating battles from a model of the per-task success probabilities (a finished
run's own c/n per task, a parametric bootstrap, or stated assumptions):

- **Interval half-width**: the smallest number of tasks whose reported pass^j interval (the summary's own method,
  :func:`green_agent.statistics.summarize_trials`: betting, or exact binomial where every task's estimate is 0/1)
  has a median half-width at most the target.
- **Power**: the probability that ``arena compare``'s decision rule (the paired sign-flip test of
  :mod:`green_agent.statistics.paired_test`) detects a true difference delta in the success rate between a candidate
  and this baseline, and the smallest number of tasks that reaches 80%.

Model of "a candidate better (worse) by delta" (delta on the success-rate scale, so pass^1): every task's p moves
toward 1 (0) in proportion to its room, p' = p + delta (1 - p) / (1 - mean p) (or p' = p + delta p / mean p for
delta < 0): the mean moves by exactly delta and every p' stays in [0, 1]. Tasks are drawn with replacement from the
model's task pool (tasks of this kind); each side gets k attempts per task; the test is run as ``arena compare`` runs
it (exact enumeration of sign patterns where there are few; otherwise random patterns, fewer than ``arena compare``
uses, which leaves the simulated power within about a point of the exact one).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from green_agent.statistics._validation import require_confidence, require_int, require_real
from green_agent.statistics.betting import betting_bounds, clopper_pearson_bounds

Alternative = Literal["two-sided", "greater", "less"]
TARGET_POWER = 0.8
_EXACT_PATTERNS_UP_TO = 12
"""Up to 2^12 sign patterns are enumerated in the power simulation; above, random ones."""
_RANDOM_PATTERNS = 2000
_MAX_CELLS = 8_000_000
_TIE = 1e-12


class PowerPoint(BaseModel):
    """Simulated power at one number of tasks."""

    model_config = ConfigDict(frozen=True)

    tasks: int
    power: float
    replicates: int


class TaskPlan(BaseModel):
    """The answer to one planning question."""

    model_config = ConfigDict(frozen=True)

    question: str
    tasks: int | None
    """Tasks needed (``None``: not reachable within ``max_tasks``)."""
    k: int
    attempts_per_run: int | None
    achieved: float | None
    """The simulated half-width or power at ``tasks``."""
    curve: list[PowerPoint]
    """Power (or median half-width, stored in ``power``) at the numbers of tasks tried, ascending."""


def shifted_probabilities(p: np.ndarray, delta: float) -> np.ndarray:
    """The candidate's per-task p for a success-rate difference ``delta`` (module docstring)."""
    mean = float(np.mean(p)) if p.size else 0.0
    if delta > 0:
        if mean >= 1.0:
            raise ValueError("delta must be <= 0 when every task already succeeds (nothing to improve)")
        if delta > 1.0 - mean:
            raise ValueError(f"delta must be at most 1 - mean p = {1.0 - mean:.3f}")
        shifted: np.ndarray = p + delta * (1.0 - p) / (1.0 - mean)
    elif delta < 0:
        if mean <= 0.0:
            raise ValueError("delta must be >= 0 when no task ever succeeds (nothing to lose)")
        if -delta > mean:
            raise ValueError(f"delta must be at least -mean p = {-mean:.3f}")
        shifted = p + delta * p / mean
    else:
        shifted = p.copy()
    clipped: np.ndarray = np.clip(shifted, 0.0, 1.0)
    return clipped


def _pass_hat_table(k: int, j: int) -> np.ndarray:
    """pass^j of c successes out of k, for c = 0..k."""
    return np.array([math.comb(c, j) / math.comb(k, j) for c in range(k + 1)], dtype=np.float64)


def _sign_patterns(tasks: int, rng: np.random.Generator) -> np.ndarray:
    if tasks <= _EXACT_PATTERNS_UP_TO:
        codes = np.arange(2**tasks)[:, None]
        bits = (codes >> np.arange(tasks)[None, :]) & 1
        patterns: np.ndarray = 1.0 - 2.0 * bits
        return patterns
    random = np.where(rng.random((_RANDOM_PATTERNS - 1, tasks)) < 0.5, -1.0, 1.0)
    return np.vstack([np.ones((1, tasks)), random])


def _rejections(d: np.ndarray, patterns: np.ndarray, alpha: float, alternative: Alternative) -> np.ndarray:
    """Per replicate (rows of ``d``): does the sign-flip test reject 0 at ``alpha``?"""
    observed = d.sum(axis=1)
    out = np.empty(d.shape[0], dtype=bool)
    chunk = max(1, _MAX_CELLS // patterns.shape[0])
    for start in range(0, d.shape[0], chunk):
        sl = slice(start, start + chunk)
        flipped = np.dot(d[sl], patterns.T)
        obs = observed[sl][:, None]
        p_greater = np.mean(flipped >= obs - _TIE, axis=1)
        p_less = np.mean(flipped <= obs + _TIE, axis=1)
        if alternative == "two-sided":
            out[sl] = np.minimum(p_greater, p_less) <= alpha / 2.0
        elif alternative == "greater":
            out[sl] = p_greater <= alpha
        else:
            out[sl] = p_less <= alpha
    return out


def simulate_differences(
    p: Sequence[float] | np.ndarray,
    *,
    tasks: int,
    k: int,
    delta: float,
    j: int = 1,
    replicates: int = 1000,
    seed: int = 0,
) -> np.ndarray:
    """Per-task pass^j differences candidate - baseline, shape (replicates, tasks), under the model of the module
    docstring (tasks drawn with replacement from ``p``)."""
    pool = _pool(p)
    tasks = require_int("tasks", tasks, minimum=1)
    k = require_int("k", k, minimum=1)
    j = require_int("j", j, minimum=1)
    if j > k:
        raise ValueError(f"j must be <= k = {k}, got {j}")
    replicates = require_int("replicates", replicates, minimum=1)
    delta = require_real("delta", delta, low=-1.0, high=1.0)
    candidate = shifted_probabilities(pool, delta)
    rng = np.random.default_rng(seed)
    draw = rng.integers(0, pool.size, size=(replicates, tasks))
    table = _pass_hat_table(k, j)
    base = table[rng.binomial(k, pool[draw])]
    cand = table[rng.binomial(k, candidate[draw])]
    diffs: np.ndarray = cand - base
    return diffs


def simulated_power(
    p: Sequence[float] | np.ndarray,
    *,
    tasks: int,
    k: int,
    delta: float,
    j: int = 1,
    confidence: float = 0.95,
    alternative: Alternative = "two-sided",
    replicates: int = 1000,
    seed: int = 0,
) -> float:
    """Share of simulated comparisons in which the paired sign-flip test rejects "no difference"."""
    confidence = require_confidence("confidence", confidence)
    d = simulate_differences(p, tasks=tasks, k=k, delta=delta, j=j, replicates=replicates, seed=seed)
    patterns = _sign_patterns(tasks, np.random.default_rng(seed + 1))
    return float(np.mean(_rejections(d, patterns, 1.0 - confidence, alternative)))


def _pool(p: Sequence[float] | np.ndarray) -> np.ndarray:
    pool = np.asarray(p, dtype=np.float64)
    if pool.ndim != 1 or pool.size == 0:
        raise ValueError("p must be a non-empty list of per-task success probabilities")
    if not np.all(np.isfinite(pool)) or pool.min() < 0.0 or pool.max() > 1.0:
        raise ValueError("p must hold probabilities in [0, 1]")
    return pool


def _search(
    evaluate: Callable[[int], float], lo: int, hi: int, good: Callable[[float], bool]
) -> tuple[int | None, list[tuple[int, float]]]:
    """Smallest n in [lo, hi] with good(evaluate(n)), assuming monotone; doubling then bisection."""
    tried: dict[int, float] = {}

    def value(n: int) -> float:
        if n not in tried:
            tried[n] = evaluate(n)
        return tried[n]

    n = lo
    while n < hi and not good(value(n)):
        n = min(hi, n * 2)
    if not good(value(n)):
        return None, sorted(tried.items())
    low = max(lo, n // 2)
    while low < n:
        mid = (low + n) // 2
        if good(value(mid)):
            n = mid
        else:
            low = mid + 1
    return n, sorted(tried.items())


def plan_for_power(
    p: Sequence[float] | np.ndarray,
    *,
    k: int,
    delta: float,
    j: int = 1,
    confidence: float = 0.95,
    alternative: Alternative = "two-sided",
    power: float = TARGET_POWER,
    max_tasks: int = 2000,
    replicates: int = 1000,
    seed: int = 0,
) -> TaskPlan:
    """Smallest number of tasks at which the comparison detects ``delta`` with probability >= ``power``."""
    max_tasks = require_int("max_tasks", max_tasks, minimum=2)

    def evaluate(n: int) -> float:
        return simulated_power(
            p,
            tasks=n,
            k=k,
            delta=delta,
            j=j,
            confidence=confidence,
            alternative=alternative,
            replicates=replicates,
            seed=seed,
        )

    tasks, tried = _search(evaluate, 2, max_tasks, lambda v: v >= power)
    return TaskPlan(
        question=f"detect a success-rate difference of {delta:+g} with {power:.0%} power ({alternative}, "
        f"{confidence:g} confidence) on pass^{j}",
        tasks=tasks,
        k=k,
        attempts_per_run=None if tasks is None else tasks * k,
        achieved=None if tasks is None else dict(tried)[tasks],
        curve=[PowerPoint(tasks=n, power=v, replicates=replicates) for n, v in tried],
    )


def median_half_width(
    p: Sequence[float] | np.ndarray,
    *,
    tasks: int,
    k: int,
    j: int = 1,
    confidence: float = 0.95,
    replicates: int = 64,
    seed: int = 0,
) -> float:
    """Median half-width of the summary's pass^j interval for ``tasks`` tasks of ``k`` attempts (simulated)."""
    pool = _pool(p)
    tasks = require_int("tasks", tasks, minimum=2)
    k = require_int("k", k, minimum=1)
    j = require_int("j", j, minimum=1)
    if j > k:
        raise ValueError(f"j must be <= k = {k}, got {j}")
    rng = np.random.default_rng(seed)
    draw = rng.integers(0, pool.size, size=(replicates, tasks))
    values = _pass_hat_table(k, j)[rng.binomial(k, pool[draw])]
    if j == k:
        ones = values.sum(axis=1)
        bounds = clopper_pearson_bounds(ones, np.full_like(ones, tasks), confidence)
        widths = bounds[:, 1] - bounds[:, 0]
    else:
        rows = betting_bounds(values, confidence=confidence, seed=seed)
        widths = rows[:, 2] - rows[:, 1]
    return float(np.median(widths) / 2.0)


def plan_for_half_width(
    p: Sequence[float] | np.ndarray,
    *,
    k: int,
    half_width: float,
    j: int = 1,
    confidence: float = 0.95,
    max_tasks: int = 2000,
    replicates: int = 64,
    seed: int = 0,
) -> TaskPlan:
    """Smallest number of tasks whose pass^j interval has a median half-width <= ``half_width``."""
    half_width = require_real("half_width", half_width, low=0.0, high=1.0)
    max_tasks = require_int("max_tasks", max_tasks, minimum=2)

    def evaluate(n: int) -> float:
        return median_half_width(p, tasks=n, k=k, j=j, confidence=confidence, replicates=replicates, seed=seed)

    tasks, tried = _search(evaluate, 2, max_tasks, lambda v: v <= half_width)
    return TaskPlan(
        question=f"a {confidence:g} interval of pass^{j} with half-width <= {half_width:g} (median)",
        tasks=tasks,
        k=k,
        attempts_per_run=None if tasks is None else tasks * k,
        achieved=None if tasks is None else dict(tried)[tasks],
        curve=[PowerPoint(tasks=n, power=v, replicates=replicates) for n, v in tried],
    )

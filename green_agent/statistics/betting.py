"""Betting confidence intervals and confidence sequences for the mean of bounded values (pure numpy, no I/O).

Method: Waudby-Smith & Ramdas, "Estimating means of bounded random variables by betting", JRSS-B 2024
(arXiv 2010.09686), the *hedged capital* process with *predictable plug-in* bets. For each candidate mean m in
[0, 1] two gamblers bet on the observations x_1, x_2, ... (each in [0, 1]) being above / below m:

    K+_t(m) = prod_{i<=t} (1 + l+_i(m) (x_i - m)),     K-_t(m) = prod_{i<=t} (1 - l-_i(m) (x_i - m)),
    l+_i(m) = min(l_i, c / m),  l-_i(m) = min(l_i, c / (1 - m)),  c = 1/2,

with l_i chosen from x_1..x_{i-1} only (predictable): l_i = sqrt(2 log(2/a0) / (n s2_{i-1})) for a sample of fixed
size n, or sqrt(2 log(2/a0) / (s2_{i-1} i log(1 + i))) for the time-uniform sequence, where s2 is the running
variance estimate (1/4 + sum (x_i - mu_i)^2) / (i + 1) around the running mean (1/2 + sum x_i) / (i + 1). Under
the null mean m both K+ and K- are nonnegative martingales with expectation 1, so their mixture 1/2 K+ + 1/2 K- is
too, and by Ville's inequality P(exists t: 1/2 K+_t(m) >= 1/a or 1/2 K-_t(m) >= 1/a) <= a. The set of m where
neither capital reached 1/a is therefore a (1 - a) confidence set. K+ is non-increasing in m and K- non-decreasing,
so the set is an interval, found by bisection (to 1e-6, rounded outward: never narrower than the exact set).

- Fixed sample (:func:`betting_interval`, :func:`betting_bounds`): tasks have no order, so the capital is averaged
  over several seeded random orders of the sample. An average of e-values is an e-value, hence the rule stays valid
  (coverage >= 1 - a at every n, for i.i.d. draws from any distribution on [0, 1]) while the result no longer depends
  on one arbitrary order. The bet size is tuned once for a0 = 0.05 whatever the requested confidence: the intervals
  are then nested (a higher confidence never gives a narrower interval); validity does not depend on the tuning.
- Sequence (:func:`betting_confidence_sequence`): the running intersection of the per-time intervals over the data
  in the order given; valid simultaneously for all t, so under continuous monitoring and optional stopping
  (Howard et al., Annals of Statistics 2021, arXiv 1810.08240). Sequential certification builds on this.
- Ratio target (``weights``): with x_i = c_i / n_i and w_i = n_i / max n, betting on w_i (x_i - m) (which lies in
  [-m, 1 - m]) estimates m = E[c] / E[n], the pooled success rate of a population of tasks with its attempts grouped
  by task (a task with more attempts weighs more, as in pooling, but tasks, not attempts, are the independent units).

Why this method: it never gives a zero-width interval (for m strictly inside (0, 1) the capital moves by at most a
bounded factor per observation, so with finitely many observations some m near the estimate is always kept), it
needs no normal approximation (so it holds at 5 or 10 tasks and when every per-task value is 0 or 1), and it is
among the tightest known intervals for bounded means (close to the CLT width for large n).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from green_agent.statistics._validation import require_confidence, require_int

BETTING_METHOD = "betting_wsr2024"
"""Name stored beside every betting interval (Waudby-Smith & Ramdas 2024, hedged capital, predictable plug-in)."""

DEFAULT_PERMUTATIONS = 16
"""Random orders of a fixed sample whose capitals are averaged (seeded), at most."""
_MAX_ORDER_CELLS = 4000
"""permutations x n is capped here (16 orders up to 250 observations, 1 from 4,000): the order matters less as n
grows, and a summary of 10,000 tasks stays fast. Depends on n only, so validity is unaffected."""

_TRUNCATION = 0.5
"""c in l+(m) = min(l, c / m): every factor stays >= 1 - c = 1/2, so the capital never jumps to zero."""
TUNING_ALPHA = 0.05
"""a0 of the bet size (fixed, so intervals are nested across confidence levels)."""
_BISECTION_STEPS = 20
"""2^-20 ~ 1e-6 of the search range; the reported bound is the outer end of the last bracket."""
_MAX_CELLS = 2_000_000
"""Float cells per evaluation chunk (rows x permutations x n), to bound memory (~16 MB per array)."""


def clopper_pearson_bounds(successes: np.ndarray, trials: np.ndarray, confidence: float = 0.95) -> np.ndarray:
    """Exact (Clopper-Pearson) two-sided bounds for binomial counts, vectorised: shape ``successes.shape + (2,)``.

    Used instead of betting where every observation is 0 or 1 by construction (pass^j or pass@j of tasks with
    exactly j counted attempts): the observations are then Bernoulli draws whose mean is the target, and the exact
    binomial interval is valid at any n, never zero width for n >= 1, and narrower than betting's.
    """
    from scipy.special import betaincinv  # lazily: scipy costs time to import, paid off the start-up path

    confidence = require_confidence("confidence", confidence)
    k = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    half = (1.0 - confidence) / 2.0
    with np.errstate(invalid="ignore", divide="ignore"):
        low = np.where(k > 0, betaincinv(np.maximum(k, 1e-300), n - k + 1.0, half), 0.0)
        high = np.where(k < n, betaincinv(k + 1.0, np.maximum(n - k, 1e-300), 1.0 - half), 1.0)
    out: np.ndarray = np.stack([low, high], axis=-1)
    return out


class BettingInterval(BaseModel):
    """A betting confidence interval for a bounded mean (see the module docstring)."""

    model_config = ConfigDict(frozen=True)

    low: float
    high: float
    estimate: float
    """The sample mean (or pooled ratio with weights); always inside [low, high]."""
    confidence: float
    n: int
    """Observations used."""
    method: str = BETTING_METHOD
    permutations: int
    """Random orders averaged (1 for a sequence or a single observation)."""


class ConfidenceSequence(BaseModel):
    """Time-uniform bounds: ``low[t-1]``, ``high[t-1]`` after the first t observations (running intersection)."""

    model_config = ConfigDict(frozen=True)

    low: tuple[float, ...]
    high: tuple[float, ...]
    estimate: tuple[float, ...]
    """Running mean (or pooled ratio) after t observations."""
    confidence: float
    method: str = BETTING_METHOD


def _as_batch(name: str, values: np.ndarray | Sequence[float], *, allow_empty: bool = False) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ValueError(f"{name} must be one- or two-dimensional (rows x observations), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must all be finite numbers (no NaN or infinity)")
    if arr.size and (arr.min() < 0.0 or arr.max() > 1.0):
        raise ValueError(f"{name} must lie in [0, 1], got values in [{arr.min()}, {arr.max()}]")
    if arr.shape[1] == 0 and not allow_empty:
        raise ValueError(f"{name} must hold at least one observation per row")
    return arr


def _plugin_bets(x: np.ndarray, horizon: int | None) -> np.ndarray:
    """Predictable bet sizes l_t for sequences ``x`` (last axis = time); ``horizon`` None: the time-uniform form."""
    t = np.arange(1, x.shape[-1] + 1, dtype=np.float64)
    mu = (0.5 + np.cumsum(x, axis=-1)) / (t + 1.0)
    s2 = (0.25 + np.cumsum((x - mu) ** 2, axis=-1)) / (t + 1.0)
    s2_prev = np.concatenate([np.full((*x.shape[:-1], 1), 0.25), s2[..., :-1]], axis=-1)
    s2_prev = np.maximum(s2_prev, 1e-12)
    scale = 2.0 * math.log(2.0 / TUNING_ALPHA)
    if horizon is None:
        bets: np.ndarray = np.sqrt(scale / (s2_prev * t * np.log1p(t)))
    else:
        bets = np.sqrt(scale / (s2_prev * float(horizon)))
    return bets


def _log_capital(
    x: np.ndarray, w: np.ndarray | None, bets: np.ndarray, m: np.ndarray, *, up: bool, truncation: float = _TRUNCATION
) -> np.ndarray:
    """log K+ (``up``) or log K- at the end of each sequence, for per-row candidate means ``m`` (shape rows).

    ``x``, ``w``, ``bets``: (rows, perms, n); ``w`` None for unit weights. Returns shape (rows, perms). Computed in
    place in one scratch array: the same operations on the same values as the plain expression, so the same bits
    (-(a * b) is exactly (-a) * b, and 1 * y is y).
    """
    mm = m[:, None, None]
    centred = x - mm
    if w is not None:
        centred *= w
    with np.errstate(divide="ignore", over="ignore"):
        step = np.minimum(bets, truncation / mm if up else truncation / (1.0 - mm))
        step *= centred
        if not up:
            np.negative(step, out=step)
        np.log1p(step, out=step)
        result: np.ndarray = step.sum(axis=-1)
    return result


def _log_mean_exp(a: np.ndarray) -> np.ndarray:
    top = a.max(axis=-1)
    out: np.ndarray = top + np.log(np.mean(np.exp(a - top[..., None]), axis=-1))
    return out


def _bisect(
    x: np.ndarray,
    w: np.ndarray | None,
    bets: np.ndarray,
    estimate: np.ndarray,
    threshold: float,
    *,
    lower: bool,
    truncation: float = _TRUNCATION,
) -> np.ndarray:
    """Per row: the outer end of the bracket around the boundary of the kept set on one side of ``estimate``."""
    rows = x.shape[0]
    outer = np.full(rows, 0.0 if lower else 1.0)
    inner = estimate.copy()

    def rejected(m: np.ndarray) -> np.ndarray:
        caps = _log_capital(x, w, bets, m, up=lower, truncation=truncation)
        result: np.ndarray = math.log(0.5) + _log_mean_exp(caps) >= threshold
        return result

    # The end of the range is kept already: the bound is that end.
    keep_end = ~rejected(outer)
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (outer + inner)
        rej = rejected(mid)
        outer = np.where(rej, mid, outer)
        inner = np.where(rej, inner, mid)
    bound: np.ndarray = np.where(keep_end, 0.0 if lower else 1.0, outer)
    return bound


def _orders(n: int, permutations: int, seed: int) -> np.ndarray:
    """``permutations`` seeded orders of range(n); the first is the identity."""
    rng = np.random.default_rng(seed)
    orders = np.empty((permutations, n), dtype=np.intp)
    orders[0] = np.arange(n)
    for p in range(1, permutations):
        orders[p] = rng.permutation(n)
    return orders


def betting_bounds(
    values: np.ndarray | Sequence[float],
    *,
    confidence: float = 0.95,
    weights: np.ndarray | Sequence[float] | None = None,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = 0,
) -> np.ndarray:
    """Vectorised fixed-sample betting intervals: one per row of ``values`` (rows x n, each in [0, 1]).

    Returns an array of shape (rows, 3): estimate, low, high. ``weights`` (same shape, in (0, 1]) switch the target
    to the ratio sum(w x) / sum(w) (see the module docstring). Rows are independent samples; the same seeded orders
    serve every row. Deterministic for a given seed.
    """
    confidence = require_confidence("confidence", confidence)
    permutations = require_int("permutations", permutations, minimum=1)
    seed = require_int("seed", seed, minimum=0)
    x = _as_batch("values", values)
    w: np.ndarray | None = None
    if weights is None:
        unit = np.ones_like(x)
    else:
        w = _as_batch("weights", weights)
        if w.shape != x.shape:
            raise ValueError(f"weights must have the shape of values {x.shape}, got {w.shape}")
        if np.any(w <= 0.0):
            raise ValueError("weights must be > 0 (leave out the observations that carry no weight)")
        unit = w
    rows, n = x.shape
    estimate = (unit * x).sum(axis=1) / unit.sum(axis=1)
    permutations = max(1, min(permutations, _MAX_ORDER_CELLS // n))
    orders = _orders(n, permutations, seed)
    threshold = math.log(1.0 / (1.0 - confidence))
    out = np.empty((rows, 3), dtype=np.float64)
    out[:, 0] = estimate
    chunk = max(1, _MAX_CELLS // (permutations * n))
    for start in range(0, rows, chunk):
        sl = slice(start, min(rows, start + chunk))
        xs = x[sl][:, orders]
        ws = None if w is None else w[sl][:, orders]  # unit weights: no multiplication (the same bits)
        bets = _plugin_bets(xs, n)
        est = estimate[sl]
        low = _bisect(xs, ws, bets, est, threshold, lower=True)
        high = _bisect(xs, ws, bets, est, threshold, lower=False)
        out[sl, 1] = np.minimum(low, est)
        out[sl, 2] = np.maximum(high, est)
    return out


def betting_interval(
    values: np.ndarray | Sequence[float],
    *,
    confidence: float = 0.95,
    weights: np.ndarray | Sequence[float] | None = None,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = 0,
) -> BettingInterval | None:
    """Betting confidence interval for the mean of ``values`` (each in [0, 1]; i.i.d. draws of the population
    whose mean is wanted), or with ``weights`` for the ratio sum(w x) / sum(w); ``None`` for no value.

    Coverage >= ``confidence`` at every sample size; never zero width (one value gives a wide, honest interval).

    >>> i = betting_interval([1.0] * 10)
    >>> i.high, 0.5 < i.low < 0.6
    (1.0, True)
    """
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"values must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        return None
    row = betting_bounds(arr, confidence=confidence, weights=weights, permutations=permutations, seed=seed)[0]
    used = max(1, min(permutations, _MAX_ORDER_CELLS // arr.size)) if arr.size > 1 else 1
    return BettingInterval(
        low=float(row[1]),
        high=float(row[2]),
        estimate=float(row[0]),
        confidence=confidence,
        n=int(arr.size),
        permutations=used,
    )


def betting_confidence_sequence(
    values: np.ndarray | Sequence[float],
    *,
    confidence: float = 0.95,
    weights: np.ndarray | Sequence[float] | None = None,
    truncation: float = _TRUNCATION,
) -> ConfidenceSequence:
    """Time-uniform betting confidence sequence over ``values`` in the order given (each in [0, 1]).

    ``low[t-1]``..``high[t-1]`` holds the mean with probability >= ``confidence`` simultaneously for every t, so a
    caller may look after every observation and stop whenever it likes (the running intersection is reported:
    bounds never widen). ``truncation`` is c in l+(m) = min(l, c / m) (any c < 1 keeps the guarantee; a larger c
    bets more and decides sooner on concentrated values, the certification's sequence uses 0.8). Cost: O(n^2)
    capital evaluations per bisection step; meant for sequences of up to a few thousand observations.
    """
    confidence = require_confidence("confidence", confidence)
    if not 0.0 < truncation < 1.0:
        raise ValueError(f"truncation must lie strictly between 0 and 1, got {truncation}")
    x = _as_batch("values", values, allow_empty=True)
    if x.shape[0] != 1:
        raise ValueError(f"values must be one-dimensional, got shape {np.asarray(values).shape}")
    w = np.ones_like(x) if weights is None else _as_batch("weights", weights, allow_empty=True)
    if w.shape != x.shape:
        raise ValueError(f"weights must have the shape of values {x.shape}, got {w.shape}")
    if np.any(w <= 0.0):
        raise ValueError("weights must be > 0 (leave out the observations that carry no weight)")
    n = x.shape[1]
    threshold = math.log(1.0 / (1.0 - confidence))
    bets_all = _plugin_bets(x[0], None)
    # Row t-1 holds the first t observations, zero-padded (a zero weight contributes a factor of exactly 1).
    tri = np.tril(np.ones((n, n), dtype=bool))
    xs = np.where(tri, x[0][None, :], 0.0)[:, None, :]
    ws = np.where(tri, w[0][None, :], 0.0)[:, None, :]
    bets = np.where(tri, bets_all[None, :], 0.0)[:, None, :]
    cum_w = np.cumsum(w[0])
    estimate = np.cumsum(w[0] * x[0]) / np.where(cum_w > 0, cum_w, 1.0)
    low = _bisect(xs, ws, bets, estimate.copy(), threshold, lower=True, truncation=truncation) if n else np.empty(0)
    high = _bisect(xs, ws, bets, estimate.copy(), threshold, lower=False, truncation=truncation) if n else np.empty(0)
    low = np.maximum.accumulate(np.minimum(low, estimate)) if n else low
    high = np.minimum.accumulate(np.maximum(high, estimate)) if n else high
    # The running intersection may exclude the current estimate (that is the point of it); keep low <= high.
    high = np.maximum(high, low)
    return ConfidenceSequence(
        low=tuple(float(v) for v in low),
        high=tuple(float(v) for v in high),
        estimate=tuple(float(v) for v in estimate),
        confidence=confidence,
    )

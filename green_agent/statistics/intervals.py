"""Uncertainty: Wilson intervals for proportions, standard errors and a vectorised task-level bootstrap for means.

Why Wilson for a pooled proportion: the Wald interval p +- z*sqrt(p(1-p)/n) collapses to zero width at 0/n and n/n
and undercovers for small n; Wilson stays inside [0, 1] and has close to nominal coverage from n of about 10.

Why a percentile bootstrap over *tasks* for macro means: the per-task unbiased estimates already carry the trial
noise, and tasks are the independent units, so resampling whole tasks captures both sources without a model. The
bootstrap is one seeded ``numpy.random.Generator`` and a matrix product (resample counts x values), so 1,000
resamples over 10,000 tasks take tens of milliseconds and the same seed always gives the same interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from green_agent.statistics._validation import require_confidence, require_int, require_real

_MAX_CHUNK_CELLS = 4_000_000
"""Resample-count cells generated at a time, to bound memory (about 32 MB of int64) whatever the sizes."""


class Interval(BaseModel):
    """A two-sided confidence interval."""

    model_config = ConfigDict(frozen=True)

    low: float
    high: float
    confidence: float
    method: str
    """``wilson`` or ``percentile_bootstrap``."""


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> Interval | None:
    """Wilson score interval (no continuity correction) for ``successes`` out of ``n`` Bernoulli trials; ``None``
    when n == 0. Computed by scipy (``binomtest(...).proportion_ci(method="wilson")``).

    The bounds are exactly 0 at 0 successes and exactly 1 at n successes.

    >>> i = wilson_interval(7, 10)
    >>> round(i.low, 4), round(i.high, 4)
    (0.3968, 0.8922)
    """
    n = require_int("n", n, minimum=0)
    successes = require_int("successes", successes, minimum=0)
    if successes > n:
        raise ValueError(f"successes must be an integer in [0, n] = [0, {n}], got {successes}")
    confidence = require_confidence("confidence", confidence)
    if n == 0:
        return None
    from scipy.stats import binomtest  # lazily: scipy.stats costs ~1 s to import, paid off the start-up path

    ci = binomtest(successes, n).proportion_ci(confidence_level=confidence, method="wilson")
    low = min(1.0, max(0.0, float(ci.low)))
    high = min(1.0, max(0.0, float(ci.high)))
    return Interval(low=low, high=high, confidence=confidence, method="wilson")


def standard_error(values: Sequence[float] | np.ndarray) -> float | None:
    """Standard error of the mean: sd(ddof=1) / sqrt(T); ``None`` for fewer than two values."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"values must be one-dimensional, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("values must all be finite numbers (no NaN or infinity)")
    if arr.size < 2:
        return None
    return float(np.std(arr, ddof=1) / math.sqrt(arr.size))


def bootstrap_means(values: np.ndarray, n_bootstrap: int, rng: np.random.Generator) -> np.ndarray:
    """Resampled means of each column of ``values`` (rows = tasks), shape ``(n_bootstrap, columns)``.

    All columns share the same resamples of rows, which keeps paired quantities (pass^j and pass@j of one j, or the
    two agents of a comparison) coherent. Implementation: for a chunk of resamples draw row indices, turn them into
    per-row counts with one ``bincount``, and multiply the counts matrix by ``values``.
    """
    rows, cols = values.shape
    out = np.empty((n_bootstrap, cols), dtype=np.float64)
    if rows == 0 or n_bootstrap == 0:
        out.fill(np.nan)
        return out
    chunk = max(1, min(n_bootstrap, _MAX_CHUNK_CELLS // rows))
    for start in range(0, n_bootstrap, chunk):
        size = min(chunk, n_bootstrap - start)
        draws = rng.integers(0, rows, size=(size, rows))
        draws += (np.arange(size, dtype=draws.dtype) * rows)[:, None]
        counts = np.bincount(draws.ravel(), minlength=size * rows).reshape(size, rows)
        out[start : start + size] = (counts @ values) / rows
    return out


def masked_bootstrap_means(
    values: np.ndarray, masks: np.ndarray, column_group: np.ndarray, n_bootstrap: int, rng: np.random.Generator
) -> np.ndarray:
    """Resampled means where column ``q`` averages only the rows of ``masks[:, column_group[q]]``.

    Rows are resampled from *all* rows (the plain nonparametric bootstrap of "mean over the qualifying rows"), so one
    set of draws serves every column however the qualifying sets differ. A replicate whose resample contains no
    qualifying row for a column is NaN there; callers decide what to do with it. Shape ``(n_bootstrap, columns)``.
    """
    rows, cols = values.shape
    groups = masks.shape[1]
    out = np.empty((n_bootstrap, cols), dtype=np.float64)
    if rows == 0 or n_bootstrap == 0:
        out.fill(np.nan)
        return out
    weights = masks.astype(np.float64)
    masked = np.where(masks[:, column_group], values, 0.0)
    stacked = np.hstack([masked, weights])
    chunk = max(1, min(n_bootstrap, _MAX_CHUNK_CELLS // rows))
    for start in range(0, n_bootstrap, chunk):
        size = min(chunk, n_bootstrap - start)
        draws = rng.integers(0, rows, size=(size, rows))
        draws += (np.arange(size, dtype=draws.dtype) * rows)[:, None]
        counts = np.bincount(draws.ravel(), minlength=size * rows).reshape(size, rows).astype(np.float64)
        totals = counts @ stacked
        sums, dens = totals[:, :cols], totals[:, cols : cols + groups][:, column_group]
        with np.errstate(invalid="ignore", divide="ignore"):
            out[start : start + size] = np.where(dens > 0, sums / np.where(dens > 0, dens, 1.0), np.nan)
    return out


def percentile_bounds(resampled: np.ndarray, confidence: float, *, low: float, high: float) -> np.ndarray:
    """Percentile interval per column of bootstrap replicates, clipped to [low, high]; shape ``(columns, 2)``."""
    alpha = 1.0 - confidence
    bounds = np.quantile(resampled, [alpha / 2.0, 1.0 - alpha / 2.0], axis=0).T
    clipped: np.ndarray = np.clip(bounds, low, high)
    return clipped


def bootstrap_mean_interval(
    values: Sequence[float] | np.ndarray,
    *,
    n_bootstrap: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    low: float = 0.0,
    high: float = 1.0,
) -> Interval | None:
    """Seeded percentile-bootstrap interval for the mean of ``values``, clipped to [low, high].

    ``None`` for fewer than two values (a one-value bootstrap has zero width and would overstate certainty) or when
    ``n_bootstrap`` is 0.
    """
    n_bootstrap = require_int("n_bootstrap", n_bootstrap, minimum=0)
    seed = require_int("seed", seed, minimum=0)
    confidence = require_confidence("confidence", confidence)
    low = require_real("low", low)
    high = require_real("high", high, low=low)
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"values must be one-dimensional, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("values must all be finite numbers (no NaN or infinity)")
    if arr.size < 2 or n_bootstrap == 0:
        return None
    rng = np.random.default_rng(seed)
    reps = bootstrap_means(arr[:, None], n_bootstrap, rng)
    lo, hi = percentile_bounds(reps, confidence, low=low, high=high)[0]
    return Interval(low=float(lo), high=float(hi), confidence=confidence, method="percentile_bootstrap")

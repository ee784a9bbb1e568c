"""Unbiased per-task estimators: pass@k (Chen et al. 2021) and pass^k (tau-bench).

Given n independent trials of one task with c successes:

- pass@k = 1 - C(n-c, k) / C(n, k): the probability that at least one of k trials drawn without replacement from the
  n observed ones succeeds. Unbiased for 1 - (1-p)^k.
- pass^k = C(c, k) / C(n, k): the probability that all k drawn trials succeed. Unbiased for p^k.

Why these and not the plug-in forms ``1 - (1 - c/n)^k`` and ``(c/n)^k``: the plug-ins are biased (n=2, p=1/2, k=2:
E[(c/n)^2] = 0.375 while p^2 = 0.25), and they happily "extrapolate" to k > n. Here k > n is undefined and returns
``None``: never clamped, never 1.0, never a silent projection.

Numerics: for n <= 2048 the ratio is formed from exact integer binomials and divided once, so the result is the
correctly rounded float (pass@2 of n=5, c=2 is exactly 0.7). Above that, both ratios are evaluated as a sum of
``log1p`` terms over whichever of the two equivalent products is shorter, then ``exp`` / ``-expm1``: full relative
precision even for tiny results (one success in a million), O(min(k, c)) or O(min(k, n-c)) work, so n up to 10^6 is
instant.
"""

from __future__ import annotations

import math

import numpy as np

from green_agent.statistics._validation import require_int

_EXACT_MAX_N = 2048
"""Up to this n, binomials are exact Python integers (at most ~600 digits) and the division is correctly rounded."""

_VECTOR_THRESHOLD = 64
"""Above this many terms the log-sum is done with numpy (pairwise summation); below, with ``math.fsum``."""


def _log_ratio_terms(numer: float, start: int, count: int, *, descending: bool) -> float:
    """Sum of ``log1p(-numer / d)`` for ``count`` denominators ``d`` starting at ``start`` (step -1 or +1).

    All ``d`` are positive and ``numer / d <= 1`` by construction of the callers.
    """
    if count == 0:
        return 0.0
    if count <= _VECTOR_THRESHOLD:
        step = -1 if descending else 1
        return math.fsum(math.log1p(-numer / (start + step * i)) for i in range(count))
    if descending:
        denominators = np.arange(start, start - count, -1, dtype=np.float64)
    else:
        denominators = np.arange(start, start + count, dtype=np.float64)
    return float(np.sum(np.log1p(-numer / denominators)))


def _check(n: object, c: object, k: object) -> tuple[int, int, int]:
    n_i = require_int("n", n, minimum=0)
    c_i = require_int("c", c, minimum=0)
    k_i = require_int("k", k, minimum=1)
    if c_i > n_i:
        raise ValueError(f"c must be an integer in [0, n] = [0, {n_i}], got {c_i}")
    return n_i, c_i, k_i


def _log_fail_all(n: int, c: int, k: int) -> float:
    """log( C(n-c, k) / C(n, k) ), the log-probability that k draws are all failures; requires n - c >= k."""
    # Two equal products; use the shorter one.
    #   prod_{j=0}^{k-1} (1 - c / (n - j))            k terms
    #   prod_{i=n-c+1}^{n} (1 - k / i)                c terms
    if k <= c:
        return _log_ratio_terms(float(c), n, k, descending=True)
    return _log_ratio_terms(float(k), n - c + 1, c, descending=False)


def _log_pass_all(n: int, c: int, k: int) -> float:
    """log( C(c, k) / C(n, k) ), the log-probability that k draws are all successes; requires c >= k."""
    #   prod_{j=0}^{k-1} (1 - (n - c) / (n - j))      k terms
    #   prod_{m=0}^{n-c-1} (1 - k / (n - m))          n - c terms
    failures = n - c
    if k <= failures:
        return _log_ratio_terms(float(failures), n, k, descending=True)
    return _log_ratio_terms(float(k), n, failures, descending=True)


def pass_at_k(n: int, c: int, k: int) -> float | None:
    """Unbiased pass@k for one task: P(at least one success among k of the n trials). ``None`` when n < k.

    Exactly 1.0 when n - c < k (every k-subset contains a success) and exactly c/n when k == 1.

    >>> pass_at_k(5, 2, 2)
    0.7
    """
    n, c, k = _check(n, c, k)
    if n < k:
        return None
    if k == 1:
        return c / n
    if c == 0:
        return 0.0
    if n - c < k:
        return 1.0
    if n <= _EXACT_MAX_N:
        total = math.comb(n, k)
        return (total - math.comb(n - c, k)) / total
    return min(1.0, max(0.0, -math.expm1(_log_fail_all(n, c, k))))


def pass_hat_k(n: int, c: int, k: int) -> float | None:
    """Unbiased pass^k for one task (tau-bench): P(all k of k trials drawn from the n succeed). ``None`` when n < k.

    Exactly 0.0 when c < k, exactly 1.0 when c == n, and exactly c/n when k == 1.

    >>> pass_hat_k(4, 3, 2)
    0.5
    """
    n, c, k = _check(n, c, k)
    if n < k:
        return None
    if k == 1:
        return c / n
    if c < k:
        return 0.0
    if c == n:
        return 1.0
    if n <= _EXACT_MAX_N:
        return math.comb(c, k) / math.comb(n, k)
    return min(1.0, max(0.0, math.exp(_log_pass_all(n, c, k))))


def pass_curves(n: int, c: int, k_max: int) -> tuple[tuple[float | None, ...], tuple[float | None, ...]]:
    """pass^j and pass@j for j = 1..k_max (index j-1), ``None`` where n < j. Used by the summaries."""
    n, c, k_max = _check(n, c, k_max)
    hats = tuple(pass_hat_k(n, c, j) for j in range(1, k_max + 1))
    ats = tuple(pass_at_k(n, c, j) for j in range(1, k_max + 1))
    return hats, ats

"""Exact group-sequential test of "pass^j >= threshold" for binary per-task values (issue 28). Pure numpy/scipy.

When every observation is 0 or 1 by construction (pass^k of tasks with exactly k scored attempts), the observations
of tasks drawn i.i.d. from "tasks of this kind" are Bernoulli(mu) draws, mu the target. The number of successes
S_t after t tasks is then binomial, and a sequential test can be calibrated *exactly* instead of through Ville's
inequality (which the betting sequence needs for values of any shape, and which wastes most of alpha at a few
dozen observations):

- Looks: after every task, t = 1 .. N, N the budget in tasks (derived from the config: the scenario's tasks, or
  ``max_attempts // k``), so a resume looks at the same points.
- Boundaries (error spending, Lan & DeMets 1983, here on the exact binomial law; the power family of Kim & DeMets
  1987): alpha/2 for each side, spent as sqrt(t / N). The upper boundary u_t is the smallest count whose crossing
  probability under mu = threshold, added to the probability spent at earlier looks, stays within
  alpha/2 * sqrt(t / N) (paths that crossed earlier no
  longer count); the lower boundary l_t is the same for the failures under 1 - threshold. *Certified* once
  S_t >= u_t, *refuted* once S_t <= l_t. Crossing the upper boundary first is an increasing event in the outcomes,
  so its probability grows with mu: for every mu <= threshold it is at most alpha/2 (and symmetrically), so a wrong
  decision has probability <= alpha whatever the truth, and <= alpha/2 unless the truth is exactly the threshold.
- Futility (non-binding, so it cannot raise the error): stop *inconclusive* when no count of the remaining budget
  reaches a boundary (nothing can be decided any more), or, from the first task on, when the predictive
  probability of reaching a boundary within the budget (Jeffreys Beta(1/2, 1/2) prior on mu updated with the
  counts so far, exact over the remaining looks) is below ``FUTILITY_BELOW``. This gives up a little of the chance
  of a decision for stopping battles that would end inconclusive anyway (benchmarks/bench_certify.py measures both).
- Boundaries are made monotone in the threshold (:func:`monotone_boundaries`, over a grid of step 1/500 and the
  threshold itself) before use: slightly more conservative, and the reported sequence agrees with the decision.
- The confidence sequence reported at the stop (repeated confidence interval, Jennison & Turnbull 1989): the values
  m that the same design run at threshold m has not rejected at any look so far, on a grid of step 1/500 widened by
  one step outward. It holds the truth at every look with probability >= 1 - alpha.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from green_agent.statistics._validation import require_confidence, require_int

BINOMIAL_METHOD = "exact_binomial_group_sequential"
"""Name of this design in a certification (power alpha spending, looks after every task, predictive futility)."""
SPENDING_POWER = 0.5
"""alpha/2 * (t / N)^SPENDING_POWER is spent by look t: below 1 spends more early (a clear claim stops sooner), above 1
keeps more for the last looks. 0.5 with ``FUTILITY_BELOW`` = 0.2 met the efficiency target of
benchmarks/bench_certify.py in the most pass^4 cells among the pairs tried (powers 0.5-1.25 x futility 0.1-0.3, on
three simulation seeds); the error bound holds for any choice."""
FUTILITY_BELOW = 0.20
"""Stop inconclusive when the predictive probability of any decision within the budget falls below this."""
MAX_BINOMIAL_TASKS = 100
"""Largest budget (tasks) this design is used for: its tables cost O(budget^2); beyond, the betting sequence is
close to exact anyway."""
_PRIOR = 0.5
_GRID = 400
"""Points of the midpoint rule over mu in the predictive probability."""
_SEQUENCE_GRID = 500


@dataclass(frozen=True)
class BinomialDesign:
    """The boundaries and futility table of one claim and budget (deterministic in them)."""

    budget: int
    threshold: float
    confidence: float
    upper: np.ndarray
    """upper[t]: certified once S_t >= upper[t] (inf: no boundary at look t); index 0 unused."""
    lower: np.ndarray
    """lower[t]: refuted once S_t <= lower[t] (-inf: none)."""
    reach: np.ndarray
    """reach[t, s]: predictive probability of reaching a boundary within the budget from S_t = s."""


def _upper_boundaries(budget: int, p: np.ndarray, side_alpha: float, looks: int | None = None) -> np.ndarray:
    """Smallest counts u_t (rows: one per null value in ``p``) spending ``side_alpha * (t / budget)^0.5`` by look t, for
    t up to ``looks`` (default the budget)."""
    rows = p.shape[0]
    last = budget if looks is None else looks
    upper = np.full((rows, last + 1), np.inf)
    dist = np.zeros((rows, last + 2))
    dist[:, 0] = 1.0
    spent = np.zeros(rows)
    counts = np.arange(last + 2)
    for t in range(1, last + 1):
        new = dist * (1.0 - p[:, None])
        new[:, 1:] += dist[:, :-1] * p[:, None]
        tail = np.cumsum(new[:, ::-1], axis=1)[:, ::-1]  # P(S_t >= s, not crossed before)
        allowed = side_alpha * (t / budget) ** SPENDING_POWER * (1.0 + 1e-12)
        ok = (spent[:, None] + tail <= allowed) & (counts[None, :] <= t)
        has = ok.any(axis=1)
        first = np.where(has, ok.argmax(axis=1), last + 1)
        upper[has, t] = first[has]
        spent += np.where(has, tail[np.arange(rows), first], 0.0)
        new[counts[None, :] >= first[:, None]] = 0.0
        dist = new
    return upper


def boundaries(
    budget: int, thresholds: np.ndarray, confidence: float, looks: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Upper and lower boundaries (rows: one per threshold, columns: looks 0..``looks``, default the budget; the
    spending is by t / budget either way)."""
    m = np.asarray(thresholds, dtype=np.float64)
    side = (1.0 - confidence) / 2.0
    upper = _upper_boundaries(budget, m, side, looks)
    failures = _upper_boundaries(budget, 1.0 - m, side, looks)
    lower = np.arange(upper.shape[1])[None, :] - failures  # S_t <= t - (failures boundary)
    return upper, lower


def _reach_table(upper: np.ndarray, lower: np.ndarray, budget: int) -> np.ndarray:
    """Predictive probability of crossing a boundary within the budget, from every state (t, s)."""
    p = (np.arange(_GRID) + 0.5) / _GRID
    log_p, log_q = np.log(p)[:, None], np.log1p(-p)[:, None]
    counts = np.arange(budget + 1)
    hit = np.zeros((_GRID, budget + 1))  # P_p(cross at a later look | S_t = s), filled backwards
    reach = np.zeros((budget + 1, budget + 1))
    for t in range(budget - 1, -1, -1):
        crossed = (counts >= upper[t + 1]) | (counts <= lower[t + 1])
        ahead = np.where(crossed[None, :], 1.0, hit)
        shifted = np.concatenate([ahead[:, 1:], np.zeros((_GRID, 1))], axis=1)
        hit = p[:, None] * shifted + (1.0 - p[:, None]) * ahead
        s = counts[: t + 1]
        # Posterior Beta(s + 1/2, t - s + 1/2) on the midpoint grid, normalised there (no Beta function needed).
        log_w = (s[None, :] + _PRIOR - 1.0) * log_p + (t - s[None, :] + _PRIOR - 1.0) * log_q
        weights = np.exp(log_w - log_w.max(axis=0, keepdims=True))
        weights /= weights.sum(axis=0, keepdims=True)
        reach[t, : t + 1] = (weights * hit[:, : t + 1]).sum(axis=0)
        reach[t, : t + 1][~(hit[:, : t + 1] > 0).any(axis=0)] = 0.0  # nothing reachable: exactly 0
    return reach


def binomial_design(budget: int, threshold: float, confidence: float = 0.95) -> BinomialDesign:
    """The design of a claim "mu >= threshold" with ``budget`` looks (one per task)."""
    budget = require_int("budget", budget, minimum=1)
    confidence = require_confidence("confidence", confidence)
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must lie strictly between 0 and 1, got {threshold}")
    grid = _grid()
    below = np.append(grid[grid < threshold], threshold)
    above = np.insert(grid[grid > threshold], 0, threshold)
    upper = monotone_boundaries(*boundaries(budget, below, confidence))[0][-1]
    lower = monotone_boundaries(*boundaries(budget, above, confidence))[1][0]
    return BinomialDesign(
        budget=budget,
        threshold=threshold,
        confidence=confidence,
        upper=upper,
        lower=lower,
        reach=_reach_table(upper, lower, budget),
    )


def _grid() -> np.ndarray:
    grid: np.ndarray = np.arange(1, _SEQUENCE_GRID) / _SEQUENCE_GRID
    return grid


def monotone_boundaries(upper: np.ndarray, lower: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Boundaries over increasing thresholds (rows) made monotone in the threshold: the upper one at m is the
    largest of those at every threshold up to m, the lower one the smallest of those from m up. Each test is then
    at most as eager as the exact one at its own threshold (so it keeps alpha/2 per side), the thresholds a path
    has rejected from below form an interval [0, a), those rejected from above (b, 1], and a decision at m means
    every threshold on the wrong side of m is rejected too: the reported sequence can never straddle a decided
    threshold. (The exact discrete boundaries are not monotone by themselves: spending in integer counts jumps.)"""
    up: np.ndarray = np.maximum.accumulate(upper, axis=0)
    down: np.ndarray = np.minimum.accumulate(lower[::-1], axis=0)[::-1]
    return up, down


DECIDED, FUTILE, BUDGET = 0, 1, 2
"""Stop reasons: a boundary was crossed; futility (nothing or too little reachable); the budget or data ran out."""


def binomial_decisions(design: BinomialDesign, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row (one battle's 0/1 observations in the seeded order, rows x n with n <= budget): the decision code (1
    certified, -1 refuted, 0 inconclusive), the observations used (the look it stopped at, else n) and the stop
    reason (DECIDED, FUTILE, BUDGET: also "undecided so far" while n < budget)."""
    x = np.atleast_2d(np.asarray(values, dtype=np.float64))
    rows, n = x.shape
    if n > design.budget:
        raise ValueError(f"values: {n} observations exceed the design's budget of {design.budget}")
    if x.size and not np.all((x == 0.0) | (x == 1.0)):
        raise ValueError("values must all be 0 or 1 for the exact binomial design")
    decision = np.zeros(rows, dtype=np.int64)
    used = np.full(rows, n, dtype=np.int64)
    reason = np.full(rows, BUDGET, dtype=np.int64)
    done = np.zeros(rows, dtype=bool)
    if design.reach[0, 0] == 0.0:  # nothing can be decided within this budget: run nothing
        return decision, np.zeros(rows, dtype=np.int64), np.full(rows, FUTILE, dtype=np.int64)
    s = np.cumsum(x, axis=1).astype(np.int64)
    for i in range(n):
        t = i + 1
        up = ~done & (s[:, i] >= design.upper[t])
        down = ~done & ~up & (s[:, i] <= design.lower[t])
        decision[up], decision[down] = 1, -1
        hit = up | down
        used[hit], reason[hit] = t, DECIDED
        done |= hit
        if t < design.budget:
            futile = ~done & (design.reach[t, s[:, i]] < FUTILITY_BELOW)
            used[futile], reason[futile] = t, FUTILE
            done |= futile
    return decision, used, reason


def binomial_sequence(values: np.ndarray, budget: int, confidence: float) -> tuple[float, float]:
    """The repeated confidence interval after ``values`` (0/1, in order): the m in [0, 1] that the design at m (with
    :func:`monotone_boundaries`) has not rejected at any look so far, on a grid of step 1/500 widened by one step
    outward."""
    x = np.asarray(values, dtype=np.float64)
    n = x.shape[0]
    if n == 0:
        return 0.0, 1.0
    grid = _grid()
    upper, lower = monotone_boundaries(*boundaries(budget, grid, confidence, looks=n))
    s = np.cumsum(x)
    looks = np.arange(1, n + 1)
    above = (s[None, :] >= upper[:, looks]).any(axis=1)  # evidence mu > m: m rejected from below
    below = (s[None, :] <= lower[:, looks]).any(axis=1)
    kept = np.flatnonzero(~above & ~below)
    if kept.size == 0:  # cannot happen near the estimate; stay valid whatever happens
        return 0.0, 1.0
    low = max(0.0, grid[kept[0]] - 1.0 / _SEQUENCE_GRID)
    high = min(1.0, grid[kept[-1]] + 1.0 / _SEQUENCE_GRID)
    return round(float(low), 9), round(float(high), 9)  # k/500 - 1/500 exactly, not 1e-17 below it

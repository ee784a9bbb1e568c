"""Which sequential design a certification uses, chosen from the config alone (issue 28). Pure numpy.

- A claim "pass^k >= threshold" (j = k: every per-task value is 0 or 1 by construction) with a budget of at most
  ``MAX_BINOMIAL_TASKS`` tasks: the exact group-sequential binomial design of
  :mod:`green_agent.statistics.sequential_binomial` (looks after every task, power error spending, futility stop).
  Ville's inequality, which the betting sequence needs for values of any shape, wastes most of alpha at a few
  dozen observations; the exact design does not.
- Every other claim (pass^j with j < k, whose per-task values lie anywhere in [0, 1]; comparisons with a baseline)
  and larger budgets: the betting confidence sequence of :mod:`green_agent.statistics.certification` with bets
  truncated at ``TRUNCATION``, and two futility stops: inconclusive as soon as no values of the remaining budget
  could reach either capital bar (the decision is then the one the whole budget would give, so nothing changes but
  the attempts), and at a quarter, half and three quarters of the budget when seeded continuations (bootstrap of
  the values so far, widened by one 0 and one 1) rarely reach one (:func:`predictive_chance`).
  Turning such values into 0/1 coins of the same mean would make the exact design apply to them too, but its
  guarantee then holds over fresh coins only: coins drawn from the config's seed (0 unless set) would be the same in
  every battle, so they are not used.

Everything here depends only on the config (claim, confidence, budget, seed), so a resume continues the same looks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from green_agent.statistics.betting import TUNING_ALPHA, betting_confidence_sequence
from green_agent.statistics.certification import CERTIFY_METHOD, threshold_capitals
from green_agent.statistics.sequential_binomial import (
    BINOMIAL_METHOD,
    BUDGET,
    DECIDED,
    FUTILE,
    FUTILITY_BELOW,
    MAX_BINOMIAL_TASKS,
    SPENDING_POWER,
    BinomialDesign,
    binomial_decisions,
    binomial_design,
    binomial_sequence,
)

TRUNCATION = 0.8
"""c of the betting design's bets, l+(m) = min(l, c / m): 0.8 rather than the intervals' 0.5, so concentrated values
(every task near 0.9, say) move the capital fast enough to decide within a few dozen tasks; any c < 1 keeps the
capital a nonnegative martingale, so the guarantee is the same (benchmarks/bench_certify.py)."""

StopReason = Literal["decided", "futility", "budget"]
REASONS: dict[int, StopReason] = {DECIDED: "decided", FUTILE: "futility", BUDGET: "budget"}


@dataclass(frozen=True)
class CertifyDesign:
    """The design of one certification: method, budget (looks), and what it needs to decide."""

    threshold: float
    confidence: float
    budget: int
    """Looks: one after every task of the budget (tasks in the seeded order)."""
    binary: bool
    """The per-task values are 0 or 1 by construction."""
    binomial: BinomialDesign | None
    """The exact design (None: the betting sequence)."""

    @property
    def method(self) -> str:
        if self.binomial is None:
            return CERTIFY_METHOD
        return BINOMIAL_METHOD

    @property
    def description(self) -> str:
        if self.binomial is None:
            return (
                "betting confidence sequence on per-task pass^j estimates in the seeded order, stopped as "
                "inconclusive once no remaining values could decide"
            )
        return (
            f"exact binomial group-sequential test, a look after every task of {self.budget}, alpha/2 per side "
            f"spent as (t / {self.budget})^{SPENDING_POWER:g} by look t; futility stop when the predictive chance "
            f"of a decision within the budget is below {FUTILITY_BELOW:g}"
        )

    def decisions(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per row of per-task values in order (rows x n, n <= budget): decision code (1 certified, -1 refuted, 0
        not decided), observations used, stop code (DECIDED, FUTILE, BUDGET = still running while n < budget)."""
        x = np.atleast_2d(np.asarray(values, dtype=np.float64))
        if self.binomial is not None:
            return binomial_decisions(self.binomial, x)
        return betting_decisions(x, self.threshold, self.confidence, self.budget)

    def sequence(self, values: np.ndarray) -> tuple[float, float]:
        """The confidence sequence after ``values`` (one battle, in order): the decision's basis."""
        x = np.asarray(values, dtype=np.float64)
        if self.binomial is not None:
            return binomial_sequence(x, self.budget, self.confidence)
        if x.size == 0:
            return 0.0, 1.0
        cs = betting_confidence_sequence(x, confidence=self.confidence, truncation=TRUNCATION)
        return cs.low[-1], cs.high[-1]


def certify_design(
    *, threshold: float, confidence: float, budget: int, binary: bool, comparison: bool
) -> CertifyDesign:
    """The design for a claim (see the module docstring): deterministic in its arguments."""
    exact = binary and not comparison and 1 <= budget <= MAX_BINOMIAL_TASKS
    return CertifyDesign(
        threshold=threshold,
        confidence=confidence,
        budget=budget,
        binary=binary,
        binomial=binomial_design(budget, threshold, confidence) if exact else None,
    )


def betting_decisions(
    values: np.ndarray, threshold: float, confidence: float, budget: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The betting sequence's decisions at ``threshold`` (as
    :func:`green_agent.statistics.certification.sequential_decisions`), stopped as inconclusive (FUTILE) once the
    largest capital the remaining looks of ``budget`` could add leaves both gamblers below the bar. That bound takes
    every remaining bet at its largest possible size and every value at the far end of [0, 1], so a stop never
    changes the decision the whole budget would give."""
    x = np.atleast_2d(np.asarray(values, dtype=np.float64))
    rows, n = x.shape
    bar = math.log(2.0 / (1.0 - confidence))
    decision = np.zeros(rows, dtype=np.int64)
    used = np.full(rows, n, dtype=np.int64)
    reason = np.full(rows, BUDGET, dtype=np.int64)
    t = np.arange(1, budget + 1, dtype=np.float64)
    # The plug-in bet at look t is sqrt(2 log(2/a0) / (s2 t log(1 + t))) with s2 >= 1/(4 t): at most this.
    largest = np.sqrt(8.0 * math.log(2.0 / TUNING_ALPHA) / np.log1p(t))
    gain_up = np.log1p(np.minimum(largest, TRUNCATION / threshold) * (1.0 - threshold))
    gain_down = np.log1p(np.minimum(largest, TRUNCATION / (1.0 - threshold)) * threshold)
    ahead_up = np.concatenate([np.cumsum(gain_up[::-1])[::-1], [0.0]])  # [i]: most the looks after i can add
    ahead_down = np.concatenate([np.cumsum(gain_down[::-1])[::-1], [0.0]])
    if ahead_up[0] < bar and ahead_down[0] < bar:
        return decision, np.zeros(rows, dtype=np.int64), np.full(rows, FUTILE, dtype=np.int64)
    if n == 0:
        return decision, used, reason
    up, down = threshold_capitals(x, threshold, TRUNCATION)
    done = np.zeros(rows, dtype=bool)
    predictive_looks = futility_looks(budget)
    for i in range(n):
        cert = ~done & (up[:, i] >= bar)
        ref = ~done & ~cert & (down[:, i] >= bar)
        decision[cert], decision[ref] = 1, -1
        hit = cert | ref
        used[hit], reason[hit] = i + 1, DECIDED
        done |= hit
        futile = ~done & (up[:, i] + ahead_up[i + 1] < bar) & (down[:, i] + ahead_down[i + 1] < bar)
        if i + 1 in predictive_looks and (~done & ~futile).any():
            live = np.flatnonzero(~done & ~futile)
            chance = predictive_chance(x[live, : i + 1], threshold, bar, budget)
            futile[live[chance < FUTILITY_BELOW]] = True
        used[futile], reason[futile] = i + 1, FUTILE
        done |= futile
    return decision, used, reason


PREDICTIVE_DRAWS = 64
"""Continuations drawn per predictive check (seeded by the look: deterministic, so a resume stops alike)."""


MAX_PREDICTIVE_TASKS = 1000
"""Budgets above this many tasks keep only the deterministic futility stop (the predictive check simulates
``PREDICTIVE_DRAWS`` continuations to the budget)."""


def futility_looks(budget: int) -> set[int]:
    """The looks at which the betting design checks its predictive chance of a decision: a quarter, half and three
    quarters of the budget (derived from the budget alone; none above ``MAX_PREDICTIVE_TASKS``)."""
    if budget > MAX_PREDICTIVE_TASKS:
        return set()
    return {math.ceil(budget * f) for f in (0.25, 0.5, 0.75) if 1 <= math.ceil(budget * f) < budget}


def predictive_chance(prefix: np.ndarray, threshold: float, bar: float, budget: int) -> np.ndarray:
    """Per row of observed values (rows x t): the share of continuations to the budget, each value drawn from the
    row's own values plus one 0 and one 1 (a bootstrap widened toward both ends), in which either capital reaches
    ``bar`` at a later look. Only used to give up (non-binding futility), so its approximation cannot raise the
    error; benchmarks/bench_certify.py measures what it costs in decisions."""
    rows, t = prefix.shape
    rest = budget - t
    pool = np.concatenate([prefix, np.zeros((rows, 1)), np.ones((rows, 1))], axis=1)
    rng = np.random.default_rng([28, 3, t, budget])
    picks = rng.integers(0, t + 2, size=(rows, PREDICTIVE_DRAWS, rest))
    future = np.take_along_axis(np.broadcast_to(pool[:, None, :], (rows, PREDICTIVE_DRAWS, t + 2)), picks, axis=2)
    paths = np.concatenate([np.broadcast_to(prefix[:, None, :], (rows, PREDICTIVE_DRAWS, t)), future], axis=2)
    up, down = threshold_capitals(paths.reshape(rows * PREDICTIVE_DRAWS, budget), threshold, TRUNCATION)
    hit = (up[:, t:] >= bar).any(axis=1) | (down[:, t:] >= bar).any(axis=1)
    chance: np.ndarray = hit.reshape(rows, PREDICTIVE_DRAWS).mean(axis=1)
    return chance

"""Sequential certification: stop a battle as soon as "is pass^j >= threshold?" is answered (issue 28). Pure numpy.

Design (uniform allocation, early stopping; validity shown by ``benchmarks/bench_certify.py``):

- The target is pass^j over *tasks of this kind*: the scenario's tasks are treated as i.i.d. draws of that
  population. The battle visits them in a seeded random order (:func:`certification_order`), each task's k attempts
  as one block.
- The observation of task i is its unbiased per-task estimate ``pass_hat_k(n, c, j)`` (in [0, 1]); its mean given
  every earlier observation is the target, so the capital below is a nonnegative martingale under the null.
- Observations enter **in the seeded order only** (:func:`ordered_observations`): task i enters once tasks 1..i are
  all complete. A task that finishes early (easy tasks are often fast) waits for the tasks before it, so the speed of
  an attempt can never select which observations are seen. A task with fewer than j scored attempts (harness
  errors) halts the sequence there: skipping it could bias the estimate if harness errors depend on the task.
- After every observation the betting confidence sequence of :mod:`green_agent.statistics.betting` (Waudby-Smith &
  Ramdas 2024, time-uniform plug-in bets; valid under continuous monitoring, Howard et al. 2021) is checked at the
  threshold: *certified* once the up-gambler's capital at the threshold reached 2/alpha (the sequence lies wholly
  above it), *refuted* once the down-gambler's did (wholly below), else *inconclusive* when the budget is spent.
  By Ville's inequality the chance that the sequence ever excludes the truth is <= alpha = 1 - confidence, so the
  chance of a wrong decision is <= alpha whatever the stopping time.
- Which design decides is chosen from the config by :mod:`green_agent.statistics.certify_design`: for pass^k
  claims (0/1 values) at budgets of up to 100 tasks an exact group-sequential binomial test
  (:mod:`green_agent.statistics.sequential_binomial`), which wastes far less of alpha at small n; other claims,
  comparisons and larger budgets use the betting sequence here, with a futility stop once no remaining values
  could decide.
- Comparison form (:func:`paired_target`): per-task differences d in [-1, 1] of the candidate and a baseline are
  mapped to (d + 1) / 2 in [0, 1]; "no worse than, with margin m" is the threshold -m on d, "better than" +m.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from green_agent.statistics._validation import require_confidence
from green_agent.statistics.betting import (
    _TRUNCATION,
    BETTING_METHOD,
    _plugin_bets,
    betting_confidence_sequence,
    betting_interval,
)
from green_agent.statistics.certify_stop import TaskStop, stopped_task_value
from green_agent.statistics.passk import pass_hat_k

CertifyDecision = Literal["certified", "refuted", "inconclusive"]
CERTIFY_METHOD = "betting_cs_wsr2024_sequential"


def parse_certify_claim(text: str) -> tuple[int, float]:
    """``"pass^4>=0.8"`` -> (4, 0.8). ValueError naming the expected form otherwise."""
    metric, sep, value = "".join(text.split()).partition(">=")
    j_text = metric.removeprefix("pass^")
    try:
        if not sep or j_text == metric or not j_text.isdigit():
            raise ValueError
        threshold = float(value)
        if not math.isfinite(threshold):
            raise ValueError
    except ValueError:
        raise ValueError(f"certify: expected a claim like 'pass^4>=0.8', got {text!r}") from None
    return int(j_text), threshold


def certification_order(task_keys: Sequence[str], seed: int) -> list[str]:
    """The seeded random order the battle visits its tasks in (sorted keys, then permuted): same keys and seed,
    same order, whatever order the keys came in."""
    keys = sorted(task_keys)
    perm = np.random.default_rng([int(seed), 28]).permutation(len(keys))
    return [keys[i] for i in perm]


def task_value(outcomes: Sequence[bool | None], j: int) -> float | None:
    """Unbiased pass^j estimate of one task from its scored outcomes (``None`` outcomes are harness errors, left
    out); ``None`` when fewer than j are scored."""
    scored = [o for o in outcomes if o is not None]
    return pass_hat_k(len(scored), sum(1 for o in scored if o), j)


def ordered_observations(
    order: Sequence[str],
    outcomes: Mapping[str, Sequence[bool | None]],
    k: int,
    j: int,
    *,
    stop_at_failure: bool = False,
) -> tuple[list[float], str | None]:
    """The observations that enter the sequence: per-task values along ``order`` up to the first task whose block
    of k attempts is not complete (or has fewer than j scored attempts). Returns the values and the key of the task
    the sequence waits for (None when every task in ``order`` entered). With ``stop_at_failure`` (a pass^k claim
    whose tasks stop at their first failure, :mod:`green_agent.statistics.certify_stop`) a task enters as 0 at its
    first scored failure, as 1 after k scored passes."""
    values: list[float] = []
    for key in order:
        got = outcomes.get(key, ())
        if stop_at_failure:
            v = stopped_task_value(got, k)
        elif len(got) < k:
            return values, key
        else:
            v = task_value(got, j)
        if v is None:
            return values, key
        values.append(v)
    return values, None


def threshold_capitals(
    values: np.ndarray, threshold: float, truncation: float = _TRUNCATION
) -> tuple[np.ndarray, np.ndarray]:
    """log K+_t and log K-_t at m = ``threshold`` after each observation, vectorised over rows (rows x n), with the
    same time-uniform bets as :func:`green_agent.statistics.betting.betting_confidence_sequence` (and its
    ``truncation``)."""
    x = np.atleast_2d(np.asarray(values, dtype=np.float64))
    bets = _plugin_bets(x, None)
    centred = x - threshold
    up = np.log1p(np.minimum(bets, truncation / threshold) * centred)
    down = np.log1p(-np.minimum(bets, truncation / (1.0 - threshold)) * centred)
    return np.cumsum(up, axis=-1), np.cumsum(down, axis=-1)


def sequential_decisions(
    values: np.ndarray, threshold: float, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """For each row (one battle's observations in order, rows x n): the decision code (1 certified, -1 refuted,
    0 inconclusive) and the number of observations used (the first look at which it was decided, else n)."""
    confidence = require_confidence("confidence", confidence)
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must lie strictly between 0 and 1, got {threshold}")
    x = np.atleast_2d(np.asarray(values, dtype=np.float64))
    rows, n = x.shape
    if n == 0:
        return np.zeros(rows, dtype=np.int64), np.zeros(rows, dtype=np.int64)
    bar = math.log(2.0 / (1.0 - confidence))
    up, down = threshold_capitals(x, threshold)
    hit_up, hit_down = up >= bar, down >= bar
    first_up = np.where(hit_up.any(axis=1), hit_up.argmax(axis=1), n)
    first_down = np.where(hit_down.any(axis=1), hit_down.argmax(axis=1), n)
    decision = np.where(first_up < first_down, 1, np.where(first_down < first_up, -1, 0))
    used = np.where(decision == 0, n, np.minimum(first_up, first_down) + 1)
    return decision.astype(np.int64), used.astype(np.int64)


def paired_target(
    differences: Sequence[float], margin: float, kind: Literal["no_worse", "better"]
) -> tuple[list[float], float]:
    """Per-task differences in [-1, 1] -> observations in [0, 1] and the threshold on that scale for the claim
    "candidate - baseline >= -margin" (``no_worse``) or ">= +margin" (``better``)."""
    bound = -margin if kind == "no_worse" else margin
    return [(float(d) + 1.0) / 2.0 for d in differences], (bound + 1.0) / 2.0


class Certification(BaseModel):
    """A certification's result, as summary.json's optional ``certification`` object."""

    model_config = ConfigDict(frozen=True)

    claim: str
    """What was asked, e.g. "pass^4 >= 0.8"."""
    metric_j: int = Field(ge=1)
    threshold: float
    confidence: float
    decision: CertifyDecision
    tasks_observed: int = Field(ge=0)
    """Observations (tasks, in the seeded order) in the confidence sequence at the stop."""
    tasks_budget: int = Field(ge=0)
    attempts_used: int = Field(ge=0)
    """Attempts run (those in flight at the stop included)."""
    attempts_fixed_design: int = Field(ge=0)
    """Attempts the fixed design (tasks x k, or max_attempts) would have run."""
    sequence_low: float | None
    sequence_high: float | None
    """The confidence sequence at the stop (valid at every look: the decision's basis)."""
    estimate: float | None
    """Mean of the observed per-task pass^j estimates."""
    interval_low: float | None = None
    interval_high: float | None = None
    interval_note: str = (
        "fixed-sample betting interval over the observed tasks; the stop was chosen by looking at the data, so do "
        "not re-read it as a fixed-sample interval: the confidence sequence is the valid one"
    )
    order_seed: int
    order: list[str]
    """The seeded task order (the sequence's order)."""
    waiting_for: str | None = None
    """The task the sequence was waiting on when the budget ended (incomplete or without enough scored attempts)."""
    baseline: str | None = None
    """Comparisons: the baseline's run directory. ``threshold``, the sequence, the estimate and its interval are
    then about the paired difference candidate - baseline in [-1, 1] (per task, paired by task key)."""
    method: str = CERTIFY_METHOD
    """The sequential design (green_agent/statistics/certify_design.py): ``exact_binomial_group_sequential`` or
    ``betting_cs_wsr2024_sequential``."""
    bets: str = BETTING_METHOD
    method_note: str | None = None
    """The design in words: looks, error spending, futility rule."""
    stop_reason: Literal["decided", "futility", "budget"] | None = None
    """Why it stopped: a decision; futility (inconclusive early: no decision was reachable, or too unlikely, within
    the budget); the budget ran out (or the sequence waits on ``waiting_for``)."""
    task_stop: TaskStop | None = Field(default=None, exclude_if=lambda stop: stop is None)
    """pass^k claims: each task stopped at its first failure, the attempts that skipped (reason
    ``certify_task_failed``) and how the summary's figures treat such tasks. Absent otherwise."""


def certify_values(
    values: Sequence[float],
    *,
    threshold: float,
    confidence: float,
    budget_exhausted: bool,
) -> CertifyDecision | None:
    """The decision after these observations; None while undecided and the budget is not spent."""
    code, _ = sequential_decisions(np.asarray([values], dtype=np.float64), threshold, confidence)
    if code[0] == 1:
        return "certified"
    if code[0] == -1:
        return "refuted"
    return "inconclusive" if budget_exhausted else None


def build_certification(
    *,
    claim: str,
    j: int,
    threshold: float,
    confidence: float,
    values: Sequence[float],
    decision: CertifyDecision,
    tasks_budget: int,
    attempts_used: int,
    attempts_fixed_design: int,
    order_seed: int,
    order: Sequence[str],
    waiting_for: str | None,
    baseline: str | None = None,
    sequence: tuple[float, float] | None = None,
    method: str = CERTIFY_METHOD,
    method_note: str | None = None,
    stop_reason: Literal["decided", "futility", "budget"] | None = None,
) -> Certification:
    """The summary object: the confidence sequence over the observations at the stop (``sequence`` when the design
    computed it, else the betting sequence) and the point estimate. With ``baseline`` the observations are
    (d + 1) / 2 of paired differences d: figures are reported on d's scale."""
    cs_low = cs_high = est = i_low = i_high = None
    if values:
        if sequence is None:
            cs = betting_confidence_sequence(list(values), confidence=confidence)
            sequence = cs.low[-1], cs.high[-1]
        cs_low, cs_high = sequence
        est = float(np.mean(values))
        fixed = betting_interval(list(values), confidence=confidence)
        if fixed is not None:
            i_low, i_high = fixed.low, fixed.high
    if baseline is not None:

        def back(v: float | None) -> float | None:
            return None if v is None else 2.0 * v - 1.0

        cs_low, cs_high, est, i_low, i_high = back(cs_low), back(cs_high), back(est), back(i_low), back(i_high)
        threshold = 2.0 * threshold - 1.0
    return Certification(
        claim=claim,
        metric_j=j,
        threshold=threshold,
        confidence=confidence,
        decision=decision,
        tasks_observed=len(values),
        tasks_budget=tasks_budget,
        attempts_used=attempts_used,
        attempts_fixed_design=attempts_fixed_design,
        sequence_low=cs_low,
        sequence_high=cs_high,
        estimate=est,
        interval_low=i_low,
        interval_high=i_high,
        order_seed=order_seed,
        order=list(order),
        waiting_for=waiting_for,
        baseline=baseline,
        method=method,
        method_note=method_note,
        stop_reason=stop_reason,
    )

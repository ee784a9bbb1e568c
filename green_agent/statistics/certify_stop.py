"""Certify's within-task stop for pass^k claims (issue 28): the skip rule, the task's observation, the summary.

A claim "pass^k >= threshold" (j = k, no baseline) only needs each task's indicator "all k attempts passed", and
that indicator is known to be 0 at the task's first failure. So a certify battle runs a task's attempts one after
another and skips the rest at its first scored failure (reason :data:`SKIP_REASON`; not a failure of the agent).

- **Skip rule** (:func:`attempts_to_skip`): once any recorded attempt of a task is a scored failure, none of its
  unrecorded attempts runs. A pure function of the recorded outcomes, so a resume continues the same sequence.
  Harness errors (``None``) are not failures: the task's next attempt runs.
- **Validity**: the indicator is unchanged by the stop (a task with a failure among its first k scored attempts has
  indicator 0 whether or not the rest ran), so the sequential designs and their error bounds
  (:mod:`green_agent.statistics.certify_design`) are untouched; ``benchmarks/bench_certify.py`` simulates it.
- **The summary's other figures** (:func:`first_failure_summary`). Under this stop a task yields X, its leading
  scored successes (0..k), and nothing more. The unique unbiased per-task estimate of pass^j = p^j from X is the
  indicator X >= j ("the first j attempts passed"): sum_x f(x) P(X = x) = p^j forces f(x) = 1[x >= j]. The usual
  estimate over the attempts run (c / n for pass^1) is biased (k = 2: E[c / n] = (p + p^2) / 2). So every pass^j
  is reported from the indicators (0/1 values: Clopper-Pearson intervals). pass@j for j >= 2 has no unbiased
  estimate in [0, 1] from X (for j = 2 it would be 2 at X = 1), so it is left empty, with a note. A task cut short
  by the battle's own stop (every attempt run passed, fewer than k) has pass^j known (1) for j up to its attempts
  and unknown above: it is left out there (coverage says so; only tasks passing so far are cut, so this leans low,
  and moves a figure by at most the cut tasks' share). The pooled (micro) rate counts the attempts run, which leans
  toward tasks that ran more of them; the note says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from green_agent.statistics.betting import clopper_pearson_bounds
from green_agent.statistics.summary import MacroStat, TaskStat, TrialsSummary, mean_and_se, summarize_trials

SKIP_REASON: Final = "certify_task_failed"
"""Why a task's remaining attempts were not run (events and summary.json): its pass^k is already 0."""

STOP_RULE: Final = "stop_task_at_first_failure"


def stops_within_task(k: int, j: int, comparison: bool) -> bool:
    """Whether a certify claim on pass^j with k attempts per task stops each task at its first failure: a pass^k
    claim (j = k >= 2) without a baseline. Such a run's attempts are not a fixed design: read its per-task pass^j
    with :func:`stopped_pass_hat`, never as a mean over the attempts run."""
    return not comparison and j == k and k >= 2


def stopped_pass_hat(outcomes: Sequence[bool | None], j: int) -> float | None:
    """A task's unbiased pass^j under the stop (``outcomes`` in attempt order): 1 when its first j scored attempts
    passed, 0 when a scored failure came first, None when not known (fewer than j scored attempts, all passed)."""
    x, failed = leading_successes(outcomes)
    if x >= j:
        return 1.0
    return 0.0 if failed else None


def first_failure(outcomes: Mapping[int, bool | None]) -> int | None:
    """The smallest attempt number whose recorded outcome is a scored failure (``False``); None without one."""
    failed = [attempt for attempt, outcome in outcomes.items() if outcome is False]
    return min(failed) if failed else None


def attempts_to_skip(outcomes: Mapping[int, bool | None], k: int) -> list[int]:
    """The attempts (1..k) of a task not to run: every unrecorded one once a recorded attempt failed, else none."""
    if first_failure(outcomes) is None:
        return []
    return [attempt for attempt in range(1, k + 1) if attempt not in outcomes]


def leading_successes(outcomes: Sequence[bool | None]) -> tuple[int, bool]:
    """X (scored successes before the first scored failure, in attempt order; harness errors left out) and whether
    a scored failure ended the task."""
    scored = [o for o in outcomes if o is not None]
    if False in scored:
        return scored.index(False), True
    return len(scored), False


def stopped_task_value(outcomes: Sequence[bool | None], k: int) -> float | None:
    """A task's pass^k indicator in the sequence: 0 at a scored failure, 1 after k scored passes, else None (not
    known yet: the sequence waits on it, as for an incomplete block)."""
    x, failed = leading_successes(outcomes)
    if failed:
        return 0.0
    return 1.0 if x >= k else None


class SkippedAttempts(BaseModel):
    """One task's attempts that certify's within-task stop did not run."""

    model_config = ConfigDict(frozen=True)

    task_key: str
    failed_attempt: int = Field(ge=1)
    """The attempt whose failure made the task's pass^k 0."""
    attempts: list[int]
    """The attempt numbers not run."""
    reason: Literal["certify_task_failed"] = "certify_task_failed"


class TaskStop(BaseModel):
    """summary.json's ``certification.task_stop``: the within-task stop of a pass^k claim and what it skipped."""

    model_config = ConfigDict(frozen=True)

    rule: Literal["stop_task_at_first_failure"] = "stop_task_at_first_failure"
    attempts_skipped: int = Field(ge=0)
    tasks_stopped: int = Field(ge=0)
    """Tasks whose remaining attempts were skipped after a failure."""
    tasks_cut: int = Field(ge=0)
    """Tasks the battle's own stop left with fewer than k attempts, all passed (pass^j unknown above them)."""
    skipped: list[SkippedAttempts] = Field(default_factory=list)
    note: str


def skipped_attempts(attempts: Mapping[str, Mapping[int, bool | None]], k: int) -> list[SkippedAttempts]:
    """Per task (in key order) the attempts the rule skipped; tasks without a failure are not listed."""
    out: list[SkippedAttempts] = []
    for key in sorted(attempts):
        outcomes = attempts[key]
        failed = first_failure(outcomes)
        skip = attempts_to_skip(outcomes, k)
        if failed is not None and skip:
            out.append(SkippedAttempts(task_key=key, failed_attempt=failed, attempts=skip))
    return out


STOP_NOTE = (
    "Certify stopped each task at its first failure ({skipped} attempt(s) of {stopped} task(s) not run, reason "
    "certify_task_failed: not failures of the agent). Per task, pass^j is then 1 when its first j attempts passed, "
    "else 0 (the unbiased estimate under this stop; not the mean over the attempts run), averaged over the tasks "
    "where it is known ({cut} task(s) cut by the battle's stop with every attempt passed are left out above their "
    "attempts). pass@j for j >= 2 cannot be estimated from such data and is left empty; the pooled (micro) rate "
    "counts the attempts run and leans toward tasks that ran more of them."
)


def task_stop_record(attempts: Mapping[str, Mapping[int, bool | None]], k: int) -> TaskStop:
    """summary.json's ``certification.task_stop`` from the recorded attempts (task key -> attempt -> outcome)."""
    skipped = skipped_attempts(attempts, k)
    cut = sum(1 for got in attempts.values() if first_failure(got) is None and 0 < len(got) < k)
    count = sum(len(s.attempts) for s in skipped)
    return TaskStop(
        attempts_skipped=count,
        tasks_stopped=len(skipped),
        tasks_cut=cut,
        skipped=skipped,
        note=STOP_NOTE.format(skipped=count, stopped=len(skipped), cut=cut),
    )


def first_failure_summary(
    trials: Mapping[str, Sequence[bool | None]], k: int, seed: int, note: str | None = None
) -> TrialsSummary:
    """The battle's summary under the within-task stop (see the module docstring): ``trials`` is task key ->
    outcomes in attempt order (as :func:`summarize_trials` takes them); ``note`` (the task stop's) is appended to
    the summary's ``interval_note``."""
    base = summarize_trials(trials, k_max=k, seed=seed)
    leading = [leading_successes(trials[t.task_id]) for t in base.tasks]
    known = np.array([k if failed else x for x, failed in leading], dtype=np.int64)  # pass^j known for j <= this
    x_arr = np.array([x for x, _ in leading], dtype=np.int64)
    tasks: list[TaskStat] = []
    for stat, x, depth in zip(base.tasks, x_arr.tolist(), known.tolist(), strict=True):
        hats = tuple(float(x >= j) if j <= depth else None for j in range(1, k + 1))
        tasks.append(stat.model_copy(update={"pass_hat": hats, "pass_at": (hats[0], *([None] * (k - 1)))}))
    macro: list[MacroStat] = []
    for j in range(1, k + 1):
        mask = known >= j
        values = (x_arr[mask] >= j).astype(np.float64)
        mean, se = mean_and_se(values)
        low = high = None
        if values.size >= 2:
            bounds = clopper_pearson_bounds(np.array([values.sum()]), np.array([values.size]), base.confidence)
            low, high = float(bounds[0, 0]), float(bounds[0, 1])
        at = (mean, se, low, high) if j == 1 else (None, None, None, None)
        macro.append(
            MacroStat(
                j=j,
                coverage=int(mask.sum()),
                total_tasks=base.total_tasks,
                pass_hat_mean=mean,
                pass_hat_se=se,
                pass_hat_ci_low=low,
                pass_hat_ci_high=high,
                pass_at_mean=at[0],
                pass_at_se=at[1],
                pass_at_ci_low=at[2],
                pass_at_ci_high=at[3],
            )
        )
    text = " ".join(part for part in (base.interval_note, note) if part)
    return base.model_copy(update={"tasks": tasks, "macro": macro, "interval_note": text or None})

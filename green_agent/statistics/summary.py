"""``summarize_trials``: per-task pass^j / pass@j, macro means with coverage and intervals, micro success rate.

Input: task id -> ordered outcomes, ``True`` / ``False`` or ``None`` for an infrastructure error (the harness or the
simulated user failed, not the agent). Infrastructure errors are counted per task and overall and excluded from n.

Why macro (an unweighted mean over tasks) is the headline: tasks are the units a user cares about and the units
that are independent; pooling attempts ("micro") lets tasks with more counted attempts weigh more. Micro is reported
too, labelled. Both get betting confidence intervals (:mod:`green_agent.statistics.betting`) whose target is
"tasks of this kind": the mean over the population of tasks the battle's tasks were drawn from (per-task unbiased
estimates are bounded in [0, 1], so the interval holds at any number of tasks and is never zero width). The pooled
rate's interval treats tasks, not attempts, as the independent units (attempts of one task are correlated).

Why coverage matters: pass^j is undefined for a task with fewer than j counted trials. Such tasks are left out of
the macro mean for that j, and the number of tasks that *were* included is reported beside it, instead of clamping
j or pretending the task passed.

Output models are frozen pydantic models; ``model_dump(mode="json")`` is what summary.json stores. Per-j values are
lists indexed by j - 1 (per task) or records carrying ``j`` (macro) so nothing depends on int dict keys in JSON.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from green_agent.statistics._validation import ordered_items, require_confidence, require_int
from green_agent.statistics.betting import BETTING_METHOD, betting_bounds, clopper_pearson_bounds
from green_agent.statistics.intervals import bootstrap_means, masked_bootstrap_means, percentile_bounds
from green_agent.statistics.passk import pass_curves


class TaskStat(BaseModel):
    """One task: counts, success rate and pass^j / pass@j for j = 1..k_max (index j - 1; ``None`` when n < j)."""

    model_config = ConfigDict(frozen=True)

    task_id: str
    n: int
    """Counted trials (infrastructure errors excluded)."""
    c: int
    """Successful trials."""
    infra_errors: int
    success_rate: float | None
    """c / n; ``None`` when n == 0."""
    longest_success_streak: int
    """Order-dependent, infrastructure errors removed first; a streak, not tau-bench's pass^j."""
    pass_hat: tuple[float | None, ...]
    """pass^j for j = 1..k_max at index j - 1."""
    pass_at: tuple[float | None, ...]
    """pass@j for j = 1..k_max at index j - 1."""


FEW_TASKS = 10
"""Below this many tasks the summary carries :data:`FEW_TASKS_CAVEAT` (intervals are valid, but wide)."""
INTERVAL_METHOD = "betting_wsr2024+clopper_pearson"
"""Betting intervals; exact binomial ones where every per-task value is 0 or 1 by construction (n = j)."""
INTERVAL_TARGET = "tasks_of_this_kind"
INTERVAL_NOTE = (
    "Intervals are {level} betting confidence intervals (Waudby-Smith & Ramdas 2024) for the mean over the "
    "population of tasks these tasks were drawn from (tasks of this kind), treating tasks as the independent units "
    "(exact Clopper-Pearson where every task has exactly j attempts, so its pass^j is 0 or 1); they hold at any "
    "number of tasks and are conservative for these tasks alone."
)
FEW_TASKS_CAVEAT = (
    "Only {tasks} task(s): the intervals are valid but wide, and a mean over so few tasks says little about tasks "
    "of this kind; use at least 10 (arena plan says how many a question needs)."
)


class MacroStat(BaseModel):
    """Macro means over the tasks with n >= j, with standard errors and betting confidence intervals."""

    model_config = ConfigDict(frozen=True)

    j: int
    coverage: int
    """Tasks with at least j counted trials (the ones averaged)."""
    total_tasks: int
    pass_hat_mean: float | None
    pass_hat_se: float | None
    pass_hat_ci_low: float | None
    pass_hat_ci_high: float | None
    pass_at_mean: float | None
    pass_at_se: float | None
    pass_at_ci_low: float | None
    pass_at_ci_high: float | None


class MicroStat(BaseModel):
    """Success rate pooled over all counted trials of all tasks, with a Wilson interval. Labelled "micro"."""

    model_config = ConfigDict(frozen=True)

    successes: int
    trials: int
    infra_errors: int
    rate: float | None
    ci_low: float | None
    ci_high: float | None
    confidence: float
    method: str = "wilson"


def _none(value: object) -> bool:
    return value is None


class TrialsSummary(BaseModel):
    """Everything ``summarize_trials`` computed, ready for ``model_dump(mode="json")``."""

    model_config = ConfigDict(frozen=True)

    k_max: int
    n_bootstrap: int
    seed: int
    confidence: float
    total_tasks: int
    infra_errors: int
    tasks: list[TaskStat]
    macro: list[MacroStat]
    """One record per j = 1..k_max."""
    micro: MicroStat
    interval_method: str | None = Field(default=None, exclude_if=_none)
    """Method of the intervals here (``betting_wsr2024+clopper_pearson``, see :data:`INTERVAL_METHOD`); absent
    (None) in summaries written before it existed, whose macro intervals are percentile bootstraps over tasks and
    whose micro interval is Wilson's."""
    interval_target: str | None = Field(default=None, exclude_if=_none)
    """What the intervals are about: ``tasks_of_this_kind`` (see :data:`INTERVAL_NOTE`); absent in older summaries."""
    interval_note: str | None = Field(default=None, exclude_if=_none)
    """The target and method in one sentence, for readers of summary.json."""
    few_tasks_caveat: str | None = Field(default=None, exclude_if=_none)
    """Set when fewer than 10 tasks have a counted trial (:data:`FEW_TASKS_CAVEAT`); absent otherwise."""

    def interval_labels(self) -> tuple[str, str]:
        """How to name the intervals in a report: (micro label, macro heading), e.g. ("betting 95%, tasks as
        units", "betting 95% intervals for tasks of this kind"); the old names for summaries written before
        ``interval_method`` existed."""
        level = f"{round(self.confidence * 100, 6):g}%"
        if self.interval_method is None:
            return f"Wilson {level}", f"task-level bootstrap {level} intervals"
        return f"betting {level}, tasks as units", f"betting {level} intervals for tasks of this kind"

    def macro_at(self, j: int) -> MacroStat | None:
        """The macro record for ``j``, or ``None`` when j is outside 1..k_max."""
        return self.macro[j - 1] if 1 <= j <= len(self.macro) else None

    def task(self, task_id: str) -> TaskStat | None:
        """The per-task record for ``task_id``, or ``None``."""
        return next((t for t in self.tasks if t.task_id == task_id), None)


@dataclass(frozen=True)
class TaskCounts:
    """Counts parsed from one task's outcomes (internal to the summaries)."""

    task_id: str
    n: int
    c: int
    infra_errors: int
    longest_streak: int


def count_trials(trials: Mapping[str, Sequence[bool | None]], name: str = "trials") -> list[TaskCounts]:
    """Validate ``trials`` and count per task in one pass (the hot loop of a 10,000-task summary)."""
    if not isinstance(trials, Mapping):
        raise ValueError(f"{name} must be a mapping of task id -> outcomes, got {type(trials).__name__}")
    counts: list[TaskCounts] = []
    for task_id, seq in trials.items():
        if not isinstance(task_id, str):
            raise ValueError(f"{name} keys must be task id strings, got {task_id!r} ({type(task_id).__name__})")
        items = ordered_items(f"{name}[{task_id!r}]", seq)
        n = c = infra = run = best = 0
        for index, outcome in enumerate(items):
            if outcome is None:
                infra += 1
                continue
            kind = type(outcome)
            if kind is not bool:
                if kind is np.bool_:
                    outcome = bool(outcome)
                else:
                    raise ValueError(
                        f"{name}[{task_id!r}][{index}] must be True, False or None (infrastructure error), "
                        f"got {outcome!r} ({kind.__name__})"
                    )
            n += 1
            if outcome:
                c += 1
                run += 1
                if run > best:
                    best = run
            else:
                run = 0
        counts.append(TaskCounts(task_id, n, c, infra, best))
    return counts


def curve_matrices(counts: Sequence[TaskCounts], k_max: int) -> tuple[np.ndarray, np.ndarray, list[TaskStat]]:
    """pass^j / pass@j matrices (tasks x k_max, NaN where undefined) and the per-task records.

    Curves are computed once per distinct (n, c): 10,000 tasks of 16 trials have at most 17 distinct pairs.
    """
    memo: dict[tuple[int, int], int] = {}
    curves: list[tuple[tuple[float | None, ...], tuple[float | None, ...]]] = []
    rows = np.empty(len(counts), dtype=np.intp)
    tasks: list[TaskStat] = []
    for i, tc in enumerate(counts):
        key = (tc.n, tc.c)
        slot = memo.get(key)
        if slot is None:
            slot = memo[key] = len(curves)
            curves.append(pass_curves(tc.n, tc.c, k_max) if k_max >= 1 else ((), ()))
        rows[i] = slot
        hats, ats = curves[slot]
        # Values were validated above; skip re-validation of 10,000 records.
        tasks.append(
            TaskStat.model_construct(
                task_id=tc.task_id,
                n=tc.n,
                c=tc.c,
                infra_errors=tc.infra_errors,
                success_rate=(tc.c / tc.n) if tc.n else None,
                longest_success_streak=tc.longest_streak,
                pass_hat=hats,
                pass_at=ats,
            )
        )
    width = max(k_max, 0)
    hat_u = np.array([[np.nan if v is None else v for v in h] for h, _ in curves], dtype=np.float64)
    at_u = np.array([[np.nan if v is None else v for v in a] for _, a in curves], dtype=np.float64)
    hat_u = hat_u.reshape(len(curves), width)
    at_u = at_u.reshape(len(curves), width)
    return hat_u[rows], at_u[rows], tasks


def coverage_bootstrap_bounds(
    columns: np.ndarray,
    column_j: Sequence[int],
    depth: np.ndarray,
    n_bootstrap: int,
    rng: np.random.Generator,
    confidence: float,
    *,
    low: float,
    high: float,
) -> np.ndarray:
    """Bootstrap bounds, shape ``(columns, 2)``, of the mean of each column over the rows with ``depth >= j``.

    One set of task resamples serves every column (see
    :func:`~green_agent.statistics.intervals.masked_bootstrap_means`). If some resample holds no qualifying task for a
    column, which is only plausible when very few tasks qualify, that column is re-bootstrapped over its qualifying
    tasks alone. Bounds are NaN where fewer than two tasks qualify or ``n_bootstrap`` is 0.
    """
    j_of_column = np.asarray(column_j, dtype=np.int64)
    bounds = np.full((j_of_column.size, 2), np.nan)
    if n_bootstrap == 0 or j_of_column.size == 0:
        return bounds
    distinct = sorted(set(j_of_column.tolist()))
    group_of_j: dict[int, int] = {}
    masks: list[np.ndarray] = []
    sizes: list[int] = []
    for j in distinct:
        mask = depth >= j
        size = int(mask.sum())
        if masks and size == sizes[-1]:  # nested sets: same size, same set
            group_of_j[j] = len(masks) - 1
            continue
        group_of_j[j] = len(masks)
        masks.append(mask)
        sizes.append(size)
    column_group = np.array([group_of_j[j] for j in j_of_column.tolist()], dtype=np.int64)
    usable = np.array([sizes[g] >= 2 for g in column_group.tolist()], dtype=bool)
    if not usable.any():
        return bounds
    reps = masked_bootstrap_means(columns, np.column_stack(masks), column_group, n_bootstrap, rng)
    for g, mask in enumerate(masks):
        cols = np.flatnonzero((column_group == g) & usable)
        if cols.size and np.isnan(reps[:, cols]).any():
            reps[:, cols] = bootstrap_means(columns[mask][:, cols], n_bootstrap, rng)
    bounds[usable] = percentile_bounds(reps[:, usable], confidence, low=low, high=high)
    return bounds


def mean_and_se(values: np.ndarray) -> tuple[float | None, float | None]:
    """Mean and standard error (sd ddof=1 / sqrt(T)) of a vector; ``None``s when too short."""
    if values.size == 0:
        return None, None
    mean = float(np.mean(values))
    se = float(np.std(values, ddof=1) / math.sqrt(values.size)) if values.size >= 2 else None
    return mean, se


def opt_float(value: float) -> float | None:
    """NaN (no interval) -> ``None``; anything else -> a plain float for JSON."""
    return None if math.isnan(value) else float(value)


def coverage_betting_bounds(
    columns: np.ndarray, column_j: Sequence[int], depth: np.ndarray, confidence: float, seed: int
) -> np.ndarray:
    """Betting interval bounds, shape ``(columns, 2)``, of the mean of each column over the rows with ``depth >= j``.

    Columns over the same rows are bounded in one vectorised call. NaN where fewer than two rows qualify: one task
    is not a sample of tasks (its own value is reported, without an interval). Where every qualifying row has
    exactly j counted trials, pass^j and pass@j of each task are 0 or 1 by construction and the exact binomial
    (Clopper-Pearson) interval is used instead (the choice depends on the trial counts only, never on outcomes).
    """
    j_of_column = np.asarray(column_j, dtype=np.int64)
    bounds = np.full((j_of_column.size, 2), np.nan)
    for j in sorted(set(j_of_column.tolist())):
        mask = depth >= j
        if int(mask.sum()) < 2:
            continue
        cols = np.flatnonzero(j_of_column == j)
        values = np.clip(columns[mask][:, cols].T, 0.0, 1.0)
        if np.all(depth[mask] == j):
            ones = np.rint(values).sum(axis=1)
            bounds[cols] = clopper_pearson_bounds(ones, np.full_like(ones, values.shape[1]), confidence)
            continue
        result = betting_bounds(values, confidence=confidence, seed=seed)
        bounds[cols] = result[:, 1:]
    return bounds


def pooled_betting_bounds(counts: Sequence[TaskCounts], confidence: float, seed: int) -> tuple[float, float] | None:
    """Betting interval of the pooled rate sum c / sum n with tasks as the units; ``None`` without a counted trial."""
    measured = [tc for tc in counts if tc.n > 0]
    if not measured:
        return None
    n = np.array([tc.n for tc in measured], dtype=np.float64)
    c = np.array([tc.c for tc in measured], dtype=np.float64)
    row = betting_bounds(c / n, confidence=confidence, weights=n / n.max(), seed=seed)[0]
    return float(row[1]), float(row[2])


def validate_bootstrap_args(n_bootstrap: object, seed: object, confidence: object) -> tuple[int, int, float]:
    """Shared checks for the bootstrap arguments of the summaries and comparisons."""
    return (
        require_int("n_bootstrap", n_bootstrap, minimum=0),
        require_int("seed", seed, minimum=0),
        require_confidence("confidence", confidence),
    )


def summarize_trials(
    trials: Mapping[str, Sequence[bool | None]],
    *,
    k_max: int | None = None,
    n_bootstrap: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> TrialsSummary:
    """Summarise repeated trials per task: per-task pass^j / pass@j, macro means with intervals, micro rate.

    Args:
        trials: task id -> ordered outcomes (``True`` success, ``False`` failure, ``None`` infrastructure error).
        k_max: largest j to report; default the largest counted n over tasks. j > n of a task gives ``None`` for
            that task and lowers the coverage of j; it is never clamped.
        n_bootstrap: 0 disables the intervals; any other value keeps them (the intervals no longer resample: the
            argument is kept for callers of the bootstrap era and recorded as given).
        seed: seed of the random task orders the betting intervals average over; same input and seed, same output.
        confidence: level of every interval (0.95 gives 95% intervals).

    Macro SE and interval bounds are ``None`` when fewer than two tasks are covered (one task is not a sample of
    tasks). The pooled rate's interval exists from one task on (wide: one task says little about tasks of this kind).
    """
    n_bootstrap, seed, confidence = validate_bootstrap_args(n_bootstrap, seed, confidence)
    counts = count_trials(trials)
    k_max = max((tc.n for tc in counts), default=0) if k_max is None else require_int("k_max", k_max, minimum=1)
    hat, at, tasks = curve_matrices(counts, k_max)
    n_arr = np.fromiter((tc.n for tc in counts), dtype=np.int64, count=len(counts))

    total = len(counts)
    js = list(range(1, k_max + 1))
    intervals_on = n_bootstrap > 0
    bounds = (
        coverage_betting_bounds(np.hstack([hat, at]), js + js, n_arr, confidence, seed)
        if intervals_on
        else np.full((2 * k_max, 2), np.nan)
    )
    macro: list[MacroStat] = []
    for j in js:
        mask = n_arr >= j
        hat_mean, hat_se = mean_and_se(hat[mask, j - 1])
        at_mean, at_se = mean_and_se(at[mask, j - 1])
        hat_b, at_b = bounds[j - 1], bounds[k_max + j - 1]
        macro.append(
            MacroStat(
                j=j,
                coverage=int(mask.sum()),
                total_tasks=total,
                pass_hat_mean=hat_mean,
                pass_hat_se=hat_se,
                pass_hat_ci_low=opt_float(hat_b[0]),
                pass_hat_ci_high=opt_float(hat_b[1]),
                pass_at_mean=at_mean,
                pass_at_se=at_se,
                pass_at_ci_low=opt_float(at_b[0]),
                pass_at_ci_high=opt_float(at_b[1]),
            )
        )

    successes = sum(tc.c for tc in counts)
    n_total = sum(tc.n for tc in counts)
    infra_total = sum(tc.infra_errors for tc in counts)
    pooled = pooled_betting_bounds(counts, confidence, seed) if intervals_on else None
    micro = MicroStat(
        successes=successes,
        trials=n_total,
        infra_errors=infra_total,
        rate=(successes / n_total) if n_total else None,
        ci_low=pooled[0] if pooled else None,
        ci_high=pooled[1] if pooled else None,
        confidence=confidence,
        method=BETTING_METHOD,
    )
    measured = sum(1 for tc in counts if tc.n > 0)
    level = f"{round(confidence * 100, 6):g}%"
    return TrialsSummary(
        k_max=k_max,
        n_bootstrap=n_bootstrap,
        seed=seed,
        confidence=confidence,
        total_tasks=total,
        infra_errors=infra_total,
        tasks=tasks,
        macro=macro,
        micro=micro,
        interval_method=INTERVAL_METHOD,
        interval_target=INTERVAL_TARGET,
        interval_note=INTERVAL_NOTE.format(level=level),
        few_tasks_caveat=FEW_TASKS_CAVEAT.format(tasks=measured) if measured < FEW_TASKS else None,
    )

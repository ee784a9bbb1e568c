"""``compare_trials``: agent A vs agent B on the same tasks, paired by task.

Why paired: the tasks differ far more from each other than two agents differ on one task, so differences taken
within a task and then averaged have a much smaller variance than the difference of two independent means. Checking
whether two separate confidence intervals overlap throws that pairing away and is both conservative and easy to
misread; the paired bootstrap interval of the mean difference answers the question directly.

Reported per j (pass^1 is the success rate):
- mean pass^j and pass@j of A and of B over the paired tasks that both have n >= j, the mean difference A - B, its
  standard error, and the interval of a paired sign-flip test (:mod:`green_agent.statistics.paired_test`: exact
  for up to 20 tasks, seeded Monte Carlo above; the interval is the set of differences that test does not reject),
  its two-sided p-value and the minimum detectable difference at 80% power;
- an exact two-sided sign test on the per-task pass^j differences (ties dropped). With one trial per task and side
  the per-task values are 0/1 and this *is* the exact McNemar test on the discordant tasks. It is descriptive: the
  decision (:func:`decide`) is the sign-flip test on one metric chosen before looking.

Tasks present on only one side are listed in ``only_in_a`` / ``only_in_b`` and left out of every paired number.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from green_agent.statistics._validation import require_confidence, require_int, require_real
from green_agent.statistics.paired_test import PairedTest, paired_sign_flip_test
from green_agent.statistics.summary import (
    TaskCounts,
    count_trials,
    curve_matrices,
    mean_and_se,
    validate_bootstrap_args,
)

_TIE_TOLERANCE = 1e-12
"""Per-task differences smaller than this are ties (guards against rounding of equal ratios such as 1/2 and 2/4)."""


class PairedStat(BaseModel):
    """Paired comparison for one j over the tasks both sides ran at least j counted trials of."""

    model_config = ConfigDict(frozen=True)

    j: int
    tasks_paired: int
    pass_hat_a: float | None
    pass_hat_b: float | None
    pass_hat_diff: float | None
    """Mean over paired tasks of pass^j(A) - pass^j(B)."""
    pass_hat_diff_se: float | None
    pass_hat_diff_ci_low: float | None
    """Interval of the two-sided paired sign-flip test at the comparison's confidence (the differences it keeps)."""
    pass_hat_diff_ci_high: float | None
    pass_at_a: float | None
    pass_at_b: float | None
    pass_at_diff: float | None
    pass_at_diff_se: float | None
    pass_at_diff_ci_low: float | None
    pass_at_diff_ci_high: float | None
    a_better: int
    """Tasks whose pass^j is higher for A."""
    b_better: int
    ties: int
    sign_test_p_value: float | None
    """Exact two-sided sign test on a_better vs b_better; ``None`` when every pair is tied."""
    pass_hat_p_value: float | None = None
    """Two-sided paired sign-flip test of mean pass^j difference 0 (the interval's test)."""
    pass_hat_mde: float | None = None
    """Minimum detectable pass^j difference at 80% power (two-sided), from the per-task differences' spread."""
    pass_at_p_value: float | None = None
    pass_at_mde: float | None = None


class TrialsComparison(BaseModel):
    """Result of :func:`compare_trials`."""

    model_config = ConfigDict(frozen=True)

    k_max: int
    n_bootstrap: int
    seed: int
    confidence: float
    interval_method: str = "percentile_bootstrap"
    """``sign_flip`` for the paired sign-flip test's inverted interval; comparisons made before it: the bootstrap."""
    tasks_in_both: int
    only_in_a: list[str]
    only_in_b: list[str]
    success_rate: PairedStat | None
    """The j = 1 record (pass^1 is the success rate), repeated under its own name; ``None`` when k_max is 0."""
    per_j: list[PairedStat]

    def at(self, j: int) -> PairedStat | None:
        """The record for ``j``, or ``None`` outside 1..k_max."""
        return self.per_j[j - 1] if 1 <= j <= len(self.per_j) else None


def _sign_test(diffs: np.ndarray) -> tuple[int, int, int, float | None]:
    a_better = int(np.sum(diffs > _TIE_TOLERANCE))
    b_better = int(np.sum(diffs < -_TIE_TOLERANCE))
    ties = int(diffs.size - a_better - b_better)
    if a_better + b_better == 0:
        return a_better, b_better, ties, None
    from scipy.stats import binomtest  # lazily: scipy.stats costs ~1 s to import, paid off the start-up path

    p_value = float(binomtest(a_better, a_better + b_better, 0.5, alternative="two-sided").pvalue)
    return a_better, b_better, ties, min(1.0, p_value)


def compare_trials(
    a: Mapping[str, Sequence[bool | None]],
    b: Mapping[str, Sequence[bool | None]],
    *,
    k_max: int | None = None,
    n_bootstrap: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> TrialsComparison:
    """Paired comparison of two agents' trials (same format as :func:`summarize_trials`), A minus B.

    ``k_max`` defaults to the largest j some paired task has on both sides (max over tasks of min(n_A, n_B)).
    ``n_bootstrap`` 0 leaves the intervals out (kept from the bootstrap era; other values are recorded only).
    Deterministic for a given seed (which seeds the Monte Carlo sign patterns above 20 tasks).
    """
    n_bootstrap, seed, confidence = validate_bootstrap_args(n_bootstrap, seed, confidence)
    counts_a = {tc.task_id: tc for tc in count_trials(a, "a")}
    counts_b = {tc.task_id: tc for tc in count_trials(b, "b")}
    common = sorted(counts_a.keys() & counts_b.keys())
    only_a = sorted(counts_a.keys() - counts_b.keys())
    only_b = sorted(counts_b.keys() - counts_a.keys())
    pa = [counts_a[t] for t in common]
    pb = [counts_b[t] for t in common]
    depth = np.fromiter((min(x.n, y.n) for x, y in zip(pa, pb, strict=True)), dtype=np.int64, count=len(common))
    k_max = (int(depth.max()) if depth.size else 0) if k_max is None else require_int("k_max", k_max, minimum=1)
    hat_a, at_a, _ = curve_matrices(pa, k_max)
    hat_b, at_b, _ = curve_matrices(pb, k_max)

    js = list(range(1, k_max + 1))
    d_hat = hat_a - hat_b
    d_at = at_a - at_b
    per_j: list[PairedStat] = []
    for j in js:
        mask = depth >= j
        col = j - 1
        hat_diff, hat_se = mean_and_se(d_hat[mask, col])
        at_diff, at_se = mean_and_se(d_at[mask, col])
        wins_a, wins_b, ties, p_value = _sign_test(d_hat[mask, col])
        hat_test = paired_sign_flip_test(d_hat[mask, col], confidence=confidence, seed=seed)
        at_test = paired_sign_flip_test(d_at[mask, col], confidence=confidence, seed=seed)
        intervals = n_bootstrap > 0 and hat_test.tasks >= 2
        per_j.append(
            PairedStat(
                j=j,
                tasks_paired=int(mask.sum()),
                pass_hat_a=mean_and_se(hat_a[mask, col])[0],
                pass_hat_b=mean_and_se(hat_b[mask, col])[0],
                pass_hat_diff=hat_diff,
                pass_hat_diff_se=hat_se,
                pass_hat_diff_ci_low=hat_test.ci_low if intervals else None,
                pass_hat_diff_ci_high=hat_test.ci_high if intervals else None,
                pass_at_a=mean_and_se(at_a[mask, col])[0],
                pass_at_b=mean_and_se(at_b[mask, col])[0],
                pass_at_diff=at_diff,
                pass_at_diff_se=at_se,
                pass_at_diff_ci_low=at_test.ci_low if intervals else None,
                pass_at_diff_ci_high=at_test.ci_high if intervals else None,
                a_better=wins_a,
                b_better=wins_b,
                ties=ties,
                sign_test_p_value=p_value,
                pass_hat_p_value=hat_test.p_value,
                pass_hat_mde=hat_test.mde,
                pass_at_p_value=at_test.p_value,
                pass_at_mde=at_test.mde,
            )
        )
    return TrialsComparison(
        k_max=k_max,
        n_bootstrap=n_bootstrap,
        seed=seed,
        confidence=confidence,
        interval_method="sign_flip",
        tasks_in_both=len(common),
        only_in_a=only_a,
        only_in_b=only_b,
        success_rate=per_j[0] if per_j else None,
        per_j=per_j,
    )


Gate = Literal["worse", "not-better", "not-noninferior"]
DecisionOutcome = Literal["better", "worse", "no_difference", "noninferior", "not_noninferior", "undetermined"]


class Decision(BaseModel):
    """The one decision of a comparison: one metric chosen before looking, one paired sign-flip test."""

    model_config = ConfigDict(frozen=True)

    metric: str
    """``pass^j`` or ``pass@j`` with its number, e.g. ``pass^1``."""
    j: int
    gate: Gate | None
    """``None``: the two-sided verdict; otherwise the one-sided question the gate asks."""
    margin: float
    test: PairedTest
    outcome: DecisionOutcome
    gate_passed: bool | None
    """``None`` without a gate."""
    rule: str
    text: str


def paired_differences(
    a: Mapping[str, Sequence[bool | None]], b: Mapping[str, Sequence[bool | None]], *, j: int, metric: str = "pass^"
) -> tuple[list[str], np.ndarray]:
    """Task ids and per-task differences A - B of pass^j (``metric`` "pass^") or pass@j ("pass@") over the tasks
    both sides ran at least j counted trials of."""
    j = require_int("j", j, minimum=1)
    if metric not in ("pass^", "pass@"):
        raise ValueError(f"metric must be 'pass^' or 'pass@', got {metric!r}")
    counts_a = {tc.task_id: tc for tc in count_trials(a, "a")}
    counts_b = {tc.task_id: tc for tc in count_trials(b, "b")}
    common = sorted(t for t in counts_a.keys() & counts_b.keys() if min(counts_a[t].n, counts_b[t].n) >= j)
    pa: list[TaskCounts] = [counts_a[t] for t in common]
    pb: list[TaskCounts] = [counts_b[t] for t in common]
    hat_a, at_a, _ = curve_matrices(pa, j)
    hat_b, at_b, _ = curve_matrices(pb, j)
    diffs = (hat_a - hat_b) if metric == "pass^" else (at_a - at_b)
    return common, diffs[:, j - 1] if diffs.size else np.empty(0)


def decide(
    a: Mapping[str, Sequence[bool | None]],
    b: Mapping[str, Sequence[bool | None]],
    *,
    j: int = 1,
    metric: str = "pass^",
    gate: Gate | None = None,
    margin: float = 0.0,
    confidence: float = 0.95,
    seed: int = 0,
) -> Decision:
    """Decide A (candidate) vs B (baseline) on one metric with the paired sign-flip test.

    Without ``gate``: two-sided at 1 - confidence, "better" / "worse" / "no_difference". With a gate, one-sided at
    1 - confidence: "worse" fails when A is shown worse than B; "not-better" fails unless A is shown better;
    "not-noninferior" fails unless A is shown better than B minus ``margin``. Each gate errs (fails an equal
    candidate, or passes a candidate that is not better / worse by the margin) with probability at most
    1 - confidence, whatever the number of tasks.
    """
    confidence = require_confidence("confidence", confidence)
    margin = require_real("margin", margin, low=0.0, high=1.0)
    if gate not in (None, "worse", "not-better", "not-noninferior"):
        raise ValueError(f"gate must be 'worse', 'not-better' or 'not-noninferior', got {gate!r}")
    _, diffs = paired_differences(a, b, j=j, metric=metric)
    name = f"{metric}{j}"
    level = f"{round(confidence * 100, 6):g}%"
    alpha = f"{round((1 - confidence) * 100, 6):g}%"
    null = -margin if gate == "not-noninferior" else 0.0
    alternative: Literal["two-sided", "greater", "less"] = (
        "two-sided" if gate is None else "less" if gate == "worse" else "greater"
    )
    test = paired_sign_flip_test(diffs, confidence=confidence, alternative=alternative, null=null, seed=seed)
    kind = "exact" if test.method == "sign_flip_exact" else f"Monte Carlo, {test.patterns} patterns, seed {seed}"
    base = f"paired sign-flip test of mean {name} A-B over {test.tasks} task(s) ({kind})"
    outcome: DecisionOutcome
    passed: bool | None = None
    if test.tasks == 0 or test.diff is None:
        outcome, rule = "undetermined", base
        text = f"no decision: no task has {j} counted attempt(s) on both sides"
        return Decision(
            metric=name,
            j=j,
            gate=gate,
            margin=margin,
            test=test,
            outcome=outcome,
            gate_passed=None,
            rule=rule,
            text=text,
        )
    interval = f"[{test.ci_low:+.3f}, {test.ci_high:+.3f}]"
    p = f"p = {test.p_value:.3g}"
    diff = f"{name} A-B = {test.diff:+.3f}"
    if gate is None:
        rule = f"two-sided {base} at {alpha}; {level} interval"
        if test.rejected:
            outcome = "better" if test.diff > 0 else "worse"
            text = f"A is {outcome} ({diff}; {p}; {level} interval {interval} excludes 0)"
        else:
            outcome = "no_difference"
            text = f"no significant difference at {level} ({diff}; {p}; {level} interval {interval} includes 0)"
    elif gate == "worse":
        rule = f"one-sided {base} (is A worse?) at {alpha}; {level} upper bound"
        outcome = "worse" if test.rejected else "no_difference"
        passed = not test.rejected
        verdict = "A is worse: gate fails" if test.rejected else "A is not shown worse: gate passes"
        text = f"{verdict} ({diff}; {p}; {level} upper bound {test.ci_high:+.3f})"
    elif gate == "not-better":
        rule = f"one-sided {base} (is A better?) at {alpha}; {level} lower bound"
        outcome = "better" if test.rejected else "no_difference"
        passed = test.rejected
        verdict = "A is better: gate passes" if test.rejected else "A is not shown better: gate fails"
        text = f"{verdict} ({diff}; {p}; {level} lower bound {test.ci_low:+.3f})"
    else:
        rule = f"one-sided {base} (is A better than B - {margin:g}?) at {alpha}; {level} lower bound"
        outcome = "noninferior" if test.rejected else "not_noninferior"
        passed = test.rejected
        verdict = (
            f"A is non-inferior (margin {margin:g}): gate passes"
            if test.rejected
            else f"A is not shown non-inferior (margin {margin:g}): gate fails"
        )
        text = f"{verdict} ({diff}; {p}; {level} lower bound {test.ci_low:+.3f} vs -{margin:g})"
    return Decision(
        metric=name, j=j, gate=gate, margin=margin, test=test, outcome=outcome, gate_passed=passed, rule=rule, text=text
    )

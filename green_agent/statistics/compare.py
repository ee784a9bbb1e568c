"""``compare_trials``: agent A vs agent B on the same tasks, paired by task.

Why paired: the tasks differ far more from each other than two agents differ on one task, so differences taken
within a task and then averaged have a much smaller variance than the difference of two independent means. Checking
whether two separate confidence intervals overlap throws that pairing away and is both conservative and easy to
misread; the paired bootstrap interval of the mean difference answers the question directly.

Reported per j (pass^1 is the success rate):
- mean pass^j and pass@j of A and of B over the paired tasks that both have n >= j, the mean difference A - B, its
  standard error, and a seeded paired bootstrap interval (whole tasks resampled, clipped to [-1, 1]);
- an exact two-sided sign test on the per-task pass^j differences (ties dropped). With one trial per task and side
  the per-task values are 0/1 and this *is* the exact McNemar test on the discordant tasks.

Tasks present on only one side are listed in ``only_in_a`` / ``only_in_b`` and left out of every paired number.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from green_agent.statistics._validation import require_int
from green_agent.statistics.summary import (
    count_trials,
    coverage_bootstrap_bounds,
    curve_matrices,
    mean_and_se,
    opt_float,
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


class TrialsComparison(BaseModel):
    """Result of :func:`compare_trials`."""

    model_config = ConfigDict(frozen=True)

    k_max: int
    n_bootstrap: int
    seed: int
    confidence: float
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
    Deterministic for a given seed.
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

    rng = np.random.default_rng(seed)
    js = list(range(1, k_max + 1))
    d_hat = hat_a - hat_b
    d_at = at_a - at_b
    bounds = coverage_bootstrap_bounds(
        np.hstack([d_hat, d_at]), js + js, depth, n_bootstrap, rng, confidence, low=-1.0, high=1.0
    )
    per_j: list[PairedStat] = []
    for j in js:
        mask = depth >= j
        col = j - 1
        hat_diff, hat_se = mean_and_se(d_hat[mask, col])
        at_diff, at_se = mean_and_se(d_at[mask, col])
        wins_a, wins_b, ties, p_value = _sign_test(d_hat[mask, col])
        hat_bound, at_bound = bounds[col], bounds[k_max + col]
        per_j.append(
            PairedStat(
                j=j,
                tasks_paired=int(mask.sum()),
                pass_hat_a=mean_and_se(hat_a[mask, col])[0],
                pass_hat_b=mean_and_se(hat_b[mask, col])[0],
                pass_hat_diff=hat_diff,
                pass_hat_diff_se=hat_se,
                pass_hat_diff_ci_low=opt_float(hat_bound[0]),
                pass_hat_diff_ci_high=opt_float(hat_bound[1]),
                pass_at_a=mean_and_se(at_a[mask, col])[0],
                pass_at_b=mean_and_se(at_b[mask, col])[0],
                pass_at_diff=at_diff,
                pass_at_diff_se=at_se,
                pass_at_diff_ci_low=opt_float(at_bound[0]),
                pass_at_diff_ci_high=opt_float(at_bound[1]),
                a_better=wins_a,
                b_better=wins_b,
                ties=ties,
                sign_test_p_value=p_value,
            )
        )
    return TrialsComparison(
        k_max=k_max,
        n_bootstrap=n_bootstrap,
        seed=seed,
        confidence=confidence,
        tasks_in_both=len(common),
        only_in_a=only_a,
        only_in_b=only_b,
        success_rate=per_j[0] if per_j else None,
        per_j=per_j,
    )

"""Reliability statistics: pure functions and frozen pydantic models, no I/O, no network, no logging of data.

Every number Arena prints comes from here; docs/metrics.md explains each definition and why it was chosen. The
dataset-evaluation scorers (tool-call matching, Fair-Forge and FinAgent scores) live in
:mod:`green_agent.evaluations.metrics`.

- Per task: :func:`pass_at_k`, :func:`pass_hat_k` (unbiased, ``None`` when n < k) and the seed's order-dependent
  :func:`first_k_all_pass`, :func:`longest_success_streak`, :func:`has_success_streak`.
- Across tasks: :func:`summarize_trials` (macro means with coverage, SE, betting CI; micro rate, task-clustered CI),
  :func:`compare_trials` (paired differences, sign-flip test intervals, MDE, exact sign / McNemar test),
  :func:`decide` (one metric, one paired sign-flip test: the verdict or a gate), :func:`paired_sign_flip_test`.
- Intervals: :func:`wilson_interval`, :func:`bootstrap_mean_interval`, :func:`standard_error`; betting intervals
  and time-uniform confidence sequences for bounded means: :func:`betting_interval`, :func:`betting_bounds`,
  :func:`betting_confidence_sequence`.
- Labels: :func:`interpret` -> :class:`Verdict`.
"""

from green_agent.statistics.betting import (
    BettingInterval,
    ConfidenceSequence,
    betting_bounds,
    betting_confidence_sequence,
    betting_interval,
    clopper_pearson_bounds,
)
from green_agent.statistics.compare import (
    Decision,
    PairedStat,
    TrialsComparison,
    compare_trials,
    decide,
    paired_differences,
)
from green_agent.statistics.intervals import Interval, bootstrap_mean_interval, standard_error, wilson_interval
from green_agent.statistics.paired_test import (
    PairedTest,
    minimum_detectable_difference,
    paired_sign_flip_test,
    sign_flip_p_values,
)
from green_agent.statistics.passk import pass_at_k, pass_hat_k
from green_agent.statistics.streaks import first_k_all_pass, has_success_streak, longest_success_streak
from green_agent.statistics.summary import MacroStat, MicroStat, TaskStat, TrialsSummary, summarize_trials
from green_agent.statistics.verdict import Verdict, VerdictLabel, VerdictThresholds, interpret

__all__ = [
    "BettingInterval",
    "ConfidenceSequence",
    "Decision",
    "Interval",
    "MacroStat",
    "MicroStat",
    "PairedStat",
    "PairedTest",
    "TaskStat",
    "TrialsComparison",
    "TrialsSummary",
    "Verdict",
    "VerdictLabel",
    "VerdictThresholds",
    "betting_bounds",
    "betting_confidence_sequence",
    "betting_interval",
    "bootstrap_mean_interval",
    "clopper_pearson_bounds",
    "compare_trials",
    "decide",
    "first_k_all_pass",
    "has_success_streak",
    "interpret",
    "longest_success_streak",
    "minimum_detectable_difference",
    "paired_differences",
    "paired_sign_flip_test",
    "pass_at_k",
    "pass_hat_k",
    "sign_flip_p_values",
    "standard_error",
    "summarize_trials",
    "wilson_interval",
]

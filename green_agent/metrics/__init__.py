"""Reliability metrics: pure functions and frozen pydantic models, no I/O, no network, no logging of data.

Every number Arena prints comes from here; docs/metrics.md explains each definition and why it was chosen.

- Per task: :func:`pass_at_k`, :func:`pass_hat_k` (unbiased, ``None`` when n < k) and the seed's order-dependent
  :func:`first_k_all_pass`, :func:`longest_success_streak`, :func:`has_success_streak`.
- Across tasks: :func:`summarize_trials` (macro means with coverage, SE, bootstrap CI; micro rate with Wilson CI),
  :func:`compare_trials` (paired differences, paired bootstrap CI, exact sign / McNemar test).
- Intervals: :func:`wilson_interval`, :func:`bootstrap_mean_interval`, :func:`standard_error`.
- Tool calls: :func:`canonicalize`, :func:`values_match`, :func:`argument_score`, :func:`match_tool_calls`.
- Seed-compatible scorers: :func:`fair_forge_tool_correctness`, :func:`finagent_case_score`,
  :func:`finagent_errored_case`, :func:`summarize_finagent`.
- Labels: :func:`interpret` -> :class:`Verdict`.
"""

from green_agent.metrics.compare import PairedStat, TrialsComparison, compare_trials
from green_agent.metrics.intervals import Interval, bootstrap_mean_interval, standard_error, wilson_interval
from green_agent.metrics.passk import pass_at_k, pass_hat_k
from green_agent.metrics.scorers import (
    FAIR_FORGE_DEFAULT_WEIGHTS,
    FINAGENT_OPTIONS,
    FairForgeToolCorrectness,
    FinAgentCaseScore,
    FinAgentSummary,
    fair_forge_tool_correctness,
    finagent_case_score,
    finagent_errored_case,
    summarize_finagent,
)
from green_agent.metrics.streaks import first_k_all_pass, has_success_streak, longest_success_streak
from green_agent.metrics.summary import MacroStat, MicroStat, TaskStat, TrialsSummary, summarize_trials
from green_agent.metrics.toolcalls import (
    CanonicalOptions,
    ExtraArguments,
    MatchedPair,
    MatchMode,
    ToolCall,
    ToolCallMatch,
    argument_score,
    canonicalize,
    match_tool_calls,
    values_match,
)
from green_agent.metrics.verdict import Verdict, VerdictLabel, VerdictThresholds, interpret

__all__ = [
    "FAIR_FORGE_DEFAULT_WEIGHTS",
    "FINAGENT_OPTIONS",
    "CanonicalOptions",
    "ExtraArguments",
    "FairForgeToolCorrectness",
    "FinAgentCaseScore",
    "FinAgentSummary",
    "Interval",
    "MacroStat",
    "MatchMode",
    "MatchedPair",
    "MicroStat",
    "PairedStat",
    "TaskStat",
    "ToolCall",
    "ToolCallMatch",
    "TrialsComparison",
    "TrialsSummary",
    "Verdict",
    "VerdictLabel",
    "VerdictThresholds",
    "argument_score",
    "bootstrap_mean_interval",
    "canonicalize",
    "compare_trials",
    "fair_forge_tool_correctness",
    "finagent_case_score",
    "finagent_errored_case",
    "first_k_all_pass",
    "has_success_streak",
    "interpret",
    "longest_success_streak",
    "match_tool_calls",
    "pass_at_k",
    "pass_hat_k",
    "standard_error",
    "summarize_finagent",
    "summarize_trials",
    "values_match",
    "wilson_interval",
]

"""Scorers of the dataset evaluations: pure functions and frozen pydantic models, no I/O.

- Tool calls: :func:`canonicalize`, :func:`values_match`, :func:`argument_score`, :func:`match_tool_calls`.
- Seed-compatible scorers: :func:`fair_forge_tool_correctness`, :func:`finagent_case_score`,
  :func:`finagent_errored_case`, :func:`summarize_finagent`.

Only the evaluations use these (battles are scored by tau2 and summarised by :mod:`green_agent.statistics`).
"""

from green_agent.evaluations.metrics.scorers import (
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
from green_agent.evaluations.metrics.toolcalls import (
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

__all__ = [
    "FAIR_FORGE_DEFAULT_WEIGHTS",
    "FINAGENT_OPTIONS",
    "CanonicalOptions",
    "ExtraArguments",
    "FairForgeToolCorrectness",
    "FinAgentCaseScore",
    "FinAgentSummary",
    "MatchMode",
    "MatchedPair",
    "ToolCall",
    "ToolCallMatch",
    "argument_score",
    "canonicalize",
    "fair_forge_tool_correctness",
    "finagent_case_score",
    "finagent_errored_case",
    "match_tool_calls",
    "summarize_finagent",
    "values_match",
]

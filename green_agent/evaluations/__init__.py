"""Evaluations on the user's own data, three ways (docs/evaluations.md):

1. Recorded conversations, Fair-Forge compatible: :func:`run_agentic` behind ``POST /run`` and ``arena score``.
2. Ragas-style agent metrics on message traces: :func:`evaluate_samples` (``arena score`` with ``samples``).
3. CSV suites run live against an A2A agent: :func:`parse_csv_suite` + :func:`run_csv_suite` behind
   ``POST /evaluations/run`` (SSE), the page at ``/evaluations/`` and ``arena eval-csv``.

Judged parts go through a :class:`Judge`: :class:`LlmJudge` (any OpenAI-compatible endpoint, structured answers,
retries, SQLite cache) or :class:`LexicalJudge` (offline, deterministic). Deterministic parts come from
:mod:`green_agent.statistics`. Mount everything on the green agent with ``create_app(...,
components=[EvaluationsComponent()])``.
"""

from green_agent.evaluations.agent_metrics import (
    AgentSample,
    MetricSpec,
    MetricSummary,
    SampleMetricResult,
    evaluate_samples,
)
from green_agent.evaluations.component import EvaluationsComponent, EvaluationsSettings
from green_agent.evaluations.connectors import (
    SUPPORTED_CLASS_PATHS,
    ConnectorError,
    ResolvedConnector,
    resolve_connector,
)
from green_agent.evaluations.csv_runner import CsvRunOptions, extract_tool_calls, run_csv_suite
from green_agent.evaluations.csv_suite import (
    CsvCase,
    CsvLimits,
    CsvProblem,
    CsvSuite,
    CsvValidationError,
    parse_csv_suite,
)
from green_agent.evaluations.fairforge import run_agentic
from green_agent.evaluations.fairforge_request import RunConfig, RunError, RunLimits
from green_agent.evaluations.judge import (
    Judge,
    JudgeInfo,
    JudgeOutcome,
    JudgeSettings,
    LexicalJudge,
    LlmJudge,
    RetryPolicy,
)
from green_agent.evaluations.judge_cache import JudgeCache

__all__ = [
    "SUPPORTED_CLASS_PATHS",
    "AgentSample",
    "ConnectorError",
    "CsvCase",
    "CsvLimits",
    "CsvProblem",
    "CsvRunOptions",
    "CsvSuite",
    "CsvValidationError",
    "EvaluationsComponent",
    "EvaluationsSettings",
    "Judge",
    "JudgeCache",
    "JudgeInfo",
    "JudgeOutcome",
    "JudgeSettings",
    "LexicalJudge",
    "LlmJudge",
    "MetricSpec",
    "MetricSummary",
    "ResolvedConnector",
    "RetryPolicy",
    "RunConfig",
    "RunError",
    "RunLimits",
    "SampleMetricResult",
    "evaluate_samples",
    "extract_tool_calls",
    "parse_csv_suite",
    "resolve_connector",
    "run_agentic",
    "run_csv_suite",
]

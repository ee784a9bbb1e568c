"""The data ``arena compare`` reports (``--json`` is :class:`CompareReport`'s dump): run headers, flips, the verdict."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from green_agent.statistics import TrialsComparison

COMPARE_SCHEMA_ID = "arena.compare/1"
VerdictOutcome = Literal["better", "worse", "no_difference", "undetermined"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class RunHeader(_Frozen):
    """Who a side is: enough to tell two runs apart at a glance."""

    role: Literal["candidate", "baseline"]
    source: str
    battle_id: str
    white_agent_url: str
    domains: list[str]
    k: int
    status: str
    error: str | None
    tasks: int
    counted_trials: int
    infrastructure_errors: int


class TaskFlip(_Frozen):
    """A task whose counted success rate differs between the runs."""

    task_key: str
    successes_a: int
    n_a: int
    successes_b: int
    n_b: int
    rate_diff: float
    """successes_a / n_a - successes_b / n_b."""


class Flips(_Frozen):
    better_in_a: list[TaskFlip]
    better_in_b: list[TaskFlip]


class Unmatched(_Frozen):
    only_in_a: list[str]
    only_in_b: list[str]


class Verdict(_Frozen):
    """The pass^1 verdict and the rule it follows (so nobody has to guess what "better" meant)."""

    j: int = 1
    outcome: VerdictOutcome
    text: str
    rule: str
    confidence: float
    diff: float | None
    ci_low: float | None
    ci_high: float | None


class CostRow(_Frozen):
    """One line of the cost and latency comparison (green_agent.engine.costs.compare_cost_rows)."""

    label: str
    a: str
    b: str


class CompareReport(_Frozen):
    """Everything ``arena compare`` prints; ``--json`` is its dump (see the module docstring)."""

    model_config = ConfigDict(frozen=True, serialize_by_alias=True, validate_by_name=True)

    schema_id: str = Field(default=COMPARE_SCHEMA_ID, alias="schema")
    a: RunHeader
    b: RunHeader
    comparison: TrialsComparison
    verdict: Verdict
    flips: Flips
    unmatched: Unmatched
    warnings: list[str]
    cost: list[CostRow] = Field(default_factory=list)
    """Cost and latency side by side (``label``, ``a``, ``b``, display strings; "n/a" when a run has no usage)."""

"""The data ``arena compare`` reports (``--json`` is :class:`CompareReport`'s dump): run headers, flips, the verdict."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from green_agent.statistics import TrialsComparison

COMPARE_SCHEMA_ID = "arena.compare/1"
VerdictOutcome = Literal["better", "worse", "no_difference", "noninferior", "not_noninferior", "undetermined"]


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
    """The verdict on the primary metric and the rule it follows (so nobody has to guess what "better" meant).

    The rule is one paired sign-flip test (green_agent.statistics.decide): two-sided without a gate, one-sided with
    ``--fail-if``; ``ci_low`` / ``ci_high`` are the differences that test does not reject (an open end is +-1),
    ``p_value`` its p-value and ``mde`` the minimum detectable difference at 80% power beside the difference."""

    j: int = 1
    outcome: VerdictOutcome
    text: str
    rule: str
    confidence: float
    diff: float | None
    ci_low: float | None
    ci_high: float | None
    metric: str = "pass^1"
    p_value: float | None = None
    mde: float | None = None
    mde_note: str = ""
    tasks: int = 0
    test: str = ""
    """``sign_flip_exact`` or ``sign_flip_monte_carlo``."""
    alternative: Literal["two-sided", "greater", "less"] = "two-sided"
    gate: Literal["worse", "not-better", "not-noninferior"] | None = None
    margin: float = 0.0
    gate_passed: bool | None = None
    """``None`` without ``--fail-if``; False makes ``arena compare`` exit 1."""


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

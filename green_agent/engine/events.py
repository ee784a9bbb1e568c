"""Progress events of a battle and the sinks they go to.

A battle emits :class:`BattleEvent` values; where they go (an A2A task's status stream, an AgentBeats backend, a
log file, a test) is the caller's choice. ``text`` keeps the seed's human wording ("🔄 Starting attempt 1/4...");
``data`` is the machine-readable form clients use for progress bars.

The data of each event type is one pydantic model below (:data:`ProgressEvent`, a union discriminated by ``type``),
built only from the engine's own values (``AttemptFinished.from_result``): the battle and ``arena view``'s import
both build events here, and every reader in the green agent and the launcher parses them back with
:func:`read_event`. The wire form (``{"type": ..., **data, "timestamp": ...}``: the A2A ``arena_event`` part, the
backend progress post's ``detail``) is published as docs/events.schema.json (``arena schema --events``). Adding a
field to what a finished attempt shows is one field of :class:`AttemptFinished` plus its line in ``from_result``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, TypeAdapter, ValidationError

from green_agent.engine.attempt_details import MalformedReply, RewardChecks, TaskScenario, reward_checks
from green_agent.engine.explanation import FailureExplanation

if TYPE_CHECKING:
    from green_agent.engine.results import AttemptResult

log = logging.getLogger(__name__)

EventType = Literal[
    "battle_started",
    "task_started",
    "attempt_started",
    "attempt_finished",
    "battle_cancelled",
    "battle_interrupted",
    "battle_finished",
    "log",
    "attempts_skipped",
]


def utc_now() -> str:
    """ISO 8601 UTC timestamp with a Z suffix."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class BattleEvent(BaseModel):
    """One progress event: a human line plus structured data."""

    type: EventType
    text: str
    data: dict[str, Any] = Field(default_factory=dict)
    timestamp: str = Field(default_factory=utc_now)
    _trajectory: tuple[dict[str, Any], ...] | None = PrivateAttr(default=None)

    @property
    def trajectory(self) -> tuple[dict[str, Any], ...] | None:
        """An ``attempt_finished`` event's trajectory messages while its sinks are called (then dropped: the battle
        keeps its events, not their trajectories); None otherwise. Never part of the event's JSON."""
        return self._trajectory

    def carry_trajectory(self, records: tuple[dict[str, Any], ...] | None) -> None:
        """Attach (or, with None, drop) the trajectory the sinks may post."""
        self._trajectory = records

    def wire(self) -> dict[str, Any]:
        """The ``arena_event`` data part: the type plus the structured fields."""
        return {"type": self.type, **self.data, "timestamp": self.timestamp}

    def typed(self) -> ProgressEvent | None:
        """The event's data as its typed model; None for a type or shape this engine does not know."""
        return read_event({"type": self.type, **self.data})


EventSink = Callable[[BattleEvent], Awaitable[None]]
"""Receives events in order. A sink must not raise for delivery problems; it must not block for long."""


async def fan_out(sinks: Sequence[EventSink], event: BattleEvent) -> None:
    """Deliver one event to every sink; one failing sink never stops the battle or the other sinks."""
    for sink in sinks:
        try:
            await sink(event)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("progress sink %r failed for a %s event", sink, event.type, exc_info=True)


EVENTS_SCHEMA_ID: Final = "arena.progress-event/1"
"""Identifier of the published wire form of progress events (docs/events.schema.json)."""


class _Event(BaseModel):
    """Fields every progress event carries.

    Reading is tolerant (a field left out by a foreign or older engine takes its default; unknown keys are
    ignored); the published schema marks every field required, because the engine always writes every one."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    battle_id: str = ""
    type: EventType

    def data(self) -> dict[str, Any]:
        """The event's ``data`` (the wire form without ``type`` and ``timestamp``)."""
        return self.model_dump(mode="json", exclude={"type"})

    def event(self, text: str, *, timestamp: str | None = None) -> BattleEvent:
        """This data as a :class:`BattleEvent` with its human ``text``."""
        if timestamp is None:
            return BattleEvent(type=self.type, text=text, data=self.data())
        return BattleEvent(type=self.type, text=text, data=self.data(), timestamp=timestamp)


class BattleStarted(_Event):
    """The battle's tasks are chosen and its attempts are about to run."""

    type: Literal["battle_started"] = "battle_started"
    attempts_total: int | None = None
    resumed_attempts: int = 0
    """Attempts carried over from an earlier run of the battle (``--resume``)."""
    tasks: list[str] = Field(default_factory=list)
    k: int | None = None
    calibration: bool = False
    seed: int | None = None
    mode: str | None = None

    def text(self, *, resumed: bool = False) -> str:
        """The seed's opening line (with how much a resume carried over, when ``resumed``)."""
        line = f"🎯 Starting pass@{self.k} evaluation: {len(self.tasks)} task(s) x {self.k} attempts"
        if self.calibration:
            line += " [CALIBRATION]"
        if resumed:
            line += f" (resumed: {self.resumed_attempts} of {self.attempts_total} attempts already done)"
        return line


class TaskStarted(_Event):
    """The first attempt of a task starts."""

    type: Literal["task_started"] = "task_started"
    task_key: str = ""


class AttemptStarted(_Event):
    """One attempt starts."""

    type: Literal["attempt_started"] = "attempt_started"
    task_key: str = ""
    attempt: int = 0

    def text(self, k: int) -> str:
        return f"[{self.task_key}] 🔄 Starting attempt {self.attempt}/{k}..."


class AttemptFinished(_Event):
    """One attempt is scored (or failed for a reason that is not the agent's) and journaled: what a live view
    shows of it without the run directory."""

    type: Literal["attempt_finished"] = "attempt_finished"
    task_key: str = ""
    attempt: int = 0
    outcome: Literal["success", "failure", "infra_error"]
    reward: float | None = None
    category: str | None = None
    """The failure category (a ``FailureCategory`` value), None on success."""
    done: int | None = None
    """Attempts of the battle finished so far (this one included)."""
    total: int | None = None
    fault_author: str | None = None
    """Whose fault the failure is (a ``FaultAuthor`` value), None on success."""
    failure_detail: str | None = None
    steps: int = 0
    duration_s: float = 0.0
    explanation: FailureExplanation | None = None
    """Why a scored attempt got a reward below 1 (None when it did not, or when not explained)."""
    trajectory_file: str | None = None
    """The attempt's trajectory, relative to the run directory (None when none was written)."""
    malformed_reply: MalformedReply | None = None
    """A format_error attempt's reply that was not one action, bounded (None for every other attempt)."""
    scenario: TaskScenario | None = None
    """What the task told the simulated user (tau2's user scenario), bounded; None when not known."""
    checks: RewardChecks | None = None
    """tau2's checks with met/unmet and the reward split, bounded; None for an attempt tau2 did not score."""

    @classmethod
    def from_result(
        cls, result: AttemptResult, *, done: int, total: int, scenario: TaskScenario | None = None
    ) -> AttemptFinished:
        """The event of a finished attempt, ``done`` of ``total`` attempts finished (``scenario``: its task's)."""
        failure = result.failure
        checks = reward_checks(result.breakdown.raw) if result.breakdown is not None else None
        return cls(
            battle_id=result.battle_id,
            task_key=result.task_key,
            attempt=result.attempt,
            outcome=result.outcome,
            reward=result.reward,
            category=failure.category.value if failure else None,
            done=done,
            total=total,
            fault_author=failure.fault_author.value if failure else None,
            failure_detail=failure.detail if failure and failure.detail else None,
            steps=result.steps,
            duration_s=result.duration_s,
            explanation=result.explanation,
            trajectory_file=result.trajectory_file,
            malformed_reply=result.malformed_reply,
            scenario=scenario,
            checks=checks,
        )

    def line(self, k: int) -> str:
        """The seed's per-attempt progress line."""
        head = f"Attempt {self.attempt}/{k}"
        timing = f"steps={self.steps}, time={self.duration_s:.1f}s"
        if self.outcome == "success":
            return f"✅ {head}: SUCCESS (reward={self.reward or 0.0:.1f}, {timing})"
        if self.outcome == "failure":
            category = self.category or "unknown_failure"
            return f"❌ {head}: FAILED (reward={self.reward or 0.0:.1f}, {timing}) [{category}]"
        return f"⚠️ {head}: INFRASTRUCTURE ERROR ({self.category}, {self.fault_author}; not counted against the agent)"

    def text(self, k: int) -> str:
        """The event's text: the task, the line and the failure detail (on a second line)."""
        detail = f"\n   ↳ Error: {self.failure_detail}" if self.failure_detail else ""
        return f"[{self.task_key}] {self.line(k)}{detail}"


class BattleStopped(_Event):
    """The battle ends before all its attempts ran: cancelled, or interrupted (the green agent is stopping)."""

    type: Literal["battle_cancelled", "battle_interrupted"]
    done: int | None = None
    total: int | None = None


class BattleFinished(_Event):
    """The battle's summary is computed (its text is the markdown summary)."""

    type: Literal["battle_finished"] = "battle_finished"
    summary: list[dict[str, Any]] = Field(default_factory=list)
    """The macro rows of summary.json's ``summary`` (see docs/summary.schema.json)."""
    failure_breakdown: dict[str, int] = Field(default_factory=dict)
    infrastructure_errors: int = 0


class LogNote(_Event):
    """A note about the battle (e.g. ``arena view``: attempts that ran without an event)."""

    type: Literal["log"] = "log"


class AttemptsSkipped(_Event):
    """Certify (a pass^k claim) did not run a task's remaining attempts: one failed, so the task's pass^k is 0
    (reason ``certify_task_failed``; not a failure of the agent). See green_agent/statistics/certify_stop.py."""

    type: Literal["attempts_skipped"] = "attempts_skipped"
    task_key: str = ""
    failed_attempt: int = 0
    attempts: list[int] = Field(default_factory=list)
    reason: str = "certify_task_failed"

    def text(self, k: int) -> str:
        which = ", ".join(str(a) for a in self.attempts)
        return (
            f"[{self.task_key}] ⏭️ Attempt(s) {which} of {k} skipped: attempt {self.failed_attempt} failed, so this "
            f"task's pass^{k} is 0 ({self.reason})"
        )


ProgressEvent = Annotated[
    BattleStarted
    | TaskStarted
    | AttemptStarted
    | AttemptFinished
    | BattleStopped
    | BattleFinished
    | LogNote
    | AttemptsSkipped,
    Field(discriminator="type"),
]
"""The data of one progress event, by its ``type``."""

_PROGRESS_EVENT: TypeAdapter[ProgressEvent] = TypeAdapter(ProgressEvent)


def read_event(wire: Mapping[str, Any]) -> ProgressEvent | None:
    """A wire event (``{"type": ..., **data}``, from our engine or a foreign one) as its typed model; None when its
    type is unknown or its fields do not fit (the caller shows its text, if any, and moves on)."""
    try:
        return _PROGRESS_EVENT.validate_python(dict(wire))
    except (ValidationError, TypeError, ValueError, RecursionError):
        return None


def events_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a progress event's wire form: the A2A ``arena_event`` data part and the
    ``detail`` of a backend progress post. Generated from the models; committed as docs/events.schema.json."""
    schema = _PROGRESS_EVENT.json_schema(mode="serialization")
    defs = schema.get("$defs", {})
    for model in (
        BattleStarted,
        TaskStarted,
        AttemptStarted,
        AttemptFinished,
        BattleStopped,
        BattleFinished,
        LogNote,
        AttemptsSkipped,
    ):
        properties = defs[model.__name__]["properties"]
        required = defs[model.__name__].setdefault("required", [])
        if "type" not in required:  # defaulted in the models (built by the engine), always on the wire
            required.insert(0, "type")
        properties["timestamp"] = {"type": "string", "description": "When the event was emitted (ISO 8601, UTC)."}
        if model is AttemptFinished:
            properties["trajectory"] = {
                "type": "object",
                "description": "Backend posts only: the attempt's trajectory made small (arena.trajectory/1).",
            }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$comment": f"{EVENTS_SCHEMA_ID}: generated by `arena schema --events` from green_agent.engine.events; "
        "do not edit by hand",
        "title": "ProgressEvent",
        **schema,
    }


def events_json_schema_text() -> str:
    """:func:`events_json_schema` as the exact text of docs/events.schema.json (2-space indent, final newline)."""
    return json.dumps(events_json_schema(), indent=2, ensure_ascii=False) + "\n"

"""Failure taxonomy: one category and one fault author per failed attempt.

Why a module of its own: the category decides whether an attempt counts against the agent at all. Blaming the
agent for the harness's or the user simulator's fault is the worst mistake a reliability harness can make, so the
rules live in one place, are pure, and are tested case by case (tests/green_agent/engine drives one attempt into
every rule).

Rules for an attempt the loop ended early (:func:`stop_for_error`, in order):
1. The loop stopped on purpose: max_steps reached -> ``timeout`` / white_agent (termination ``max_steps``).
2. The white agent's channel failed: per-turn time limit -> ``timeout``; connection, HTTP or JSON-RPC error ->
   ``communication_error``; a Task it failed -> ``white_agent_error``; a reply over the byte cap or a reply that is
   not one action -> ``format_error``. All white_agent (termination ``agent_error``).
3. A tool call was killed, crashed or exhausted its sandbox: the fault of whoever made the call (the agent:
   ``timeout`` for a time limit, else ``white_agent_error``; the simulated user: ``user_simulator_error``), except
   a call that hit its time limit and its grace while its sandbox got almost no CPU (starved by a saturated
   machine: green_agent/engine/tau/sandbox_cpu.py): ``harness_error`` / harness.
4. The simulated user failed (:class:`UserSimulatorError`) -> ``user_simulator_error`` / user_simulator.
5. The attempt deadline fired -> the party being waited on is blamed (termination ``deadline``): the white agent ->
   ``timeout``; the user simulator -> ``user_simulator_error``; the environment or the harness -> ``harness_error``;
   but when it fired while a tool call past its limit was in its grace without having computed (rule 3), the harness
   -> ``harness_error``.
6. Anything else is a ``harness_error`` (termination ``too_many_errors``) of the party being waited on, except that
   an unexpected exception while waiting on the white agent is the harness's own (the white-agent channel classifies
   every failure of the agent into rule 2, so what escapes it is a bug on our side).

Rules for a scored attempt (:func:`classify_scored`):
1. Reward within 1e-6 of 1 is a success.
2. A failed score is explained by the first failed check, in the order DB, COMMUNICATE, ACTION, ENV_ASSERTION,
   among the checks of the task's reward basis only (tau2 runs every check, but only those in the basis count: a
   telecom task scored on environment assertions is never blamed for a database mismatch). Database wrong ->
   ``task_incomplete``; required information not told -> ``missing_outputs`` (none told) / ``incomplete_outputs``
   (some told); gold actions missed -> ``task_incomplete`` naming the missed actions; environment assertions failed
   -> ``task_incomplete`` naming the failed assertions (details bounded to :data:`MAX_DETAIL_CHARS`). No failed
   check in the basis -> ``unknown_failure``. A breakdown without a reward basis (written before it was recorded)
   is read as before: every check counts, and the details give the counts only.
3. tau2's evaluator failing is a ``harness_error`` / harness (:func:`scoring_failed`), except when what failed was an
   environment assertion run on the state the conversation left (e.g. a check of a record the agent never created,
   as when it does nothing): that is the agent's doing, scored 0 as tau2's runner scores it and explained here as
   ``task_incomplete`` / white_agent naming tau2's error and the assertion (the scoring worker marks such verdicts).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from green_agent.engine.config import BattleConfig
from green_agent.engine.results import Failure, FailureCategory, FaultAuthor, RewardBreakdown, TerminationReason
from green_agent.engine.tau.sandbox import ToolFault
from green_agent.engine.tau.scoring import PROVOKED_ERROR_KEY
from green_agent.engine.tau.users.base import UserSimulatorError
from green_agent.engine.turn_protocol import ActionParseError
from green_agent.engine.white_client import (
    WhiteAgentCommunicationError,
    WhiteAgentReplyTooLarge,
    WhiteAgentReportedFailure,
    WhiteAgentTimeout,
)

SUCCESS_TOLERANCE = 1e-6
"""tau2's trial success rule: |reward - 1| <= 1e-6."""

MAX_DETAIL_CHARS = 500
"""Longest failure detail naming failed checks (their arguments come from tau2's task data); longer ones are cut."""
MAX_ARGUMENT_CHARS = 60
"""Longest argument value shown in a named check."""
ENV_TYPE_PLACES = {"user": " on the user's device", "assistant": " in the agent's database"}
"""Where an environment assertion was checked, by tau2's ``env_type``."""


@dataclass(frozen=True, slots=True)
class EarlyStop:
    """Why the attempt loop stopped before a normal end of conversation."""

    category: FailureCategory
    fault_author: FaultAuthor
    detail: str
    termination_reason: TerminationReason


class StoppedOnPurpose(Exception):
    """Raised inside the attempt loop to end the attempt with a decided :class:`EarlyStop` (e.g. max_steps)."""

    def __init__(self, stop: EarlyStop) -> None:
        super().__init__(stop.detail)
        self.stop = stop


DEADLINE_CATEGORY: dict[FaultAuthor, FailureCategory] = {
    FaultAuthor.WHITE_AGENT: FailureCategory.TIMEOUT,
    FaultAuthor.USER_SIMULATOR: FailureCategory.USER_SIMULATOR_ERROR,
    FaultAuthor.ENVIRONMENT: FailureCategory.HARNESS_ERROR,
    FaultAuthor.HARNESS: FailureCategory.HARNESS_ERROR,
}
"""The category of an attempt deadline, by the party being waited on when it fired."""


def is_success(reward: float) -> bool:
    """tau2's rule for a successful trial."""
    return abs(reward - 1.0) <= SUCCESS_TOLERANCE


def max_steps_stop(max_steps: int) -> EarlyStop:
    """The agent used its step budget without ending the conversation."""
    return EarlyStop(
        FailureCategory.TIMEOUT,
        FaultAuthor.WHITE_AGENT,
        f"max_steps ({max_steps}) reached without ending the conversation",
        TerminationReason.MAX_STEPS,
    )


def deadline_stop(waiting_on: FaultAuthor, doing: str, attempt_timeout_s: float) -> EarlyStop:
    """The attempt deadline fired while ``waiting_on`` was ``doing`` something: that party is blamed."""
    return EarlyStop(
        DEADLINE_CATEGORY[waiting_on],
        waiting_on,
        f"attempt time limit ({attempt_timeout_s:g} s) hit while {doing}",
        TerminationReason.DEADLINE,
    )


def tool_fault_stop(fault: ToolFault) -> EarlyStop:
    """A killed, crashed or exhausted tool call: the fault of whoever made the call (agent or simulated user), except
    a call the machine starved of CPU (it never ran: green_agent/engine/tau/sandbox_cpu.py), which is the harness's."""
    if fault.kind == "starved":
        caller = "simulated user" if fault.requestor == "user" else "agent"
        detail = f"the {caller}'s {fault.detail}"
        return EarlyStop(FailureCategory.HARNESS_ERROR, FaultAuthor.HARNESS, detail, TerminationReason.TOO_MANY_ERRORS)
    if fault.requestor == "user":
        return EarlyStop(
            FailureCategory.USER_SIMULATOR_ERROR,
            FaultAuthor.USER_SIMULATOR,
            f"the simulated user's {fault.detail}",
            TerminationReason.USER_ERROR,
        )
    category = FailureCategory.TIMEOUT if fault.kind == "timeout" else FailureCategory.WHITE_AGENT_ERROR
    return EarlyStop(category, FaultAuthor.WHITE_AGENT, f"the agent's {fault.detail}", TerminationReason.AGENT_ERROR)


def stop_for_error(
    error: Exception,
    *,
    waiting_on: FaultAuthor,
    doing: str,
    deadline_expired: bool,
    config: BattleConfig,
    steps: int,
    starving: str | None = None,
) -> EarlyStop:
    """Attribute an exception that ended an attempt (rules 1-6 of the module docstring).

    ``waiting_on`` / ``doing``: who the loop was waiting on and for what when ``error`` arrived; ``steps``: the
    agent's replies so far; ``starving``: the figures of a tool call in its grace that the machine has not run
    (sandbox_cpu.py), when the deadline fired during it.
    """
    agent_error = TerminationReason.AGENT_ERROR
    if isinstance(error, StoppedOnPurpose):
        return error.stop
    if isinstance(error, WhiteAgentTimeout):
        detail = f"turn time limit ({config.turn_timeout_s:g} s) exceeded at step {steps + 1}: {error}"
        return EarlyStop(FailureCategory.TIMEOUT, FaultAuthor.WHITE_AGENT, detail, agent_error)
    if isinstance(error, WhiteAgentCommunicationError):
        return EarlyStop(FailureCategory.COMMUNICATION_ERROR, FaultAuthor.WHITE_AGENT, str(error), agent_error)
    if isinstance(error, WhiteAgentReportedFailure):
        return EarlyStop(FailureCategory.WHITE_AGENT_ERROR, FaultAuthor.WHITE_AGENT, str(error), agent_error)
    if isinstance(error, WhiteAgentReplyTooLarge):
        detail = f"reply at step {steps + 1} refused: {error}"
        return EarlyStop(FailureCategory.FORMAT_ERROR, FaultAuthor.WHITE_AGENT, detail, agent_error)
    if isinstance(error, ActionParseError):
        detail = f"reply at step {steps} is not an action: {error}"
        return EarlyStop(FailureCategory.FORMAT_ERROR, FaultAuthor.WHITE_AGENT, detail, agent_error)
    if isinstance(error, ToolFault):
        return tool_fault_stop(error)
    if isinstance(error, UserSimulatorError):
        return EarlyStop(
            FailureCategory.USER_SIMULATOR_ERROR, FaultAuthor.USER_SIMULATOR, str(error), TerminationReason.USER_ERROR
        )
    if isinstance(error, TimeoutError) and deadline_expired:
        if starving is not None:  # a tool call in its grace the machine did not run: not the caller's deadline
            return deadline_stop(FaultAuthor.HARNESS, f"{doing}: {starving}", config.attempt_timeout_s)
        return deadline_stop(waiting_on, doing, config.attempt_timeout_s)
    author = FaultAuthor.HARNESS if waiting_on is FaultAuthor.WHITE_AGENT else waiting_on
    return EarlyStop(
        FailureCategory.HARNESS_ERROR,
        author,
        f"{type(error).__name__} while {doing}: {error}",
        TerminationReason.TOO_MANY_ERRORS,
    )


def scoring_failed(error: Exception, termination: TerminationReason) -> EarlyStop:
    """tau2's evaluator raised (or its worker died) on a finished conversation: the harness's fault."""
    return EarlyStop(FailureCategory.HARNESS_ERROR, FaultAuthor.HARNESS, f"tau2 evaluator failed: {error}", termination)


def _shown_value(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= MAX_ARGUMENT_CHARS else text[: MAX_ARGUMENT_CHARS - 3] + "..."


def _shown_call(name: Any, arguments: Any, shown_keys: Any = None) -> str:
    """``name(key=value, ...)`` with Python reprs of the values (all of them, or only ``shown_keys``)."""
    items = list(arguments.items()) if isinstance(arguments, Mapping) else []
    if isinstance(shown_keys, list):
        items = [(key, value) for key, value in items if key in shown_keys]
    return f"{name}({', '.join(f'{key}={_shown_value(value)}' for key, value in items)})"


def _entries(raw: Mapping[str, Any], key: str, inner: str) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """(check, what it checked) for each well-formed entry of the RewardInfo list ``raw[key]``."""
    entries = raw.get(key)
    if not isinstance(entries, list):
        return []
    return [
        (entry, entry[inner])
        for entry in entries
        if isinstance(entry, Mapping) and isinstance(entry.get(inner), Mapping)
    ]


def _missed_actions(raw: Mapping[str, Any]) -> list[str]:
    """The gold actions tau2 found no matching tool call for, with the arguments it compares."""
    missed = []
    for check, action in _entries(raw, "action_checks", "action"):
        if not check.get("action_match"):
            by_user = " by the user" if action.get("requestor") == "user" else ""
            missed.append(
                _shown_call(action.get("name"), action.get("arguments"), action.get("compare_args")) + by_user
            )
    return missed


def _failed_assertions(raw: Mapping[str, Any]) -> list[str]:
    """The environment assertions that did not hold, where they were checked (``not`` for an expected False)."""
    failed = []
    for check, assertion in _entries(raw, "env_assertions", "env_assertion"):
        if not check.get("met"):
            negated = "not " if assertion.get("assert_value") is False else ""
            place = ENV_TYPE_PLACES.get(str(assertion.get("env_type")), "")
            failed.append(negated + _shown_call(assertion.get("func_name"), assertion.get("arguments")) + place)
    return failed


def _named(counts: str, label: str, names: list[str]) -> str:
    """``counts; label: name; name`` cut to :data:`MAX_DETAIL_CHARS` (just ``counts`` when nothing is named)."""
    if not names:
        return counts
    detail = f"{counts}; {label}: {'; '.join(names)}"
    return detail if len(detail) <= MAX_DETAIL_CHARS else detail[: MAX_DETAIL_CHARS - 3] + "..."


def _provoked_evaluator_error(raw: Mapping[str, Any]) -> str | None:
    """tau2's error when the verdict is one the scoring worker made because an environment assertion raised on the
    state the attempt left (green_agent/engine/tau/scoring.py, ``_provoked_verdict``), else None."""
    info = raw.get("info")
    error = info.get(PROVOKED_ERROR_KEY) if isinstance(info, Mapping) else None
    return str(error)[:MAX_DETAIL_CHARS] if error else None


def _short(met: int, total: int) -> bool:
    """Some of ``total`` checks (at least one) not met."""
    return total > 0 and met < total


def classify_scored(breakdown: RewardBreakdown) -> Failure | None:
    """Explain a scored attempt: ``None`` for a success, else the failure the breakdown shows (rule 2 above)."""
    if is_success(breakdown.reward):
        return None
    provoked = _provoked_evaluator_error(breakdown.raw)
    if provoked is not None:
        return Failure(
            category=FailureCategory.TASK_INCOMPLETE,
            fault_author=FaultAuthor.WHITE_AGENT,
            detail=_named(
                f"tau2's evaluator could not check the state the conversation left ({provoked}); scored 0",
                "raised",
                _failed_assertions(breakdown.raw),
            ),
        )
    basis = set(breakdown.reward_basis)
    named = bool(basis)  # no basis: a record from before it was kept, explained exactly as it was then

    def counts(check: str) -> bool:
        return not basis or check in basis

    if counts("DB") and breakdown.db_match is False:
        return Failure(
            category=FailureCategory.TASK_INCOMPLETE,
            fault_author=FaultAuthor.WHITE_AGENT,
            detail="conversation ended but the database state differs from the goal state",
        )
    if counts("COMMUNICATE") and _short(breakdown.communicate_met, breakdown.communicate_total):
        told, total = breakdown.communicate_met, breakdown.communicate_total
        category = FailureCategory.MISSING_OUTPUTS if told == 0 else FailureCategory.INCOMPLETE_OUTPUTS
        return Failure(
            category=category,
            fault_author=FaultAuthor.WHITE_AGENT,
            detail=f"required information told to the user: {told} of {total}",
        )
    if counts("ACTION") and _short(breakdown.action_met, breakdown.action_total):
        detail = f"expected actions performed: {breakdown.action_met} of {breakdown.action_total}"
        return Failure(
            category=FailureCategory.TASK_INCOMPLETE,
            fault_author=FaultAuthor.WHITE_AGENT,
            detail=_named(detail, "missed", _missed_actions(breakdown.raw)) if named else detail,
        )
    if counts("ENV_ASSERTION") and _short(breakdown.env_assertions_met, breakdown.env_assertions_total):
        detail = f"environment assertions met: {breakdown.env_assertions_met} of {breakdown.env_assertions_total}"
        return Failure(
            category=FailureCategory.TASK_INCOMPLETE,
            fault_author=FaultAuthor.WHITE_AGENT,
            detail=_named(detail, "failed", _failed_assertions(breakdown.raw)) if named else detail,
        )
    return Failure(
        category=FailureCategory.UNKNOWN_FAILURE,
        fault_author=FaultAuthor.WHITE_AGENT,
        detail=f"reward {breakdown.reward:g} with no failed check in the breakdown",
    )


def failure_from_stop(stop: EarlyStop) -> Failure:
    """The :class:`Failure` an early stop stands for."""
    return Failure(category=stop.category, fault_author=stop.fault_author, detail=stop.detail)

"""Failure taxonomy: one category and one fault author per failed attempt.

Why a module of its own: the category decides whether an attempt counts against the agent at all. Blaming the
agent for the harness's or the user simulator's fault is the worst mistake a reliability harness can make, so the
rules live in one place, are pure, and are tested case by case.

Rules, in order:
1. Something the attempt loop observed ends the attempt early (an :class:`EarlyStop`): its category/author are final.
2. Otherwise the attempt was scored by tau2: reward within 1e-6 of 1 is a success.
3. A failed score is explained by the reward breakdown: database wrong -> ``task_incomplete``; database right but
   required information not told -> ``missing_outputs`` (none told) / ``incomplete_outputs`` (some told); failed
   actions or environment assertions -> ``task_incomplete``; anything else -> ``unknown_failure``.
"""

from __future__ import annotations

from dataclasses import dataclass

from green_agent.engine.results import Failure, FailureCategory, FaultAuthor, RewardBreakdown

SUCCESS_TOLERANCE = 1e-6
"""tau2's trial success rule: |reward - 1| <= 1e-6."""


@dataclass(frozen=True, slots=True)
class EarlyStop:
    """Why the attempt loop stopped before a normal end of conversation."""

    category: FailureCategory
    fault_author: FaultAuthor
    detail: str
    termination_reason: str


def is_success(reward: float) -> bool:
    """tau2's rule for a successful trial."""
    return abs(reward - 1.0) <= SUCCESS_TOLERANCE


def classify_scored(breakdown: RewardBreakdown) -> Failure | None:
    """Explain a scored attempt: ``None`` for a success, else the failure the breakdown shows."""
    if is_success(breakdown.reward):
        return None
    if breakdown.db_match is False:
        return Failure(
            category=FailureCategory.TASK_INCOMPLETE,
            fault_author=FaultAuthor.WHITE_AGENT,
            detail="conversation ended but the database state differs from the goal state",
        )
    if breakdown.communicate_total and breakdown.communicate_met < breakdown.communicate_total:
        told, total = breakdown.communicate_met, breakdown.communicate_total
        category = FailureCategory.MISSING_OUTPUTS if told == 0 else FailureCategory.INCOMPLETE_OUTPUTS
        return Failure(
            category=category,
            fault_author=FaultAuthor.WHITE_AGENT,
            detail=f"required information told to the user: {told} of {total}",
        )
    if breakdown.action_total and breakdown.action_met < breakdown.action_total:
        return Failure(
            category=FailureCategory.TASK_INCOMPLETE,
            fault_author=FaultAuthor.WHITE_AGENT,
            detail=f"expected actions performed: {breakdown.action_met} of {breakdown.action_total}",
        )
    if breakdown.env_assertions_total and breakdown.env_assertions_met < breakdown.env_assertions_total:
        return Failure(
            category=FailureCategory.TASK_INCOMPLETE,
            fault_author=FaultAuthor.WHITE_AGENT,
            detail=(f"environment assertions met: {breakdown.env_assertions_met} of {breakdown.env_assertions_total}"),
        )
    return Failure(
        category=FailureCategory.UNKNOWN_FAILURE,
        fault_author=FaultAuthor.WHITE_AGENT,
        detail=f"reward {breakdown.reward:g} with no failed check in the breakdown",
    )


def failure_from_stop(stop: EarlyStop) -> Failure:
    """The :class:`Failure` an early stop stands for."""
    return Failure(category=stop.category, fault_author=stop.fault_author, detail=stop.detail)

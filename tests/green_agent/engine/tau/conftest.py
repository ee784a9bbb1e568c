"""Fixtures for the tau2 adapter tests: one scoring pool for the whole session, and in-process replays.

Why a session-wide pool: every worker pays tau2's evaluator import (~4 s); one pool is enough for all the scoring
tests. The executor is not bound to an event loop, so function-scoped async tests can share it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from green_agent.engine.tau.environment import AttemptEnvironment
from green_agent.engine.tau.scoring import ScoringPool
from green_agent.engine.tau.tasks import TaskRef

STARTED = "2026-01-01T10:00:00Z"
ENDED = "2026-01-01T10:00:30Z"


@pytest.fixture(scope="session")
def scoring_pool() -> Iterator[ScoringPool]:
    """A two-worker scoring pool, started lazily by the first score and stopped at the end of the session."""
    pool = ScoringPool(max_workers=2, warm=False)
    yield pool
    asyncio.run(pool.close())


def gold_actions(ref: TaskRef) -> list[tuple[str, dict[str, Any], str]]:
    """The task's gold actions as (name, arguments, requestor)."""
    criteria = ref.task.evaluation_criteria
    return [(a.name, dict(a.arguments), a.requestor) for a in (criteria.actions or [] if criteria else [])]


def communicate_info(ref: TaskRef) -> list[str]:
    """The strings the agent must tell the user."""
    criteria = ref.task.evaluation_criteria
    return list(criteria.communicate_info or []) if criteria else []


def final_statement(info: Sequence[str]) -> str:
    """A closing statement carrying ``info`` verbatim (no question), as the replay reference agent sends."""
    return "Your request has been completed." + (f" Details: {'; '.join(info)}." if info else "")


async def replay(
    ref: TaskRef,
    *,
    skip: frozenset[int] | set[int] = frozenset(),
    told: Sequence[str] | None = None,
    termination: str = "user_stop",
) -> tuple[AttemptEnvironment, dict[str, Any]]:
    """Play the task's gold actions (minus the indices in ``skip``), tell ``told`` (default: all communicate_info),
    let the user stop; return the environment and the simulation."""
    env = await AttemptEnvironment.create(ref)
    env.record_user_text("Hi, I need help with my account.")
    for i, (name, arguments, requestor) in enumerate(gold_actions(ref)):
        if i not in skip:
            await env.call_tool(name, arguments, requestor=requestor)  # type: ignore[arg-type]
    env.record_assistant_text(final_statement(communicate_info(ref) if told is None else told))
    env.record_user_text("Thanks! ###STOP###")
    return env, env.simulation(termination, started_at=STARTED, ended_at=ENDED)

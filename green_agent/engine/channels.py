"""The parties one attempt talks to, as the attempt loop sees them: the seams where tests (and other transports)
plug in.

:func:`~green_agent.engine.attempt.run_attempt` gets all of them through ``AttemptDeps``, so a test can drive one
attempt with a scripted white agent or a scripted user and check whom each failure is blamed on
(tests/green_agent/engine). The battle wires the real ones: :func:`a2a_channels` (the A2A client over the battle's
HTTP pool) and :func:`~green_agent.engine.tau.users.make_user` (the scripted or LLM user of the battle's config).

What the loop relies on, and the attribution rules depend on (green_agent/engine/attribution.py):
- a :class:`WhiteChannel` raises only the white client's classified errors for the agent's failures
  (``WhiteAgentTimeout``, ``WhiteAgentCommunicationError``, ``WhiteAgentReportedFailure``, ``WhiteAgentReplyTooLarge``);
  anything else it raises is taken for a harness bug;
- a simulated user raises :class:`~green_agent.engine.tau.users.UserSimulatorError` for its own failures; anything
  else it raises is a harness error blamed on the user simulator.
"""

from __future__ import annotations

import contextlib
import functools
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from green_agent.engine.agent_bounds import warn_near_bound
from green_agent.engine.card_cache import CardCache
from green_agent.engine.config import UserSimulatorConfig
from green_agent.engine.results import RewardBreakdown
from green_agent.engine.tau.scoring import ScoredSimulation
from green_agent.engine.tau.tasks import TaskRef
from green_agent.engine.tau.users.base import SimulatedUser
from green_agent.engine.white_client import WhiteAgentClient, WhiteReply

if TYPE_CHECKING:
    from green_agent.engine.tau.environment import AttemptEnvironment


class WhiteChannel(Protocol):
    """One attempt's conversation with the white agent: a message in, the agent's reply out."""

    async def send(
        self,
        *,
        context_id: str,
        text: str,
        data: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> WhiteReply:
        """Send one message in ``context_id``; the reply, or one of the white client's classified errors."""
        ...


class WhiteChannels(Protocol):
    """Opens an attempt's channel to the white agent at ``url`` (closed when the attempt ends)."""

    def __call__(self, url: str, *, turn_timeout_s: float) -> contextlib.AbstractAsyncContextManager[WhiteChannel]:
        """``turn_timeout_s``: the per-turn limit the channel enforces (exceeded: ``WhiteAgentTimeout``)."""
        ...


class UserFactory(Protocol):
    """Makes the simulated user of one attempt (``make_user``'s signature)."""

    def __call__(
        self,
        ref: TaskRef,
        config: UserSimulatorConfig,
        environment: AttemptEnvironment,
        /,
        *,
        api_key: str | None,
    ) -> SimulatedUser:
        """A fresh user for one attempt of ``ref``, playing on ``environment``."""
        ...


class Scorer(Protocol):
    """Scores a finished conversation (the battle's :class:`~green_agent.engine.tau.scoring.ScoringPool`)."""

    async def score(self, ref: TaskRef, simulation: dict[str, Any]) -> RewardBreakdown:
        """tau2's reward breakdown; ``ScoringError`` when the evaluator fails."""
        ...

    async def score_explained(self, ref: TaskRef, simulation: dict[str, Any]) -> ScoredSimulation:
        """The same breakdown, plus why the reward is below 1 (what the attempt loop calls); the explanation is
        None when explaining failed, never an error of its own."""
        ...


def a2a_channels(http: httpx.AsyncClient, *, concurrency: int | None = None) -> WhiteChannels:
    """Channels over A2A (:class:`WhiteAgentClient`) sharing ``http``, the battle's byte-capped connection pool, and
    the white agent's card (:class:`CardCache`: fetched by the first attempt that needs it, then reused; a battle's
    ``concurrency`` near the bound the card announces is logged: green_agent/engine/agent_bounds.py)."""
    cards = CardCache(functools.partial(warn_near_bound, concurrency=concurrency))

    def open_channel(url: str, *, turn_timeout_s: float) -> WhiteAgentClient:
        return WhiteAgentClient(url, httpx_client=http, turn_timeout_s=turn_timeout_s, cards=cards)

    return open_channel

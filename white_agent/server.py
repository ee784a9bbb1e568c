"""The A2A side of every reference white agent: agent card, executor adapter and the Starlette app.

Why one adapter: the agents only decide *what* to answer (:class:`AgentReply`); how that becomes an A2A Message, a
completed Task or a failed Task is the same for all of them and lives here. The app serves A2A 1.0 and, with the
compatibility switch on, the 0.3 wire format that AgentBeats and most public green agents speak.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from a2a.helpers import new_data_part, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Task,
    TaskState,
    TaskStatus,
)
from starlette.applications import Starlette

from white_agent.protocol import GreenTurn, parse_green_message

logger = logging.getLogger(__name__)

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


class TurnExecutor(AgentExecutor):
    """Adapts a :class:`TurnAgent` to the a2a-sdk executor interface (exactly one Message, or one Task, per request)."""

    def __init__(self, agent: TurnAgent) -> None:
        self._agent = agent

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Parse the green agent's message, ask the agent, publish its reply."""
        message = context.message
        if message is None:  # pragma: no cover - the SDK always passes the message on SendMessage
            raise ValueError("no message in request")
        context_id = context.context_id or str(uuid.uuid4())
        turn = parse_green_message(message, context.metadata)
        reply = await self._agent.reply(context_id, turn)
        if reply.kind == "message":
            answer = new_text_message(reply.text, context_id=context_id)
            if reply.data is not None:
                answer.parts.append(new_data_part(reply.data))
            if reply.metadata:
                answer.metadata.update(reply.metadata)
            await event_queue.enqueue_event(answer)
            return
        task_id = context.task_id or str(uuid.uuid4())
        await event_queue.enqueue_event(
            Task(
                id=task_id,
                context_id=context_id,
                status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                history=[message],
            )
        )
        updater = TaskUpdater(event_queue, task_id, context_id)
        status_message = updater.new_agent_message([new_text_part(reply.text)], metadata=reply.metadata)
        if reply.kind == "task_failed":
            await updater.failed(status_message)
            return
        parts = [new_text_part(reply.text)] + ([new_data_part(reply.data)] if reply.data is not None else [])
        await updater.add_artifact(parts, name="action")
        await updater.complete(status_message)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Nothing to undo: a turn either answers or is abandoned."""


def build_agent_card(url: str, *, name: str, description: str, version: str = "0.1.0") -> AgentCard:
    """The card: one JSON-RPC endpoint announced as protocol 1.0 and 0.3 (the 0.3 entry adds the legacy ``url``)."""
    return AgentCard(
        name=name,
        description=description,
        version=version,
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id="tau-bench-customer-service",
                name="tau-bench customer service",
                description="Answers each harness turn with one action: a tool call or a reply to the user.",
                tags=["tau-bench", "customer-service", "tool-use"],
            )
        ],
        supported_interfaces=[
            AgentInterface(protocol_binding="JSONRPC", protocol_version="1.0", url=url),
            AgentInterface(protocol_binding="JSONRPC", protocol_version="0.3", url=url),
        ],
    )


def create_app(agent: TurnAgent, *, card_url: str, name: str, description: str) -> Starlette:
    """A Starlette app serving ``agent`` over A2A at ``/`` with its card at ``/.well-known/agent-card.json``.

    ``card_url`` is the URL clients should call (what the card announces), e.g. ``http://127.0.0.1:9004/``.
    Shutdown drains the SDK's in-flight tasks (so a deliberately hanging turn is cancelled) and closes the agent.
    """
    card = build_agent_card(card_url, name=name, description=description)
    handler = DefaultRequestHandler(agent_executor=TurnExecutor(agent), task_store=InMemoryTaskStore(), agent_card=card)

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await handler.aclose()
            await agent.aclose()

    routes = [
        *create_agent_card_routes(card),
        *create_agent_card_routes(card, card_url="/.well-known/agent.json"),  # legacy path (AgentBeats 1.2.6)
        *create_jsonrpc_routes(handler, rpc_url="/", enable_v0_3_compat=True),
    ]
    return Starlette(routes=routes, lifespan=lifespan)

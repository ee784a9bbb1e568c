"""The A2A side of every reference white agent: the agent card and the Starlette app.

Why one app for all agents: the agents only decide *what* to answer (:class:`AgentReply`); how that becomes an A2A
Message, a completed Task or a failed Task is the same for all of them and lives in :mod:`white_agent.turns`. The
app serves A2A 1.0 and, with the compatibility switch on, the 0.3 wire format that AgentBeats and most public green
agents speak.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentExtension, AgentInterface, AgentSkill
from starlette.applications import Starlette

from white_agent.contexts import CONVERSATIONS_EXTENSION_URI, BoundedContexts
from white_agent.reply import AgentReply, ReplyKind, TurnAgent
from white_agent.turns import DirectRequestHandler

__all__ = ["AgentReply", "ReplyKind", "TurnAgent", "build_agent_card", "create_app"]


def conversations_extension(contexts: BoundedContexts[Any]) -> AgentExtension:
    """The card extension announcing how many live conversations the agent holds at most (a green agent warns when
    a battle's concurrency comes near it; a new conversation beyond it is refused, never a live one evicted)."""
    extension = AgentExtension(
        uri=CONVERSATIONS_EXTENSION_URI,
        description="Live conversations held at most; more are refused (JSON-RPC error) until some go idle.",
        required=False,
    )
    extension.params.update({"max_live_conversations": contexts.max_contexts, "idle_s": contexts.idle_s})
    return extension


def build_agent_card(
    url: str,
    *,
    name: str,
    description: str,
    version: str = "0.1.0",
    extensions: list[AgentExtension] | None = None,
) -> AgentCard:
    """The card: one JSON-RPC endpoint announced as protocol 1.0 and 0.3 (the 0.3 entry adds the legacy ``url``)."""
    return AgentCard(
        name=name,
        description=description,
        version=version,
        capabilities=AgentCapabilities(streaming=True, extensions=extensions or []),
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
    Shutdown drains the SDK's in-flight tasks and closes the agent.
    """
    contexts = getattr(agent, "contexts", None)
    extensions = [conversations_extension(contexts)] if isinstance(contexts, BoundedContexts) else []
    card = build_agent_card(card_url, name=name, description=description, extensions=extensions)
    handler = DirectRequestHandler(agent, card)

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

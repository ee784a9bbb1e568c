"""The ``replay`` (calibration) white agent: performs a tau2 task's gold actions, then tells the user what to tell.

Why it exists: a calibration battle must score 1.0 on every task, so it shows that the harness (turn protocol,
environment, scoring) is sound before anyone trusts its verdict on a real agent. The agent learns which task it is
playing only from the ``arena`` block the green agent sends in the first message of a calibration attempt; it
ignores what the tool results and the user say.

Per conversation (A2A context id; bounded, live ones never forgotten: white_agent/contexts.py): one gold action
per turn, in tau2's order; then one ``respond``
whose content holds every ``communicate_info`` string verbatim, as a statement without a question mark (tau2's
check is a case-insensitive substring test on the message with its commas removed, so the strings are joined with
"; "); afterwards a short closing statement for anything else.

Dual control (telecom): a gold action whose requestor is the user is something the customer does on their own
phone, with tools only the user has. The agent cannot call it; it asks for it in words, in a ``respond`` turn that
names the user tool and, when it takes arguments, gives them as JSON (:func:`ask_user_text`), e.g. "Please do this
on your phone: set_network_mode_preference with {"mode": "4g_5g_preferred"}. Let me know when it is done." The
simulated user runs it (the scripted user with exactly these arguments; an LLM user as it understands the request)
and the script goes on with the next gold action.

Tool mode "mcp" (the first message carries an ``mcp`` endpoint): the agent's gold actions are performed as MCP tool
calls on the attempt's endpoint, in order, during a turn, up to the next action that is the user's; the A2A reply to
that turn is then the request to the user, or the final statement when none is left. The trajectory the green agent
records is the same as in text mode (the same calls in the same order, then the same messages), so the score is too.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from white_agent.contexts import DEFAULT_IDLE_S, DEFAULT_MAX_CONTEXTS, BoundedContexts
from white_agent.gold import GoldTask, GoldTaskNotFound, load_gold_task
from white_agent.mcp_client import McpConnector, McpToolsError, describe_mcp_error
from white_agent.protocol import ArenaInfo, GreenTurn, McpEndpointInfo, format_action, format_respond
from white_agent.server import AgentReply

logger = logging.getLogger(__name__)

NO_METADATA_TEXT = (
    "This is a calibration agent. It replays the gold actions of a tau-bench task and needs the calibration "
    'metadata (an "arena" block naming the domain, split, task id and attempt) in the first message of the '
    "conversation, which this conversation did not provide."
)
COMPLETED_TEXT = "Your request has been completed."
CLOSING_TEXT = "Thank you for contacting us. Have a great day."


def ask_user_text(name: str, arguments: dict[str, object]) -> str:
    """The request for the customer's own action ``name``: the user tool's exact name, its arguments as JSON."""
    given = f" with {json.dumps(arguments, ensure_ascii=False)}" if arguments else ""
    return f"Please do this on your phone: {name}{given}. Let me know when it is done."


def final_statement(communicate_info: Sequence[str]) -> str:
    """The final message to the user: a statement carrying each string verbatim (no commas added, no question)."""
    if not communicate_info:
        return COMPLETED_TEXT
    return f"{COMPLETED_TEXT} Details: {'; '.join(communicate_info)}."


@dataclass(frozen=True)
class ScriptAction:
    """One scripted action: a tool call of the agent's, or (``by_user``) a request that the customer do it."""

    name: str
    arguments_json: str
    by_user: bool = False

    def arguments(self) -> dict[str, Any]:
        """A fresh copy of the arguments."""
        value: dict[str, Any] = json.loads(self.arguments_json)
        return value

    def reply(self) -> str:
        """The reply that performs it: the tool call, or the request to the user."""
        if self.by_user:
            return format_respond(ask_user_text(self.name, self.arguments()))
        return format_action(self.name, self.arguments())


@dataclass(frozen=True)
class ReplayScript:
    """What one attempt will do: the actions in order (the agent's and the customer's) and the final content."""

    actions: tuple[ScriptAction, ...]
    final_content: str

    @classmethod
    def from_gold(cls, gold: GoldTask) -> ReplayScript:
        """The faithful script of a gold task."""
        return cls(
            actions=tuple(ScriptAction(a.name, a.arguments_json, a.by_user) for a in gold.steps),
            final_content=final_statement(gold.communicate_info),
        )


@dataclass
class ReplayState:
    """One conversation's progress. ``turns`` counts replies given once the script was known."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    arena: ArenaInfo | None = None
    script: ReplayScript | None = None
    step: int = 0
    turns: int = 0
    final_sent: bool = False
    mcp: McpEndpointInfo | None = None
    """The attempt's MCP tool endpoint (tool mode "mcp"); the gold actions are then called there."""


class ReplayAgent:
    """The calibration agent (a :class:`white_agent.server.TurnAgent`)."""

    card_name = "Arena replay white agent"
    card_description = "Calibration white agent: replays the gold actions of the tau-bench task named in the metadata."

    def __init__(self, *, max_contexts: int = DEFAULT_MAX_CONTEXTS, idle_s: float = DEFAULT_IDLE_S) -> None:
        self._contexts: BoundedContexts[ReplayState] = BoundedContexts(max_contexts, idle_s=idle_s)
        self._mcp = McpConnector()

    @property
    def contexts(self) -> BoundedContexts[ReplayState]:
        """The per-context states (exposed for tests and diagnostics)."""
        return self._contexts

    def new_state(self) -> ReplayState:
        """A fresh conversation state (subclasses extend it)."""
        return ReplayState()

    async def reply(self, context_id: str, turn: GreenTurn) -> AgentReply:
        """The next scripted reply of ``context_id``; the script is built when the arena metadata first arrives."""
        state = self._contexts.get_or_create(context_id, self.new_state)
        async with state.lock:
            if state.script is None:
                if turn.arena is None:
                    detail = f" Problem: {turn.arena_error}." if turn.arena_error else ""
                    return AgentReply(format_respond(NO_METADATA_TEXT + detail))
                arena = turn.arena
                try:
                    gold = await asyncio.to_thread(load_gold_task, arena.domain, arena.split, arena.task_id)
                except GoldTaskNotFound as error:
                    return AgentReply(f"Calibration task not found: {error}.", kind="task_failed")
                state.arena = arena
                state.mcp = turn.mcp
                self.start(state, arena, gold)
            if state.mcp is not None:
                try:
                    await self.call_over_mcp(state, state.mcp)
                except McpToolsError as error:
                    return AgentReply(f"The attempt's MCP tool endpoint failed: {error}", kind="task_failed")
            return await self.advance(state)

    async def call_over_mcp(self, state: ReplayState, endpoint: McpEndpointInfo) -> None:
        """Perform the script's tool calls on the MCP endpoint, in order, up to the next action that is the user's
        (results are not read)."""
        script = state.script
        assert script is not None
        if state.step >= len(script.actions) or script.actions[state.step].by_user:
            return
        async with self._mcp.open(endpoint) as client:
            while state.step < len(script.actions) and not script.actions[state.step].by_user:
                action = script.actions[state.step]
                try:
                    await client.call_tool(action.name, action.arguments())
                except Exception as error:  # transport/protocol failures end the attempt
                    raise McpToolsError(f"calling {action.name}: {describe_mcp_error(error)}") from error
                state.step += 1

    def start(self, state: ReplayState, arena: ArenaInfo, gold: GoldTask) -> None:
        """Fix the attempt's script (the flaky agent overrides this to inject its fault)."""
        state.script = ReplayScript.from_gold(gold)

    async def advance(self, state: ReplayState) -> AgentReply:
        """Answer one turn from the script."""
        state.turns += 1
        return self.next_scripted(state)

    @staticmethod
    def next_scripted(state: ReplayState) -> AgentReply:
        """The next gold action (or request to the user), else the final statement, else the closing statement."""
        script = state.script
        assert script is not None
        if state.step < len(script.actions):
            action = script.actions[state.step]
            state.step += 1
            return AgentReply(action.reply())
        if not state.final_sent:
            state.final_sent = True
            return AgentReply(format_respond(script.final_content))
        return AgentReply(format_respond(CLOSING_TEXT))

    async def aclose(self) -> None:
        """Nothing to release."""

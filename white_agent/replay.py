"""The ``replay`` (calibration) white agent: performs a tau2 task's gold actions, then tells the user what to tell.

Why it exists: a calibration battle must score 1.0 on every task, so it shows that the harness (turn protocol,
environment, scoring) is sound before anyone trusts its verdict on a real agent. The agent learns which task it is
playing only from the ``arena`` block the green agent sends in the first message of a calibration attempt; it
ignores what the tool results and the user say.

Per conversation (A2A context id, bounded LRU): one gold assistant action per turn, in order; then one ``respond``
whose content holds every ``communicate_info`` string verbatim, as a statement without a question mark (tau2's
check is a case-insensitive substring test on the message with its commas removed, so the strings are joined with
"; "); afterwards a short closing statement for anything else.

Tool mode "mcp" (the first message carries an ``mcp`` endpoint): the gold actions are performed as MCP tool calls
on the attempt's endpoint, in order, during the first turn that has actions left; the A2A reply to that turn is
already the final statement. The trajectory the green agent records is the same as in text mode (the same calls in
the same order, then the same message), so the score is too.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from white_agent.contexts import DEFAULT_MAX_CONTEXTS, BoundedContexts
from white_agent.gold import GoldTask, GoldTaskNotFound, load_gold_task
from white_agent.protocol import (
    ArenaInfo,
    GreenTurn,
    McpConnector,
    McpEndpointInfo,
    McpToolsError,
    describe_mcp_error,
    format_action,
    format_respond,
)
from white_agent.server import AgentReply

logger = logging.getLogger(__name__)

NO_METADATA_TEXT = (
    "This is a calibration agent. It replays the gold actions of a tau-bench task and needs the calibration "
    'metadata (an "arena" block naming the domain, split, task id and attempt) in the first message of the '
    "conversation, which this conversation did not provide."
)
COMPLETED_TEXT = "Your request has been completed."
CLOSING_TEXT = "Thank you for contacting us. Have a great day."


def final_statement(communicate_info: Sequence[str]) -> str:
    """The final message to the user: a statement carrying each string verbatim (no commas added, no question)."""
    if not communicate_info:
        return COMPLETED_TEXT
    return f"{COMPLETED_TEXT} Details: {'; '.join(communicate_info)}."


@dataclass(frozen=True)
class ReplayScript:
    """What one attempt will say: the tool calls in order (name, arguments as JSON text) and the final content."""

    actions: tuple[tuple[str, str], ...]
    final_content: str

    @classmethod
    def from_gold(cls, gold: GoldTask) -> ReplayScript:
        """The faithful script of a gold task."""
        return cls(
            actions=tuple((a.name, a.arguments_json) for a in gold.actions),
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

    def __init__(self, *, max_contexts: int = DEFAULT_MAX_CONTEXTS) -> None:
        self._contexts: BoundedContexts[ReplayState] = BoundedContexts(max_contexts)
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
        """Perform the script's remaining tool calls on the MCP endpoint, in order (results are not read)."""
        script = state.script
        assert script is not None
        if state.step >= len(script.actions):
            return
        async with self._mcp.open(endpoint) as client:
            while state.step < len(script.actions):
                name, arguments_json = script.actions[state.step]
                try:
                    await client.call_tool(name, json.loads(arguments_json))
                except Exception as error:  # transport/protocol failures end the attempt
                    raise McpToolsError(f"calling {name}: {describe_mcp_error(error)}") from error
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
        """The next gold action, else the final statement, else the closing statement."""
        script = state.script
        assert script is not None
        if state.step < len(script.actions):
            name, arguments_json = script.actions[state.step]
            state.step += 1
            return AgentReply(format_action(name, json.loads(arguments_json)))
        if not state.final_sent:
            state.final_sent = True
            return AgentReply(format_respond(script.final_content))
        return AgentReply(format_respond(CLOSING_TEXT))

    async def aclose(self) -> None:
        """Nothing to release."""

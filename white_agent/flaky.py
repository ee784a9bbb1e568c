"""The ``flaky`` white agent: replay plus seeded fault injection, so every failure category can be produced on purpose.

Fault choice (per attempt, at most one): ``u = Random(f"{seed}:{domain}:{task_id}:{attempt}").random()`` is compared
with the cumulative rates walked in :data:`FAULTS` order; the first fault whose cumulative rate exceeds ``u`` is the
attempt's fault, none when ``u`` is beyond the sum. The same Random then draws the turn at which turn-bound faults
strike (``randrange(number of gold actions + 1)``, the last one being the final statement; in telecom the
customer's own gold actions count too, each being one request to the user). Because the draw depends
only on the seed and the attempt's identity, concurrency and arrival order never change which attempts fail.

What each fault does (and the failure category the harness should report):

``skip_action``      the last write action is left out (no write action: the last non-read one; none: no effect);
                     in telecom that may be the customer's: the agent then never asks for it -> task_incomplete
``wrong_argument``   one argument of that same action is changed (ids first, e.g. ``"#W123"`` -> ``"#W123-x"``;
                     a tool without arguments gets an unexpected one; a customer's action is asked for with the
                     changed arguments) -> task_incomplete
``malformed_reply``  at the chosen turn a reply with no JSON action at all -> format_error
``no_reply``         at the chosen turn the agent sleeps ``no_reply_s`` (default 3600 s) -> timeout; when the server
                     stops meanwhile (:meth:`FlakyAgent.abandon_hanging_turns`) the turn is abandoned: a JSON-RPC
                     error, never a reply
``crash``            at the chosen turn the executor raises; the client gets a JSON-RPC error -> communication_error
``report_failure``   at the chosen turn an A2A Task in state failed with an explanation -> white_agent_error
``task_reply``       every turn is answered as a completed A2A Task (action in the status message and in an
                     artifact) instead of a Message; the attempt must still succeed
``drop_final``       the final statement tells none of the ``communicate_info`` -> missing_outputs
``partial_final``    it tells only the first half (``n // 2``) of them -> incomplete_outputs; with fewer than two
                     strings that is none, i.e. the same as ``drop_final``

Tasks without a write action or without ``communicate_info`` make the database or output faults invisible (the
attempt then succeeds); scenarios that want those categories should use tasks that have them.
Turn-bound faults do not consume a gold action: if the green agent carries on, the script resumes where it was.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from white_agent.contexts import DEFAULT_IDLE_S, DEFAULT_MAX_CONTEXTS
from white_agent.errors import TurnAbandoned, WhiteAgentConfigError
from white_agent.gold import GoldTask
from white_agent.protocol import ArenaInfo
from white_agent.replay import ReplayAgent, ReplayScript, ReplayState, final_statement
from white_agent.server import AgentReply

logger = logging.getLogger(__name__)

FAULTS: tuple[str, ...] = (
    "skip_action",
    "wrong_argument",
    "malformed_reply",
    "no_reply",
    "crash",
    "report_failure",
    "task_reply",
    "drop_final",
    "partial_final",
)
"""Every fault, in the fixed order the cumulative draw walks (the order of launcher.cli.scenario.FlakyFault)."""

TURN_FAULTS = frozenset({"malformed_reply", "no_reply", "crash", "report_failure"})
"""Faults that strike at one chosen turn."""

MALFORMED_TEXT = "Let me look into that for you. I am checking the details of your request now."
REPORTED_FAILURE_TEXT = "I could not complete this request: an internal error occurred (injected by the flaky agent)."
DROPPED_FINAL_TEXT = "Your request has been completed. Thank you for your patience."
CRASH_MARKER = "flaky agent: injected crash"
"""Appears in the crash exception's message, so log filters can recognise the deliberate crash."""

DEFAULT_NO_REPLY_S = 3600.0


class InjectedCrash(RuntimeError):
    """The deliberate crash of the ``crash`` fault (the SDK turns it into a JSON-RPC internal error)."""


def validate_fault_rates(rates: Mapping[str, float]) -> dict[str, float]:
    """Check names, ranges and the sum; return a plain dict. Raises :class:`WhiteAgentConfigError`."""
    checked: dict[str, float] = {}
    for name, rate in rates.items():
        if name not in FAULTS:
            raise WhiteAgentConfigError(f"fault_rates: unknown fault {name!r}; known faults: {', '.join(FAULTS)}")
        value = float(rate)
        if not 0.0 <= value <= 1.0 or math.isnan(value):
            raise WhiteAgentConfigError(f"fault_rates.{name}: must be between 0 and 1 (got {rate})")
        checked[name] = value
    total = sum(checked.values())
    if total > 1.0 + 1e-9:
        raise WhiteAgentConfigError(f"fault_rates: the rates must sum to at most 1 (they sum to {total:g})")
    return checked


@dataclass(frozen=True)
class FaultDecision:
    """The fault of one attempt (``None``: behave like replay) and the turn (0-based) for turn-bound faults."""

    fault: str | None
    turn: int
    draw: float


def choose_fault(
    seed: int, domain: str, task_id: str, attempt: int, rates: Mapping[str, float], n_turns: int
) -> FaultDecision:
    """The attempt's fault, a pure function of its arguments (see the module docstring)."""
    rng = random.Random(f"{seed}:{domain}:{task_id}:{attempt}")
    u = rng.random()
    chosen: str | None = None
    cumulative = 0.0
    for name in FAULTS:
        cumulative += rates.get(name, 0.0)
        if u < cumulative:
            chosen = name
            break
    turn = rng.randrange(max(1, n_turns))
    return FaultDecision(fault=chosen, turn=turn, draw=u)


def _target_action(gold: GoldTask) -> int | None:
    """Index in the script (``gold.steps``) of the last write action, else of the last non-read one, else None."""
    steps = gold.steps
    predicates: tuple[Callable[[str], bool], ...] = (lambda t: t == "write", lambda t: t != "read")
    for predicate in predicates:
        for index in range(len(steps) - 1, -1, -1):
            if predicate(steps[index].tool_type):
                return index
    return None


_UNCHANGED = object()


def _corrupt_value(value: Any) -> Any:
    """A different value of a similar shape, or ``_UNCHANGED`` when there is nothing to change."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "-x" if value else "x"
    if isinstance(value, list):
        if not value:
            return ["x"]
        first = _corrupt_value(value[0])
        return [first if first is not _UNCHANGED else "x", *value[1:]]
    if isinstance(value, dict):
        for key in sorted(value):
            changed = _corrupt_value(value[key])
            if changed is not _UNCHANGED:
                return {**value, key: changed}
        return {**value, "x": "x"}
    if value is None:
        return "x"
    return _UNCHANGED


def corrupt_arguments(arguments: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A copy of ``arguments`` with one value changed (id-like keys first); returns it and the key changed."""
    keys = sorted(arguments)
    ordered = [k for k in keys if k.endswith(("_id", "_ids"))] + [k for k in keys if not k.endswith(("_id", "_ids"))]
    for key in ordered:
        changed = _corrupt_value(arguments[key])
        if changed is not _UNCHANGED:
            return {**arguments, key: changed}, key
    return {**arguments, "unexpected_argument": "x"}, "unexpected_argument"


def faulty_script(gold: GoldTask, fault: str | None) -> ReplayScript:
    """The replay script of ``gold`` with a script-level fault applied (turn-level faults leave it unchanged)."""
    script = ReplayScript.from_gold(gold)
    target = _target_action(gold)
    if fault == "skip_action" and target is not None:
        actions = script.actions[:target] + script.actions[target + 1 :]
        return replace(script, actions=actions)
    if fault == "wrong_argument" and target is not None:
        action = script.actions[target]
        corrupted, _key = corrupt_arguments(action.arguments())
        wrong = replace(action, arguments_json=json.dumps(corrupted))
        actions = (*script.actions[:target], wrong, *script.actions[target + 1 :])
        return replace(script, actions=actions)
    if fault == "drop_final":
        return replace(script, final_content=DROPPED_FINAL_TEXT)
    if fault == "partial_final":
        info = gold.communicate_info
        half = info[: len(info) // 2]
        return replace(script, final_content=final_statement(half) if half else DROPPED_FINAL_TEXT)
    return script


@dataclass
class FlakyState(ReplayState):
    """Replay progress plus the attempt's fault decision."""

    decision: FaultDecision | None = None
    fired: bool = False


class FlakyAgent(ReplayAgent):
    """Replay with seeded fault injection (a :class:`white_agent.server.TurnAgent`)."""

    card_name = "Arena flaky white agent"
    card_description = "Replays gold actions with seeded fault injection, to produce each failure category on purpose."

    def __init__(
        self,
        *,
        seed: int = 0,
        fault_rates: Mapping[str, float] | None = None,
        max_contexts: int = DEFAULT_MAX_CONTEXTS,
        no_reply_s: float = DEFAULT_NO_REPLY_S,
        idle_s: float = DEFAULT_IDLE_S,
    ) -> None:
        super().__init__(max_contexts=max_contexts, idle_s=idle_s)
        self._seed = seed
        self._rates = validate_fault_rates(fault_rates or {})
        self._no_reply_s = no_reply_s
        self._hanging: set[asyncio.Future[None]] = set()
        self._abandoning = False

    def abandon_hanging_turns(self) -> None:
        """Wake every ``no_reply`` turn now hanging, and fail later ones at once: each raises :class:`TurnAbandoned`.

        Called as the server begins to stop (from its event loop), so the deliberate hangs do not hold the exit;
        the green agent has given up on those turns or is about to lose the agent anyway.
        """
        self._abandoning = True
        for waiter in self._hanging:
            if not waiter.done():
                waiter.set_result(None)

    async def _hang(self) -> None:
        """Sleep ``no_reply_s``, unless the turns are abandoned first (then :class:`TurnAbandoned`)."""
        if not self._abandoning:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._hanging.add(waiter)
            try:
                await asyncio.wait({waiter}, timeout=self._no_reply_s)
            finally:
                self._hanging.discard(waiter)
            if not waiter.done():
                return
        raise TurnAbandoned("the no_reply fault's hang was cut short: the agent is stopping")

    def new_state(self) -> FlakyState:
        """A fresh state with room for the fault decision."""
        return FlakyState()

    def decide(self, arena: ArenaInfo, gold: GoldTask) -> FaultDecision:
        """The fault of this attempt (exposed so tests and reports can predict it)."""
        n_turns = len(gold.steps) + 1
        return choose_fault(self._seed, arena.domain, arena.task_id, arena.attempt, self._rates, n_turns)

    def start(self, state: ReplayState, arena: ArenaInfo, gold: GoldTask) -> None:
        """Decide the fault, then build the (possibly altered) script."""
        assert isinstance(state, FlakyState)
        state.decision = self.decide(arena, gold)
        state.script = faulty_script(gold, state.decision.fault)

    async def advance(self, state: ReplayState) -> AgentReply:
        """Inject the turn-bound fault at its turn; otherwise the scripted reply (as a Task for ``task_reply``)."""
        assert isinstance(state, FlakyState) and state.decision is not None
        decision = state.decision
        turn = state.turns
        state.turns += 1
        if decision.fault in TURN_FAULTS and turn == decision.turn and not state.fired:
            state.fired = True
            if decision.fault == "malformed_reply":
                return AgentReply(MALFORMED_TEXT)
            if decision.fault == "crash":
                raise InjectedCrash(CRASH_MARKER)
            if decision.fault == "report_failure":
                return AgentReply(REPORTED_FAILURE_TEXT, kind="task_failed")
            if decision.fault == "no_reply":
                arena = state.arena
                assert arena is not None  # set before start() decided the fault
                logger.info(
                    "no_reply fault: hanging at turn %d of %s task %s attempt %d",
                    turn,
                    arena.domain,
                    arena.task_id,
                    arena.attempt,
                )
                await self._hang()
        reply = self.next_scripted(state)
        if decision.fault == "task_reply":
            return replace(reply, kind="task_completed")
        return reply

"""One attempt: a fresh tau2 environment, a fresh simulated user and a new A2A context, played to the end and scored.

The loop (agent turn -> parse action -> tool call on the environment or message to the user -> user reply or stop)
mirrors tau2's orchestrator, but the agent is remote and everything that can fail is attributed to whoever failed:
the white agent (counted in pass^k) or the user simulator / environment / harness (infrastructure errors, excluded
from n and reported). The attempt never raises for any of these: it always returns an :class:`AttemptResult`.

The loop tracks whom it is waiting on at every moment (the environment while it is built, the simulated user for its
turns, the white agent for its replies and for the tool calls it asked for, the harness for its own set-up); the
rules that turn an exception or the attempt deadline into a category and a fault author are in
:mod:`green_agent.engine.attribution`. The white agent's channel and the user factory are parameters
(:class:`AttemptDeps`, :mod:`green_agent.engine.channels`), so tests drive every rule with scripted parties.

The same places also start and stop the clocks of cost and latency (:class:`~green_agent.engine.costs.AttemptMeter`):
each round trip to the white agent (with what it reported about its own usage), each turn of the simulated user, and
the rest of the attempt; the result carries them as ``usage``. None of it affects the verdict.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from green_agent.engine.attempt_details import MalformedReply, malformed_record, malformed_reply, oversize_reply
from green_agent.engine.attribution import (
    EarlyStop,
    StoppedOnPurpose,
    classify_scored,
    failure_from_stop,
    max_steps_stop,
    scoring_failed,
    stop_for_error,
)
from green_agent.engine.channels import Scorer, UserFactory, WhiteChannel, WhiteChannels
from green_agent.engine.config import BattleConfig
from green_agent.engine.costs import AttemptMeter, UsageMeter
from green_agent.engine.events import utc_now
from green_agent.engine.results import (
    AttemptResult,
    FailureCategory,
    FaultAuthor,
    RewardBreakdown,
    TerminationReason,
)
from green_agent.engine.tau.environment import AttemptEnvironment
from green_agent.engine.tau.sandbox import SandboxFactory
from green_agent.engine.tau.scoring import ScoredSimulation, ScoringError
from green_agent.engine.tau.tasks import TaskRef
from green_agent.engine.tau.users import SimulatedUser
from green_agent.engine.turn_protocol import (
    ActionParseError,
    build_first_data,
    build_first_message,
    parse_action,
    tool_result_message,
    user_message,
)
from green_agent.engine.white_client import WhiteReply
from green_agent.engine.white_errors import WhiteAgentReplyTooLarge
from green_agent.text_safety import json_line

log = logging.getLogger(__name__)

SCORED_TERMINATIONS = frozenset({TerminationReason.USER_STOP, TerminationReason.AGENT_STOP})
"""tau2 gives reward 0 to any other termination, so only these are sent to the evaluator."""


@dataclass(frozen=True, slots=True)
class AttemptSpec:
    """What identifies one attempt inside a battle."""

    battle_id: str
    ref: TaskRef
    attempt: int
    """1-based attempt number for this task."""
    white_agent_url: str


@dataclass(frozen=True, slots=True)
class ToolEndpoint:
    """Where a white agent reaches one attempt's tools natively (tool_mode = "mcp")."""

    url: str
    token: str

    def describe(self) -> dict[str, str]:
        """What the white agent is told (first message data part and metadata, key ``mcp``)."""
        return {"url": self.url, "token": self.token, "transport": "streamable-http", "auth": "bearer"}


class ToolGateway(Protocol):
    """Serves an attempt's environment tools over MCP for as long as the attempt runs."""

    def open(self, env: AttemptEnvironment, attempt_key: str) -> contextlib.AbstractAsyncContextManager[ToolEndpoint]:
        """Expose ``env``'s tools on an endpoint of their own; closed (token revoked) on exit."""
        ...


@dataclass(frozen=True, slots=True)
class AttemptDeps:
    """What an attempt borrows from its battle. Nothing here holds per-attempt state.

    The parties the attempt talks to are parameters (green_agent/engine/channels.py): the battle passes the A2A
    channel and ``make_user``; tests pass scripted ones and check whom every failure is blamed on.
    """

    config: BattleConfig
    scoring: Scorer
    white_channels: WhiteChannels
    """Opens the attempt's channel to the white agent (the battle: ``a2a_channels`` over its HTTP pool)."""
    user_factory: UserFactory
    """Makes the attempt's simulated user (the battle: ``make_user``)."""
    user_api_key: str | None
    trajectories_dir: Path | None
    tool_gateway: ToolGateway | None = None
    sandboxes: SandboxFactory | None = None
    """Where the attempt's tool sandbox comes from (one factory per application; None: a private one)."""


class _Phase:
    """Who is being waited on, and for what: an attempt deadline or an unexpected error is blamed on that party."""

    def __init__(self) -> None:
        self.author = FaultAuthor.HARNESS
        self.what = "preparing the attempt"

    def set(self, author: FaultAuthor, what: str) -> None:
        self.author, self.what = author, what


def calibration_metadata(spec: AttemptSpec) -> dict[str, Any]:
    """What a calibration agent may learn about the attempt (sent only when the battle sets calibration)."""
    return {
        "battle_id": spec.battle_id,
        "domain": spec.ref.domain,
        "split": spec.ref.split,
        "task_index": spec.ref.index,
        "task_id": spec.ref.task_id,
        "attempt": spec.attempt,
        "calibration": True,
    }


async def run_attempt(spec: AttemptSpec, deps: AttemptDeps) -> AttemptResult:
    """Play one attempt to its end and score it. Never raises except on cancellation."""
    return await _Attempt(spec, deps).run()


class _Attempt:
    """One attempt from start to result: the state its phases share (environment, user, steps, meter) in one place.

    ``run`` plays (``_play`` -> ``_converse`` -> ``_turns``) under the attempt deadline, turns whatever stopped it
    into an :class:`EarlyStop` blamed on the party being waited on (:class:`_Phase`), then scores (``_result``).
    """

    def __init__(self, spec: AttemptSpec, deps: AttemptDeps) -> None:
        self.spec = spec
        self.deps = deps
        self.cfg = deps.config
        self.context_id = uuid.uuid4().hex  # new for every attempt; never reused, never taken from the agent's echo
        self.meter = AttemptMeter()  # where the time goes and what the parties' model calls cost (engine/costs.py)
        self.phase = _Phase()
        self.env: AttemptEnvironment | None = None
        self.user: SimulatedUser | None = None
        self.steps = 0
        """The agent's A2A replies so far (its MCP tool calls are counted by the environment)."""
        self.malformed: MalformedReply | None = None
        """The reply that ended the attempt as a format_error (kept for the result and the trajectory)."""

    async def run(self) -> AttemptResult:
        started_at, t0 = utc_now(), time.perf_counter()
        stop: EarlyStop | None = None
        termination = TerminationReason.USER_STOP
        deadline = asyncio.timeout(self.cfg.attempt_timeout_s)
        try:
            async with deadline:
                termination = await self._play()
        except asyncio.CancelledError:
            raise
        except Exception as error:
            stop = stop_for_error(
                error,
                waiting_on=self.phase.author,
                doing=self.phase.what,
                deadline_expired=deadline.expired(),
                config=self.cfg,
                steps=self.steps,
                starving=self.env.starving if self.env is not None else None,
            )
            if stop.category is FailureCategory.HARNESS_ERROR:
                log.error("attempt %s/%s: %s", self.spec.ref.key, self.spec.attempt, stop.detail, exc_info=error)
        finally:
            if self.user is not None:
                with contextlib.suppress(Exception):
                    await self.user.aclose()
            if self.env is not None:
                with contextlib.suppress(Exception):
                    await self.env.aclose()
        return await self._result(stop, termination, started_at=started_at, t0=t0)

    async def _play(self) -> TerminationReason:
        spec, deps, cfg, phase = self.spec, self.deps, self.cfg, self.phase
        phase.set(FaultAuthor.ENVIRONMENT, "building the tau2 environment")
        env = await AttemptEnvironment.create(spec.ref, sandboxes=deps.sandboxes, tool_timeout_s=cfg.tool_timeout_s)
        self.env = env
        phase.set(FaultAuthor.HARNESS, "creating the simulated user")
        user = deps.user_factory(spec.ref, cfg.user_simulator, env, api_key=deps.user_api_key)
        self.user = user
        if cfg.tool_mode == "text":
            return await self._converse(env, user, None)
        phase.set(FaultAuthor.HARNESS, "opening the attempt's MCP tool endpoint")
        if deps.tool_gateway is None:
            raise RuntimeError("tool_mode 'mcp' needs the green agent's MCP component, which is not installed")
        async with deps.tool_gateway.open(env, f"{spec.battle_id}/{spec.ref.key}/{spec.attempt}") as endpoint:
            return await self._converse(env, user, endpoint)

    async def _converse(
        self, env: AttemptEnvironment, user: SimulatedUser, endpoint: ToolEndpoint | None
    ) -> TerminationReason:
        self.phase.set(FaultAuthor.USER_SIMULATOR, "waiting for the simulated user's opening")
        with self.meter.waiting_on_user():
            opening = await user.opening()
        env.record_user_text(opening.text)
        if opening.stop:
            return TerminationReason.USER_STOP
        described = endpoint.describe() if endpoint is not None else None
        text = build_first_message(env.policy, env.tools, opening.text, mcp=described)
        data: dict[str, Any] = build_first_data(env.policy, env.tools, mcp=described)
        metadata: dict[str, Any] | None = {"mcp": described} if described else None
        if self.cfg.calibration:
            arena = calibration_metadata(self.spec)
            metadata, data = {**(metadata or {}), "arena": arena}, {**data, "arena": arena}
        self.phase.set(FaultAuthor.WHITE_AGENT, "opening the channel to the white agent")
        async with self.deps.white_channels(self.spec.white_agent_url, turn_timeout_s=self.cfg.turn_timeout_s) as white:
            return await self._turns(env, user, white, text, data, metadata)

    async def _turns(
        self,
        env: AttemptEnvironment,
        user: SimulatedUser,
        white: WhiteChannel,
        text: str,
        data: dict[str, Any] | None,
        metadata: dict[str, Any] | None,
    ) -> TerminationReason:
        cfg, phase, meter = self.cfg, self.phase, self.meter
        while True:
            # Steps are the agent's actions: A2A replies, and in tool_mode "mcp" also its MCP tool calls.
            if max(self.steps, env.steps) >= cfg.max_steps:
                raise StoppedOnPurpose(max_steps_stop(cfg.max_steps))
            phase.set(FaultAuthor.WHITE_AGENT, f"waiting for the white agent (step {self.steps + 1})")
            with meter.waiting_on_agent(), self._keep_oversize(env):
                reply = await white.send(context_id=self.context_id, text=text, data=data, metadata=metadata)
            meter.agent_replied(reply.reported_usage)
            data, metadata = None, None
            self.steps += 1
            if env.fault is not None:  # tool_mode "mcp": one of the agent's MCP calls this turn was killed
                raise env.fault
            if env.steps >= cfg.max_steps:  # tool_mode "mcp": the agent's MCP calls this turn used the budget
                raise StoppedOnPurpose(max_steps_stop(cfg.max_steps))
            phase.set(FaultAuthor.WHITE_AGENT, f"reading the white agent's reply (step {self.steps})")
            try:
                action = await _parse_reply(reply)
            except ActionParseError:
                self.malformed = malformed_reply(reply.text, reply.data_parts, turn=env.message_count, step=self.steps)
                raise
            if action.name == "respond":
                content = str(action.arguments.get("content", ""))
                env.record_assistant_text(content)
                phase.set(FaultAuthor.USER_SIMULATOR, "waiting for the simulated user")
                with meter.waiting_on_user():
                    turn = await user.reply(content)
                env.record_user_text(turn.text)
                if turn.stop:
                    return TerminationReason.USER_STOP
                text = user_message(turn.text)
            else:
                # A tool call's cost is decided by the agent's arguments: a deadline hit here is the agent's.
                phase.set(FaultAuthor.WHITE_AGENT, f"running the agent's tool call {action.name[:80]}")
                arguments = _whole_numbers(action.arguments) if action.source == "data" else action.arguments
                outcome = await env.call_tool(action.name, arguments)
                text = tool_result_message(outcome.content)

    @contextlib.contextmanager
    def _keep_oversize(self, env: AttemptEnvironment) -> Iterator[None]:
        """Keep the first bytes of a reply refused for its size (its format_error's record)."""
        try:
            yield
        except WhiteAgentReplyTooLarge as error:
            self.malformed = oversize_reply(error.head, turn=env.message_count, step=self.steps + 1)
            raise

    async def _result(
        self, stop: EarlyStop | None, termination: TerminationReason, *, started_at: str, t0: float
    ) -> AttemptResult:
        """The attempt's result: its early stop, or else tau2's score of what happened; usage and trajectory."""
        spec, deps, env, cfg = self.spec, self.deps, self.env, self.cfg
        ended_at = utc_now()
        steps = max(self.steps, env.steps) if env is not None else self.steps
        termination = stop.termination_reason if stop else termination
        result = _new_result(spec, context_id=self.context_id, steps=steps, termination=termination)
        if stop is not None:
            failure = failure_from_stop(stop)
            result.failure = failure
            result.outcome = "infra_error" if failure.is_infrastructure else "failure"
            result.reward = None if failure.is_infrastructure else 0.0
            if failure.category is FailureCategory.FORMAT_ERROR:
                result.malformed_reply = self.malformed
        elif env is not None:
            simulation = env.simulation(termination, started_at=started_at, ended_at=ended_at)
            try:
                scored = (
                    await deps.scoring.score_explained(spec.ref, simulation)
                    if termination in SCORED_TERMINATIONS
                    else ScoredSimulation(
                        RewardBreakdown(reward=0.0, raw={"note": f"termination {termination} is not scored by tau2"})
                    )
                )
            except ScoringError as error:
                result.failure = failure_from_stop(scoring_failed(error, termination))
                result.outcome = "infra_error"
            else:
                breakdown = scored.breakdown
                result.breakdown = breakdown
                result.reward = breakdown.reward
                result.failure = classify_scored(breakdown)
                result.outcome = "success" if result.failure is None else "failure"
                result.explanation = scored.explanation if result.failure is not None else None
        elapsed = time.perf_counter() - t0
        result.duration_s = round(elapsed, 3)
        user_usage = getattr(self.user, "usage", None)  # only a user that calls a model has one (the LLM user)
        result.usage = self.meter.usage(
            cfg, user_usage if isinstance(user_usage, UsageMeter) else None, duration_s=elapsed
        )
        if env is not None and deps.trajectories_dir is not None:
            result.trajectory_file = await _write_trajectory(deps.trajectories_dir, spec, env, result)
        return result


def _new_result(spec: AttemptSpec, *, context_id: str, steps: int, termination: TerminationReason) -> AttemptResult:
    """An attempt's result before its outcome is known (a failure until proven otherwise)."""
    return AttemptResult(
        battle_id=spec.battle_id,
        domain=spec.ref.domain,
        split=spec.ref.split,
        task_index=spec.ref.index,
        task_id=spec.ref.task_id,
        attempt=spec.attempt,
        context_id=context_id,
        outcome="failure",
        steps=steps,
        termination_reason=termination,
    )


def harness_failure(spec: AttemptSpec, detail: str) -> AttemptResult:
    """The result of an attempt whose loop itself failed (a harness bug): an infrastructure error, not the agent's."""
    termination = TerminationReason.TOO_MANY_ERRORS
    result = _new_result(spec, context_id="", steps=0, termination=termination)
    result.outcome = "infra_error"
    result.failure = failure_from_stop(
        EarlyStop(FailureCategory.HARNESS_ERROR, FaultAuthor.HARNESS, detail, termination)
    )
    return result


PARSE_OFF_LOOP_CHARS = 32 * 1024
"""Replies longer than this are parsed in a worker thread (the parser is linear, but 1 MB still takes a while)."""


async def _parse_reply(reply: WhiteReply) -> Any:
    """The reply's one action (ActionParseError otherwise); big replies are parsed off the event loop."""
    size = len(reply.text) + sum(len(repr(part)) for part in reply.data_parts[:8])
    if size > PARSE_OFF_LOOP_CHARS or len(reply.data_parts) > 8:
        return await asyncio.to_thread(parse_action, reply.text, reply.data_parts)
    return parse_action(reply.text, reply.data_parts)


_EXACT_FLOAT_INT = 2**53


def _whole_numbers(value: Any) -> Any:
    """A2A data parts carry numbers as doubles (protobuf Struct): turn 2.0 back into 2 so tools see integers.

    Only where the double holds the integer exactly (|x| <= 2**53); 1e300 stays a float instead of becoming a
    301-digit integer.
    """
    if isinstance(value, float) and value.is_integer() and abs(value) <= _EXACT_FLOAT_INT:
        return int(value)
    if isinstance(value, dict):
        return {key: _whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole_numbers(item) for item in value]
    return value


MAX_TRAJECTORY_LINE_CHARS = 256 * 1024
"""Longest line of a trajectory file: longer strings inside a message are cut (and say so)."""


async def _write_trajectory(
    directory: Path, spec: AttemptSpec, env: AttemptEnvironment, result: AttemptResult
) -> str | None:
    """One JSONL file per attempt: a header line with the result, then one line per message (off the event loop).

    Every string is made valid UTF-8 (lone surrogates replaced) and lines are bounded, so nothing an agent sends can
    make the file unwritable or unreadable. A write failure is logged and leaves the attempt without a file; it
    never ends the battle.
    """
    records = [*env.trajectory_records()]
    if result.malformed_reply is not None:  # the reply that was not an action, after the conversation
        records.append(malformed_record(result.malformed_reply, utc_now()))
    result.keep_trajectory(records)  # posted from memory with the attempt's event (engine/events.py)
    try:
        return await asyncio.to_thread(write_trajectory_file, directory, spec, result, records)
    except (OSError, ValueError) as error:
        log.error("attempt %s/%s: trajectory not written: %s", spec.ref.key, spec.attempt, error)
        return None


def write_trajectory_file(
    directory: Path, spec: AttemptSpec, result: AttemptResult, records: Sequence[dict[str, Any]]
) -> str:
    """Write ``directory``/<the attempt's name>.jsonl: a header line with ``result``, then ``records`` (lines bounded);
    the path to put in ``result.trajectory_file``. Blocking (a worker thread); OSError or ValueError when it fails.
    Also the pooled owner's writer of a member's records (green_agent/service/pool_owner.py)."""
    name = f"{spec.ref.domain}-{spec.ref.split or 'all'}-{spec.ref.index:04d}-attempt{spec.attempt:02d}.jsonl"
    header = {"attempt": result.model_dump(mode="json", exclude={"trajectory_file"})}
    lines = [json_line(record, max_chars=MAX_TRAJECTORY_LINE_CHARS) for record in (header, *records)]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(Path("trajectories") / name)

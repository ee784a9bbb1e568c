"""One tau2 environment per attempt, and the tau2-shaped trajectory of everything that happened on it.

Why a wrapper instead of tau2's Orchestrator: the orchestrator is synchronous and owns the conversation loop, while
our loop is async and talks to a remote agent. This class keeps what the orchestrator guarantees about the *data*:

* the environment is built fresh for the attempt and initialised from ``task.initial_state`` exactly as the
  orchestrator does (``Environment.set_state(initialization_data, initialization_actions, message_history)``);
* the trajectory opens with the orchestrator's greeting "Hi! How can I help you today?" (or, for the few mock tasks
  that carry one, with the task's message history instead);
* every tool call is recorded as a participant message holding the call, followed at once by one ``ToolMessage``
  with the same id and the tool output *verbatim* (tau2's evaluator replays the calls and raises if an output
  differs);
* ``sync_tools()`` runs after every step (it keeps telecom's phone and network views consistent).

Termination reasons accepted by :meth:`AttemptEnvironment.simulation` are the values of tau2's
``TerminationReason``: ``user_stop``, ``agent_stop``, ``judge_stop``, ``max_steps``, ``too_many_errors``,
``agent_error``, ``user_error``. Only ``user_stop`` and ``agent_stop`` are scored by tau2; any other reason scores 0.

Where the environment lives: in the attempt's own tool sandbox process (:mod:`green_agent.engine.tau.sandbox`), because
tool calls run tau2 code on arguments the agent chose and must be killable at a time limit. This object is the
serving side: it records the trajectory (tau2 message models) and forwards each tool call to the sandbox. A call
that exceeds ``tool_timeout_s``, crashes the sandbox or exhausts its memory raises
:class:`~green_agent.engine.tau.sandbox.ToolFault`, and the environment is unusable afterwards (``fault`` says why).

Costs on the 2-core dev machine: a sandbox builds its environment on the fork server's template databases
(green_agent/engine/tau/databases.py) without validating anything, since the sandbox is thrown away after the
attempt; :func:`fresh_environment` (a validated copy: retail ~20 ms, airline ~100 ms, telecom and mock ~1 ms, from a
database file parsed once per process) is for everything else. Tool calls take well under a millisecond (0.5 ms at
most over every gold action of the test splits) plus the pipe round trip.
"""

from __future__ import annotations

import json
import threading
import uuid
from copy import deepcopy
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Self

from pydantic import TypeAdapter

from green_agent.engine.tau.banking import environment_kwargs, policy_key
from green_agent.engine.tau.databases import environment_on, template_environment, validated
from green_agent.engine.tau.quiet import quiet_tau2
from green_agent.engine.tau.sandbox import SandboxFactory, SandboxInit, ToolFault, ToolSandbox
from green_agent.engine.tau.tasks import TaskRef

quiet_tau2()

from tau2.data_model.message import (  # noqa: E402  (quiet_tau2 must run first)
    AssistantMessage,
    Message,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from tau2.data_model.simulation import SimulationRun, TerminationReason  # noqa: E402

if TYPE_CHECKING:
    from tau2.environment.environment import Environment

GREETING = "Hi! How can I help you today?"
"""The agent's first message in every tau2 conversation (tau2's orchestrator opens with it)."""

TERMINATION_REASONS: tuple[str, ...] = tuple(reason.value for reason in TerminationReason)
"""Every termination reason tau2 knows; ``simulation()`` refuses anything else."""

SCORED_TERMINATIONS: frozenset[str] = frozenset({TerminationReason.USER_STOP.value, TerminationReason.AGENT_STOP.value})
"""The termination reasons tau2's evaluator scores; the others get reward 0 without any check."""

Requestor = Literal["assistant", "user"]

LARGE_ARGUMENTS_CHARS = 64 * 1024
"""Tool arguments longer than this (as JSON) are handed to the sandbox from a worker thread."""


_MESSAGE: TypeAdapter[Message] = TypeAdapter(Message)


def _message_from_json(data: dict[str, Any]) -> Message:
    return _MESSAGE.validate_python(data)


def _shown_call(name: str, arguments: dict[str, Any], limit: int = 200) -> str:
    """``name({...})`` for a failure detail, cut to ``limit`` characters."""
    text = f"{name}({json.dumps(arguments, ensure_ascii=False)})"
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class ToolOutcome:
    """What a tool call returned: the output exactly as recorded, and whether tau2 flagged it as an error."""

    content: str
    error: bool


def fresh_environment(domain: str, solo_mode: bool = False, **kwargs: Any) -> Environment:
    """A brand-new tau2 environment for ``domain`` with its own database objects.

    Same result as tau2's ``get_environment(solo_mode=..., **kwargs)`` (same data, same hash), but the database file
    is parsed once per process; validating the cached dict builds new objects every time, so environments share
    nothing. ``kwargs``: banking_knowledge's (:func:`environment_kwargs_of`).
    """
    return environment_on(domain, validated, solo_mode, **kwargs)


def environment_kwargs_of(ref: TaskRef) -> dict[str, Any]:
    """What ``get_environment`` takes for ``ref`` besides the databases (banking_knowledge: its retrieval variant,
    the task and its read-log allowlist, :mod:`green_agent.engine.tau.banking`; nothing for other domains)."""
    return environment_kwargs(ref.domain, ref.task, ref.retrieval)


_SCHEMAS: dict[tuple[str, str | None, str | None], tuple[str, str, str]] = {}
"""(domain, retrieval variant, task for a task-specific policy) -> tool schemas and policy: what they depend on
(:func:`~green_agent.engine.tau.banking.policy_key`). Bounded by the tasks a process plays (golden_retrieval's
policy is per task; every other variant and domain has one entry)."""
_SCHEMAS_LOCK = threading.Lock()
MAX_SCHEMAS = 512
"""Entries kept in :data:`_SCHEMAS`; beyond that the oldest go (a process playing more distinct golden_retrieval
tasks than this regenerates their schemas, ~20 ms each)."""


def _schemas_of(env: Environment) -> tuple[str, str, str]:
    tools = [tool.openai_schema for tool in env.get_tools()]
    user_tools = [tool.openai_schema for tool in env.get_user_tools()] if env.user_tools is not None else []
    return json.dumps(tools), json.dumps(user_tools), env.get_policy()


def _schemas_json(domain: str, env: Environment | None = None, ref: TaskRef | None = None) -> tuple[str, str, str]:
    """(tools JSON, user tools JSON, policy) of a domain (for ``ref``'s variant and task when given): the same for
    every environment built with the same :func:`~green_agent.engine.tau.banking.policy_key`, ~20 ms to generate.

    Computed once per process and key, from ``env`` when given (it is only read; it must have been built for ``ref``)
    or else from a fresh environment."""
    key = policy_key(domain, ref.task if ref is not None else None, ref.retrieval if ref is not None else None)
    found = _SCHEMAS.get(key)
    if found is None:
        if env is None:
            env = fresh_environment(domain, **(environment_kwargs_of(ref) if ref is not None else {}))
        found = _schemas_of(env)
        with _SCHEMAS_LOCK:
            while len(_SCHEMAS) >= MAX_SCHEMAS:
                del _SCHEMAS[next(iter(_SCHEMAS))]
            _SCHEMAS[key] = found
    return found


def schemas(domain: str, ref: TaskRef | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    """Fresh copies of a domain's agent tools, user tools (OpenAI function schemas) and policy (for ``ref``'s
    retrieval variant and task when given: banking_knowledge's depend on them)."""
    tools, user_tools, policy = _schemas_json(domain, ref=ref)
    return json.loads(tools), json.loads(user_tools), policy


def _timestamp(value: datetime | str) -> datetime:
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value)  # Python 3.11 accepts a "Z" suffix


def build_environment(ref: TaskRef, *, disposable: bool = False) -> tuple[Environment, list[Message]]:
    """Build and initialise the environment the way tau2's orchestrator does; return it with the opening messages.

    Runs inside a tool sandbox (blocking, CPU-bound). ``disposable``: this process serves this one attempt and is
    then thrown away (a forked sandbox), so the environment may work on the process's template databases
    themselves instead of a validated copy (:func:`~green_agent.engine.tau.databases.template_environment`)."""
    _schemas_json(ref.domain, ref=ref)  # first use per domain costs a build: pay it here, off the event loop
    kwargs = environment_kwargs_of(ref)
    env = template_environment(ref.domain, **kwargs) if disposable else fresh_environment(ref.domain, **kwargs)
    state = ref.task.initial_state
    history: list[Message] = []
    if state is not None and state.message_history:
        history = [message.model_copy(deep=True, update={"turn_idx": None}) for message in state.message_history]
    env.set_state(
        initialization_data=state.initialization_data if state is not None else None,
        initialization_actions=state.initialization_actions if state is not None else None,
        message_history=history,
    )
    if not history:
        history = [AssistantMessage(role="assistant", content=GREETING, cost=0.0)]
    env.sync_tools()
    return env, history


class AttemptEnvironment:
    """A fresh tau2 environment for one attempt plus the attempt's trajectory. Never shared between attempts.

    Build it with :meth:`create` and close it with :meth:`aclose` (or ``async with``), which stops its sandbox.
    Who records what: the attempt loop records both sides' text (:meth:`record_assistant_text`,
    :meth:`record_user_text`); every tool call, the agent's or the simulated user's, is recorded by
    :meth:`call_tool` itself.
    """

    def __init__(self, ref: TaskRef, sandbox: ToolSandbox, init: SandboxInit, *, tool_timeout_s: float) -> None:
        """Internal: use :meth:`create`, which starts the sandbox and builds the environment there."""
        self._ref = ref
        self._sandbox = sandbox
        self._tool_timeout_s = tool_timeout_s
        self._messages: list[Message] = [_message_from_json(m) for m in init.opening]
        self._steps = 0
        self._errors = 0
        self._calls = 0
        self._tools = init.tools
        self._user_tools = init.user_tools
        self._policy = init.policy
        self._fault: ToolFault | None = None

    @classmethod
    async def create(
        cls, ref: TaskRef, *, sandboxes: SandboxFactory | None = None, tool_timeout_s: float = 5.0
    ) -> AttemptEnvironment:
        """Start a tool sandbox for ``ref``, build the environment in it and record the opening greeting.

        Raises :class:`~green_agent.engine.tau.sandbox.SandboxError` when the sandbox or tau2 fails (a harness failure).
        """
        factory = sandboxes or SandboxFactory()
        sandbox, init = await factory.open(ref)
        return cls(ref, sandbox, init, tool_timeout_s=tool_timeout_s)

    async def aclose(self) -> None:
        """Stop the sandbox process (idempotent). The recorded trajectory stays readable."""
        await self._sandbox.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @property
    def ref(self) -> TaskRef:
        """The task this attempt plays."""
        return self._ref

    @property
    def policy(self) -> str:
        """The domain policy the agent must follow (tau2's ``get_policy()``)."""
        return self._policy

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The agent's tools as OpenAI function schemas (this attempt's own copy)."""
        return self._tools

    @property
    def user_tools(self) -> list[dict[str, Any]]:
        """The simulated user's tools (telecom's phone) as OpenAI function schemas; ``[]`` in other domains."""
        return self._user_tools

    @property
    def steps(self) -> int:
        """Assistant actions so far: tool calls by the agent plus agent messages (the greeting not included)."""
        return self._steps

    @property
    def tool_errors(self) -> int:
        """Tool calls (by anyone) that tau2 flagged as errors; its orchestrator stops at 10 (``too_many_errors``)."""
        return self._errors

    @property
    def message_count(self) -> int:
        """Messages recorded so far, the greeting included."""
        return len(self._messages)

    @property
    def fault(self) -> ToolFault | None:
        """The tool call that killed this environment's sandbox (time limit, crash, memory), if one did."""
        return self._fault

    @property
    def starving(self) -> str | None:
        """The figures of a tool call in its grace that the machine has not run (sandbox_cpu.py), else None."""
        return self._sandbox.grace.detail

    @property
    def sandbox_pid(self) -> int | None:
        """The sandbox process id (diagnostics, tests)."""
        return self._sandbox.pid

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        requestor: Requestor = "assistant",
        call_id: str | None = None,
    ) -> ToolOutcome:
        """Run a tool on this environment (in its sandbox) and record the call and its verbatim output.

        Unknown tools, wrong or missing arguments and tool failures come back as an outcome with ``error=True`` and
        tau2's "Error: ..." text (recorded too: tau2's evaluator replays them and gets the same text). Arguments that
        are not a JSON object cannot be expressed as a tau2 tool call: they get an error outcome and nothing is
        recorded. A call that exceeds the tool time limit, crashes the sandbox or exhausts its memory raises
        :class:`~green_agent.engine.tau.sandbox.ToolFault` (so does every later call). Other exceptions escape only for
        faults inside tau2 or the sandbox itself (not the agent's).
        """
        if self._fault is not None:
            raise self._fault
        if requestor == "assistant":
            self._steps += 1
        if not isinstance(arguments, dict) or not isinstance(name, str):
            self._errors += 1
            return ToolOutcome(content="Error: tool arguments must be a JSON object", error=True)
        try:
            encoded_size = len(json.dumps(arguments))
        except (TypeError, ValueError):
            self._errors += 1
            return ToolOutcome(content="Error: tool arguments must be JSON values", error=True)
        self._calls += 1
        call = ToolCall(
            id=call_id or f"call_{self._calls:03d}", name=name, arguments=deepcopy(arguments), requestor=requestor
        )
        participant = AssistantMessage if requestor == "assistant" else UserMessage
        self._messages.append(participant(role=requestor, content=None, tool_calls=[call]))
        try:
            answer = await self._sandbox.call(
                call.model_dump(mode="json"), timeout_s=self._tool_timeout_s, large=encoded_size > LARGE_ARGUMENTS_CHARS
            )
        except ToolFault as fault:
            shown = _shown_call(name, arguments)
            self._fault = ToolFault(fault.kind, f"tool call {shown}: {fault.detail}", requestor=requestor, tool=name)
            raise self._fault from None
        result = ToolMessage.model_validate(answer)
        self._messages.append(result)
        if result.error:
            self._errors += 1
        return ToolOutcome(content=result.content if result.content is not None else "", error=result.error)

    def record_assistant_text(self, text: str) -> None:
        """Record a message the agent sent to the user (counts as a step).

        tau2's orchestrator also syncs the tools after text turns; that sync only mirrors database state that tool
        calls change, and every tool call is followed by one in the sandbox, so it is not repeated here.
        """
        self._steps += 1
        self._messages.append(AssistantMessage(role="assistant", content=text))

    def record_user_text(self, text: str) -> None:
        """Record a message the user sent to the agent (stop tokens included, as tau2 records them)."""
        self._messages.append(UserMessage(role="user", content=text))

    def _numbered(self) -> list[Message]:
        return [message.model_copy(update={"turn_idx": i}) for i, message in enumerate(self._messages)]

    def simulation(
        self,
        termination_reason: str,
        *,
        started_at: datetime | str,
        ended_at: datetime | str,
        run_id: str | None = None,
        seed: int | None = None,
    ) -> dict[str, Any]:
        """The attempt as a tau2 ``SimulationRun``, JSON-ready (what the scorer and the trajectory files take).

        ``started_at``/``ended_at``: datetimes or ISO 8601 strings (a ``Z`` suffix is fine). Raises ``ValueError``
        for a termination reason tau2 does not know (see :data:`TERMINATION_REASONS`).
        """
        if termination_reason not in TERMINATION_REASONS:
            raise ValueError(
                f"termination_reason {termination_reason!r} is not one of tau2's: {', '.join(TERMINATION_REASONS)}"
            )
        start, end = _timestamp(started_at), _timestamp(ended_at)
        run = SimulationRun(
            id=run_id or str(uuid.uuid4()),
            task_id=self._ref.task_id,
            start_time=start.isoformat(),
            end_time=end.isoformat(),
            duration=max(0.0, (end - start).total_seconds()),
            termination_reason=TerminationReason(termination_reason),
            messages=self._numbered(),
            seed=seed,
        )
        dumped: dict[str, Any] = run.model_dump(mode="json")
        return dumped

    def trajectory_records(self) -> list[dict[str, Any]]:
        """One JSON-ready dict per message (tau2's message fields, ``turn_idx`` numbered), for JSONL files."""
        return [message.model_dump(mode="json") for message in self._numbered()]


__all__ = [
    "GREETING",
    "SCORED_TERMINATIONS",
    "TERMINATION_REASONS",
    "AttemptEnvironment",
    "ToolFault",
    "ToolOutcome",
    "build_environment",
    "environment_kwargs_of",
    "fresh_environment",
    "schemas",
]

"""A tool call that hits its time limit because the machine never ran its sandbox is not the agent's fault: it gets
a grace to answer, and if the machine still does not run it, it is a harness error; a call that burns CPU past the
limit stays the agent's, also when it got little CPU before the limit (green_agent/engine/tau/sandbox_cpu.py).

Starvation is made with SIGSTOP (the sandbox gets no CPU at all, as on a saturated machine, only more so), released
with SIGCONT. No assertion is about elapsed time.
"""

from __future__ import annotations

import asyncio
import contextlib

import psutil
import pytest

from green_agent.engine.attribution import failure_from_stop, tool_fault_stop
from green_agent.engine.results import AttemptResult, FailureCategory, FaultAuthor, TerminationReason
from green_agent.engine.tau.environment import AttemptEnvironment
from green_agent.engine.tau.sandbox import SandboxFactory, ToolFault
from green_agent.engine.tau.sandbox_cpu import STARVED_GRACE_LIMITS
from green_agent.engine.tau.tasks import resolve_task
from tests.green_agent.engine.conftest import RETAIL, SHORT, Arena
from tests.green_agent.engine.fakes import ScriptedUser, ScriptedWhite, tool

BOMB = {"expression": "9**9**9"}
"""calculate() evaluates it: one big-integer power that burns CPU for minutes."""


def _starve(pid: int | None, for_s: float) -> None:
    """Stop the sandbox now and continue it ``for_s`` seconds later (psutil checks that the pid is still that
    process before it signals, so a sandbox killed and reaped meanwhile is left alone)."""
    assert pid is not None
    process = psutil.Process(pid)
    process.suspend()

    def resume() -> None:
        with contextlib.suppress(psutil.Error):
            process.resume()

    asyncio.get_running_loop().call_later(for_s, resume)


LIMIT = 0.5
"""The tool time limit of these tests (seconds); the whole grace is (1 + STARVED_GRACE_LIMITS) times it."""
PAST_THE_GRACE = (1 + STARVED_GRACE_LIMITS) * LIMIT + 1.0
WITHIN_THE_GRACE = 1.5 * LIMIT


async def test_a_call_whose_sandbox_got_no_cpu_past_its_grace_is_a_harness_error() -> None:
    async with SandboxFactory() as sandboxes:
        env = await AttemptEnvironment.create(
            resolve_task("retail", "test", 0), sandboxes=sandboxes, tool_timeout_s=LIMIT
        )
        try:
            assert (await env.call_tool("calculate", {"expression": "1+1"})).content == "2.0"
            _starve(env.sandbox_pid, for_s=PAST_THE_GRACE)
            with pytest.raises(ToolFault) as caught:
                await env.call_tool("calculate", {"expression": "2+3"})
        finally:
            await env.aclose()
    fault = caught.value
    assert fault.kind == "starved", fault.detail
    assert "calculate" in fault.detail and "of CPU" in fault.detail and f"{LIMIT:g} s" in fault.detail
    stop = tool_fault_stop(fault)
    assert (stop.category, stop.fault_author) == (FailureCategory.HARNESS_ERROR, FaultAuthor.HARNESS)
    assert stop.termination_reason is TerminationReason.TOO_MANY_ERRORS
    assert failure_from_stop(stop).is_infrastructure  # excluded from n, re-run by --retry-infra
    assert "the agent's tool call calculate" in stop.detail and "not the caller's" in stop.detail


async def test_a_call_stopped_past_its_limit_and_continued_answers_and_nobody_is_blamed() -> None:
    async with SandboxFactory() as sandboxes:
        env = await AttemptEnvironment.create(
            resolve_task("retail", "test", 0), sandboxes=sandboxes, tool_timeout_s=LIMIT
        )
        try:
            _starve(env.sandbox_pid, for_s=WITHIN_THE_GRACE)  # longer than the limit, then SIGCONT
            outcome = await env.call_tool("calculate", {"expression": "2+3"})
            assert (outcome.content, outcome.error) == ("5.0", False)
            assert env.fault is None
            assert (await env.call_tool("calculate", {"expression": "1+1"})).content == "2.0"  # still usable
        finally:
            await env.aclose()


async def test_a_cpu_burning_call_that_got_little_cpu_before_its_limit_stays_the_agents() -> None:
    """The loaded-machine case: the bomb waited first (stopped past the limit), then computed during its grace."""
    async with SandboxFactory() as sandboxes:
        env = await AttemptEnvironment.create(
            resolve_task("retail", "test", 0), sandboxes=sandboxes, tool_timeout_s=LIMIT
        )
        try:
            _starve(env.sandbox_pid, for_s=WITHIN_THE_GRACE)
            with pytest.raises(ToolFault) as caught:
                await env.call_tool("calculate", BOMB)
        finally:
            await env.aclose()
    assert caught.value.kind == "timeout", caught.value.detail
    stop = tool_fault_stop(caught.value)
    assert (stop.category, stop.fault_author) == (FailureCategory.TIMEOUT, FaultAuthor.WHITE_AGENT)


async def test_a_call_that_burns_cpu_past_the_limit_stays_the_agents() -> None:
    async with SandboxFactory() as sandboxes:
        env = await AttemptEnvironment.create(
            resolve_task("retail", "test", 0), sandboxes=sandboxes, tool_timeout_s=1.0
        )
        try:
            with pytest.raises(ToolFault) as caught:
                await env.call_tool("calculate", BOMB)
        finally:
            await env.aclose()
    assert caught.value.kind == "timeout", caught.value.detail
    stop = tool_fault_stop(caught.value)
    assert (stop.category, stop.fault_author) == (FailureCategory.TIMEOUT, FaultAuthor.WHITE_AGENT)
    assert not failure_from_stop(stop).is_infrastructure


@pytest.mark.parametrize("requestor", ["assistant", "user"])
def test_a_starved_call_is_the_harness_s_whoever_made_it(requestor: str) -> None:
    fault = ToolFault("starved", "tool call get_users(): starved", requestor=requestor, tool="get_users")
    stop = tool_fault_stop(fault)
    assert (stop.category, stop.fault_author) == (FailureCategory.HARNESS_ERROR, FaultAuthor.HARNESS)
    caller = "simulated user" if requestor == "user" else "agent"
    assert stop.detail == f"the {caller}'s tool call get_users(): starved"


async def _starve_the_sandbox(env: AttemptEnvironment) -> str:
    _starve(env.sandbox_pid, for_s=(1 + STARVED_GRACE_LIMITS) * SHORT + 1.0)  # past the tool call's whole grace
    return "Hi! Please list the users."


async def test_an_attempt_whose_tool_call_was_starved_is_an_infrastructure_error(arena: Arena) -> None:
    result: AttemptResult = await arena.play(
        ScriptedWhite(tool("get_users")), ScriptedUser(_starve_the_sandbox), ref=RETAIL, tool_timeout_s=SHORT
    )
    assert result.outcome == "infra_error" and result.reward is None
    assert result.failure is not None
    assert (result.failure.category, result.failure.fault_author) == (
        FailureCategory.HARNESS_ERROR,
        FaultAuthor.HARNESS,
    )
    assert "the agent's tool call get_users" in result.failure.detail and "of CPU" in result.failure.detail


async def _starve_the_sandbox_for_long(env: AttemptEnvironment) -> str:
    _starve(env.sandbox_pid, for_s=60.0)  # past the attempt deadline (the deadline kills it first)
    return "Hi! Please list the users."


async def test_an_attempt_deadline_during_a_starved_calls_grace_is_the_harness_s(arena: Arena) -> None:
    """The grace (up to 4 limits) may outlast the attempt: the deadline then fires while a call the machine did not
    run waits for the CPU; that is not the agent's timeout. The limit is 2 s, so the deadline (6 s) falls in the
    grace (2 to 8 s into the call) unless building the environment took over 4 s."""
    result: AttemptResult = await arena.play(
        ScriptedWhite(tool("get_users")),
        ScriptedUser(_starve_the_sandbox_for_long),
        ref=RETAIL,
        tool_timeout_s=2.0,
        attempt_timeout_s=6.0,
    )
    assert result.outcome == "infra_error" and result.reward is None
    assert result.failure is not None
    assert (result.failure.category, result.failure.fault_author) == (
        FailureCategory.HARNESS_ERROR,
        FaultAuthor.HARNESS,
    ), result.failure.detail
    assert result.termination_reason is TerminationReason.DEADLINE
    assert "attempt time limit (6 s)" in result.failure.detail and "of CPU" in result.failure.detail

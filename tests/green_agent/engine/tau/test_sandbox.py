"""Tool sandboxes: a hostile tool call is killed at its time limit and only its own attempt is affected."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import pytest

from green_agent.engine.tau.environment import AttemptEnvironment
from green_agent.engine.tau.sandbox import SandboxFactory, ToolFault
from green_agent.engine.tau.sandbox_child import _tool_answer
from green_agent.engine.tau.tasks import resolve_task

BOMB = {"expression": "9**9**9"}  # one C-level big-integer power: minutes of CPU holding the GIL


async def test_a_tool_call_over_the_limit_is_killed_and_the_loop_stays_free() -> None:
    async with SandboxFactory() as sandboxes:
        bombed = await AttemptEnvironment.create(
            resolve_task("retail", "test", 0), sandboxes=sandboxes, tool_timeout_s=1.0
        )
        other = await AttemptEnvironment.create(resolve_task("retail", "test", 1), sandboxes=sandboxes)
        pid = bombed.sandbox_pid
        assert pid is not None
        ticks: list[float] = []

        async def tick() -> None:  # the event loop must keep turning while the bomb runs
            while True:
                ticks.append(time.perf_counter())
                await asyncio.sleep(0.01)

        ticker = asyncio.create_task(tick())
        with pytest.raises(ToolFault) as caught:
            await bombed.call_tool("calculate", BOMB)
        ticker.cancel()
        assert caught.value.kind == "timeout" and caught.value.requestor == "assistant"
        assert "calculate" in caught.value.detail and "1 s" in caught.value.detail
        # Unsandboxed, this call holds the GIL for minutes: the loop would not tick at all until it ends (and the
        # call would not end at its 1 s limit). Counted, not timed: the loop turned many times while the call ran.
        assert len(ticks) > 20, f"the serving loop stalled during the tool call ({len(ticks)} ticks)"
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # killed, not left computing
        assert bombed.fault is caught.value
        with pytest.raises(ToolFault):  # the environment stays unusable
            await bombed.call_tool("calculate", {"expression": "1+1"})
        outcome = await other.call_tool("calculate", {"expression": "2+3"})  # another attempt is unaffected
        assert (outcome.content, outcome.error) == ("5.0", False)
        await bombed.aclose()
        await other.aclose()


async def test_a_sandbox_that_dies_mid_call_is_a_crash_of_that_call() -> None:
    env = await AttemptEnvironment.create(resolve_task("retail", "test", 0), tool_timeout_s=30.0)
    pid = env.sandbox_pid
    assert pid is not None
    call = asyncio.create_task(env.call_tool("calculate", BOMB))
    await asyncio.sleep(0.5)
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(ToolFault) as caught:
        await call
    assert caught.value.kind == "crashed"
    await env.aclose()


@pytest.mark.parametrize(
    ("requestor", "kind", "category", "author"),
    [
        ("assistant", "timeout", "timeout", "white_agent"),
        ("assistant", "crashed", "white_agent_error", "white_agent"),
        ("assistant", "resource", "white_agent_error", "white_agent"),
        ("user", "timeout", "user_simulator_error", "user_simulator"),
    ],
)
def test_tool_faults_are_blamed_on_whoever_made_the_call(requestor: str, kind: Any, category: str, author: str) -> None:
    from green_agent.engine.attribution import tool_fault_stop

    stop = tool_fault_stop(ToolFault(kind, "tool call calculate(...): killed", requestor=requestor, tool="calculate"))
    assert (stop.category.value, stop.fault_author.value) == (category, author)
    assert "calculate" in stop.detail


async def test_close_stops_the_sandbox_process() -> None:
    env = await AttemptEnvironment.create(resolve_task("mock", None, 0))
    pid = env.sandbox_pid
    assert pid is not None
    await env.aclose()
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"sandbox {pid} still running after aclose()")


class _ExhaustingEnv:
    """Stands in for a tau2 environment whose tool runs out of memory or recursion depth."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def make_tool_call(self, name: str, requestor: str = "assistant", **kwargs: Any) -> Any:
        raise self.error

    def sync_tools(self) -> None:
        pass


@pytest.mark.parametrize("error", [MemoryError(), RecursionError("deep")])
def test_exhausted_resources_are_reported_not_turned_into_tool_output(error: BaseException) -> None:
    from tau2.data_model.message import ToolCall

    answer = _tool_answer(_ExhaustingEnv(error), ToolCall(id="c1", name="t", arguments={}, requestor="assistant"))
    assert answer == {"resource": type(error).__name__}

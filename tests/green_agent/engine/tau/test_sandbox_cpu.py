"""The figures a timed-out tool call is judged by (green_agent/engine/tau/sandbox_cpu.py): what a sandbox reports is
checked before it is used, and what cannot be read leaves the call judged as before (the caller's timeout)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from green_agent.engine.tau.sandbox_cpu import (
    STARVED_CPU_SHARE,
    CallCpu,
    GraceWatch,
    LateCall,
    answer_within_limit,
    call_cpu,
    process_cpu_s,
    reported_cpu_s,
    settle,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.25, 0.25),
        (3, 3.0),
        (0, 0.0),
        (True, None),
        ("1.0", None),
        (float("nan"), None),
        (float("inf"), None),
        (-1.0, None),
        (1e12, None),
        (None, None),
    ],
)
def test_a_reported_cpu_figure_is_used_only_when_it_is_a_sensible_number(value: Any, expected: float | None) -> None:
    assert reported_cpu_s({"ok": {}, "cpu": value}) == expected


def test_an_answer_without_a_figure_gives_no_baseline() -> None:
    assert reported_cpu_s({"ok": {}}) is None


def test_a_call_is_starved_below_the_share_of_its_limit() -> None:
    assert CallCpu(used_s=0.0, limit_s=5.0).starved
    assert CallCpu(used_s=STARVED_CPU_SHARE * 5.0 * 0.99, limit_s=5.0).starved
    assert not CallCpu(used_s=STARVED_CPU_SHARE * 5.0, limit_s=5.0).starved
    assert not CallCpu(used_s=4.9, limit_s=5.0).starved


def test_the_cpu_of_a_live_process_is_read_and_of_a_missing_one_is_unknown() -> None:
    own = process_cpu_s(os.getpid())
    assert own is not None and own > 0.0
    assert process_cpu_s(None) is None
    assert process_cpu_s(2**22 + 12345) is None  # above the kernel's pid_max: no such process


def test_unknown_figures_leave_the_call_unjudged() -> None:
    assert call_cpu(os.getpid(), None, 5.0) is None  # no baseline
    assert call_cpu(2**22 + 12345, 0.0, 5.0) is None  # the process is gone
    assert call_cpu(os.getpid(), 1e9, 5.0) is None  # a baseline above what the kernel counts: not this process
    measured = call_cpu(os.getpid(), 0.0, 5.0)
    assert measured is not None and measured.used_s > 0.0 and measured.limit_s == 5.0


async def test_a_late_call_whose_cpu_cannot_be_read_is_the_callers_timeout_at_its_limit() -> None:
    never: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
    with pytest.raises(LateCall) as caught:
        await answer_within_limit(never, pid=None, baseline_s=0.0, limit_s=0.1)
    assert caught.value.kind == "timeout" and "0.1 s" in caught.value.detail
    await settle(never)
    assert never.cancelled()


async def test_an_answer_during_the_grace_of_a_call_that_did_not_compute_is_the_calls_answer() -> None:
    # This process, waiting on its loop, uses next to no CPU: to the judge it is a sandbox that waited for the CPU.
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[bytes] = loop.create_future()
    loop.call_later(0.5, answer.set_result, b"late")
    baseline = process_cpu_s(os.getpid())
    assert await answer_within_limit(answer, pid=os.getpid(), baseline_s=baseline, limit_s=0.25) == b"late"


async def test_settle_retrieves_a_failed_exchange() -> None:
    failed: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
    failed.set_exception(EOFError("gone"))
    await settle(failed)  # retrieved: no "exception was never retrieved" when it is collected
    assert failed.done() and not failed.cancelled()


async def test_a_wait_cancelled_in_the_grace_keeps_the_starved_figures_and_an_answer_clears_them() -> None:
    # This process, waiting on its loop, uses next to no CPU: to the judge it is a sandbox that waited for the CPU.
    loop = asyncio.get_running_loop()
    never: asyncio.Future[bytes] = loop.create_future()
    watch = GraceWatch()
    baseline = process_cpu_s(os.getpid())
    waiting = asyncio.ensure_future(
        answer_within_limit(never, pid=os.getpid(), baseline_s=baseline, limit_s=0.2, watch=watch)
    )
    while watch.detail is None and not waiting.done():  # in the grace once the first reading found it starved
        await asyncio.sleep(0.05)  # (done instead: judged not starved; awaiting it below shows why)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert watch.detail is not None and "past its time limit of 0.2 s" in watch.detail and "of CPU" in watch.detail
    await settle(never)
    answered: asyncio.Future[bytes] = loop.create_future()
    answered.set_result(b"ok")
    assert await answer_within_limit(answered, pid=os.getpid(), baseline_s=baseline, limit_s=0.2, watch=watch) == b"ok"
    assert watch.detail is None

"""The figures a timed-out tool call is judged by (green_agent/engine/tau/sandbox_cpu.py): what a sandbox reports is
checked before it is used, and what cannot be read leaves the call judged as before (the caller's timeout)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from green_agent.engine.tau.sandbox_cpu import (
    STARVED_CPU_SHARE,
    CallCpu,
    call_cpu,
    process_cpu_s,
    reported_cpu_s,
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

"""Did a tool call that hit its time limit work, or wait? The CPU time of its sandbox decides whose fault it is.

A tool call's limit (``tool_timeout_s``) is wall-clock time. tau2's tools need well under a millisecond of CPU, so a
call that spends its limit *computing* is doing what the agent's arguments asked for (``calculate("9**9**9")``): the
agent's timeout, as always. But wall time also passes while the sandbox waits for a CPU that the machine does not
give it (the harness saturated it: hundreds of attempts in flight on a few cores) or while it is stopped; then the
call never ran, and blaming the agent would be blaming it for the harness. So when the limit hits, the parent asks the
kernel (psutil: ``/proc/<pid>/stat`` on Linux) how much CPU the sandbox has used, and subtracts what the sandbox
reported with its previous answer (its own ``time.process_time()``; between calls it sleeps on its pipe). A call that
got less than :data:`STARVED_CPU_SHARE` of the limit as CPU is **starved**: a harness error (excluded from n, re-run by
``--retry-infra``), and the detail gives both figures.

Why a share and not "any CPU at all": a CPU-burning call on a loaded machine gets only part of a core. It stays the
agent's as long as it got at least a tenth of one over the limit (at the default 5 s: 0.5 s of CPU, a thousand times
what any tau2 tool needs). A machine that gives a runnable process less than that is starving everything on it, and
that is the harness's doing. When the figures cannot be read (no psutil support, the process gone, no baseline), the
call is judged as before: the timeout of whoever made it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import psutil

STARVED_CPU_SHARE = 0.1
"""A timed-out call whose sandbox used less CPU than this share of the limit was starved by the machine, not busy."""

MAX_REPORTED_CPU_S = 1e9
"""Largest CPU figure taken from a sandbox's answer (anything else, or a non-number, is ignored: no baseline)."""

CPU_KEY = "cpu"
"""The key of every sandbox answer that carries the sandbox's CPU seconds so far (set in sandbox_child.py)."""


@dataclass(frozen=True, slots=True)
class CallCpu:
    """CPU seconds a timed-out call's sandbox used during the call, against the call's limit."""

    used_s: float
    limit_s: float

    @property
    def starved(self) -> bool:
        """The call got less than :data:`STARVED_CPU_SHARE` of its limit as CPU: it waited, it did not work."""
        return self.used_s < STARVED_CPU_SHARE * self.limit_s

    def detail(self) -> str:
        """The starved call's failure detail: what was measured, and whose fault that makes it."""
        return (
            f"no answer within the tool time limit of {self.limit_s:g} s, but the sandbox got only "
            f"{self.used_s:.3f} s of CPU in that time (less than {STARVED_CPU_SHARE:.0%} of it): the machine did not "
            "run it (saturated or the sandbox stopped), a harness error, not the caller's; the call was killed"
        )


def reported_cpu_s(answer: dict[str, Any]) -> float | None:
    """The CPU seconds a sandbox reported with its answer, or None when it sent none or nothing sensible."""
    value = answer.get(CPU_KEY)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) and 0.0 <= value <= MAX_REPORTED_CPU_S else None


def process_cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds process ``pid`` has used so far; None when it cannot be read. Blocking (a procfs
    read): call it in a worker thread."""
    if pid is None:
        return None
    try:
        times = psutil.Process(pid).cpu_times()
    except (psutil.Error, OSError):
        return None
    return float(times.user + times.system)


def call_cpu(pid: int | None, baseline_s: float | None, limit_s: float) -> CallCpu | None:
    """What the sandbox ``pid`` used since it reported ``baseline_s``, or None when either figure is unknown (or the
    difference is negative, so the two do not describe one process). Blocking: call it in a worker thread."""
    if baseline_s is None:
        return None
    now_s = process_cpu_s(pid)
    if now_s is None:
        return None
    # The kernel counts in clock ticks (10 ms) and the child in nanoseconds: allow one tick of disagreement.
    used = now_s - baseline_s
    if used < -0.02:
        return None
    return CallCpu(used_s=max(0.0, used), limit_s=limit_s)

"""Did a tool call that hit its time limit work, or wait? The CPU time of its sandbox decides whose fault it is.

A tool call's limit (``tool_timeout_s``) is wall-clock time. tau2's tools need well under a millisecond of CPU, so a
call that spends its limit *computing* is doing what the agent's arguments asked for (``calculate("9**9**9")``): the
agent's timeout, as always. But wall time also passes while the sandbox waits for a CPU that the machine does not
give it (the harness saturated it: hundreds of attempts in flight on a few cores) or while it is stopped; then the
call never ran, and blaming the agent would be blaming it for the harness. So when the limit hits, the parent asks the
kernel (psutil: ``/proc/<pid>/stat`` on Linux) how much CPU the sandbox has used, minus what the sandbox reported
with its previous answer (its own ``time.process_time()``; between calls it sleeps on its pipe):

* at least :data:`STARVED_CPU_SHARE` of the limit (0.5 s at the default 5 s): the call computed; it is killed and
  is the caller's timeout, at once, as before;
* less: the call may be one that waited for the CPU, or a CPU-burning one that got only a sliver of a loaded machine.
  It is given up to :data:`STARVED_GRACE_LIMITS` more limits of wall time, its CPU read again every
  :data:`POLL_S`. An answer in that time is simply the call's answer (nothing failed; logged). Once its CPU reaches
  the share it is killed as the caller's timeout (it was computing). If the grace runs out with the CPU still under
  the share, the call is **starved**: killed, and a harness error (excluded from n, re-run by ``--retry-infra``)
  whose detail gives the figures.

Why this separates the two: a starved tau2 call needs about a millisecond of CPU, so whenever the machine gives it
the CPU it answers; a CPU-burning call that gets even 2.5% of a core reaches the share within the grace. A machine
that gives a runnable process less than that for the grace is starving everything on it: the harness's doing. When
the figures cannot be read (no psutil support, the process gone, no baseline), the call is judged as before: the
timeout of whoever made it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from dataclasses import dataclass
from typing import Any, Literal

import psutil

log = logging.getLogger(__name__)

STARVED_CPU_SHARE = 0.1
"""A late call whose sandbox used less CPU than this share of the limit did not compute: it waited for the CPU."""

STARVED_GRACE_LIMITS = 3.0
"""How many more limits of wall time a late call that has not computed may take (so at most 4x the limit in all)."""

POLL_S = 0.25
"""How often a late call's CPU is read again during its grace."""

MAX_REPORTED_CPU_S = 1e9
"""Largest CPU figure taken from a sandbox's answer (anything else, or a non-number, is ignored: no baseline)."""

CPU_KEY = "cpu"
"""The key of every sandbox answer that carries the sandbox's CPU seconds so far (set in sandbox_child.py)."""


@dataclass(frozen=True, slots=True)
class CallCpu:
    """CPU seconds a late call's sandbox used during the call, against the call's limit."""

    used_s: float
    limit_s: float

    @property
    def starved(self) -> bool:
        """The call got less than :data:`STARVED_CPU_SHARE` of its limit as CPU: it waited, it did not work."""
        return self.used_s < STARVED_CPU_SHARE * self.limit_s

    def detail(self, waited_s: float) -> str:
        """The starved call's failure detail: what was measured, and whose fault that makes it."""
        return (
            f"no answer within the tool time limit of {self.limit_s:g} s nor in the {waited_s - self.limit_s:.1f} s "
            f"of grace after it, and the sandbox got only {self.used_s:.3f} s of CPU in those {waited_s:.1f} s (less "
            f"than {STARVED_CPU_SHARE:.0%} of the limit): the machine did not run it (saturated, or the sandbox "
            "stopped), a harness error, not the caller's; the call was killed"
        )

    def waiting(self, waited_s: float) -> str:
        """A call still in its grace: what was measured (the attempt deadline's detail if it fires now)."""
        return (
            f"its tool call was {waited_s - self.limit_s:.1f} s past its time limit of {self.limit_s:g} s and its "
            f"sandbox had got only {self.used_s:.3f} s of CPU in those {waited_s:.1f} s: the machine did not run it "
            "(a harness error, not the caller's)"
        )


class GraceWatch:
    """What the sandbox's call in its grace has shown so far (None outside a grace): read when the attempt deadline
    fires during the grace, so that a call the machine did not run is not the agent's deadline either."""

    def __init__(self) -> None:
        self.detail: str | None = None


class LateCall(Exception):
    """A call past its limit is over: its sandbox is to be killed and the call judged ``kind``."""

    def __init__(self, kind: Literal["timeout", "starved"], detail: str) -> None:
        super().__init__(detail)
        self.kind: Literal["timeout", "starved"] = kind
        self.detail = detail


async def answer_within_limit(
    exchange: asyncio.Future[bytes],
    *,
    pid: int | None,
    baseline_s: float | None,
    limit_s: float,
    watch: GraceWatch | None = None,
) -> bytes:
    """The answer ``exchange`` brings, within ``limit_s`` or, for a call that has not computed, within its grace.

    Raises :class:`LateCall` (``timeout``: the caller's; ``starved``: the harness's) when the call is over, and
    whatever the exchange raises. Leaves ``exchange`` running: the caller settles it (:func:`settle`). ``watch``
    holds the starved figures while the call is in its grace (kept when the wait is cancelled there)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    watch = watch if watch is not None else GraceWatch()
    watch.detail = None
    done, _ = await asyncio.wait({exchange}, timeout=limit_s)
    while not done:
        cpu = await asyncio.to_thread(call_cpu, pid, baseline_s, limit_s)
        waited = loop.time() - started
        if cpu is None or not cpu.starved:
            watch.detail = None
            raise LateCall("timeout", f"no answer within the tool time limit of {limit_s:g} s; the call was killed")
        watch.detail = cpu.waiting(waited)
        remaining = (1.0 + STARVED_GRACE_LIMITS) * limit_s - waited
        if remaining <= 0:
            watch.detail = None
            raise LateCall("starved", cpu.detail(waited))
        done, _ = await asyncio.wait({exchange}, timeout=min(remaining, POLL_S))
    watch.detail = None
    late = loop.time() - started - limit_s
    if late > 0:
        log.info("a tool call answered %.1f s after its %g s limit: its sandbox had waited for the CPU", late, limit_s)
    return exchange.result()


async def settle(exchange: asyncio.Future[bytes]) -> None:
    """Stop an exchange that is still running and wait until it has (it unregisters its descriptor on the way out);
    retrieve its outcome either way, so that no exception is left unretrieved."""
    if not exchange.done():
        exchange.cancel()
        await asyncio.wait({exchange})
    if not exchange.cancelled():
        with contextlib.suppress(BaseException):
            exchange.result()


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

"""Parsing a pathological 400 KB reply off the event loop: the speed goals the adversarial test used to assert.

For each pathological reply shape (tests/adversarial/hostile_agent.py: PATHOLOGICAL_UNITS) a k=2 battle runs against
a hostile agent that sends it, while ``GET /health`` is polled every 20 ms. Prints each kind's attempt durations and
the /health p50/p99/max, and exits 1 when an attempt took ``--parse-s`` (default 10 s) or more, /health's max reached
``--stall-ms`` (default 1000 ms), or a poll failed.

    .venv/bin/python benchmarks/bench_pathological_parse.py

tests/adversarial/test_hostile_replies.py keeps the behaviour (each reply is the agent's format_error, no
infrastructure error, every /health poll answered within its 2 s limit); these figures depend on the machine's load,
so they live here. Processes started here are stopped here.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.adversarial.conftest import battle_config  # noqa: E402
from tests.adversarial.harness import GreenAgent, HealthPoller, run_battle  # noqa: E402
from tests.adversarial.hostile_agent import (  # noqa: E402
    PATHOLOGICAL_UNITS,
    HostileAgent,
    pathological_reply,
    serve_hostile,
)


async def measure(green: GreenAgent, hostile: HostileAgent, url: str, kind: str) -> tuple[list[float], HealthPoller]:
    """One battle whose every reply is the ``kind`` of pathological reply: attempt durations and the /health poll."""
    hostile.set_behaviour(pathological_reply(kind))
    async with HealthPoller(green, interval_s=0.02, timeout_s=2.0) as health:
        outcome = await run_battle(green, url, battle_config(), timeout_s=120, unresponsive_s=10)
    return [float(a["duration_s"]) for a in outcome.attempts], health


async def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--parse-s", type=float, default=10.0, help="the goal: every attempt under this")
    parser.add_argument("--stall-ms", type=float, default=1000.0, help="the goal: /health's max under this")
    args = parser.parse_args()
    ok = True
    with tempfile.TemporaryDirectory(prefix="bench-parse-") as tmp:
        root = Path(tmp)
        hostile = HostileAgent()
        with serve_hostile(hostile) as url:
            green = GreenAgent.start(runs_dir=root / "runs", token="bench-" + os.urandom(8).hex(), log_dir=root)
            try:
                for kind in sorted(PATHOLOGICAL_UNITS):
                    durations, health = await measure(green, hostile, url, kind)
                    met = (
                        bool(durations)
                        and max(durations) < args.parse_s
                        and health.failures == 0
                        and max(health.latencies_ms) < args.stall_ms
                    )
                    ok = ok and met
                    shown = ", ".join(f"{d:.2f}" for d in durations)
                    print(f"{'PASS' if met else 'MISS'} [{kind}] attempts {shown} s; {health.summary()}")
            finally:
                green.stop()
    print(f"goals: attempts < {args.parse_s:g} s, /health max < {args.stall_ms:g} ms, no failed poll")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

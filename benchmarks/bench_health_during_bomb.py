"""/health latency while a tool call runs away: the speed goal the adversarial test used to assert (p99 < 100 ms).

A retail battle whose white agent sends ``calculate("9**9**9")`` (k=2) runs beside a calibration battle of the
reference replay agent on the mock domain; ``GET /health`` is polled every 20 ms for the tool limit plus 2 s from the
moment the bomb was sent. Prints p50/p99/max and exits 1 when p99 reaches ``--p99-ms`` (default 100) or a poll failed.

    .venv/bin/python benchmarks/bench_health_during_bomb.py
    .venv/bin/python benchmarks/bench_health_during_bomb.py --loop uvloop --p99-ms 100

tests/adversarial/test_tool_sandbox.py keeps the behaviour (the bomb is the agent's timeout, nothing else stalls,
/health answers within its 2 s poll limit); this figure depends on the machine's load, so it lives here. Processes
started here are stopped here.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.adversarial.conftest import MOCK_TASK, RETAIL_TASK, battle_config  # noqa: E402
from tests.adversarial.harness import GreenAgent, HealthPoller, ReferenceWhite, run_battle  # noqa: E402
from tests.adversarial.hostile_agent import (  # noqa: E402
    HostileAgent,
    by_context,
    calculate_bomb,
    serve_hostile,
    tool_then_malformed,
)

TOOL_TIMEOUT_S = 5.0
"""BattleConfig.tool_timeout_s default (the battle does not set it)."""
POLL_S = TOOL_TIMEOUT_S + 2.0


async def measure(green: GreenAgent, hostile: HostileAgent, hostile_url: str, replay_url: str) -> HealthPoller:
    """Run the bomb battle and the replay battle; the /health poll taken while the bomb runs."""
    hostile.set_behaviour(
        by_context({0: calculate_bomb("9**9**9")}, tool_then_malformed("calculate", {"expression": "2 + 2"}))
    )
    bomb_config = battle_config(RETAIL_TASK, turn_timeout_s=30.0, attempt_timeout_s=120.0)
    battles: list[asyncio.Task[Any]] = [
        asyncio.create_task(run_battle(green, hostile_url, bomb_config, timeout_s=240, watch_health=False))
    ]
    try:
        while not any(r.context_index == 0 and r.note == "action calculate" for r in hostile.records):
            if battles[0].done():
                raise RuntimeError("the bomb battle ended before the bomb was sent")
            await asyncio.sleep(0.02)
        replay_config = battle_config(MOCK_TASK, calibration=True)
        battles.append(
            asyncio.create_task(run_battle(green, replay_url, replay_config, timeout_s=240, watch_health=False))
        )
        async with HealthPoller(green, interval_s=0.02, timeout_s=2.0) as health:
            await asyncio.sleep(POLL_S)
        await asyncio.gather(*battles)
    finally:
        for task in battles:
            if not task.done():
                task.cancel()
        await asyncio.gather(*battles, return_exceptions=True)
    return health


async def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--loop", default="asyncio", choices=["asyncio", "uvloop"])
    parser.add_argument("--p99-ms", type=float, default=100.0, help="the goal: /health p99 below this")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-health-") as tmp:
        root = Path(tmp)
        hostile = HostileAgent()
        replay = ReferenceWhite.start(kind="replay", log_dir=root)
        try:
            with serve_hostile(hostile) as hostile_url:
                green = GreenAgent.start(
                    runs_dir=root / "runs",
                    token="bench-" + os.urandom(8).hex(),
                    log_dir=root,
                    extra_args=["--loop", args.loop],
                )
                try:
                    health = await measure(green, hostile, hostile_url, replay.url)
                finally:
                    green.stop()
        finally:
            replay.stop()
    ok = health.failures == 0 and health.p99 < args.p99_ms
    print(f"{'PASS' if ok else 'MISS'} [{args.loop}] {health.summary()} (goal: p99 < {args.p99_ms:g} ms)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

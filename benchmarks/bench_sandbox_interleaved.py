"""Issue 24, item 2's figure: 200 ``calculate("9**9**9")`` attempts interleaved with a retail calibration battle on
one green agent, on each event loop. Done when, for every loop: 0 infrastructure errors, the calibration battle scores
1.0, and every bomber attempt is its ``timeout``.

    .venv/bin/python benchmarks/bench_sandbox_interleaved.py                 # asyncio and uvloop, 200 bombs each
    .venv/bin/python benchmarks/bench_sandbox_interleaved.py --loops uvloop --bomb-k 20

The bomber spreads its attempts over retail test tasks 0..N-1 (k each, 8 in flight, 1 s tool limit); the calibration
battle plays the last ``--calibration-tasks`` retail test tasks with the reference replay agent (k=2, 4 in flight).
ARENA_ADVERSARIAL_GREEN_SOURCE=<tree> runs another source tree's green agent (e.g. the code before the fix).
Exit 1 when a loop misses the target. Processes started here are stopped here.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.adversarial.harness import GreenAgent, ReferenceWhite  # noqa: E402
from tests.adversarial.hostile_agent import HostileAgent, serve_hostile  # noqa: E402
from tests.adversarial.sandbox_interleave import InterleaveReport, bombs_beside_calibration  # noqa: E402


async def one_loop(loop: str, args: argparse.Namespace, root: Path, hostile: HostileAgent, replay_url: str) -> bool:
    green = GreenAgent.start(
        runs_dir=root / f"runs-{loop}", token="bench-" + os.urandom(8).hex(), log_dir=root, extra_args=["--loop", loop]
    )
    try:
        started = time.perf_counter()
        report: InterleaveReport = await bombs_beside_calibration(
            green,
            hostile,
            replay_url,
            bomb_tasks=args.bomb_tasks,
            bomb_k=args.bomb_k,
            bomb_concurrency=args.bomb_concurrency,
            calibration_tasks=args.calibration_tasks,
            tool_timeout_s=args.tool_timeout_s,
        )
        elapsed = time.perf_counter() - started
    finally:
        green.stop()
    timeouts = report.bomb_outcomes.get(("failure", "timeout", "white_agent"), 0)
    ok = (
        report.loop == loop
        and not report.infrastructure
        and timeouts == report.bombs
        and report.calibration_pass_hat == 1.0
        and all(reward == 1.0 for reward in report.calibration_rewards)
    )
    print(f"{'PASS' if ok else 'MISS'} {report.line()} [{elapsed:.0f} s]", flush=True)
    for item in report.infrastructure[:10]:
        print(f"    infrastructure error: {item}", flush=True)
    return ok


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loops", nargs="+", default=["asyncio", "uvloop"], choices=["asyncio", "uvloop"])
    parser.add_argument("--bomb-tasks", type=int, default=4)
    parser.add_argument("--bomb-k", type=int, default=50, help="attempts per bomber task (even, at most 64)")
    parser.add_argument("--bomb-concurrency", type=int, default=8)
    parser.add_argument("--calibration-tasks", type=int, default=40, help="retail test tasks (at most 40)")
    parser.add_argument("--tool-timeout-s", type=float, default=1.0)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
        root = Path(tmp)
        hostile = HostileAgent()
        replay = ReferenceWhite.start(kind="replay", log_dir=root)
        try:
            with serve_hostile(hostile):
                for loop in args.loops:
                    results.append(await one_loop(loop, args, root, hostile, replay.url))
        finally:
            replay.stop()
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

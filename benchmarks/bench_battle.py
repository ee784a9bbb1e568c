"""Benchmark: a calibration battle over a whole tau2 split through real A2A on loopback (separate processes).

Measures wall time of the battle (from the assessment request to the final artifact), attempts per second and the
peak RSS of the green agent process (its scoring workers reported separately). Target from issue 3: the retail test
split with k = 4 (160 attempts) in under 60 s on a 2-core machine.

    .venv/bin/python benchmarks/bench_battle.py [--domain retail] [--k 4] [--concurrency 8] [--scoring-workers 2]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import psutil

from launcher.cli.assessment_client import run_assessment
from launcher.ports import free_ports, loopback_url
from launcher.processes import ProcessGroup


async def sample_rss(pid: int, peaks: dict[str, int], stop: asyncio.Event) -> None:
    """Poll RSS of the green agent and (separately) its children every 50 ms."""
    main = psutil.Process(pid)
    while not stop.is_set():
        try:
            peaks["green"] = max(peaks["green"], main.memory_info().rss)
            kids = sum(c.memory_info().rss for c in main.children(recursive=True))
            peaks["workers"] = max(peaks["workers"], kids)
        except psutil.Error:
            pass
        await asyncio.sleep(0.05)


async def main(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="arena-bench-"))
    green_port, white_port = free_ports(2)
    python = sys.executable
    async with ProcessGroup(work / "logs") as group:
        white = await group.start_and_wait(
            "white_agent",
            [
                python,
                "-m",
                "white_agent",
                "--kind",
                "replay",
                "--port",
                str(white_port),
                "--card-url",
                loopback_url(white_port),
            ],
            loopback_url(white_port) + "/.well-known/agent-card.json",
        )
        green = await group.start_and_wait(
            "green_agent",
            [
                python,
                "-m",
                "green_agent",
                "--port",
                str(green_port),
                "--card-url",
                loopback_url(green_port),
                "--runs-dir",
                str(work / "runs"),
                "--scoring-workers",
                str(args.scoring_workers),
            ],
            loopback_url(green_port) + "/health",
            timeout_s=120,
        )
        del white
        # /health answers once the lifespan (scoring pool warm-up) has finished.
        peaks = {"green": 0, "workers": 0}
        stop = asyncio.Event()
        sampler = asyncio.create_task(sample_rss(green.pid, peaks, stop))
        config = {
            "mode": "all",
            "domain": args.domain,
            "split": "test",
            "k": args.k,
            "calibration": True,
            "concurrency": args.concurrency,
        }
        started = time.perf_counter()
        outcome = await run_assessment(loopback_url(green_port), loopback_url(white_port), config, idle_timeout_s=300)
        wall = time.perf_counter() - started
        stop.set()
        await sampler
    if outcome.state != "completed":
        print(f"battle did not complete: {outcome.state} {outcome.error}", file=sys.stderr)
        return 1
    attempts = outcome.result["attempts"]
    ok = sum(a["outcome"] == "success" for a in attempts)
    print(f"calibration battle {args.domain}/test k={args.k}: {len(attempts)} attempts, {ok} scored 1.0")
    print(
        f"wall time {wall:.1f} s (target < 60 s for retail k=4), {len(attempts) / wall:.2f} attempts/s, "
        f"concurrency {args.concurrency}, scoring workers {args.scoring_workers}"
    )
    print(
        f"peak RSS: green agent {peaks['green'] / 2**20:.0f} MiB, its scoring workers together "
        f"{peaks['workers'] / 2**20:.0f} MiB"
    )
    return 0 if ok == len(attempts) else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--domain", default="retail")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--scoring-workers", type=int, default=2)
    sys.exit(asyncio.run(main(parser.parse_args())))

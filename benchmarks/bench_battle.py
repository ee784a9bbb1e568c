"""Benchmark: a calibration battle over a whole tau2 split through real A2A on loopback (separate processes).

Measures wall time of the battle (from the assessment request to the final artifact), attempts per second and the
peak RSS of the green agent process (its scoring workers reported separately). Target from issue 3: the retail test
split with k = 4 (160 attempts) in under 60 s on a 2-core machine.

    .venv/bin/python benchmarks/bench_battle.py [--domain retail] [--k 4] [--concurrency 8] [--scoring-workers 2]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from green_agent.service.operator_auth import TOKEN_ENV
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


def cpu_seconds(green_pid: int, white_pid: int) -> dict[str, float]:
    """CPU time (user + system) used so far by the green agent, each kind of its children, and the white agent."""

    def used(proc: psutil.Process) -> float:
        times = proc.cpu_times()
        return times.user + times.system

    green = psutil.Process(green_pid)
    out = {"green agent": used(green), "white agent": used(psutil.Process(white_pid))}
    for child in green.children(recursive=True):
        try:
            cmd = " ".join(child.cmdline())
            kind = (
                "sandboxes (fork server)" if "forkserver" in cmd else "scoring workers" if "spawn" in cmd else "other"
            )
            out[kind] = out.get(kind, 0.0) + used(child) + child.cpu_times().children_user
        except psutil.Error:
            pass
    return out


@dataclass
class BattleFigure:
    """One calibration battle: what it did and what it cost."""

    domain: str
    k: int
    concurrency: int
    scoring_workers: int
    attempts: int
    scored_one: int
    wall_s: float
    """From the assessment request to the final artifact (the agents already started and warm)."""
    run_dir: Path
    """The battle's run directory (trajectories, attempts.jsonl): the same attempts for tau2's baseline."""
    peak_rss_mib: dict[str, float] = field(default_factory=dict)
    cpu_s: dict[str, float] = field(default_factory=dict)


async def _wait_warm(url: str, timeout_s: float = 120.0) -> None:
    """Until the green agent's /health says its scoring workers are started (it answers before that)."""
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(trust_env=False, timeout=5.0) as client:
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                if (await client.get(url + "/health")).json().get("warm"):
                    return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"the green agent at {url} did not warm up within {timeout_s:g} s")


async def calibration_battle(
    work: Path, *, domain: str = "retail", k: int = 4, concurrency: int = 8, scoring_workers: int = 2
) -> BattleFigure:
    """Start a replay white agent and a green agent under ``work`` and run one calibration battle of ``domain``'s
    test split; the agents are stopped before this returns, the run directory stays."""
    green_port, white_port = free_ports(2)
    python = sys.executable
    token = secrets.token_urlsafe(32)
    white_argv = [python, "-m", "white_agent", "--kind", "replay", "--port", str(white_port)]
    green_argv = [python, "-m", "green_agent", "--port", str(green_port), "--runs-dir", str(work / "runs")]
    green_argv += ["--scoring-workers", str(scoring_workers), "--card-url", loopback_url(green_port)]
    async with ProcessGroup(work / "logs") as group:
        white = await group.start_and_wait(
            "white_agent",
            [*white_argv, "--card-url", loopback_url(white_port)],
            loopback_url(white_port) + "/.well-known/agent-card.json",
        )
        green = await group.start_and_wait(
            "green_agent",
            green_argv,
            loopback_url(green_port) + "/health",
            timeout_s=120,
            env={**os.environ, TOKEN_ENV: token},
        )
        await _wait_warm(loopback_url(green_port))
        peaks = {"green": 0, "workers": 0}
        stop = asyncio.Event()
        sampler = asyncio.create_task(sample_rss(green.pid, peaks, stop))
        config = {"mode": "all", "domain": domain, "split": "test", "k": k, "calibration": True}
        config["concurrency"] = concurrency
        started = time.perf_counter()
        outcome = await run_assessment(
            loopback_url(green_port), loopback_url(white_port), config, idle_timeout_s=300, operator_token=token
        )
        wall = time.perf_counter() - started
        stop.set()
        await sampler
        cpu = cpu_seconds(green.pid, white.pid)
    if outcome.state != "completed" or outcome.result is None:
        raise RuntimeError(f"battle did not complete: {outcome.state} {outcome.error}")
    attempts = outcome.result["attempts"]
    return BattleFigure(
        domain=domain,
        k=k,
        concurrency=concurrency,
        scoring_workers=scoring_workers,
        attempts=len(attempts),
        scored_one=sum(a["outcome"] == "success" for a in attempts),
        wall_s=wall,
        run_dir=work / "runs" / outcome.result["battle_id"],
        peak_rss_mib={name: peak / 2**20 for name, peak in peaks.items()},
        cpu_s=cpu,
    )


async def main(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="arena-bench-"))
    try:
        figure = await calibration_battle(
            work, domain=args.domain, k=args.k, concurrency=args.concurrency, scoring_workers=args.scoring_workers
        )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    what = f"calibration battle {figure.domain}/test k={figure.k}"
    print(f"{what}: {figure.attempts} attempts, {figure.scored_one} scored 1.0")
    print(
        f"wall time {figure.wall_s:.1f} s, {figure.attempts / figure.wall_s:.2f} attempts/s, "
        f"concurrency {figure.concurrency}, scoring workers {figure.scoring_workers}, load {os.getloadavg()[0]:.2f}"
    )
    print(
        f"peak RSS: green agent {figure.peak_rss_mib['green']:.0f} MiB, its children together "
        f"{figure.peak_rss_mib['workers']:.0f} MiB"
    )
    print("CPU seconds (start-up included): " + ", ".join(f"{name} {sec:.1f}" for name, sec in figure.cpu_s.items()))
    if args.keep:
        print(f"run directory: {figure.run_dir}")
    return 0 if figure.scored_one == figure.attempts else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--domain", default="retail")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--scoring-workers", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="keep the run directory (printed)")
    sys.exit(asyncio.run(main(parser.parse_args())))

"""One battle worked by 1, 2, 3 pool workers (issue 29): attempts per second against a 1 s-per-turn agent.

Each run starts N fresh ``arena-green --pool ... --pool-capacity C`` processes on this machine (the first is the
battle's owner; every one leases attempts), one battle backend (SQLite by default; ``--postgres`` starts a throwaway
PostgreSQL server, durable settings), and the reference replay agent behind the delay proxy of
bench_latency_hiding.py (every A2A call waits ``--delay`` seconds). The battle (retail/test calibration, ``--tasks``
random tasks x ``--k``, concurrency N x C) is created through the backend's API for the owner, as AgentBeats does;
it is sized so one worker takes about a minute. Capacity is the limit that makes workers matter: the battle is wider
than one worker's capacity.

Per worker count it prints: the whole battle's wall time (battle created to result stored) and attempts/s over it;
the active rate (attempts over the time from the first lease to the last record, on the store's clock: the battle's
start-up and the result's posting left out, the last wave's tail kept); attempts recorded per worker; whether every
calibration attempt scored 1.0; the load average before the run and the machine's CPU use during it (all of the
machine's processes: a saturated machine cannot scale). Then the ratios 2/1 and 3/1 of both rates. Target (issue
29): >= 1.8x from 1 to 2 workers while the machine is not saturated, judged on the whole battle's rate; exit 1 when
a run's calibration is not all 1.0 or that ratio misses the target on a machine that was not saturated (CPU below
85%).

    .venv/bin/python benchmarks/bench_pool_battle.py                        # 1, 2, 3 workers, capacity 8
    .venv/bin/python benchmarks/bench_pool_battle.py --workers 1,2 --tasks 20 --k 2 --delay 1 --postgres

Every process started here is stopped here (tests/support/pool_battle.py).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from green_agent.wire.attempt_leases import AttemptOut  # noqa: E402
from tests.support.pool_battle import PoolCluster, pool_cluster  # noqa: E402
from tests.support.postgres import PostgresServer  # noqa: E402

TARGET_RATIO = 1.8
SATURATED_CPU = 85.0
BATTLE_LIMIT_S = 1800.0
WARM_UP_S = 5.0
"""After the green agents answer: their scoring workers and sandbox fork servers finish starting."""


@dataclass
class Figures:
    workers: int
    attempts: int
    wall_s: float
    active_rate: float
    per_worker: dict[str, int]
    perfect: int
    load: tuple[float, float, float]
    cpu_percent: float

    @property
    def rate(self) -> float:
        return self.attempts / self.wall_s if self.wall_s > 0 else 0.0


def _when(text: str | None) -> float:
    if not text:
        raise ValueError("an attempt recorded without recorded_at")
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def active_rate(attempts: list[AttemptOut]) -> float:
    """Attempts done over the store-clock time from the first lease to the last record."""
    done = [a for a in attempts if a.state == "done"]
    leased = [_when(h.leased_at) for a in done for h in a.history]
    if not done or not leased:
        return 0.0
    span = max(_when(a.recorded_at) for a in done) - min(leased)
    return len(done) / span if span > 0 else 0.0


async def measure(
    cluster: PoolCluster, white_url: str, workers: int, args: argparse.Namespace, backend: str
) -> Figures:
    greens = [
        await cluster.start_green(f"{workers}-{n}", pool_backend=backend, capacity=args.capacity)
        for n in range(1, workers + 1)
    ]
    await asyncio.sleep(WARM_UP_S)
    config: dict[str, Any] = {"mode": "random", "num_tasks": args.tasks, "domain": "retail", "split": "test"}
    config |= {"k": args.k, "calibration": True, "concurrency": min(64, workers * args.capacity), "seed": args.seed}
    config |= {"attempt_timeout_s": 1800, "turn_timeout_s": 600, "tool_timeout_s": 60}
    load = os.getloadavg()
    psutil.cpu_percent(None)  # starts the interval
    started = time.monotonic()
    battle_id = await cluster.start_battle(greens[0], white_url, config, backend=backend)
    battle = await cluster.wait_finished(battle_id, limit_s=BATTLE_LIMIT_S, backend=backend)
    wall = time.monotonic() - started
    cpu = psutil.cpu_percent(None)
    result = battle["result"]["detail"]
    if result.get("status") != "completed":
        raise RuntimeError(f"battle {battle_id} ended {result.get('status')}: {str(result)[:2000]}")
    attempts = await cluster.attempts(battle_id, backend=backend)
    per_worker: dict[str, int] = {}
    for attempt in attempts:
        per_worker[str(attempt.recorded_by)] = per_worker.get(str(attempt.recorded_by), 0) + 1
    for green in greens:
        await cluster.stop(green)
    return Figures(
        workers=workers,
        attempts=len(result["attempts"]),
        wall_s=wall,
        active_rate=active_rate(attempts),
        per_worker=per_worker,
        perfect=sum(1 for a in result["attempts"] if a.get("reward") == 1.0),
        load=load,
        cpu_percent=cpu,
    )


def row(f: Figures) -> str:
    workers = ", ".join(f"{name} {count}" for name, count in sorted(f.per_worker.items()))
    return (
        f"| {f.workers} | {f.attempts} | {f.wall_s:.1f} s | {f.rate:.2f} | {f.active_rate:.2f} | "
        f"{f.perfect}/{f.attempts} | {f.load[0]:.1f} | {f.cpu_percent:.0f}% | {workers} |"
    )


async def main_async(args: argparse.Namespace) -> int:
    counts = [int(text) for text in args.workers.split(",")]
    print(f"cores {os.cpu_count()}; load before: {os.getloadavg()}; delay {args.delay:g} s per A2A call")
    print(f"battle: retail/test calibration, {args.tasks} tasks x k={args.k}; capacity {args.capacity} per worker")
    print(
        "| workers | attempts | wall | attempts/s (wall) | attempts/s (active) | score 1.0 | load | CPU | recorded by |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    figures: dict[int, Figures] = {}
    server = PostgresServer() if args.postgres else None
    with tempfile.TemporaryDirectory(prefix="arena-pool-bench-") as tmp:
        root = Path(tmp)
        try:
            db = str(root / "backend.sqlite3")
            if server is not None:
                server.start()
                db = server.create_database()
            async with pool_cluster(root) as cluster:
                (backend,) = await cluster.start_backends(db)
                white = await cluster.start_white(kind="replay", delay_s=args.delay)
                for workers in counts:
                    figures[workers] = await measure(cluster, white.delayed_url, workers, args, backend)
                    print(row(figures[workers]), flush=True)
        finally:
            if server is not None:
                server.stop()
    failed = any(f.perfect != f.attempts for f in figures.values())
    one = figures.get(1)
    for workers, f in sorted(figures.items()):
        if one is None or workers == 1:
            continue
        wall_ratio = f.rate / one.rate if one.rate else 0.0
        active_ratio = f.active_rate / one.active_rate if one.active_rate else 0.0
        print(f"ratio {workers}/1: {wall_ratio:.2f}x over the whole battle, {active_ratio:.2f}x active")
        saturated = max(f.cpu_percent, one.cpu_percent) >= SATURATED_CPU
        if workers == 2:
            verdict = "met" if wall_ratio >= TARGET_RATIO else "MISSED"
            verdict += " (machine saturated: a miss is not judged)" if saturated else ""
            print(f"target {workers}/1 >= {TARGET_RATIO}x over the whole battle: {verdict}")
            failed = failed or (wall_ratio < TARGET_RATIO and not saturated)
    print(f"load after: {os.getloadavg()}")
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--workers", default="1,2,3", help="worker counts to run (default %(default)s)")
    parser.add_argument("--tasks", type=int, default=30, help="random retail/test tasks (default %(default)s)")
    parser.add_argument("--k", type=int, default=2, help="attempts per task, even (default %(default)s)")
    parser.add_argument("--capacity", type=int, default=8, help="--pool-capacity of each worker (default %(default)s)")
    parser.add_argument("--delay", type=float, default=1.0, help="seconds per A2A call (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="task selection seed (default %(default)s)")
    parser.add_argument("--postgres", action="store_true", help="a throwaway PostgreSQL server instead of SQLite")
    return asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())

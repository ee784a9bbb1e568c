"""Benchmark of ``arena view runs/`` building its runs home (a script, not a timed test).

What the launcher does before the backend starts: read every run of a folder, write one import file per run, and
compute ``arena compare``'s statistics for every comparable pair (launcher.cli.runs_home.build_home). Measured on a
folder of N runs (default 30) of one domain, 30 tasks x 4 attempts each (every pair comparable, so N(N-1)/2 pairs,
up to the cap MAX_PAIRS), plus the same folder with the cap lowered to show what the pairs cost.

Run:  .venv/bin/python benchmarks/bench_runs_home.py [--runs N] [--tasks T]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from launcher.cli.runs_home import MAX_PAIRS, build_home
from tests.support.run_folders import make_result, tasks, write_run


def folder(root: Path, runs: int, task_count: int) -> Path:
    rng = random.Random(0)
    keys = tasks(task_count)
    for i in range(runs):
        rate = 0.3 + 0.6 * i / max(1, runs - 1)
        outcomes = {key: ["success" if rng.random() < rate else "failure" for _ in range(4)] for key in keys}
        write_run(
            root, make_result(f"run-{i:03d}", outcomes, started_at=f"2026-11-{1 + i % 28:02d}T{i % 24:02d}:00:00Z")
        )
    return root


def timed(runs_dir: Path, max_pairs: int) -> tuple[float, int, int]:
    with tempfile.TemporaryDirectory() as work:
        start = time.perf_counter()
        built = build_home(runs_dir, Path(work), max_pairs=max_pairs)
        elapsed = time.perf_counter() - start
        size = sum(path.stat().st_size for path in built.files)
    return elapsed, built.comparisons, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--tasks", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs_dir = folder(Path(tmp) / "runs", args.runs, args.tasks)
        timed(runs_dir, 1)  # warm-up: imports (scipy) and the first sign-flip tables
        for cap in (0, MAX_PAIRS):
            elapsed, pairs, size = timed(runs_dir, cap)
            print(
                f"{args.runs} runs x {args.tasks} tasks x 4 attempts, cap {cap} pairs: {elapsed:.2f} s, "
                f"{pairs} pairs with statistics, import files {size / 1e6:.1f} MB"
            )


if __name__ == "__main__":
    main()

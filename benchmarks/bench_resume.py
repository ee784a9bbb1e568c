"""Benchmark of resuming a battle (a script, not a timed test): the cost of loading and skipping N finished attempts.

What a resume does before its first new attempt, per the run directory (green_agent/engine/run_store.py): read
run.json, read attempts.jsonl (parse and validate every line into an AttemptResult), compare the config hash, and
pick the missing (task, attempt) pairs. This times exactly those calls for N = 20, 200 and 2000 attempts (2000 is
the green agent's default per-battle limit), using real attempt results: the ones a finished run directory holds
(``--from RUN_DIR``, e.g. an offline demo run), replicated over more task indices. A resumed battle's attempts are
otherwise the same as a fresh one's, so this is the whole overhead.

Run:  .venv/bin/python benchmarks/bench_resume.py --from runs/<battle id> [--repeats N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from green_agent.engine.run_store import (
    AttemptJournal,
    RunManifest,
    check_resumable,
    config_hash,
    load_run,
    read_attempts,
    read_manifest,
)


def build_run(source: Path, target: Path, n: int) -> list[str]:
    """A run directory with ``n`` attempts made from ``source``'s, spread over n / k tasks."""
    manifest = read_manifest(source)
    if manifest is None:
        raise SystemExit(f"{source}: no run.json (not a run directory written by this version)")
    originals = list(read_attempts(source / "attempts.jsonl").attempts.values())
    k = manifest.config.k
    tasks = max(1, n // k)
    config = manifest.config.model_copy(update={"task_index": list(range(tasks)), "mode": "manual"})
    keys = [f"{config.domain}/{config.split}/{i}" for i in range(tasks)]
    copy = RunManifest(
        battle_id="bench",
        white_agent_url=manifest.white_agent_url,
        config=config,
        config_hash=config_hash(config),
        created_at=manifest.created_at,
        tasks=keys,
    )

    async def write() -> None:
        journal = AttemptJournal(target)
        await journal.start(copy, keep_bytes=None)
        for index in range(tasks):
            for attempt in range(1, k + 1):
                original = originals[(index * k + attempt - 1) % len(originals)]
                await journal.append(original.model_copy(update={"task_index": index, "attempt": attempt}))

    asyncio.run(write())
    return keys


def resume_work(run_dir: Path, keys: list[str]) -> int:
    """What Battle._open_run_dir does on a resume, minus the journal's truncate: returns attempts still to run."""
    stored = load_run(run_dir)
    assert stored is not None
    config = stored.manifest.config
    check_resumable(stored, config, keys)
    wanted = {(key, a) for key in keys for a in range(1, config.k + 1)}
    carried = {key for key in stored.attempts.attempts if key in wanted}
    return len(wanted - carried)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", type=Path, required=True, help="a finished run directory")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    print(f"{'attempts':>8}  {'file size':>10}  {'median':>9}  {'best':>9}  {'per attempt':>11}")
    for n in (20, 200, 2000):
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = Path(tmp)
            keys = build_run(args.source, run_dir, n)
            size = (run_dir / "attempts.jsonl").stat().st_size
            assert resume_work(run_dir, keys) == 0  # warm-up, and every attempt is found
            samples = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                resume_work(run_dir, keys)
                samples.append(time.perf_counter() - start)
            median = statistics.median(samples)
            print(
                f"{n:>8}  {size / 1e6:>8.2f} MB  {median * 1e3:>7.1f} ms  {min(samples) * 1e3:>7.1f} ms  "
                f"{median / n * 1e6:>8.0f} µs"
            )


if __name__ == "__main__":
    main()

"""Battle-backend ingestion on its two stores, side by side: SQLite with one backend, PostgreSQL with one replica,
PostgreSQL with two replicas (issue 16: "ingestion on PostgreSQL vs SQLite, one and two replicas, events/s and p99
latency").

Why: PostgreSQL is what lets several backend processes serve the same battles, but every event then costs a
transaction on a database server (a network round trip per statement, the battle's row locked while its sequence
number is taken, a WAL flush at commit) instead of a group commit into a local file. This puts a number on that
price and shows whether a second replica adds throughput to one battle or only contention on its row.

What runs: one PostgreSQL server (tests/support/postgres.py, Debian's binaries, durability as deployed: fsync and
synchronous_commit on) for the whole run; then, each on a fresh database (a new temporary SQLite file, or a new
PostgreSQL database), ``bench_backend_ingest.measure``: N posters x M events into one battle over HTTP on loopback,
poster i posting to replica i % replicas (see benchmarks/bench_backend_ingest.py for the details). Per configuration:
events/s accepted, lost (accepted with a 204 but missing from the stored history), out of order (a poster's events
stored in another order than it posted them), refused (any answer but 204), p50/p99 request latency, the backends'
CPU per event (summed over the replicas), the PostgreSQL server's CPU per event (postmaster and its backends; the
database's share of the work, which SQLite does inside the backend process) and the 1-minute load average before it.

    .venv/bin/python benchmarks/bench_backend_scaleout.py                       # 20 posters x 100 events
    .venv/bin/python benchmarks/bench_backend_scaleout.py --posters 40 --events-per-poster 50 --json-out out.json
    .venv/bin/python benchmarks/bench_backend_scaleout.py --rounds 3     # every configuration 3 times, and medians

A single run on a small shared machine is noisy (one configuration's figure moves by a third from run to run here):
``--rounds N`` runs the three configurations N times, interleaved, and adds a table of per-configuration medians.

Exits 1 when a configuration lost an event or stored one out of order. Every process it starts (the backends and
the PostgreSQL server) is stopped on the way out, also on an error, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import time
from collections.abc import Coroutine
from pathlib import Path
from types import FrameType
from typing import Any, Literal, TypeVar

REPO = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
for _path in (str(REPO), str(BENCH)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from bench_backend_ingest import measure  # noqa: E402

from tests.support.postgres import PostgresServer  # noqa: E402

T = TypeVar("T")
Store = Literal["sqlite", "postgresql"]
CONFIGURATIONS: tuple[tuple[Store, int], ...] = (("sqlite", 1), ("postgresql", 1), ("postgresql", 2))
"""(store, replicas), in the order they run."""

COLUMNS: tuple[tuple[str, str], ...] = (
    ("store", "store"),
    ("replicas", "replicas"),
    ("events/s", "events_per_s"),
    ("lost", "events_lost"),
    ("out_of_order", "events_out_of_order"),
    ("refused", "events_refused"),
    ("p50 ms", "latency_p50_ms"),
    ("p99 ms", "latency_p99_ms"),
    ("backend CPU ms/event", "server_cpu_ms_per_event"),
    ("PG CPU ms/event", "db_server_cpu_ms_per_event"),
    ("load before", "load_before_1m"),
)
MEDIAN_KEYS = (
    "events_per_s",
    "latency_p50_ms",
    "latency_p99_ms",
    "server_cpu_ms_per_event",
    "db_server_cpu_ms_per_event",
    "load_before_1m",
)
"""Figures whose median over the rounds is reported; counts (lost, out_of_order, refused) are summed instead."""
SUMMED_KEYS = ("events_lost", "events_out_of_order", "events_refused")


class Interrupts:
    """Ctrl-C and SIGTERM: cancel the measurement under way, whose ``finally`` blocks stop its backend processes,
    then stop (the PostgreSQL server is stopped by its ``with`` block).

    Why not asyncio's own Ctrl-C handling: while the fake agents' uvicorn servers run (inside ``measure``), uvicorn
    takes SIGINT and SIGTERM over to shut those servers down and raises the signal again once they have stopped, by
    which time asyncio's handler would have nothing to interrupt. This handler is installed before, so it is the one
    uvicorn hands the signal back to, and it cancels the measurement itself."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.task: asyncio.Task[Any] | None = None

    def install(self) -> None:
        signal.signal(signal.SIGINT, self.handle)
        signal.signal(signal.SIGTERM, self.handle)

    def handle(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum
        task = self.task
        if task is not None and not task.done():
            task.get_loop().call_soon_threadsafe(task.cancel)
            return
        raise KeyboardInterrupt  # between measurements: unwind right away

    def check(self) -> None:
        """KeyboardInterrupt if a signal came (also one that arrived as a measurement was ending anyway)."""
        if self.signum is not None:
            raise KeyboardInterrupt

    async def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Await ``coroutine`` as the task a signal cancels."""
        self.task = asyncio.current_task()
        try:
            return await coroutine
        finally:
            self.task = None


def _server_facts(server: PostgresServer) -> dict[str, str]:
    """The server's version and the settings that decide what a commit costs."""
    facts: dict[str, str] = {}
    with server.connect() as conn:
        for name in ("server_version", "fsync", "synchronous_commit", "wal_sync_method", "max_connections"):
            row = conn.execute(f"SHOW {name}").fetchone()
            facts[name] = str(row[0]) if row is not None else "?"
    return facts


def run_configurations(
    server: PostgresServer,
    posters: int,
    events_per_poster: int,
    *,
    rounds: int,
    pause_s: float,
    sqlite_synchronous: Literal["normal", "full"],
    interrupts: Interrupts,
) -> list[dict[str, Any]]:
    """Each configuration ``rounds`` times (interleaved, so that a drift of the machine hits them alike), each run on
    a fresh database, one after the other (``pause_s`` between runs)."""
    results: list[dict[str, Any]] = []
    runs = [
        (round_number, store, replicas) for round_number in range(1, rounds + 1) for store, replicas in CONFIGURATIONS
    ]
    for number, (round_number, store, replicas) in enumerate(runs):
        if number and pause_s > 0:
            time.sleep(pause_s)
        interrupts.check()
        db = server.create_database() if store == "postgresql" else None  # None: a temporary SQLite file
        print(f"round {round_number}/{rounds}: {store} x{replicas} ...", file=sys.stderr, flush=True)
        figures = asyncio.run(
            interrupts.run(
                measure(
                    posters,
                    events_per_poster,
                    db=db,
                    replicas=replicas,
                    synchronous=sqlite_synchronous,
                    db_server_pid=server.pid if store == "postgresql" else None,
                )
            )
        )
        interrupts.check()
        figures["load_before_1m"] = figures["load_before"][0]
        figures["round"] = round_number
        results.append(figures)
    return results


def medians(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per configuration: the median of each of :data:`MEDIAN_KEYS` over its runs, the sum of :data:`SUMMED_KEYS`."""
    out: list[dict[str, Any]] = []
    for store, replicas in CONFIGURATIONS:
        runs = [f for f in results if f["store"] == store and f["replicas"] == replicas]
        if not runs:
            continue
        summary: dict[str, Any] = {"store": store, "replicas": replicas, "runs": len(runs)}
        for key in MEDIAN_KEYS:
            values = [f[key] for f in runs if f[key] is not None]
            summary[key] = round(statistics.median(values), 3) if values else None
        for key in SUMMED_KEYS:
            summary[key] = sum(f[key] for f in runs)
        out.append(summary)
    return out


def table(results: list[dict[str, Any]], *, with_round: bool = False) -> str:
    """The figures as an aligned text table, one run (or one configuration's medians) a row."""

    def cell(value: Any) -> str:
        return "-" if value is None else str(value)

    columns = ((("round", "round"),) if with_round else ()) + COLUMNS
    rows = [[title for title, _ in columns]] + [[cell(figures[key]) for _, key in columns] for figures in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    lines = ["  ".join(text.rjust(width) for text, width in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def failures(results: list[dict[str, Any]]) -> list[str]:
    """What makes the run fail: a configuration that lost an event or stored one out of order."""
    out: list[str] = []
    for figures in results:
        name = f"{figures['store']} x{figures['replicas']}"
        if figures["events_lost"]:
            out.append(f"{name}: {figures['events_lost']} accepted events missing from the stored history")
        if figures["events_out_of_order"]:
            out.append(f"{name}: {figures['events_out_of_order']} events stored out of their poster's order")
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the configurations, print the table(s) (and write the JSON), exit 1 on a lost or reordered event."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--posters", type=int, default=20)
    parser.add_argument("--events-per-poster", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=1, help="run every configuration this many times (default 1)")
    parser.add_argument("--pause", type=float, default=3.0, help="seconds between runs, for the machine to settle")
    parser.add_argument(
        "--sqlite-synchronous",
        choices=["normal", "full"],
        default="normal",
        help="the SQLite backend's fsync policy (default normal, as deployed; full fsyncs every group commit, "
        "closer to PostgreSQL's synchronous_commit=on)",
    )
    parser.add_argument("--json-out", type=Path, default=None, help="also write every figure to this JSON file")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.posters < 1 or args.events_per_poster < 1:
        parser.error("--rounds, --posters and --events-per-poster must be at least 1")
    interrupts = Interrupts()
    interrupts.install()
    started = time.time()
    try:
        with PostgresServer(fast=False) as server:
            facts = _server_facts(server)
            print(
                f"PostgreSQL {facts['server_version']} (fsync={facts['fsync']}, "
                f"synchronous_commit={facts['synchronous_commit']}, wal_sync_method={facts['wal_sync_method']}); "
                f"{args.posters} posters x {args.events_per_poster} events; {os.cpu_count()} CPUs",
                file=sys.stderr,
                flush=True,
            )
            results = run_configurations(
                server,
                args.posters,
                args.events_per_poster,
                rounds=args.rounds,
                pause_s=args.pause,
                sqlite_synchronous=args.sqlite_synchronous,
                interrupts=interrupts,
            )
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("interrupted: every process this run started has been stopped", file=sys.stderr)
        return 128 + (interrupts.signum or signal.SIGINT)
    print(table(results, with_round=args.rounds > 1))
    summary = medians(results) if args.rounds > 1 else []
    if summary:
        print(f"\nmedians over {args.rounds} rounds (lost, out_of_order, refused: totals)")
        print(table(summary))
    problems = failures(results)
    for problem in problems:
        print(f"FAILED {problem}", file=sys.stderr)
    if args.json_out is not None:
        document = {
            "benchmark": "bench_backend_scaleout",
            "started_at": started,
            "posters": args.posters,
            "events_per_poster": args.events_per_poster,
            "sqlite_synchronous": args.sqlite_synchronous,
            "postgres": facts,
            "cpu_count": os.cpu_count(),
            "rounds": args.rounds,
            "configurations": results,
            "medians": summary,
            "failures": problems,
        }
        args.json_out.write_text(json.dumps(document, indent=2) + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

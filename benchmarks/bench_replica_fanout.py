"""Cross-replica live fan-out: how long until a page open on replica B shows an event posted to replica A.

Issue 16 asks that a browser on replica A see events posted to replica B "within a second". This measures it end to
end, the way it happens in a deployment: one PostgreSQL server (Debian's binaries, durable settings), two backend
processes on its database, a running battle (fake green/white agents and launcher), a page's SSE stream opened on
replica B, and events posted one at a time to replica A. For each event: the time from A's 204 (the event is
committed) to the moment B's stream delivers it (its ``battle_event`` carrying that event). The path crosses
NOTIFY, B's LISTEN connection, B's live hub and feed (which paces its store reads to ten passes a second per
battle), and the SSE response.

Also with a concurrent load (``--background-posters``): the same measurement while other posters keep the battle
busy on both replicas, so the figure is not only that of an idle system.

    .venv/bin/python benchmarks/bench_replica_fanout.py [--events 200] [--pause 0.02] [--background-posters 4]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
for _path in (str(REPO), str(BENCH)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from backend_process import start_backend, stop_backend, wait_healthy  # noqa: E402
from bench_backend_ingest import SETUP_LIMIT_S, _distinct_free_ports, _start_battle  # noqa: E402

from battle_backend.testing import FakeA2AAgent, FakeLauncher, serve_app  # noqa: E402
from tests.support.postgres import PostgresServer  # noqa: E402

TARGET_S = 1.0
RUN_LIMIT_S = 600.0


async def _sse_arrivals(url: str, battle_id: str, arrivals: dict[str, float], ready: asyncio.Event) -> None:
    """Read the battle page's SSE stream on ``url``; note when each event (by its message) arrives."""
    async with (
        httpx.AsyncClient(base_url=url, trust_env=False, timeout=httpx.Timeout(30.0, read=None)) as client,
        client.stream("GET", f"/battles/{battle_id}/events") as response,
    ):
        ready.set()
        event = ""
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                event = line.partition(":")[2].strip()
            elif line.startswith("data:") and event == "battle_event":
                data = json.loads(line.partition(":")[2])
                arrivals[str(data["event"].get("message"))] = time.perf_counter()


async def _background(url: str, battle_id: str, token: str, stop: asyncio.Event, number: int) -> int:
    posted = 0
    async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=30.0) as client:
        while not stop.is_set():
            body = {"is_result": False, "message": f"background {number} #{posted}", "reported_by": "bench"}
            await client.post(f"/battles/{battle_id}", json=body, headers={"X-Battle-Token": token})
            posted += 1
    return posted


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def measure(url: str, events: int, pause_s: float, background_posters: int) -> dict[str, Any]:
    """Two replicas on the database at ``url``; ``events`` timed posts to A, read on B."""
    green, white, launcher = FakeA2AAgent(name="fanout-green"), FakeA2AAgent(name="fanout-white"), FakeLauncher()
    ports = _distinct_free_ports(2)
    replica_a, replica_b = (f"http://127.0.0.1:{port}" for port in ports)
    processes = []
    with tempfile.TemporaryDirectory():
        try:
            for port in ports:
                processes.append(start_backend(port, url, "--ready-poll-interval", "0.5"))
            async with contextlib.AsyncExitStack() as stack:
                fakes = {
                    "green": await stack.enter_async_context(serve_app(green.app)),
                    "white": await stack.enter_async_context(serve_app(white.app)),
                    "launcher": await stack.enter_async_context(serve_app(launcher.app)),
                }
                stack.push_async_callback(launcher.aclose)
                a = await stack.enter_async_context(httpx.AsyncClient(base_url=replica_a, trust_env=False))
                b = await stack.enter_async_context(httpx.AsyncClient(base_url=replica_b, trust_env=False))
                await asyncio.gather(
                    wait_healthy(a, processes[0], SETUP_LIMIT_S), wait_healthy(b, processes[1], SETUP_LIMIT_S)
                )
                battle_id, token = await _start_battle(a, green, fakes)
                arrivals: dict[str, float] = {}
                ready = asyncio.Event()
                reader = asyncio.create_task(_sse_arrivals(replica_b, battle_id, arrivals, ready))
                stop = asyncio.Event()
                background = [
                    asyncio.create_task(_background((replica_a, replica_b)[n % 2], battle_id, token, stop, n))
                    for n in range(background_posters)
                ]
                latencies: list[float] = []
                try:
                    async with asyncio.timeout(RUN_LIMIT_S):
                        await ready.wait()
                        await asyncio.sleep(0.3)
                        for n in range(events):
                            body = {"is_result": False, "message": f"timed #{n}", "reported_by": "bench"}
                            response = await a.post(
                                f"/battles/{battle_id}", json=body, headers={"X-Battle-Token": token}
                            )
                            acknowledged = time.perf_counter()
                            if response.status_code != 204:
                                raise RuntimeError(f"POST answered {response.status_code}: {response.text}")
                            while body["message"] not in arrivals:
                                await asyncio.sleep(0.001)
                            latencies.append(max(0.0, arrivals[body["message"]] - acknowledged))
                            await asyncio.sleep(pause_s)
                finally:
                    stop.set()
                    posted = sum(await asyncio.gather(*background))
                    reader.cancel()
                    await asyncio.gather(reader, return_exceptions=True)
        finally:
            for process in processes:
                stop_backend(process)
    return {
        "events": len(latencies),
        "background_posters": background_posters,
        "background_events": posted,
        "p50_ms": round(statistics.median(latencies) * 1000, 1),
        "p95_ms": round(_percentile(latencies, 0.95) * 1000, 1),
        "p99_ms": round(_percentile(latencies, 0.99) * 1000, 1),
        "max_ms": round(max(latencies) * 1000, 1),
        "within_1_s": sum(1 for latency in latencies if latency <= TARGET_S),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=200, help="timed events (default 200)")
    parser.add_argument("--pause", type=float, default=0.02, help="seconds between timed events (default 0.02)")
    parser.add_argument(
        "--background-posters", type=int, default=4, help="posters keeping the battle busy meanwhile (default 4)"
    )
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"load_before": round(os.getloadavg()[0], 2), "runs": []}
    with PostgresServer(fast=False) as server:
        for background in sorted({0, args.background_posters}):
            url = server.create_database()
            figures = asyncio.run(measure(url, args.events, args.pause, background))
            results["runs"].append(figures)
            print(
                f"fan-out replica A -> page on replica B, {figures['events']} events, "
                f"{background} background posters ({figures['background_events']} events): "
                f"p50 {figures['p50_ms']} ms, p95 {figures['p95_ms']} ms, p99 {figures['p99_ms']} ms, "
                f"max {figures['max_ms']} ms; within 1 s: {figures['within_1_s']}/{figures['events']}"
            )
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(results, indent=2) + "\n")
    return 0 if all(run["within_1_s"] == run["events"] for run in results["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())

"""The green agent's durable outbox through a backend outage: figures, no assertions on time.

One reporter (``BackendReporter`` with its outbox file) posts a battle's events to our backend running as its own
process (``python -m battle_backend``, a temporary SQLite file; fake green and white agents get a real battle
running first so the result needs the battle token). Phases:

1. backend up: ``--events`` progress events, reported as fast as the caller can (the cost of one ``progress()`` call,
   which includes appending to the outbox queue), then delivered (events/s);
2. backend down (the process terminated): ``--events`` more events and the result are reported during an outage of
   ``--outage-s`` seconds, then the backend is started again on the same port and database;
3. the time from the backend answering again to the reporter having nothing left (drain time).

Printed: events delivered / emitted, events stored by the backend (each key once? in order?), results stored, the
drain time, and the outbox file's size. Everything binds 127.0.0.1 and stops by itself.

    .venv/bin/python benchmarks/bench_outbox.py                      # 200 + 200 events, a 10 s outage
    .venv/bin/python benchmarks/bench_outbox.py --events 500 --outage-s 30 --json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from backend_process import free_port, start_backend, stop_backend, wait_healthy  # noqa: E402

from battle_backend.testing import FakeA2AAgent, serve_app  # noqa: E402
from green_agent.service.backend_client import BackendReporter  # noqa: E402
from green_agent.service.outbox import OUTBOX_FILE  # noqa: E402
from tests.support.event_keys import stored_event_keys  # noqa: E402

LIMIT_S = 600.0


async def _start_battle(client: httpx.AsyncClient, green: FakeA2AAgent, urls: dict[str, str]) -> tuple[str, str]:
    """A running battle between the fake agents; (battle id, battle token)."""
    requirement = [{"role": "blue_agent", "name": "white_agent", "required": True}]
    green_body = {"alias": "g", "agent_url": urls["green"], "launcher_url": "", "is_green": True}
    green_body |= {"participant_requirements": requirement, "battle_timeout": LIMIT_S * 2}
    white_body = {"alias": "w", "agent_url": urls["white"], "launcher_url": "", "is_green": False}
    green_id = (await client.post("/agents", json=green_body)).raise_for_status().json()["agent_id"]
    white_id = (await client.post("/agents", json=white_body)).raise_for_status().json()["agent_id"]
    create = {"green_agent_id": green_id, "opponents": [{"name": "white_agent", "agent_id": white_id}]}
    battle_id = str((await client.post("/battles", json=create)).raise_for_status().json()["battle_id"])
    async with asyncio.timeout(LIMIT_S):
        (start,) = await green.wait_for("battle_start")
    return battle_id, str(start["battle_token"])


async def run(events: int, outage_s: float) -> dict[str, Any]:
    """Start everything, report through an outage, count; returns the figures."""
    green, white = FakeA2AAgent(name="g"), FakeA2AAgent(name="w")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        db, outbox = Path(tmp) / "bench.sqlite3", Path(tmp) / "run" / OUTBOX_FILE
        process = start_backend(port, db)
        try:
            async with contextlib.AsyncExitStack() as stack:
                urls = {
                    "green": await stack.enter_async_context(serve_app(green.app)),
                    "white": await stack.enter_async_context(serve_app(white.app)),
                }
                client = await stack.enter_async_context(httpx.AsyncClient(base_url=url, trust_env=False, timeout=60))
                await wait_healthy(client, process, LIMIT_S)
                battle_id, token = await _start_battle(client, green, urls)
                reporter = BackendReporter(url, battle_id, token=token)
                await reporter.open_outbox(outbox)
                reporter.start()

                started = time.perf_counter()
                for n in range(events):
                    reporter.progress(f"up {n}", detail={"type": "bench", "n": n, "pad": "x" * 200})
                enqueue_us = (time.perf_counter() - started) / events * 1e6
                assert await reporter.flush(timeout=LIMIT_S)
                up_elapsed = time.perf_counter() - started

                stop_backend(process)
                for n in range(events):
                    reporter.progress(f"down {n}", detail={"type": "bench", "n": n, "pad": "x" * 200})
                reporter.result("done", winner="w", detail={"attempts": []})
                await asyncio.sleep(outage_s)
                pending_at_restart = reporter.pending_count
                process = start_backend(port, db)
                await wait_healthy(client, process, LIMIT_S)
                back = time.perf_counter()
                drained = await reporter.flush(timeout=LIMIT_S)
                drain_s = time.perf_counter() - back
                await reporter.aclose()
                battle = (await client.get(f"/battles/{battle_id}")).raise_for_status().json()
        finally:
            stop_backend(process)
        outbox_bytes = outbox.stat().st_size
        # Keys are "<battle id>:<reporter nonce>:<seq>": one reporter here, so one nonce and seq 1..n in order (read
        # from the database: the API does not show them)
        keys = [key.rsplit(":", 2) for key in stored_event_keys(db, battle_id)]
    stored = [(prefix, int(seq)) for prefix, _nonce, seq in keys]
    expected = [(battle_id, n) for n in range(1, 2 * events + 2)]
    return {
        "events_emitted": 2 * events + 1,
        "events_delivered": reporter.delivered_count,
        "events_stored": len(stored),
        "stored_in_order_once": stored == expected,
        "results_stored": sum(1 for e in battle["interact_history"] if e.get("is_result")),
        "undelivered": len(reporter.undelivered()),
        "enqueue_us_per_event": round(enqueue_us, 1),
        "delivery_events_per_s_backend_up": round(events / up_elapsed, 1),
        "outage_s": outage_s,
        "pending_at_restart": pending_at_restart,
        "drained": drained,
        "drain_s_after_backend_back": round(drain_s, 3),
        "outbox_bytes": outbox_bytes,
        "cpu_count": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    """Run once and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=200, help="progress events before and during the outage")
    parser.add_argument("--outage-s", type=float, default=10.0, help="how long the backend stays down")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args(argv)
    figures = asyncio.run(run(args.events, args.outage_s))
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

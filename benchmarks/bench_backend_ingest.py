"""Event ingestion of the battle backend: N concurrent posters into one battle over HTTP on loopback.

Measures events per second accepted (204) and events lost (accepted but missing from the battle's
interact_history afterwards). Target: >= 500 events/s and 0 lost with 20 posters on a 2-core machine.

The backend runs as its own process (`python -m battle_backend`, a temporary SQLite file) so that the posters
do not share its interpreter; a fake green agent, a fake white agent and a fake launcher (battle_backend.testing)
get a real battle running first. Everything binds 127.0.0.1 and stops by itself.

    .venv/bin/python benchmarks/bench_backend_ingest.py            # 20 posters x 100 events
    .venv/bin/python benchmarks/bench_backend_ingest.py --posters 20 --events-per-poster 200 --json
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

from battle_backend.testing import FakeA2AAgent, FakeLauncher, serve_app  # noqa: E402

SETUP_LIMIT_S = 60.0
RUN_LIMIT_S = 600.0


async def _start_battle(client: httpx.AsyncClient, green: FakeA2AAgent, urls: dict[str, str]) -> str:
    requirement = [{"role": "blue_agent", "name": "white_agent", "required": True}]
    green_body = {
        "alias": "bench-green",
        "agent_url": urls["green"],
        "launcher_url": urls["launcher"],
        "is_green": True,
        "participant_requirements": requirement,
        "battle_timeout": RUN_LIMIT_S,
    }
    white_body = {
        "alias": "bench-white",
        "agent_url": urls["white"],
        "launcher_url": urls["launcher"],
        "is_green": False,
    }
    green_id = (await client.post("/agents", json=green_body)).raise_for_status().json()["agent_id"]
    white_id = (await client.post("/agents", json=white_body)).raise_for_status().json()["agent_id"]
    battle = (
        (
            await client.post(
                "/battles",
                json={"green_agent_id": green_id, "opponents": [{"name": "white_agent", "agent_id": white_id}]},
            )
        )
        .raise_for_status()
        .json()
    )
    async with asyncio.timeout(SETUP_LIMIT_S):
        while not green.messages_of_type("battle_start"):
            state = (await client.get(f"/battles/{battle['battle_id']}", params={"history": "false"})).json()["state"]
            if state == "error":
                raise RuntimeError("the benchmark battle failed to start")
            await asyncio.sleep(0.05)
    return str(battle["battle_id"])


async def _poster(url: str, battle_id: str, number: int, count: int) -> tuple[int, int]:
    """Post ``count`` events; returns (accepted, refused)."""
    accepted = refused = 0
    async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=60.0) as client:
        for index in range(count):
            event = {
                "is_result": False,
                "message": f"poster {number} event {index}",
                "reported_by": f"poster-{number}",
                "timestamp": "2026-11-22T00:00:00Z",
                "bench": [number, index],
            }
            response = await client.post(f"/battles/{battle_id}", json=event)
            if response.status_code == 204:
                accepted += 1
            else:
                refused += 1
    return accepted, refused


async def run(posters: int, events_per_poster: int) -> dict[str, Any]:
    """Start everything, post, count, stop; returns the figures."""
    green, white, launcher = FakeA2AAgent(name="bench-green"), FakeA2AAgent(name="bench-white"), FakeLauncher()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        process = start_backend(port, Path(tmp) / "bench.sqlite3", "--ready-poll-interval", "0.5")
        try:
            async with contextlib.AsyncExitStack() as stack:
                urls = {
                    "green": await stack.enter_async_context(serve_app(green.app)),
                    "white": await stack.enter_async_context(serve_app(white.app)),
                    "launcher": await stack.enter_async_context(serve_app(launcher.app)),
                }
                stack.push_async_callback(launcher.aclose)
                async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=60.0) as client:
                    await wait_healthy(client, process, SETUP_LIMIT_S)
                    battle_id = await _start_battle(client, green, urls)
                    started = time.perf_counter()
                    async with asyncio.timeout(RUN_LIMIT_S):
                        outcomes = await asyncio.gather(
                            *(_poster(url, battle_id, n, events_per_poster) for n in range(posters))
                        )
                    elapsed = time.perf_counter() - started
                    battle = (await client.get(f"/battles/{battle_id}")).raise_for_status().json()
        finally:
            stop_backend(process)
    accepted = sum(a for a, _ in outcomes)
    refused = sum(r for _, r in outcomes)
    stored = [tuple(e["bench"]) for e in battle["interact_history"] if isinstance(e.get("bench"), list)]
    expected = {(n, i) for n in range(posters) for i in range(events_per_poster)}
    return {
        "posters": posters,
        "events_per_poster": events_per_poster,
        "events_posted": posters * events_per_poster,
        "events_accepted": accepted,
        "events_refused": refused,
        "events_stored": len(stored),
        "events_lost": len(expected - set(stored)),
        "events_duplicated": len(stored) - len(set(stored)),
        "elapsed_s": round(elapsed, 3),
        "events_per_s": round(accepted / elapsed, 1) if elapsed > 0 else None,
        "cpu_count": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    """Run once and print the figures; exit 1 when an event was lost or refused."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--posters", type=int, default=20)
    parser.add_argument("--events-per-poster", type=int, default=100)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args(argv)
    figures = asyncio.run(run(args.posters, args.events_per_poster))
    if args.json:
        print(json.dumps(figures))
    else:
        print(
            f"{figures['posters']} posters x {figures['events_per_poster']} events: "
            f"{figures['events_per_s']} events/s accepted over {figures['elapsed_s']} s, "
            f"lost {figures['events_lost']}, duplicated {figures['events_duplicated']}, "
            f"refused {figures['events_refused']}"
        )
    return 0 if figures["events_lost"] == 0 and figures["events_refused"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

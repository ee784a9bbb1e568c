"""Issue 15's figures side by side, in one run: where users wait, measured the same way every time.

1. The offline demo end to end: ``arena run scenarios/offline_demo.toml`` from the command to its exit (a fresh
   runs directory; the summary must still be round 1's). Target <= 10 s.
2. The green agent's start-up: ``python -m green_agent`` until ``/health`` answers 200, and until it reports its
   scoring workers warm. Target <= 3 s to /health.
3. The calibration battle (retail test split, k = 4: 160 attempts of the replay agent over real A2A, separate
   processes, agents already started) against tau2's own in-process replay + evaluate of the same attempts
   (benchmarks/tau2_baseline.py). Target: ratio >= 8.
4. The attempt loop's own cost per turn beyond the A2A round trip (benchmarks/bench_turn_overhead.py). Target <= 5 ms.
5. Battle backend ingestion, 20 concurrent posters into one battle on SQLite (benchmarks/bench_backend_ingest.py).
   Target >= 1000 events/s with 0 lost.

The machine's load average is recorded before each part: the figures mean little on a busy machine.

    .venv/bin/python benchmarks/bench_speed.py [--json-out figures.json] [--skip demo,startup,battle,turn,ingest]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
for path in (BENCH, REPO):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from bench_backend_ingest import measure as measure_ingest  # noqa: E402
from bench_battle import calibration_battle  # noqa: E402
from bench_turn_overhead import measure as measure_turn_overhead  # noqa: E402
from tau2_baseline import replay_and_evaluate  # noqa: E402

from green_agent.service.operator_auth import TOKEN_ENV  # noqa: E402

PARTS = ("demo", "startup", "battle", "turn", "ingest")
DEMO_SCENARIO = REPO / "scenarios" / "offline_demo.toml"
ROUND_ONE_DEMO = {1: 0.55, 2: 0.267, 3: 0.1, 4: 0.0}
"""The offline demo's macro pass^j in round 1 (and in the README): a faster demo must still say exactly this."""


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def measure_demo(runs: int = 2) -> dict[str, Any]:
    """``arena run`` of the offline demo, command to exit, ``runs`` times in fresh runs directories."""
    arena = Path(sys.executable).with_name("arena")
    walls: list[float] = []
    loads: list[float] = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="arena-speed-demo-") as tmp:
            loads.append(_load())
            started = time.perf_counter()
            done = subprocess.run(
                [str(arena), "run", str(DEMO_SCENARIO), "--runs-dir", tmp],
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            walls.append(time.perf_counter() - started)
            summary = next(Path(tmp).glob("*/summary.json"), None)
            if done.returncode != 0 or summary is None:
                raise RuntimeError(f"the demo failed (exit {done.returncode}): {done.stderr[-2000:]}")
            macro = json.loads(summary.read_text())["summary"]["macro"]
            pass_hat = {row["j"]: round(row["pass_hat_mean"], 3) for row in macro}
            if pass_hat != ROUND_ONE_DEMO:
                raise RuntimeError(f"the demo's summary changed: pass^j {pass_hat}, round 1 had {ROUND_ONE_DEMO}")
    return {"wall_s": [round(w, 2) for w in walls], "best_s": round(min(walls), 2), "load": loads}


async def _poll(client: httpx.AsyncClient, url: str, want_warm: bool, deadline: float) -> float:
    while time.perf_counter() < deadline:
        try:
            response = await client.get(url)
            if response.status_code == 200 and (not want_warm or response.json().get("warm")):
                return time.perf_counter()
        except (httpx.HTTPError, ValueError):
            pass
        await asyncio.sleep(0.01)
    raise RuntimeError(f"{url} did not answer in time")


async def _startup_once(tmp: Path) -> tuple[float, float]:
    port = _free_port()
    argv = [sys.executable, "-m", "green_agent", "--port", str(port), "--runs-dir", str(tmp / "runs")]
    env = {**os.environ, TOKEN_ENV: "speed-benchmark-token-" + "x" * 24}
    started = time.perf_counter()
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp)
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=1.0) as client:
            url = f"http://127.0.0.1:{port}/health"
            healthy = await _poll(client, url, False, started + 120)
            warm = await _poll(client, url, True, started + 120)
        return healthy - started, warm - started
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def measure_startup(runs: int = 3) -> dict[str, Any]:
    """The green agent from ``exec`` to /health 200, and to its scoring workers warm; median of ``runs``."""
    health: list[float] = []
    warm: list[float] = []
    load = _load()
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="arena-speed-start-") as tmp:
            first, second = asyncio.run(_startup_once(Path(tmp)))
        health.append(first)
        warm.append(second)
    return {
        "health_s": round(statistics.median(health), 2),
        "warm_s": round(statistics.median(warm), 2),
        "runs_health_s": [round(h, 2) for h in health],
        "load": load,
    }


def measure_battle(concurrency: int = 16) -> dict[str, Any]:
    """The retail calibration battle, then tau2's in-process replay + evaluate of the very same attempts."""
    work = Path(tempfile.mkdtemp(prefix="arena-speed-battle-"))
    try:
        load = _load()
        figure = asyncio.run(calibration_battle(work, domain="retail", k=4, concurrency=concurrency))
        if figure.scored_one != figure.attempts:
            raise RuntimeError(f"calibration: only {figure.scored_one} of {figure.attempts} attempts scored 1.0")
        baseline_load = _load()
        baseline = replay_and_evaluate(figure.run_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    baseline_s = float(baseline.seconds)
    return {
        "attempts": figure.attempts,
        "arena_s": round(figure.wall_s, 2),
        "tau2_s": round(baseline_s, 2),
        "tau2_attempts": baseline.attempts,
        "ratio": round(baseline_s / figure.wall_s, 2),
        "concurrency": concurrency,
        "cpu_s": {name: round(value, 1) for name, value in figure.cpu_s.items()},
        "load": load,
        "baseline_load": baseline_load,
    }


def measure_turns() -> dict[str, Any]:
    load = _load()
    figures = asyncio.run(measure_turn_overhead(tasks=40, rounds=3))
    figures.pop("rounds", None)
    return {**figures, "load": load}


def measure_backend() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for posters, events in ((20, 50), (20, 100)):
        load = _load()
        figures = asyncio.run(measure_ingest(posters, events))
        out[f"{posters}x{events}"] = {**figures, "load_before": load}
    return out


def _row(name: str, figure: str, target: str, ok: bool) -> str:
    return f"{name:<34} {figure:<44} {target:<22} {'ok' if ok else 'MISSED'}"


def report(results: dict[str, Any]) -> list[str]:
    lines = [_row("part", "figure", "target", True).replace(" ok", "  ")]
    if "demo" in results:
        demo = results["demo"]
        lines.append(
            _row(
                "offline demo, command to exit",
                f"{demo['best_s']:.1f} s (runs {demo['wall_s']})",
                "<= 10 s",
                demo["best_s"] <= 10,
            )
        )
    if "startup" in results:
        start = results["startup"]
        figure = f"/health {start['health_s']:.2f} s, warm {start['warm_s']:.2f} s"
        lines.append(_row("green agent start-up", figure, "<= 3 s to /health", start["health_s"] <= 3))
    if "battle" in results:
        battle = results["battle"]
        figure = f"{battle['arena_s']:.1f} s vs tau2 {battle['tau2_s']:.1f} s = {battle['ratio']:.1f}x"
        lines.append(_row(f"calibration, {battle['attempts']} attempts", figure, ">= 8x", battle["ratio"] >= 8))
    if "turn" in results:
        turn = results["turn"]
        figure = f"{turn['overhead_ms_per_turn']:.2f} ms/turn over {turn['turns']} turns"
        lines.append(_row("harness overhead per turn", figure, "<= 5 ms", turn["overhead_ms_per_turn"] <= 5))
    if "ingest" in results:
        for shape, figures in results["ingest"].items():
            rate, lost = figures["events_per_s"], figures["lost"]
            figure = f"{rate:.0f} events/s, lost {lost}, p99 {figures.get('p99_ms')} ms"
            lines.append(
                _row(f"backend ingestion {shape} (SQLite)", figure, ">= 1000/s, 0 lost", rate >= 1000 and not lost)
            )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json-out", type=Path, default=None, help="also write every figure as JSON here")
    parser.add_argument("--skip", default="", help=f"comma-separated parts to skip: {', '.join(PARTS)}")
    args = parser.parse_args()
    skip = {part.strip() for part in args.skip.split(",") if part.strip()}
    unknown = skip - set(PARTS)
    if unknown:
        parser.error(f"--skip: unknown part(s) {sorted(unknown)}; choose from {', '.join(PARTS)}")
    results: dict[str, Any] = {"cpus": os.cpu_count(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    steps = {
        "demo": measure_demo,
        "startup": measure_startup,
        "battle": measure_battle,
        "turn": measure_turns,
        "ingest": measure_backend,
    }
    for name, step in steps.items():
        if name in skip:
            continue
        print(f"measuring {name} (load {_load():.2f}) ...", file=sys.stderr, flush=True)
        results[name] = step()
    lines = report(results)
    print("\n".join(lines))
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 0 if all(not line.endswith("MISSED") for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Latency hiding: how close a battle gets to ideal when every A2A call of the agent under test is slow (issue 27).

The replay (calibration) agent sits behind a proxy that delays every A2A call (POST) by ``delay`` seconds; the green
agent (``arena-green --workers N``, default one per core) runs retail/test calibration battles at several
concurrencies. For each run it prints:

- ratio: wall time of the battle against the ideal ``max(longest attempt's calls, calls / concurrency) x delay``
  (calls = A2A replies, summed over the attempts; only meaningful with a delay); the wall time includes the battle's
  start (its attempt workers start with it);
- attempts/s, the share of attempts scoring 1.0 (calibration: must be all), peak memory (PSS) of the green agent's
  process tree (serving process, attempt workers, sandboxes, scoring workers; sampled at most every 0.5 s, less
  often when reading it costs more than 5% of a core), and ``/health`` p99 / max polled every 50 ms;
- under each row, when the first/last attempt started and finished, and where the time over ideal went: the agent's
  turn latency (p50 / p95) against the delay (the excess is queueing in the green agent, the proxy and the agent),
  each party's mean time per attempt, and the attempt that ended last (when it started, its turns, agent and
  harness seconds);
- CPU seconds the battle cost, by party (the green agent's serving process, attempt workers, sandboxes and scoring
  processes; the replay agent; the proxy), in total and per agent turn: load-independent, unlike the wall times on a
  shared machine (the table's CPU-s column is the total).

Targets on a 2-core machine: concurrency 256 with a 2 s delay within 1.5x ideal, every attempt 1.0, /health p99 under
250 ms (on 16 cores: 1 s delay at 256 within 1.15x, raw throughput at least 100 attempts/s). Exit 1 when a run with
a target misses it. The machine's load matters: the script prints ``os.getloadavg()`` before each run.

    .venv/bin/python benchmarks/bench_latency_hiding.py                      # the default matrix
    .venv/bin/python benchmarks/bench_latency_hiding.py --runs 2:256:320 --workers 2
    .venv/bin/python benchmarks/bench_latency_hiding.py --runs 0:64:320      # raw throughput, no delay

``--runs`` takes ``delay:concurrency:attempts`` items (attempts a multiple of 40: retail/test x k). Every process
started here runs in a process group of its own and is stopped here.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from launcher.cli.assessment_client import run_assessment  # noqa: E402
from launcher.ports import free_ports  # noqa: E402

DEFAULT_RUNS = "2:16:160,2:64:320,2:256:320,2:512:640,0:64:320,0:256:320"
TASKS = 40
"""retail/test."""
RATIO_TARGET = 1.5
HEALTH_P99_TARGET_S = 0.250
TOKEN = secrets.token_urlsafe(16)

# --- the delay proxy (a process of its own: ``bench_latency_hiding.py proxy ...``; benchmarks/delay_proxy.py) ---------


def serve_proxy(port: int, upstream: str, delay_s: float) -> None:
    from delay_proxy import serve

    serve(port, upstream, delay_s)


# --- the driver --------------------------------------------------------------------------------------------------


@dataclass
class Run:
    delay_s: float
    concurrency: int
    attempts: int


@dataclass
class Figures:
    run: Run
    load: tuple[float, float, float]
    wall_s: float
    calls: int
    longest: int
    perfect: int
    attempts: int
    peak_mb: float
    health: list[float]
    health_failures: int
    marks: dict[str, float]
    """Seconds from the request to the first/last attempt started/finished (the start-up is the first start)."""
    failures: list[str]
    """Why attempts did not score 1.0 (category, author, detail), at most a few."""
    cpu: dict[str, float]
    """CPU seconds spent during the battle by party: the green agent's serving process, workers, sandboxes, scoring
    (from samples of each process, :class:`CpuMeter`), the white (replay) agent and the proxy."""
    driver_cpu_s: float = 0.0
    """This script's own CPU during the battle (/health polls, memory and CPU sampling): not in the totals."""
    where: str = ""
    """Where the time over ideal went: turn latency against the delay, time per party, the attempt that ended last."""

    @property
    def cpu_total_s(self) -> float:
        """CPU seconds of the battle: the green agent's processes, the white agent and the proxy."""
        return sum(self.cpu.values())

    def cpu_text(self) -> str:
        """CPU-s per party, the total and per agent turn (an A2A call: the unit of work of a latency-bound battle)."""
        parts = " ".join(f"{k} {v:.1f}" for k, v in sorted(self.cpu.items()))
        per_turn = self.cpu_total_s / self.calls * 1000 if self.calls else 0.0
        return (
            f"CPU-s: total {self.cpu_total_s:.1f} ({per_turn:.2f} ms per agent turn over {self.calls} turns): {parts}; "
            f"driver {self.driver_cpu_s:.1f} (not in the total)"
        )

    @property
    def ideal_s(self) -> float:
        return max(self.longest, self.calls / self.run.concurrency) * self.run.delay_s

    @property
    def ratio(self) -> float | None:
        return self.wall_s / self.ideal_s if self.run.delay_s > 0 and self.ideal_s > 0 else None

    def p99(self) -> float:
        ordered = sorted(self.health) or [float("inf")]
        return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]

    def missed(self) -> list[str]:
        """The targets this run misses (the ratio target applies to concurrency 256 with a 2 s delay)."""
        misses = []
        if self.perfect != self.attempts or self.attempts != self.run.attempts:
            misses.append(f"calibration {self.perfect}/{self.run.attempts}")
        if self.p99() >= HEALTH_P99_TARGET_S or self.health_failures:
            misses.append(f"/health p99 {self.p99() * 1000:.0f} ms, {self.health_failures} failed polls")
        ratio = self.ratio
        if self.run.delay_s == 2 and self.run.concurrency == 256 and ratio is not None and ratio > RATIO_TARGET:
            misses.append(f"ratio {ratio:.2f} > {RATIO_TARGET}")
        return misses


@contextlib.asynccontextmanager
async def started(argv: list[str], env: dict[str, str] | None = None) -> AsyncIterator[asyncio.subprocess.Process]:
    """A child in a process group of its own, killed with its group on exit."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        start_new_session=True,
        stdout=asyncio.subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # whatever of the group outlived its leader


async def ready(url: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=2) as http:
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(url)).status_code == 200:
                    return
            await asyncio.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {timeout_s} s")


async def poll_health(url: str, samples: list[float], failures: list[int], stop: asyncio.Event) -> None:
    async with httpx.AsyncClient(timeout=5) as http:
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                (await http.get(url)).raise_for_status()
                samples.append(time.perf_counter() - t0)
            except httpx.HTTPError:
                failures.append(1)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.05)


def role(process: psutil.Process) -> str:
    """Which part of the green agent a process of its tree is (for the CPU breakdown)."""
    cmdline = " ".join(process.cmdline())
    if "workers.child" in cmdline:
        return "workers"
    if "forkserver" in cmdline or "arena-sandbox" in process.name():
        return "sandboxes"
    if "spawn_main" in cmdline:
        return "scoring"
    return "serving"


def tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


class CpuMeter:
    """CPU seconds of the green agent's process tree during a battle, by part (serving, workers, sandboxes, scoring).

    Each process is sampled with the memory (every 0.5 s) and once more at the end: its CPU over the battle is its
    last sample less what it had used when the battle started (0 for processes started during it); a process that
    lived between two samples, or whose last half second went unsampled, is missed (the parts are a lower bound).
    (Summing each live process's own time and its reaped children's at both ends misses more: a worker's scoring
    processes and fork server outlive it and are reaped by init.)"""

    def __init__(self) -> None:
        self.first: dict[int, float] = {}
        self.last: dict[int, tuple[str, float]] = {}
        self.roles: dict[int, str] = {}

    def sample(self, process: psutil.Process) -> None:
        with contextlib.suppress(psutil.Error):
            if process.pid not in self.roles:
                self.roles[process.pid] = role(process)
            times = process.cpu_times()
            self.last[process.pid] = (self.roles[process.pid], times.user + times.system)

    def start(self, processes: list[psutil.Process]) -> None:
        for process in processes:
            self.sample(process)
        self.first = {pid: seconds for pid, (_role, seconds) in self.last.items()}

    def by_role(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for pid, (name, seconds) in self.last.items():
            totals[name] = totals.get(name, 0.0) + seconds - self.first.get(pid, 0.0)
        return totals


PSS_SHARE = 0.05
"""At most this share of a core goes to reading the green tree's PSS (the kernel walks every page of every process:
at 256 in flight, sweeps every 0.5 s took 11-15 CPU-s per battle from the 2 cores the measured parties share)."""


async def watch_memory(pid: int, peak: list[float], stop: asyncio.Event, cpu: CpuMeter | None = None) -> None:
    """Peak PSS of the green tree (a sweep when its cost allows: see PSS_SHARE) and each process's CPU (0.5 s)."""

    def sweep(pss: bool) -> float:
        total = 0
        for process in tree(pid):
            with contextlib.suppress(psutil.Error):
                if pss:
                    total += process.memory_full_info().pss  # forked sandboxes share pages: RSS would count them again
                if cpu is not None:
                    cpu.sample(process)
        return total / 2**20

    next_pss = 0.0
    while not stop.is_set():
        if time.monotonic() >= next_pss:
            t0 = time.monotonic()
            peak[0] = max(peak[0], await asyncio.to_thread(sweep, True))
            next_pss = time.monotonic() + (time.monotonic() - t0) / PSS_SHARE
        else:
            await asyncio.to_thread(sweep, False)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)


async def measure(run: Run, workers: int | None, runs_dir: Path, python: str) -> Figures:
    white_port, proxy_port, green_port = free_ports(3)
    white_url, proxy_url = f"http://127.0.0.1:{white_port}", f"http://127.0.0.1:{proxy_port}"
    green_url = f"http://127.0.0.1:{green_port}"
    white_argv = [python, "-m", "white_agent", "--kind", "replay", "--port", str(white_port)]
    white_argv += ["--card-url", proxy_url + "/", "--max-contexts", "5000"]
    proxy_argv = [python, __file__, "proxy", "--port", str(proxy_port), "--upstream", white_url]
    proxy_argv += ["--delay", str(run.delay_s)]
    green_argv = [python, "-m", "green_agent", "--port", str(green_port), "--runs-dir", str(runs_dir)]
    green_argv += ["--max-concurrency", "1024", "--max-attempts-in-flight", "1024"]
    green_argv += ["--workers", str(workers)] if workers is not None else []
    k = run.attempts // TASKS
    config = {"mode": "all", "domain": "retail", "split": "test", "k": k, "calibration": True}
    config |= {"concurrency": run.concurrency, "attempt_timeout_s": 1800, "turn_timeout_s": 600, "tool_timeout_s": 60}
    env = {"ARENA_OPERATOR_TOKEN": TOKEN}
    cpu = CpuMeter()
    async with started(white_argv) as white, started(proxy_argv) as proxy, started(green_argv, env) as green:
        await asyncio.gather(ready(f"{white_url}/.well-known/agent-card.json"), ready(f"{green_url}/health"))
        await ready(f"{proxy_url}/.well-known/agent-card.json")
        await asyncio.sleep(5)  # let the green agent's scoring workers and fork server warm up
        load = os.getloadavg()
        await asyncio.to_thread(cpu.start, await asyncio.to_thread(tree, green.pid))
        driver = psutil.Process()
        driver_before = cpu_s(driver.pid)
        samples: list[float] = []
        failures: list[int] = []
        peak = [0.0]
        stop = asyncio.Event()
        watchers = [
            asyncio.create_task(poll_health(f"{green_url}/health", samples, failures, stop)),
            asyncio.create_task(watch_memory(green.pid, peak, stop, cpu)),
        ]
        before = {name: cpu_s(process.pid) for name, process in (("white", white), ("proxy", proxy))}
        battle_id = f"latency-{int(run.delay_s * 1000)}-{run.concurrency}-{run.attempts}-{secrets.token_hex(3)}"
        t0 = time.perf_counter()
        marks: dict[str, float] = {}
        starts: dict[tuple[str, int], float] = {}

        def on_event(event: dict[str, Any], _text: str) -> None:
            kind = str(event.get("type"))
            if kind in ("attempt_started", "attempt_finished"):
                marks.setdefault(f"first {kind}", time.perf_counter() - t0)
                marks[f"last {kind}"] = time.perf_counter() - t0
            if kind == "attempt_started":
                starts[(str(event.get("task_key")), int(event.get("attempt") or 0))] = time.perf_counter() - t0

        try:
            outcome = await run_assessment(
                green_url,
                proxy_url + "/",
                config,
                battle_id=battle_id,
                operator_token=TOKEN,
                idle_timeout_s=900,
                on_event=on_event,
            )
        finally:
            wall = time.perf_counter() - t0
            stop.set()
            await asyncio.gather(*watchers)
            after = {name: cpu_s(process.pid) - before[name] for name, process in (("white", white), ("proxy", proxy))}
            await asyncio.to_thread(_sample_at_end, green.pid, cpu)
            driver_cpu = cpu_s(driver.pid) - driver_before
    if outcome.state != "completed":
        raise RuntimeError(f"battle {battle_id} ended {outcome.state}: {outcome.error}")
    summary = json.loads((runs_dir / battle_id / "summary.json").read_text(encoding="utf-8"))
    attempts = summary["attempts"]
    steps = [int(a["steps"]) for a in attempts]
    return Figures(
        run=run,
        load=load,
        wall_s=wall,
        calls=sum(steps),
        longest=max(steps, default=0),
        perfect=sum(1 for a in attempts if a.get("reward") == 1.0),
        attempts=len(attempts),
        peak_mb=peak[0],
        health=samples,
        health_failures=len(failures),
        marks=marks,
        failures=[
            f"{a['failure']['category']} ({a['failure']['fault_author']}): {a['failure']['detail'][:300]}"
            for a in attempts
            if a.get("reward") != 1.0 and a.get("failure")
        ][:5],
        cpu={**cpu.by_role(), **after},
        driver_cpu_s=driver_cpu,
        where=where_time_went(attempts, starts, run.delay_s),
    )


def where_time_went(attempts: list[dict[str, Any]], starts: dict[tuple[str, int], float], delay_s: float) -> str:
    """The agent's turn latency against the proxy's delay (the rest is queueing in the harness and the agent), the
    mean time per party of an attempt, and the attempt that ended last: when it started and where its time went."""
    turns = sorted(t for a in attempts for t in (a.get("usage") or {}).get("agent_turn_latencies_s", []))
    if not turns:
        return ""

    def usage(a: dict[str, Any], part: str) -> float:
        return float((a.get("usage") or {}).get(part) or 0.0)

    p50, p95 = turns[len(turns) // 2], turns[min(len(turns) - 1, int(0.95 * len(turns)))]
    parts = ", ".join(
        f"{p} {sum(usage(a, p + '_s') for a in attempts) / len(attempts):.1f} s" for p in ("agent", "user", "harness")
    )
    text = f"turn p50 {p50:.2f} s / p95 {p95:.2f} s (delay {delay_s:g} s); per attempt: {parts}"
    timed = [
        (starts[key] + float(a["duration_s"]), key, a)
        for a in attempts
        if (key := (f"{a['domain']}/{a['split']}/{a['task_index']}", int(a["attempt"]))) in starts
    ]
    if timed:
        _end, (task, number), a = max(timed, key=lambda item: item[0])
        text += (
            f"; ended last: {task}#{number} ({a['steps']} turns) started {starts[(task, number)]:.1f} s, took "
            f"{float(a['duration_s']):.1f} s (agent {usage(a, 'agent_s'):.1f}, harness {usage(a, 'harness_s'):.1f})"
        )
    return text


def cpu_s(pid: int) -> float:
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return float(times.user + times.system)


def _sample_at_end(pid: int, cpu: CpuMeter) -> None:
    """Sample the green tree every 0.1 s until the battle's workers are gone (at most 10 s): their last CPU."""
    deadline = time.monotonic() + 10
    while True:
        processes = tree(pid)
        for process in processes:
            cpu.sample(process)
        if time.monotonic() > deadline or not any(cpu.roles.get(p.pid) == "workers" for p in processes):
            return
        time.sleep(0.1)


def row(f: Figures) -> str:
    ratio = f"{f.ratio:.2f}" if f.ratio is not None else "-"
    delay = f"{f.run.delay_s:g} s" if f.run.delay_s else "none"
    health = f"{f.p99() * 1000:.0f} / {max(f.health, default=0) * 1000:.0f} ms"
    return (
        f"| {delay} | {f.run.concurrency} | {f.attempts} | {f.wall_s:.1f} s | {f.ideal_s:.1f} s | {ratio} | "
        f"{f.attempts / f.wall_s:.1f} | {f.perfect}/{f.run.attempts} | {f.peak_mb:.0f} MB | {health} | "
        f"{f.load[0]:.1f} | {f.cpu_total_s:.1f} | "
        f"{', '.join(f.missed()) or 'ok'} |"
    )


def parse_runs(text: str) -> list[Run]:
    runs = []
    for item in text.split(","):
        delay, concurrency, attempts = item.split(":")
        if int(attempts) % TASKS:
            raise SystemExit(f"--runs: attempts must be a multiple of {TASKS} (retail/test x k), got {attempts}")
        runs.append(Run(float(delay), int(concurrency), int(attempts)))
    return runs


async def main_async(args: argparse.Namespace) -> int:
    runs = parse_runs(args.runs)
    print(f"cores {os.cpu_count()}, workers {args.workers or 'default (one per core)'}; load before: {os.getloadavg()}")
    print(
        "| delay | concurrency | attempts | wall | ideal | ratio | attempts/s | score 1.0 | peak memory | "
        "/health p99 / max | load | CPU-s | targets |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    failed = False
    with tempfile.TemporaryDirectory(prefix="arena-latency-") as tmp:
        for run in runs:
            figures = await measure(run, args.workers, Path(tmp), sys.executable)
            print(row(figures), flush=True)
            print("    " + ", ".join(f"{k} {v:.1f} s" for k, v in figures.marks.items()), flush=True)
            print(f"    {figures.where}", flush=True)
            print(f"    {figures.cpu_text()}", flush=True)
            for failure in figures.failures:
                print(f"    not 1.0: {failure}", flush=True)
            failed = failed or bool(figures.missed())
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command")
    proxy = sub.add_parser("proxy", help="(internal) serve the delay proxy")
    proxy.add_argument("--port", type=int, required=True)
    proxy.add_argument("--upstream", required=True)
    proxy.add_argument("--delay", type=float, required=True)
    parser.add_argument("--runs", default=DEFAULT_RUNS, help="delay:concurrency:attempts items (default %(default)s)")
    parser.add_argument("--workers", type=int, default=None, help="arena-green --workers (default: its own)")
    args = parser.parse_args()
    if args.command == "proxy":
        serve_proxy(args.port, args.upstream, args.delay)
        return 0
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())

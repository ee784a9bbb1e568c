"""Event ingestion of the battle backend: N concurrent posters into one battle over HTTP on loopback.

Measures events per second accepted (204), events lost (accepted with a 204 but missing from the battle's
interact_history afterwards), events out of order (each poster numbers its events and posts the next only after the
previous was accepted, so its events must appear in the stored history in increasing order), request latency
(p50/p99 of every POST), the backend processes' CPU time per event (summed over every replica; independent of how
busy the machine is) and the machine's load (os.getloadavg) before and after. Targets (issue 15): >= 1000 events/s
and 0 lost with 20 posters x 50 and x 100 events on a 2-core machine.

The backend runs as its own process (`python -m battle_backend`) so that the posters do not share its interpreter;
a fake green agent, a fake white agent and a fake launcher (battle_backend.testing) get a real battle running
first. Everything binds 127.0.0.1 and stops by itself.

Store (``--db``): by default a temporary SQLite file, as deployed on one machine; ``--db postgresql://...`` a
PostgreSQL database (issue 16), which ``--replicas N`` backend processes then share: the battle is created through
replica 1, and poster i posts to replica i % N, all into the same battle, so the figures show what one ordered
per-battle history costs when its writers are spread over processes. Whichever replica's scheduler takes the battle
starts it; the one fake green agent receives that replica's battle_start and with it the battle token (exactly one
battle_start must arrive). Several replicas on one SQLite file are refused: a SQLite store belongs to one process.
``benchmarks/bench_backend_scaleout.py`` runs SQLite, PostgreSQL x1 and PostgreSQL x2 side by side.

Posting style (``--style``): ``arena`` posts as Arena's green agent does (the battle token in the headers, an
idempotency key ``event_id`` per event); ``agentbeats`` posts as AgentBeats' agents do (neither).

Client (``--client``): ``raw`` is a minimal keep-alive HTTP/1.1 client on asyncio streams (a few microseconds of CPU
per request); ``httpx`` is httpx.AsyncClient, which costs this 2-core machine more CPU per request (~2.5 ms) than
the backend itself, so with it the figure measures the posters as much as the backend. Both are kept: ``raw`` for
the backend's throughput, ``httpx`` for comparison with earlier figures.

Live viewers (``--watchers N``, ``--stuck-watchers N``): N browsers' SSE streams of the battle page that read
everything, and N that connect and never read (spread over the replicas like the posters); ingestion must not slow
down for either (fan-out is off the write path).

    .venv/bin/python benchmarks/bench_backend_ingest.py                       # 20 posters x 100 events
    .venv/bin/python benchmarks/bench_backend_ingest.py --events-per-poster 50 --json
    .venv/bin/python benchmarks/bench_backend_ingest.py --client httpx --style agentbeats   # the issue's setup
    .venv/bin/python benchmarks/bench_backend_ingest.py --db postgresql://arena@127.0.0.1:5432/bench --replicas 2

From another script: ``figures = await measure(20, 100)`` or ``await measure(20, 100, db=url, replicas=2)`` (same
keys as ``--json``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

import httpx
import psutil

REPO = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
for _path in (str(REPO), str(BENCH)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from backend_process import free_port, start_backend, stop_backend, wait_healthy  # noqa: E402

from battle_backend.store.postgres.store import is_postgres_url  # noqa: E402
from battle_backend.testing import FakeA2AAgent, FakeLauncher, serve_app  # noqa: E402

SETUP_LIMIT_S = 60.0
RUN_LIMIT_S = 600.0
WATCHER_DRAIN_S = 30.0
TARGET_EVENTS_PER_S = 1000.0

Client = Literal["raw", "httpx"]
Style = Literal["arena", "agentbeats"]


def _battle_starts(green: FakeA2AAgent, battle_id: str) -> list[dict[str, Any]]:
    """The battle_start messages the green agent received for this battle (from whichever replica started it)."""
    return [m for m in green.messages_of_type("battle_start") if m.get("battle_id") == battle_id]


async def _start_battle(client: httpx.AsyncClient, green: FakeA2AAgent, urls: dict[str, str]) -> tuple[str, str]:
    """Register the fakes, create a battle, wait for battle_start; returns (battle id, battle token).

    ``client`` talks to replica 1; with several replicas the battle may be started by any of them (their schedulers
    race for it, the store lets one win), so this waits for the green agent's battle_start, not for a replica."""
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
    battle_id = str(battle["battle_id"])
    async with asyncio.timeout(SETUP_LIMIT_S):
        while not _battle_starts(green, battle_id):
            state = (await client.get(f"/battles/{battle_id}", params={"history": "false"})).json()["state"]
            if state == "error":
                raise RuntimeError("the benchmark battle failed to start")
            await asyncio.sleep(0.05)
    token = str(_battle_starts(green, battle_id)[0].get("battle_token") or "")
    return battle_id, token


class RawHttp:
    """One keep-alive HTTP/1.1 connection: POST a JSON body, read the status (and drain the body)."""

    def __init__(self, host: str, port: int) -> None:
        self._host, self._port = host, port
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> int:
        """Send one request and return its status code (reconnects when the server closed the connection)."""
        if self._streams is None:
            self._streams = await asyncio.open_connection(self._host, self._port)
        reader, writer = self._streams
        head = [f"POST {path} HTTP/1.1", f"Host: {self._host}:{self._port}", "Content-Type: application/json"]
        head += [f"{name}: {value}" for name, value in headers.items()]
        head.append(f"Content-Length: {len(body)}")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("ascii") + body)
        response = await reader.readuntil(b"\r\n\r\n")
        lines = response.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        length = int(fields.get("content-length", "0"))
        if length:
            await reader.readexactly(length)
        if fields.get("connection", "").lower() == "close":
            await self.aclose()
        return status

    async def aclose(self) -> None:
        """Close the connection."""
        if self._streams is not None:
            writer = self._streams[1]
            self._streams = None
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


def _event(number: int, index: int, battle_id: str, style: Style) -> dict[str, Any]:
    event: dict[str, Any] = {
        "is_result": False,
        "message": f"poster {number} event {index}",
        "reported_by": f"poster-{number}",
        "timestamp": "2026-11-22T00:00:00Z",
        "bench": [number, index],
    }
    if style == "arena":
        event["event_id"] = f"{battle_id}:poster-{number}:{index}"
    return event


class PosterOutcome(NamedTuple):
    """What one poster saw: the indices of its events answered 204, the status of every other answer, and the
    latency of every request in seconds."""

    accepted: list[int]
    refused: list[int]
    latencies: list[float]


def _record(outcome: PosterOutcome, index: int, status: int) -> None:
    if status == 204:
        outcome.accepted.append(index)
    else:
        outcome.refused.append(status)


async def _poster(
    url: str, battle_id: str, number: int, count: int, *, token: str, client: Client, style: Style
) -> PosterOutcome:
    """Post ``count`` events one after the other, each after the previous one was answered."""
    outcome = PosterOutcome([], [], [])
    headers = {"X-Battle-Token": token} if style == "arena" and token else {}
    path = f"/battles/{battle_id}"
    if client == "raw":
        host, _, port = url.removeprefix("http://").partition(":")
        raw = RawHttp(host, int(port))
        try:
            for index in range(count):
                body = json.dumps(_event(number, index, battle_id, style)).encode()
                started = time.perf_counter()
                status = await raw.post(path, body, headers)
                outcome.latencies.append(time.perf_counter() - started)
                _record(outcome, index, status)
        finally:
            await raw.aclose()
        return outcome
    async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=60.0, headers=headers) as http:
        for index in range(count):
            started = time.perf_counter()
            response = await http.post(path, json=_event(number, index, battle_id, style))
            outcome.latencies.append(time.perf_counter() - started)
            _record(outcome, index, response.status_code)
    return outcome


async def _watcher(url: str, battle_id: str, received: list[int], number: int, *, stuck: bool) -> None:
    """A browser's SSE stream of the battle page: counts its ``battle_event`` messages in ``received[number]``, or
    (stuck) never reads."""
    host, _, port = url.removeprefix("http://").partition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        request = (
            f"GET /battles/{battle_id}/events HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: text/event-stream\r\n\r\n"
        )
        writer.write(request.encode("ascii"))
        if stuck:
            await asyncio.Event().wait()  # connected, never reads: the server's socket buffer fills up
        while True:
            line = await reader.readline()
            if not line:
                return
            if line.startswith(b"event: battle_event"):
                received[number] += 1
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def _watchers_drained(http: httpx.AsyncClient, battle_id: str, received: list[int]) -> bool:
    """Whether every reading watcher got every event of the battle (given up to ``WATCHER_DRAIN_S`` to get there:
    the live feed paces itself, so the last events reach the pages shortly after the last post)."""
    battle = (await http.get(f"/battles/{battle_id}", params={"history": "false"})).raise_for_status().json()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(WATCHER_DRAIN_S):
            while any(count < battle["event_count"] for count in received):
                await asyncio.sleep(0.05)
    return all(count >= battle["event_count"] for count in received)


def _percentile(values: list[float], fraction: float) -> float | None:
    """The value below which ``fraction`` of ``values`` lie (nearest rank); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


def _tree_cpu_s(process: psutil.Process) -> float:
    """CPU seconds (user + system) a process has used, with its children: live ones and those it has reaped (a
    PostgreSQL postmaster's backends come and go)."""
    times = process.cpu_times()
    total = times.user + times.system + times.children_user + times.children_system
    for child in process.children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            child_times = child.cpu_times()
            total += child_times.user + child_times.system
    return total


def _out_of_order(stored: list[tuple[int, int]]) -> int:
    """Stored events that come after a later event of the same poster (each poster's indices must increase)."""
    highest: dict[int, int] = {}
    late = 0
    for number, index in stored:
        if index < highest.get(number, -1):
            late += 1
        highest[number] = max(index, highest.get(number, -1))
    return late


def _distinct_free_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def check_store(db: str | None, replicas: int) -> None:
    """ValueError unless ``replicas`` backends can share ``db`` (several need a PostgreSQL URL)."""
    if replicas < 1:
        raise ValueError(f"--replicas must be at least 1, not {replicas}")
    if replicas > 1 and not (db is not None and is_postgres_url(db)):
        raise ValueError(
            f"{replicas} replicas need a shared PostgreSQL database (--db postgresql://USER@HOST:PORT/DBNAME): "
            "a SQLite file belongs to one backend process"
        )


async def measure(
    posters: int,
    events_per_poster: int,
    *,
    client: Client = "raw",
    style: Style = "arena",
    watchers: int = 0,
    stuck_watchers: int = 0,
    synchronous: Literal["normal", "full"] = "normal",
    db: str | None = None,
    replicas: int = 1,
    db_server_pid: int | None = None,
    backend_options: Sequence[str] = (),
) -> dict[str, Any]:
    """Start the backend process(es) and the fakes, post, count, stop; returns the figures (see the module
    docstring). ``synchronous`` is the backend's ``--sqlite-synchronous``; ``db`` its ``--db`` (None: a temporary
    SQLite file); ``replicas`` how many backends share it (more than one needs PostgreSQL). ``db_server_pid``, when
    given, is the database server's main process, whose CPU time (with its children's) is reported per event too;
    ``backend_options`` are further ``python -m battle_backend`` options (e.g. ``--db-pool-size 20``)."""
    check_store(db, replicas)
    green, white, launcher = FakeA2AAgent(name="bench-green"), FakeA2AAgent(name="bench-white"), FakeLauncher()
    ports = _distinct_free_ports(replicas)
    urls_of_replicas = [f"http://127.0.0.1:{port}" for port in ports]
    load_before = os.getloadavg()
    received = [0] * watchers
    with tempfile.TemporaryDirectory() as tmp:
        store = db if db is not None else str(Path(tmp) / "bench.sqlite3")
        processes: list[subprocess.Popen[bytes]] = []
        try:
            for port in ports:
                options = ("--ready-poll-interval", "0.5", "--sqlite-synchronous", synchronous, *backend_options)
                processes.append(start_backend(port, store, *options))
            async with contextlib.AsyncExitStack() as stack:
                urls = {
                    "green": await stack.enter_async_context(serve_app(green.app)),
                    "white": await stack.enter_async_context(serve_app(white.app)),
                    "launcher": await stack.enter_async_context(serve_app(launcher.app)),
                }
                stack.push_async_callback(launcher.aclose)
                clients = [
                    await stack.enter_async_context(httpx.AsyncClient(base_url=url, trust_env=False, timeout=60.0))
                    for url in urls_of_replicas
                ]
                await asyncio.gather(
                    *(
                        wait_healthy(http, process, SETUP_LIMIT_S)
                        for http, process in zip(clients, processes, strict=True)
                    )
                )
                http = clients[0]
                battle_id, token = await _start_battle(http, green, urls)
                viewers = [
                    asyncio.create_task(
                        _watcher(urls_of_replicas[n % replicas], battle_id, received, n, stuck=n >= watchers)
                    )
                    for n in range(watchers + stuck_watchers)
                ]
                await asyncio.sleep(0.2 if viewers else 0)  # let the streams subscribe
                servers = [psutil.Process(process.pid) for process in processes]
                database = psutil.Process(db_server_pid) if db_server_pid is not None else None
                cpu_before = sum(_tree_cpu_s(server) for server in servers)
                db_cpu_before = _tree_cpu_s(database) if database is not None else 0.0
                started = time.perf_counter()
                async with asyncio.timeout(RUN_LIMIT_S):
                    outcomes = await asyncio.gather(
                        *(
                            _poster(
                                urls_of_replicas[n % replicas],
                                battle_id,
                                n,
                                events_per_poster,
                                token=token,
                                client=client,
                                style=style,
                            )
                            for n in range(posters)
                        )
                    )
                elapsed = time.perf_counter() - started
                cpu_after = sum(_tree_cpu_s(server) for server in servers)
                db_cpu_after = _tree_cpu_s(database) if database is not None else 0.0
                watchers_complete = await _watchers_drained(http, battle_id, received)
                for task in viewers:
                    task.cancel()
                await asyncio.gather(*viewers, return_exceptions=True)
                battle = (await http.get(f"/battles/{battle_id}")).raise_for_status().json()
                battle_starts = len(_battle_starts(green, battle_id))
        finally:
            for process in processes:
                stop_backend(process)
    accepted = {(n, index) for n, outcome in enumerate(outcomes) for index in outcome.accepted}
    refused_statuses: dict[str, int] = {}
    for outcome in outcomes:
        for status in outcome.refused:
            refused_statuses[str(status)] = refused_statuses.get(str(status), 0) + 1
    latencies = [latency for outcome in outcomes for latency in outcome.latencies]
    stored = [
        (int(e["bench"][0]), int(e["bench"][1])) for e in battle["interact_history"] if isinstance(e.get("bench"), list)
    ]
    lost = len(accepted - set(stored))
    server_cpu = cpu_after - cpu_before
    db_cpu = db_cpu_after - db_cpu_before
    per_replica = [sum(len(o.accepted) for n, o in enumerate(outcomes) if n % replicas == r) for r in range(replicas)]
    return {
        "posters": posters,
        "events_per_poster": events_per_poster,
        "client": client,
        "style": style,
        "watchers": watchers,
        "stuck_watchers": stuck_watchers,
        "store": "postgresql" if db is not None and is_postgres_url(db) else "sqlite",
        "replicas": replicas,
        "sqlite_synchronous": synchronous,
        "backend_options": list(backend_options),
        "battle_starts": battle_starts,
        "events_posted": posters * events_per_poster,
        "events_accepted": len(accepted),
        "events_accepted_per_replica": per_replica,
        "events_refused": sum(refused_statuses.values()),
        "refused_statuses": refused_statuses,
        "events_stored": len(stored),
        "events_lost": lost,
        "events_out_of_order": _out_of_order(stored),
        "events_duplicated": len(stored) - len(set(stored)),
        "events_seen_by_watchers": sum(received),
        "watchers_complete": watchers_complete,
        "elapsed_s": round(elapsed, 3),
        "events_per_s": round(len(accepted) / elapsed, 1) if elapsed > 0 else None,
        "latency_p50_ms": _ms(_percentile(latencies, 0.50)),
        "latency_p99_ms": _ms(_percentile(latencies, 0.99)),
        "latency_mean_ms": _ms(statistics.fmean(latencies) if latencies else None),
        # short names for the side-by-side runners (benchmarks/bench_speed.py, bench_backend_scaleout.py)
        "lost": lost,
        "out_of_order": _out_of_order(stored),
        "p50_ms": _ms(_percentile(latencies, 0.50)),
        "p99_ms": _ms(_percentile(latencies, 0.99)),
        "server_cpu_ms_per_event": round(server_cpu * 1000 / len(accepted), 3) if accepted else None,
        "db_server_cpu_ms_per_event": (
            round(db_cpu * 1000 / len(accepted), 3) if accepted and database is not None else None
        ),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "cpu_count": os.cpu_count(),
        "target_events_per_s": TARGET_EVENTS_PER_S,
    }


async def run(posters: int, events_per_poster: int) -> dict[str, Any]:
    """The earlier name of :func:`measure` (default client and style)."""
    return await measure(posters, events_per_poster)


def met(figures: dict[str, Any]) -> bool:
    """Whether a run meets the issue's target: >= 1000 events/s, none lost, refused, duplicated or out of order."""
    return lossless(figures) and (figures["events_per_s"] or 0) >= TARGET_EVENTS_PER_S


def lossless(figures: dict[str, Any]) -> bool:
    """Every event accepted and stored once, each poster's in the order it posted them, from one battle_start."""
    return bool(
        figures["events_lost"] == 0
        and figures["events_refused"] == 0
        and figures["events_duplicated"] == 0
        and figures["events_out_of_order"] == 0
        and figures["battle_starts"] == 1
    )


def describe(figures: dict[str, Any]) -> str:
    """One line for a terminal."""
    statuses = figures["refused_statuses"]
    refused = f"{figures['events_refused']} (statuses {statuses})" if statuses else "0"
    return (
        f"{figures['posters']} posters x {figures['events_per_poster']} events ({figures['store']}, "
        f"{figures['replicas']} replica(s), {figures['client']} client, "
        f"{figures['style']} style, {figures['watchers']}+{figures['stuck_watchers']} stuck watchers, "
        f"synchronous={figures['sqlite_synchronous']}, {figures['battle_starts']} battle_start): "
        f"{figures['events_per_s']} events/s over {figures['elapsed_s']} s, "
        f"p50 {figures['latency_p50_ms']} ms, p99 {figures['latency_p99_ms']} ms, "
        f"backend CPU {figures['server_cpu_ms_per_event']} ms/event, lost {figures['events_lost']}, "
        f"duplicated {figures['events_duplicated']}, out of order {figures['events_out_of_order']}, "
        f"refused {refused}, "
        f"watchers saw {figures['events_seen_by_watchers']} (complete: {figures['watchers_complete']}); "
        f"load {figures['load_before'][0]} -> {figures['load_after'][0]} on {figures['cpu_count']} CPUs"
    )


def main(argv: list[str] | None = None) -> int:
    """Run once and print the figures; exit 1 when an event was lost, refused, duplicated or stored out of order,
    or a reading watcher did not get every event (throughput below the target is reported, not an error: it depends
    on the machine and its load)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--posters", type=int, default=20)
    parser.add_argument("--events-per-poster", type=int, default=100)
    parser.add_argument("--client", choices=["raw", "httpx"], default="raw")
    parser.add_argument("--style", choices=["arena", "agentbeats"], default="arena")
    parser.add_argument("--watchers", type=int, default=0, help="SSE viewers of the battle that read everything")
    parser.add_argument("--stuck-watchers", type=int, default=0, help="SSE viewers that connect and never read")
    parser.add_argument("--sqlite-synchronous", choices=["normal", "full"], default="normal")
    parser.add_argument(
        "--db",
        default=None,
        help="the backends' --db: a PostgreSQL URL postgresql://USER@HOST:PORT/DBNAME (or a SQLite file); default a "
        "temporary SQLite file",
    )
    parser.add_argument(
        "--replicas", type=int, default=1, help="backend processes sharing --db (more than 1 needs PostgreSQL)"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args(argv)
    try:
        check_store(args.db, args.replicas)
    except ValueError as exc:
        parser.error(str(exc))
    figures = asyncio.run(
        measure(
            args.posters,
            args.events_per_poster,
            client=args.client,
            style=args.style,
            watchers=args.watchers,
            stuck_watchers=args.stuck_watchers,
            synchronous=args.sqlite_synchronous,
            db=args.db,
            replicas=args.replicas,
        )
    )
    figures["target_met"] = met(figures)
    print(json.dumps(figures) if args.json else describe(figures))
    return 0 if lossless(figures) and figures["watchers_complete"] else 1


if __name__ == "__main__":
    sys.exit(main())

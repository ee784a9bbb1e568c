"""Benchmark of tool mode "mcp" (a script, not a timed test).

Two figures, on loopback:
  1. an MCP tool call on an attempt endpoint (bearer token, a real retail environment, the ``calculate`` tool):
     round trip median and p95 with the mcp package's client, 2026-era protocol (one POST per call) and
     handshake-era (stateful session); plus the cost of opening a client session, which the reference agents
     pay once per A2A turn;
  2. the same offline battle (replay agent, calibration, retail test tasks 0..N-1, k attempts each) in tool mode
     "text" and in tool mode "mcp": wall time of each and the ratio mcp / text.

The green agent runs in this process (with its MCP component, on a socket with TCP_NODELAY); the replay white agent
runs in a child process (``python -m white_agent``). Battles are started and awaited through the control tool
``start_battle(wait=true)``, as the operator (the control endpoint needs the green agent's operator token: a random one
is made for the run); the modes alternate so drift on a shared machine hits both alike.

    .venv/bin/python benchmarks/bench_mcp.py [--calls 500] [--tasks 10] [--k 4] [--concurrency 4] [--repeats 2]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from green_agent.engine.tau.environment import AttemptEnvironment
from green_agent.engine.tau.tasks import resolve_task
from green_agent.service.a2a_server import create_app
from green_agent.service.mcp import McpComponent
from green_agent.service.operator_auth import OperatorToken, bearer_header
from launcher.ports import free_ports, loopback_url
from launcher.processes import ProcessGroup
from white_agent.protocol import McpConnector, McpEndpointInfo

TLS = httpx2.create_ssl_context()
"""Built once, as the reference agents do: building one per client costs more than the calls measured here."""


@contextlib.asynccontextmanager
async def serve(factory: Any) -> AsyncIterator[str]:
    """Serve ``factory(url)`` with uvicorn on a loopback socket with TCP_NODELAY (no delayed-ACK stalls)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(factory(url), log_level="warning", access_log=False, log_config=None))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                raise RuntimeError("green agent failed to start")
            await asyncio.sleep(0.02)
        yield url
    finally:
        server.should_exit = True
        await task
        sock.close()


@contextlib.asynccontextmanager
async def attempt_session(url: str, token: str, mode: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, verify=TLS) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode, cache=None) as client,
    ):
        yield client


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def round_trips(component: McpComponent, calls: int) -> None:
    assert component.gateway is not None
    env = await AttemptEnvironment.create(resolve_task("retail", "test", 0))
    async with component.gateway.open(env, "bench/round-trip/1") as endpoint:
        for mode in ("auto", "legacy"):
            async with attempt_session(endpoint.url, endpoint.token, mode) as client:
                for _ in range(20):  # warm-up
                    await client.call_tool("calculate", {"expression": "1 + 1"})
                samples = []
                for _ in range(calls):
                    start = time.perf_counter()
                    result = await client.call_tool("calculate", {"expression": "1 + 1"})
                    samples.append(time.perf_counter() - start)
                    assert not result.is_error
                version = client.protocol_version
            print(
                f"tool call round trip ({mode}, protocol {version}): median "
                f"{statistics.median(samples) * 1e3:.2f} ms, p95 {percentile(samples, 0.95) * 1e3:.2f} ms "
                f"over {calls} calls"
            )
        connector, info = McpConnector(), McpEndpointInfo(url=endpoint.url, token=endpoint.token)
        opens = []
        for _ in range(50):
            start = time.perf_counter()
            async with connector.open(info) as client:
                await client.call_tool("calculate", {"expression": "1 + 1"})
            opens.append(time.perf_counter() - start)
        print(
            f"per-turn session as the reference agents open it (open + one call + close): median "
            f"{statistics.median(opens) * 1e3:.2f} ms, p95 {percentile(opens, 0.95) * 1e3:.2f} ms"
        )


async def battle(control: Client, white: str, config: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    start = time.perf_counter()
    result = await control.call_tool("start_battle", {"white_agent_url": white, "config": config, "wait": True})
    wall = time.perf_counter() - start
    if result.is_error or not result.structured_content:
        raise RuntimeError(f"battle failed: {result.content}")
    return wall, dict(result.structured_content)


async def battles(url: str, white: str, operator: OperatorToken, args: argparse.Namespace) -> None:
    base = {
        "mode": "manual",
        "domain": "retail",
        "split": "test",
        "task_id": list(range(args.tasks)),
        "k": args.k,
        "calibration": True,
        "concurrency": args.concurrency,
    }
    walls: dict[str, list[float]] = {"text": [], "mcp": []}
    async with (
        create_mcp_http_client(headers=bearer_header(operator.value)) as http,  # SDK timeouts: long waits are fine
        Client(streamable_http_client(f"{url}/mcp/", http_client=http)) as control,
    ):
        await battle(control, white, {**base, "task_id": [0], "k": 2})  # warm-up: task loading, scoring workers
        for _ in range(args.repeats):
            for mode in ("text", "mcp"):
                wall, started = await battle(control, white, {**base, "tool_mode": mode})
                attempts = started["results"]["attempts"]
                ok = sum(a["reward"] == 1.0 for a in attempts)
                steps = sum(a["steps"] for a in attempts)
                print(
                    f"battle {mode:4s}: {len(attempts)} attempts, {ok} scored 1.0, {steps} A2A turns, wall {wall:.2f} s"
                )
                if ok != len(attempts):
                    raise RuntimeError(f"{mode}: {len(attempts) - ok} attempts did not score 1.0")
                walls[mode].append(wall)
    text, mcp = statistics.median(walls["text"]), statistics.median(walls["mcp"])
    print(
        f"battle retail test tasks 0..{args.tasks - 1} x k={args.k} (concurrency {args.concurrency}): "
        f"text {text:.2f} s, mcp {mcp:.2f} s (medians of {args.repeats}); ratio mcp/text {mcp / text:.2f}"
    )


async def main(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="arena-bench-mcp-"))
    (white_port,) = free_ports(1)
    holder: dict[str, McpComponent] = {}
    operator = OperatorToken.new()

    def green(url: str) -> Any:
        holder["mcp"] = McpComponent(public_url=url)
        return create_app(
            url,
            runs_dir=work / "runs",
            scoring_workers=args.scoring_workers,
            components=[holder["mcp"]],
            operator_token=operator,
        )

    async with ProcessGroup(work / "logs") as group:
        await group.start_and_wait(
            "white_agent",
            [
                sys.executable,
                "-m",
                "white_agent",
                "--kind",
                "replay",
                "--port",
                str(white_port),
                "--card-url",
                loopback_url(white_port),
            ],
            loopback_url(white_port) + "/.well-known/agent-card.json",
        )
        async with serve(green) as url:
            await round_trips(holder["mcp"], args.calls)
            await battles(url, loopback_url(white_port), operator, args)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500, help="timed tool calls per protocol mode")
    parser.add_argument("--tasks", type=int, default=10, help="retail test tasks 0..N-1")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2, help="battles per mode (alternating)")
    parser.add_argument("--scoring-workers", type=int, default=2)
    sys.exit(asyncio.run(main(parser.parse_args())))

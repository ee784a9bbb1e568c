"""Benchmark of the evaluations (a script, not a timed test).

Two figures, on the project's 2-core machine:
  1. ``POST /run`` over 1,000 recorded conversations (1-3 interactions each, about half with tool expectations),
     scored by the lexical judge: in-process (``run_agentic``) and over HTTP through the green agent's server.
  2. A CSV suite of 100 cases run live against the scripted finance white agent (a separate process, as
     ``arena eval-csv --agent finance-demo`` starts it) through ``POST /evaluations/run`` with concurrency 8:
     wall time seen by the client and cases per second.

Run:  .venv/bin/python benchmarks/bench_evaluations.py [--repeats N]

Each figure is the median (and best) of N runs after one warm-up run; inputs come from a fixed seed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from green_agent.evaluations import EvaluationsComponent, EvaluationsSettings, JudgeSettings, run_agentic
from green_agent.service.a2a_server import create_app
from green_agent.service.operator_auth import OperatorToken, bearer_header
from launcher.ports import free_port, loopback_url
from launcher.processes import ProcessGroup
from tests.support.servers import serve_app_factory

SAMPLE_CSV = ROOT / "scenarios" / "finance_suite.csv"
OPERATOR = OperatorToken.new()
"""The benchmark's green agents' operator token (/run and /evaluations/* need it)."""


def make_run_request(conversations: int, seed: int = 7) -> dict[str, Any]:
    """A /run body with ``conversations`` datasets of 1-3 interactions (some wrong, some with tools)."""
    rng = random.Random(seed)
    datasets = []
    for index in range(conversations):
        interactions = []
        for turn in range(rng.randint(1, 3)):
            a, b = rng.randint(1, 99), rng.randint(1, 99)
            right = rng.random() < 0.85
            item: dict[str, Any] = {
                "qa_id": f"q{index}-{turn}",
                "query": f"What is {a} + {b}?",
                "assistant": f"The sum of {a} and {b} is {a + b if right else a + b + 1}.",
                "ground_truth_assistant": f"{a} + {b} equals {a + b}",
            }
            if rng.random() < 0.5:
                used = (
                    [
                        {
                            "tool_name": "calculator",
                            "parameters": {"operation": "add", "a": a, "b": b},
                            "result": a + b,
                            "step": 1,
                        }
                    ]
                    if rng.random() < 0.9
                    else []
                )
                item["agentic"] = {"tools_used": used, "final_answer_uses_tools": bool(used)}
                item["ground_truth_agentic"] = {
                    "expected_tools": [
                        {"tool_name": "calculator", "parameters": {"operation": "add", "a": a, "b": b}, "step": 1}
                    ],
                    "tool_sequence_matters": False,
                }
            interactions.append(item)
        datasets.append({"session_id": f"s{index}", "assistant_id": "bench", "conversation": interactions})
    return {
        "connector": {
            "class_path": "langchain_groq.chat_models.ChatGroq",
            "params": {"model": "llama-3.3-70b-versatile"},
        },
        "datasets": datasets,
        "config": {"k": 3, "judge": "lexical"},
    }


def make_csv(cases: int) -> bytes:
    """``cases`` rows made by cycling the sample suite with fresh test ids."""
    lines = SAMPLE_CSV.read_text(encoding="utf-8").splitlines()
    header, rows = lines[0], lines[1:]
    out = [header]
    for index in range(cases):
        row = rows[index % len(rows)]
        out.append(f"bench-{index:03d}," + row.split(",", 1)[1])
    return ("\n".join(out) + "\n").encode()


def _stats(samples: list[float]) -> str:
    return f"median {statistics.median(samples):.3f} s, best {min(samples):.3f} s"


async def bench_run(repeats: int, conversations: int) -> None:
    payload = make_run_request(conversations)
    interactions = sum(len(d["conversation"]) for d in payload["datasets"])
    settings = JudgeSettings(cache_path=None, environ={})
    await run_agentic(payload, settings)  # warm-up
    in_process = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = await run_agentic(payload, settings)
        in_process.append(time.perf_counter() - start)
    agg = result["aggregated_metrics"]
    print(f"/run, {conversations} conversations ({interactions} interactions), lexical judge")
    print(
        f"  in-process run_agentic: {_stats(in_process)} "
        f"({conversations / statistics.median(in_process):,.0f} conversations/s)"
    )
    with tempfile.TemporaryDirectory() as tmp:
        component = EvaluationsComponent(EvaluationsSettings(judge=settings))
        async with serve_app_factory(
            lambda url: create_app(
                url, runs_dir=Path(tmp), scoring_workers=1, components=[component], operator_token=OPERATOR
            ),
            startup_timeout_s=120,
        ) as url:
            body = json.dumps(payload).encode()
            async with httpx.AsyncClient(base_url=url, timeout=120, headers=bearer_header(OPERATOR.value)) as client:
                await client.post("/run", content=body)
                over_http = []
                for _ in range(repeats):
                    start = time.perf_counter()
                    response = await client.post("/run", content=body, headers={"content-type": "application/json"})
                    over_http.append(time.perf_counter() - start)
                    assert response.status_code == 200, response.text[:300]
    print(
        f"  over HTTP (request {len(body) / 1e6:.1f} MB, response {len(response.content) / 1e6:.1f} MB): "
        f"{_stats(over_http)}"
    )
    print(
        f"  result: {agg['fully_correct_conversations']}/{agg['total_conversations']} correct, "
        f"pass@3 {agg['pass_at_k']:.4f}, pass^3 {agg['pass_pow_k']:.4f}, {agg['interpretation']}"
    )


async def bench_csv(repeats: int, cases: int, concurrency: int) -> None:
    csv = make_csv(cases)
    with tempfile.TemporaryDirectory() as tmp:
        async with ProcessGroup(Path(tmp) / "logs", handle_signals=False) as group:
            port = free_port()
            white = loopback_url(port)
            await group.start_and_wait(
                "finance",
                [
                    sys.executable,
                    "-m",
                    "white_agent",
                    "--kind",
                    "finance",
                    "--port",
                    str(port),
                    "--card-url",
                    white + "/",
                ],
                white + "/.well-known/agent-card.json",
                timeout_s=60,
            )
            component = EvaluationsComponent(
                EvaluationsSettings(judge=JudgeSettings(cache_path=None), max_concurrency=32)
            )
            async with (
                serve_app_factory(
                    lambda url: create_app(
                        url, runs_dir=Path(tmp), scoring_workers=1, components=[component], operator_token=OPERATOR
                    ),
                    startup_timeout_s=120,
                ) as url,
                httpx.AsyncClient(base_url=url, timeout=300, headers=bearer_header(OPERATOR.value)) as client,
            ):

                async def once() -> tuple[float, dict[str, Any]]:
                    start = time.perf_counter()
                    summary: dict[str, Any] = {}
                    async with client.stream(
                        "POST",
                        "/evaluations/run",
                        files={"file": ("bench.csv", csv, "text/csv")},
                        data={"agent_url": white, "concurrency": str(concurrency)},
                    ) as r:
                        event = None
                        async for line in r.aiter_lines():
                            if line.startswith("event:"):
                                event = line.split(":", 1)[1].strip()
                            elif line.startswith("data:") and event == "summary":
                                summary = json.loads(line.split(":", 1)[1])
                    return time.perf_counter() - start, summary

                await once()  # warm-up
                walls, summaries = [], []
                for _ in range(repeats):
                    wall, summary = await once()
                    walls.append(wall)
                    summaries.append(summary)
    median = statistics.median(walls)
    last = summaries[-1]
    print(f"CSV suite, {cases} cases, concurrency {concurrency}, scripted finance agent (own process), lexical judge")
    print(f"  wall time (client, upload to summary): {_stats(walls)}; {cases / median:.1f} cases/s")
    print(
        f"  server-side wall time {statistics.median(s['wall_time_s'] for s in summaries):.3f} s; "
        f"passed {last['passed']}/{last['total']}, errored {last['errored']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    asyncio.run(bench_run(args.repeats, args.conversations))
    asyncio.run(bench_csv(args.repeats, args.cases, args.concurrency))


if __name__ == "__main__":
    main()

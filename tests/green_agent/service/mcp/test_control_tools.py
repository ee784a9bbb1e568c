"""The control tools at /mcp/ through the mcp package's own client: every tool, progress notifications, and bad
input answered with tool errors (never a crash or a hang)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from green_agent.statistics import compare_trials, summarize_trials
from tests.green_agent.service.mcp.conftest import GreenServer, control, error_text, structured, white_agent

pytestmark = pytest.mark.asyncio(loop_scope="session")

TOOLS = {
    "list_domains",
    "list_tasks",
    "start_battle",
    "get_battle",
    "get_results",
    "cancel_battle",
    "score_attempts",
    "compare_runs",
}
CALIBRATION = {"domain": "airline", "task_id": [0, 1], "k": 2, "calibration": True}


async def test_every_tool_is_listed_with_an_output_schema(green: GreenServer) -> None:
    async with control(green) as client:
        listed = (await client.list_tools()).tools
    assert {tool.name for tool in listed} == TOOLS
    assert all(tool.output_schema and tool.description for tool in listed)


async def test_list_domains_and_tasks(green: GreenServer) -> None:
    async with control(green) as client:
        domains = structured(await client.call_tool("list_domains", {}))
        page = structured(await client.call_tool("list_tasks", {"domain": "retail", "offset": 38, "limit": 5}))
        default = structured(await client.call_tool("list_tasks", {"domain": "airline"}))
    by_name = {d["name"]: d["splits"] for d in domains["domains"]}
    assert set(by_name) == {"retail", "airline", "telecom", "mock"} and by_name["retail"]["test"] == 40
    assert (page["total"], page["offset"], [t["index"] for t in page["tasks"]]) == (40, 38, [38, 39])
    assert page["split"] == "test" and all(t["task_id"] and t["reason_for_call"] for t in page["tasks"])
    assert default["total"] == 20 and len(default["tasks"]) == 20
    assert all(t["gold_gap"] is None for t in page["tasks"] + default["tasks"])


async def test_list_tasks_marks_the_tasks_whose_gold_solution_cannot_pass(green: GreenServer) -> None:
    async with control(green) as client:
        mock = structured(await client.call_tool("list_tasks", {"domain": "mock", "split": None}))
    marked = {t["index"]: t["gold_gap"] for t in mock["tasks"] if t["gold_gap"]}
    assert list(marked) == [7] and "no gold actions" in marked[7]


async def test_a_battle_from_start_to_results(green: GreenServer) -> None:
    async with white_agent("replay") as white, control(green) as client:
        started = structured(await client.call_tool("start_battle", {"white_agent_url": white, "config": CALIBRATION}))
        battle_id = started["battle_id"]
        assert started["state"] == "running" and started["results"] is None
        for _ in range(600):  # bounded polling: the battle ends in seconds
            status = structured(await client.call_tool("get_battle", {"battle_id": battle_id, "events": 3}))
            if status["state"] != "running":
                break
            await asyncio.sleep(0.05)
        results = structured(await client.call_tool("get_results", {"battle_id": battle_id}))
        cancelled = structured(await client.call_tool("cancel_battle", {"battle_id": battle_id}))
    assert status["state"] == "finished" and status["attempts_done"] == status["attempts_total"] == 4
    assert len(status["recent_events"]) == 3 and status["recent_events"][-1]["type"] == "battle_finished"
    assert results["k"] == 2 and results["calibration"] is True and results["failure_breakdown"] == {}
    assert [row["j"] for row in results["macro"]] == [1, 2] and results["macro"][1]["pass_hat_mean"] == 1.0
    assert results["micro"]["successes"] == 4 and len(results["attempts"]) == 4
    assert "CALIBRATION" in results["markdown"]
    assert cancelled == {
        "battle_id": battle_id,
        "state": "finished",
        "was_running": False,
        "attempts_finished": 4,
        "attempts_total": 4,
        "message": f"battle {battle_id} had already ended (finished); nothing was cancelled",
    }
    assert results["status"] == "completed"


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # 2026-era per-request calls and handshake-era sessions
async def test_start_battle_with_wait_reports_progress(green: GreenServer, mode: str) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with white_agent("replay") as white, control(green, mode=mode) as client:
        result = await client.call_tool(
            "start_battle",
            {"white_agent_url": white, "config": CALIBRATION, "wait": True},
            progress_callback=on_progress,
        )
    started = structured(result)
    assert started["state"] == "finished" and started["results"]["micro"]["successes"] == 4
    assert [(p, t) for p, t, _ in seen] == [(0, 4), (1, 4), (2, 4), (3, 4), (4, 4)]
    assert "Starting pass@2" in (seen[0][2] or "") and all("Attempt" in (m or "") for _, _, m in seen[1:])


async def test_cancel_a_running_battle(green: GreenServer) -> None:
    # The flaky agent never answers its first turn: the battle stays running until it is cancelled.
    config = {**CALIBRATION, "turn_timeout_s": 600}
    async with white_agent("flaky", fault_rates={"no_reply": 1.0}, no_reply_s=600) as white, control(green) as client:
        battle_id = structured(await client.call_tool("start_battle", {"white_agent_url": white, "config": config}))[
            "battle_id"
        ]
        cancelled = structured(await client.call_tool("cancel_battle", {"battle_id": battle_id}))
        status = structured(await client.call_tool("get_battle", {"battle_id": battle_id}))
        partial = structured(await client.call_tool("get_results", {"battle_id": battle_id}))
        again = structured(await client.call_tool("cancel_battle", {"battle_id": battle_id}))
    assert cancelled == {
        "battle_id": battle_id,
        "state": "cancelled",
        "was_running": True,
        "attempts_finished": 0,
        "attempts_total": 4,
        "message": f"battle {battle_id} ended cancelled: 0 of 4 attempts finished; get_results has the partial summary",
    }
    assert status["state"] == "cancelled" and status["recent_events"][-1]["type"] == "battle_finished"
    assert status["error"] is None  # cancelled is a state of its own, not an error
    assert "battle_cancelled" in {e["type"] for e in status["recent_events"]}
    # The battle's result (the same one summary.json holds) says "cancelled" and covers no attempt.
    assert partial["state"] == partial["status"] == "cancelled" and partial["attempts"] == []
    summary = json.loads((green.runs_dir / battle_id / "summary.json").read_text())
    assert summary["status"] == "cancelled" and summary["attempts"] == []
    assert again["state"] == "cancelled" and again["was_running"] is False


async def test_score_attempts_and_compare_runs_match_the_metrics_library(green: GreenServer) -> None:
    a: dict[str, list[bool | None]] = {
        "t1": [True, True, False, True],
        "t2": [False, None, False, True],
        "t3": [True] * 4,
    }
    b: dict[str, list[bool | None]] = {
        "t1": [False, False, True, False],
        "t2": [True, True, True, True],
        "t3": [True, False, True, True],
    }
    async with control(green) as client:
        summary = structured(await client.call_tool("score_attempts", {"trials": a, "seed": 7}))
        comparison = structured(await client.call_tool("compare_runs", {"a": a, "b": b, "n_bootstrap": 200}))
        async with white_agent("replay") as white:
            battle = structured(
                await client.call_tool("start_battle", {"white_agent_url": white, "config": CALIBRATION, "wait": True})
            )
        by_id = structured(await client.call_tool("compare_runs", {"a": battle["battle_id"], "b": battle["battle_id"]}))
    assert summary == summarize_trials(a, seed=7).model_dump(mode="json")
    assert comparison == compare_trials(a, b, n_bootstrap=200).model_dump(mode="json")
    assert by_id["tasks_in_both"] == 2 and by_id["per_j"][0]["pass_hat_diff"] == 0.0


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        ("get_battle", {"battle_id": "no-such-battle"}, "no battle 'no-such-battle'"),
        ("get_results", {"battle_id": "no-such-battle"}, "no battle 'no-such-battle'"),
        ("cancel_battle", {"battle_id": "no-such-battle"}, "no battle 'no-such-battle'"),
        ("list_tasks", {"domain": "banking"}, "known domains"),
        ("list_tasks", {"domain": "retail", "split": "nope"}, "known splits"),
        ("list_tasks", {"domain": "retail", "limit": 0}, "limit"),
        ("list_tasks", {"domain": "retail", "colour": "red"}, "unknown argument(s) for list_tasks: colour"),
        ("get_battle", {}, "battle_id"),
        ("score_attempts", {"trials": {"t": [True, 1]}}, "valid boolean"),
        ("score_attempts", {"trials": {"t": [True]}, "k_max": 0}, "k_max"),
        ("compare_runs", {"a": "no-such-battle", "b": {"t": [True]}}, "no battle 'no-such-battle'"),
        ("start_battle", {"white_agent_url": "http://127.0.0.1:9", "config": {"k": 3}}, "k must be even"),
        ("start_battle", {"white_agent_url": "http://127.0.0.1:9", "config": {"domain": "banking"}}, "known domains"),
        ("start_battle", {"white_agent_url": "http://127.0.0.1:9", "config": {"task_id": 400}}, "valid 0..39"),
        ("start_battle", {"white_agent_url": "http://127.0.0.1:9", "config": {"kay": 2}}, "kay"),
        ("start_battle", {"white_agent_url": "http://127.0.0.1:9"}, "does not answer"),
        ("start_battle", {"white_agent_url": "ftp://example.org"}, "http(s) URL"),
        ("start_battle", {"white_agent_url": "http://127.0.0.1:9", "battle_id": "../etc"}, "battle_id"),
    ],
)
async def test_bad_input_is_a_tool_error(
    green: GreenServer, tool: str, arguments: dict[str, Any], message: str
) -> None:
    async with control(green) as client:
        result = await client.call_tool(tool, arguments)
    assert message in error_text(result)


async def test_a_battle_id_cannot_be_reused(green: GreenServer) -> None:
    async with white_agent("replay") as white, control(green) as client:
        arguments = {"white_agent_url": white, "config": CALIBRATION, "battle_id": "reused-id", "wait": True}
        structured(await client.call_tool("start_battle", arguments))
        again = await client.call_tool("start_battle", arguments)
    assert "already exists" in error_text(again)


async def test_a_white_agent_that_is_not_an_a2a_agent_is_refused(green: GreenServer) -> None:
    # A server that answers HTTP but has no agent card under this path (a white agent's unknown path: 404).
    async with white_agent("replay") as white, control(green) as client:
        result = await client.call_tool("start_battle", {"white_agent_url": f"{white}/no-agent-here"})
    assert "HTTP 404" in error_text(result)

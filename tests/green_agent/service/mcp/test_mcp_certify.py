"""``certify`` through MCP ``start_battle`` on the green agent's control tools (issue 28): a small flaky battle whose
claim is clearly true stops early, and the result carries ``certification``. What a remote config may set for certify
(docs/results.md): a comparison carries the baseline's values; a ``baseline`` path is never opened by the green
agent (only a label), and a comparison without values is refused naming the field."""

from __future__ import annotations

import json

import pytest

from tests.green_agent.service.mcp.conftest import GreenServer, control, error_text, structured, white_agent

pytestmark = pytest.mark.asyncio(loop_scope="session")

TASKS = [7, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23]
"""16 retail tasks the replaying agent solves; with low fault rates pass^1 is near 1, far above 0.3."""
FAULTS = {"skip_action": 0.05, "malformed_reply": 0.05}


async def test_start_battle_with_certify_stops_early_and_reports_the_decision(green: GreenServer) -> None:
    config = {
        "domain": "retail",
        "task_id": TASKS,
        "k": 4,
        "calibration": True,
        "concurrency": 4,
        "certify": "pass^1>=0.3",
    }
    async with white_agent("flaky", seed=199, fault_rates=FAULTS) as white, control(green) as client:
        result = await client.call_tool(
            "start_battle", {"white_agent_url": white, "config": config, "wait": True, "battle_id": "mcp-certify"}
        )
    started = structured(result)
    assert started["state"] == "finished", started
    results = started["results"]
    cert = results["certification"]
    assert cert["decision"] == "certified" and cert["claim"] == "pass^1 >= 0.3"
    assert cert["attempts_fixed_design"] == len(TASKS) * 4
    assert len(results["attempts"]) == cert["attempts_used"] < cert["attempts_fixed_design"]  # stopped early
    assert cert["tasks_observed"] < cert["tasks_budget"] == len(TASKS)
    assert cert["sequence_low"] > 0.3
    run = json.loads((green.runs_dir / "mcp-certify" / "run.json").read_text(encoding="utf-8"))
    assert run["certify_order"] == cert["order"]
    on_disk = json.loads((green.runs_dir / "mcp-certify" / "summary.json").read_text(encoding="utf-8"))
    assert on_disk["certification"] == cert


async def test_a_remote_comparison_must_carry_the_baseline_values(green: GreenServer) -> None:
    claim = {"metric": "pass^1", "compare": "no_worse", "margin": 0.1, "baseline": str(green.runs_dir)}
    config = {"domain": "retail", "task_id": [7, 9], "k": 2, "calibration": True, "certify": claim}
    async with control(green) as client:
        result = await client.call_tool("start_battle", {"white_agent_url": "http://127.0.0.1:9", "config": config})
    text = error_text(result)
    assert "certify.baseline_values" in text and "never opens" in text

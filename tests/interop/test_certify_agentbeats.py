"""``certify`` through an AgentBeats battle (issue 28): our backend creates the battle with the certify claim in the
green agent's config (``{"pass_k_config": {..., "certify": "pass^1>=0.3"}}``, as an AgentBeats user posts it), the
green agent and a flaky white agent run behind their launchers, the battle stops early with the right decision, and
the backend's stored result (``GET /battles/{id}``) and its battle page carry the certification.

Everything goes through the backend's HTTP API exactly as in test_real_agentbeats.py (register both agents with
their launchers, create the battle, poll it); every process the test starts is stopped by it (checked with psutil).
"""

from __future__ import annotations

import asyncio
import io
import json
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console

from green_agent.engine.config import remote_config_dict
from launcher.cli.battle_display import BattleDisplay
from launcher.cli.run_command import RunOptions, green_agent_argv, start_agent, white_agent_argv
from launcher.cli.scenario import load_scenario
from launcher.ports import free_ports, loopback_url
from launcher.processes import ProcessGroup
from tests.interop.interop_support import (
    BATTLE_LIMIT_S,
    WHITE_REQUIREMENT,
    _checked,
    descendants,
    start_our_backend,
    still_running,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

CLAIM = "pass^1>=0.3"
TASKS = [7, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23]
"""16 retail tasks the replaying agent solves; with low fault rates pass^1 is near 1, far above 0.3, so the claim is
certified after a few tasks of the 16 (64 attempts) of the fixed design."""
SCENARIO = f"""
name = "certify-agentbeats"

[pass_k_config]
mode = "manual"
k = 4
domain = "retail"
task_id = {TASKS}
split = "test"
seed = 0
max_steps = 30
turn_timeout_s = 30
attempt_timeout_s = 120
concurrency = 4
calibration = true

[user_simulator]
kind = "scripted"

[white_agent]
kind = "flaky"
seed = 199

[white_agent.fault_rates]
skip_action = 0.05
malformed_reply = 0.05
"""


async def _start_agents(group: ProcessGroup, scenario_path: Path, runs_dir: Path, log_dir: Path) -> dict[str, str]:
    """The flaky white agent and the green agent, each behind an ``arena launcher`` (as ``arena run`` starts them)."""
    scenario = load_scenario(scenario_path)
    white_port, green_port, white_launcher_port, green_launcher_port = free_ports(4)
    options = RunOptions(scenario_path=scenario_path, runs_dir=runs_dir, with_launchers=True, quiet=True)
    display = BattleDisplay(Console(file=io.StringIO()), quiet=True)
    white_url, _ = await start_agent(
        group,
        display,
        "white_agent",
        white_agent_argv(scenario.white_agent, white_port, python=sys.executable),
        white_port,
        white_launcher_port,
        options,
        log_dir,
    )
    green_url, _ = await start_agent(
        group,
        display,
        "green_agent",
        green_agent_argv(green_port, runs_dir, python=sys.executable, scenario=scenario_path),
        green_port,
        green_launcher_port,
        options,
        log_dir,
    )
    return {
        "white_url": white_url,
        "white_launcher": loopback_url(white_launcher_port),
        "green_url": green_url,
        "green_launcher": loopback_url(green_launcher_port),
    }


async def _certify_battle(backend_url: str, agents: dict[str, str], config: dict[str, Any]) -> dict[str, Any]:
    """Register both agents, create the battle with ``config`` as the green agent's config, poll until it ends."""
    async with httpx.AsyncClient(base_url=backend_url, timeout=30.0, trust_env=False) as http:
        white = await _checked(
            await http.post(
                "/agents",
                json={
                    "alias": "certify-white",
                    "agent_url": agents["white_url"],
                    "launcher_url": agents["white_launcher"],
                    "is_green": False,
                },
            ),
            201,
        )
        green = await _checked(
            await http.post(
                "/agents",
                json={
                    "alias": "certify-green",
                    "agent_url": agents["green_url"],
                    "launcher_url": agents["green_launcher"],
                    "is_green": True,
                    "participant_requirements": WHITE_REQUIREMENT,
                    "battle_timeout": 900,
                },
            ),
            201,
        )
        created = await _checked(
            await http.post(
                "/battles",
                json={
                    "green_agent_id": green["agent_id"],
                    "opponents": [{"name": "white_agent", "agent_id": white["agent_id"]}],
                    "config": {"pass_k_config": config},
                },
            ),
            201,
        )
        battle_id = created["battle_id"]
        async with asyncio.timeout(BATTLE_LIMIT_S):
            while True:
                battle: dict[str, Any] = await _checked(await http.get(f"/battles/{battle_id}"), 200)
                if battle["state"] in ("finished", "error"):
                    break
                await asyncio.sleep(0.5)
        page = await http.get(f"/ui/battles/{battle_id}")
        assert page.status_code == 200, page.text[:500]
        battle["_page"] = page.text
    return battle


def _find_certification(detail: Any) -> dict[str, Any]:
    """The ``certification`` object of the stored result (at the top of the detail, or in its summary)."""
    assert isinstance(detail, dict), detail
    for holder in (detail, detail.get("summary")):
        if isinstance(holder, dict) and isinstance(holder.get("certification"), dict):
            cert: dict[str, Any] = holder["certification"]
            return cert
    raise AssertionError(f"no certification in the stored result: {sorted(detail)}")


async def test_agentbeats_battle_with_certify_stops_early_and_the_backend_stores_the_decision(tmp_path: Path) -> None:
    scenario_path = tmp_path / "certify.toml"
    scenario_path.write_text(SCENARIO, encoding="utf-8")
    runs_dir = tmp_path / "runs"
    config = remote_config_dict(load_scenario(scenario_path).pass_k_config)  # what a remote config may say
    config["certify"] = CLAIM
    group = ProcessGroup(tmp_path / "logs", grace_s=5.0, handle_signals=False)
    async with group:
        backend_url = await start_our_backend(group, tmp_path)
        agents = await _start_agents(group, scenario_path, runs_dir, tmp_path / "logs")
        battle = await _certify_battle(backend_url, agents, config)
        started = descendants(group)
    assert still_running(started) == []

    assert battle["state"] == "finished", json.dumps(battle)[:3000]
    detail = battle["result"]["detail"]
    cert = _find_certification(detail)
    assert cert["decision"] == "certified" and cert["claim"] == "pass^1 >= 0.3"
    assert cert["sequence_low"] > 0.3
    assert cert["tasks_observed"] < cert["tasks_budget"] == len(TASKS)
    assert cert["attempts_used"] < cert["attempts_fixed_design"] == len(TASKS) * 4  # stopped early
    assert len(detail["attempts"]) == cert["attempts_used"]
    # The green agent's run directory (named by the backend's battle id) holds the same decision and order.
    run_dir = runs_dir / battle["battle_id"]
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert summary["certification"] == cert
    assert json.loads((run_dir / "run.json").read_text(encoding="utf-8"))["certify_order"] == cert["order"]
    # The battle page shows the decision (the certification box of battle_backend/views/certification.py).
    assert "CERTIFIED" in battle["_page"].upper() and "pass^1 &gt;= 0.3" in battle["_page"]

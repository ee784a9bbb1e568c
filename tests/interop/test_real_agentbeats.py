"""Interoperability proof: our green agent, white agent and launchers run a battle on the REAL AgentBeats backend
(PyPI agentbeats==1.2.6, in a venv of its own), and the same scenario on our backend gives the same outcome.

The scenario (interop_scenario.toml) is deterministic: calibration replay of retail tasks 0 and 1, k = 2, scripted
user, so every attempt succeeds and the white agent wins. Everything goes through the backends' HTTP API exactly as
a user of AgentBeats would drive it: register the agents (with their launchers), create the battle, poll it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from launcher.processes import ProcessGroup
from tests.interop.interop_support import (
    GREEN_ALIAS,
    REPO,
    SCENARIO,
    WHITE_ALIAS,
    BattleRun,
    DescendantWatcher,
    agentbeats_venv,
    attempt_outcomes,
    descendants,
    event_kinds,
    green_events,
    normalised_messages,
    result_events,
    run_battle,
    start_agents,
    start_our_backend,
    start_real_backend,
    still_running,
)

pytestmark = [pytest.mark.agentbeats, pytest.mark.slow, pytest.mark.timeout(1800)]

EXPECTED_OUTCOMES = [(0, 1, "success", 1.0), (0, 2, "success", 1.0), (1, 1, "success", 1.0), (1, 2, "success", 1.0)]


@pytest.fixture(scope="module")
def venv() -> Path:
    return agentbeats_venv()


def _assert_our_battle(run: BattleRun, backend: str) -> None:
    """What must hold on either backend: finished, our white agent won, our progress and our result are recorded."""
    battle = run.battle
    assert battle["state"] == "finished", f"{backend}: {json.dumps(battle)[:3000]}"
    assert battle["result"]["winner"] == WHITE_ALIAS, battle["result"]
    messages = [e["message"] for e in green_events(battle)]
    assert any(m.startswith("🎯 Starting pass@2 evaluation") for m in messages), messages
    assert sum("✅ Attempt" in m for m in messages) == 4, messages
    assert not any("❌" in m or "⚠️" in m for m in messages), messages
    results = result_events(battle)
    assert len(results) == 1 and results[0]["reported_by"] == "green_agent"
    assert results[0]["detail"] == battle["result"]["detail"]
    assert results[0]["markdown_content"].startswith("# Arena pass^k evaluation")
    assert attempt_outcomes(battle) == EXPECTED_OUTCOMES
    # The backend credited our white agent with the win and unlocked both agents. The scenario is a calibration
    # battle: AgentBeats knows nothing of that and moves the rating (+15); ours records the win with no ELO change.
    white, green = run.white, run.green
    expected_rating = 1015 if backend == "AgentBeats" else 1000
    assert white["elo"]["stats"]["wins"] == 1 and white["elo"]["rating"] == expected_rating, white["elo"]
    assert white["status"] == "unlocked" and green["status"] == "unlocked"


async def test_our_agents_battle_on_real_agentbeats_and_on_our_backend_alike(venv: Path, tmp_path: Path) -> None:
    runs_dir = tmp_path / "runs"
    group = ProcessGroup(tmp_path / "logs", grace_s=5.0, handle_signals=False)
    async with group:
        real_url, real_db = await start_real_backend(group, venv, tmp_path)
        our_url = await start_our_backend(group, tmp_path)
        agents = await start_agents(group, runs_dir, tmp_path / "logs")

        real = await run_battle(real_url, agents)
        ours = await run_battle(our_url, agents)
        started = descendants(group)

    # Every process the test started (backends, launchers, agents restarted by the launchers) is gone.
    assert still_running(started) == []
    assert real_db.is_file(), "the real backend's database lives in the test's copy of its package"

    _assert_our_battle(real, "AgentBeats")
    _assert_our_battle(ours, "our backend")
    # AgentBeats passes our green agent the opponent's alias; the green agent reports it as the winner.
    assert GREEN_ALIAS not in (real.battle["result"]["winner"], ours.battle["result"]["winner"])

    # The same outcome on both backends: winner, attempts, and the same progress events of each kind.
    assert real.battle["result"]["winner"] == ours.battle["result"]["winner"]
    assert attempt_outcomes(real.battle) == attempt_outcomes(ours.battle)
    assert event_kinds(real.battle) == event_kinds(ours.battle)
    assert normalised_messages(real.battle) == normalised_messages(ours.battle)
    summary_real = real.battle["result"]["detail"]["summary"]
    summary_ours = ours.battle["result"]["detail"]["summary"]
    assert summary_real == summary_ours

    # The green agent wrote each battle's run directory under its --runs-dir, named by the backend's battle id.
    for run in (real, ours):
        summary = json.loads((runs_dir / run.battle["battle_id"] / "summary.json").read_text(encoding="utf-8"))
        assert summary["battle_id"] == run.battle["battle_id"]


async def test_arena_run_with_the_real_agentbeats_backend(venv: Path, tmp_path: Path) -> None:
    """``arena run SCENARIO --backend URL`` drives a battle on the real AgentBeats backend end to end."""

    def arena_run(url: str) -> tuple[int, str, list[psutil.Process]]:
        env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200", "NO_COLOR": "1"}
        argv = [
            sys.executable,
            "-m",
            "launcher",
            "run",
            str(SCENARIO),
            "--backend",
            url,
            "--runs-dir",
            str(tmp_path / "runs"),
        ]
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        watcher = DescendantWatcher(proc.pid)
        try:
            output, _ = proc.communicate(timeout=900)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        return proc.returncode, output, watcher.stop()

    async with ProcessGroup(tmp_path / "logs", handle_signals=False) as group:
        url, _ = await start_real_backend(group, venv, tmp_path)
        code, output, started = await asyncio.to_thread(arena_run, url)
        assert code == 0, output
        assert still_running(started) == [], output
        found = re.search(r"battle (?P<id>[0-9a-f-]{36}): " + re.escape(url), output)
        assert found is not None, output  # AgentBeats has no battle page: the command shows the battle's JSON URL
        async with httpx.AsyncClient(base_url=url, trust_env=False) as http:
            battle = (await http.get(f"/battles/{found['id']}")).json()
    assert battle["state"] == "finished", battle
    assert battle["result"]["winner"].startswith("arena-replay-white-")
    assert f"winner (as the backend records it): {battle['result']['winner']}" in output
    assert sum("✅ Attempt" in e["message"] for e in green_events(battle)) == 4
    assert (tmp_path / "runs" / found["id"] / "summary.json").is_file()

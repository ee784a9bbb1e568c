"""``arena run`` end to end with the real green and white agents (replay white agent, scripted user, offline)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from launcher_test_helpers import REPO, subprocess_environment

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("green_agent.service.a2a_server") is None
    or importlib.util.find_spec("white_agent") is None,
    reason="needs the green agent (green_agent.service.a2a_server) and the white agents",
)

SCENARIO = """
name = "e2e replay"

[pass_k_config]
mode = "manual"
k = 2
domain = "retail"
task_id = 0
concurrency = 2

[user_simulator]
kind = "scripted"

[white_agent]
kind = "replay"
"""


def test_arena_run_completes_and_writes_the_run_directory(tmp_path: Path) -> None:
    import psutil

    scenario = tmp_path / "scenario.toml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    runs = tmp_path / "runs"
    argv = [sys.executable, "-m", "launcher", "run", str(scenario), "--runs-dir", str(runs), "--battle-id", "e2e"]
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        env={**subprocess_environment(), "COLUMNS": "200"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, output
    run_dir = runs / "e2e"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["battle_id"] == "e2e"
    assert len(summary["attempts"]) == 2
    assert (run_dir / "summary.md").is_file()
    # The summary is printed once, rendered: its title appears once and never as a raw markdown heading.
    heading = (run_dir / "summary.md").read_text(encoding="utf-8").splitlines()[0]
    assert heading.startswith("# ")
    assert output.count(heading.removeprefix("# ").strip()) == 1, output
    assert heading not in output
    assert len(list((run_dir / "trajectories").glob("*.jsonl"))) == 2
    assert f"summary: {run_dir / 'summary.json'}" in output
    # Nothing we started is left: no process has our run directory on its command line.
    leftovers = [
        p.info
        for p in psutil.process_iter(["pid", "cmdline"])
        if any(str(runs) in part for part in (p.info["cmdline"] or []))
    ]
    assert leftovers == []

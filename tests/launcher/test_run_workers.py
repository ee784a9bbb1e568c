"""``arena run --workers N`` (issue 27): validated, recorded with the other overrides, and the worker processes of
the green agent ``arena run`` starts are what it says (real green and replay white agents, scripted user)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from launcher_test_helpers import REPO, subprocess_environment
from typer.testing import CliRunner

from launcher.cli.app import app
from launcher.cli.run_overrides import MAX_WORKERS, RunOverrides

runner = CliRunner()

needs_agents = pytest.mark.skipif(
    importlib.util.find_spec("green_agent.service.a2a_server") is None
    or importlib.util.find_spec("white_agent") is None,
    reason="needs the green agent and the white agents",
)

SCENARIO = """
name = "workers"

[pass_k_config]
mode = "manual"
k = 4
domain = "retail"
split = "test"
task_index = [0, 1, 2, 3, 4, 5, 6, 7]
concurrency = 32
calibration = true

[user_simulator]
kind = "scripted"

[white_agent]
kind = "replay"
"""
WORKER_MODULE = "green_agent.engine.workers.child"


def test_the_flag_is_recorded_and_goes_to_the_green_agents_command_line() -> None:
    overrides = RunOverrides(workers=3)
    assert overrides.given() == {"--workers": 3}
    assert overrides.green_argv() == ["--workers", "3"]
    assert RunOverrides().green_argv() == []  # not given: the green agent's own default (one per core)


@pytest.mark.parametrize("value", ["0", "-1", str(MAX_WORKERS + 1), "many"])
def test_out_of_range_workers_are_refused_naming_the_flag(tmp_path: Path, value: str) -> None:
    scenario = tmp_path / "scenario.toml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    argv = ["run", str(scenario), "--runs-dir", str(tmp_path / "runs"), "--workers", value]
    result = runner.invoke(app, argv, env={"COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    assert "--workers" in result.output
    assert not (tmp_path / "runs").exists()  # refused before anything started


def run_watching_workers(tmp_path: Path, workers: int) -> tuple[int, str, set[int]]:
    """``arena run --workers N`` of the scenario; its exit code, output and the attempt worker processes seen."""
    scenario = tmp_path / "scenario.toml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    runs = tmp_path / "runs"
    argv = [sys.executable, "-m", "launcher", "run", str(scenario), "--runs-dir", str(runs), "--battle-id", "w"]
    argv += ["--workers", str(workers)]
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        env={**subprocess_environment(), "COLUMNS": "200"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen: set[int] = set()
    try:
        root = psutil.Process(proc.pid)
        while proc.poll() is None:
            for child in root.children(recursive=True):
                try:  # a worker's forks (its sandboxes) share its command line: count the workers themselves
                    parent = child.parent()
                    if WORKER_MODULE in " ".join(child.cmdline()) and (
                        parent is None or WORKER_MODULE not in " ".join(parent.cmdline())
                    ):
                        seen.add(child.pid)
                except psutil.Error:
                    pass
            time.sleep(0.05)  # polling only: nothing is asserted about time
        output, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, output, seen


@needs_agents
@pytest.mark.parametrize("workers", [1, 2])
def test_workers_reach_the_green_agent(tmp_path: Path, workers: int) -> None:
    code, output, seen = run_watching_workers(tmp_path, workers)
    assert code == 0, output
    # --workers 1: every attempt in the green agent's own process; 2: the battle (32 in flight) uses two workers.
    assert len(seen) == (0 if workers == 1 else 2), seen
    run_dir = tmp_path / "runs" / "w"
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert len(summary["attempts"]) == 32 and all(a["reward"] == 1.0 for a in summary["attempts"])
    record = json.loads((run_dir / "scenario.json").read_text(encoding="utf-8"))
    assert record["overrides"] == {"--workers": workers}

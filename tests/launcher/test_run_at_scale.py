"""``arena run`` of a scenario with ``concurrency = 256`` against the reference replay agent (issue 27): the battle
runs (it was refused above 16), over the green agent's attempt workers, and calibration scores 320/320 (the replay
agent no longer forgets live conversations); nothing it started outlives it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from launcher_test_helpers import REPO, ours, subprocess_environment

SCENARIO = """
name = "scale"

[pass_k_config]
mode = "all"
k = 8
domain = "retail"
split = "test"
calibration = true
concurrency = 256
attempt_timeout_s = 600
turn_timeout_s = 120

[user_simulator]
kind = "scripted"

[white_agent]
kind = "replay"
"""


@pytest.mark.slow
def test_arena_run_at_concurrency_256_scores_320_of_320(tmp_path: Path) -> None:
    scenario, runs = tmp_path / "scale.toml", tmp_path / "runs"
    scenario.write_text(SCENARIO, encoding="utf-8")
    argv = [sys.executable, "-m", "launcher", "run", str(scenario), "--runs-dir", str(runs), "-q"]
    done = subprocess.run(
        [*argv, "--battle-id", "scale"],
        cwd=REPO,
        env=subprocess_environment(),
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((runs / "scale" / "summary.json").read_text(encoding="utf-8"))
    assert summary["status"] == "completed"
    assert summary["config"]["concurrency"] == 256
    attempts = summary["attempts"]
    assert len(attempts) == 320
    assert sum(1 for a in attempts if a["reward"] == 1.0) == 320, summary["failure_breakdown"]
    deadline = time.monotonic() + 30
    while (left := ours(runs)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, [p.pid for p in left]

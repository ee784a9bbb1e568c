"""``arena run --certify`` end to end (issue 28): a flaky-agent battle that is clearly good stops early with the
right decision and says so in summary.json, summary.md and the verdict; killed -9 (its whole process group)
mid-battle, ``--resume`` continues the same seeded sequence to the same decision."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from launcher_test_helpers import REPO, attempts_on_disk, ours, subprocess_environment, wait_for

CLAIM = "pass^1>=0.3"
SCENARIO = """
name = "certify-e2e"

[pass_k_config]
mode = "manual"
k = 4
domain = "retail"
task_index = [7, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23]
split = "test"
seed = 0
max_steps = 30
turn_timeout_s = 5
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
"""16 tasks the replaying agent solves (low fault rates): pass^1 is near 1, far above 0.3, so the claim is
certified after a few tasks of the 16 (64 attempts) of the fixed design."""
KILL_AFTER = 6
"""Attempts on disk before the kill (the uninterrupted battle decides after about 24)."""


def arena(scenario: Path, runs: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "launcher", "run", str(scenario), *args, "--runs-dir", str(runs), "-q"]


def env() -> dict[str, str]:
    return {**subprocess_environment(), "COLUMNS": "200"}


def run_to_end(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=REPO, env=env(), capture_output=True, text=True, timeout=600, check=False)


def read_json(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "certify.toml"
    path.write_text(SCENARIO, encoding="utf-8")
    return path


@pytest.mark.slow
def test_certify_stops_early_and_resumes_after_kill_9_into_the_same_sequence(scenario: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    whole = run_to_end(arena(scenario, runs, "--battle-id", "whole", "--certify", CLAIM))
    assert whole.returncode == 0, whole.stdout + whole.stderr
    assert "certify pass^1 >= 0.3: CERTIFIED" in whole.stdout
    reference = read_json(runs / "whole" / "summary.json")
    cert = reference["certification"]
    assert cert["decision"] == "certified"
    assert cert["tasks_observed"] < cert["tasks_budget"] == 16
    assert cert["attempts_used"] < cert["attempts_fixed_design"] == 64
    assert len(reference["attempts"]) == cert["attempts_used"]
    assert cert["sequence_low"] > 0.3
    assert read_json(runs / "whole" / "run.json")["certify_order"] == cert["order"]
    markdown = (runs / "whole" / "summary.md").read_text(encoding="utf-8")
    assert "CERTIFIED" in markdown and "confidence sequence" in markdown

    # The same battle killed -9 (arena run and every agent it started: one process group) mid-battle.
    proc = subprocess.Popen(
        arena(scenario, runs, "--battle-id", "cut", "--certify", CLAIM),
        cwd=REPO,
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    run_dir = runs / "cut"
    try:
        wait_for(lambda: attempts_on_disk(run_dir) >= KILL_AFTER, 300, f"{KILL_AFTER} attempts")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        wait_for(lambda: not ours(runs), 60, "the run's agents to exit")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for child in ours(runs):
            child.kill()
    if (run_dir / "summary.json").exists():  # the agents run in sessions of their own and stop on their parent's
        assert read_json(run_dir / "summary.json")["status"] == "interrupted"  # death: a partial summary at most
    on_disk = attempts_on_disk(run_dir)
    assert on_disk < cert["attempts_used"]  # killed before the decision

    resumed = run_to_end(arena(scenario, runs, "--resume", "--battle-id", "cut", "--certify", CLAIM))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    final = read_json(run_dir / "summary.json")
    assert final["resumed_attempts"] == on_disk
    again = final["certification"]
    for name in ("decision", "order", "tasks_observed", "sequence_low", "sequence_high", "estimate", "claim"):
        assert again[name] == cert[name], name
    assert not ours(runs)


@pytest.mark.slow
def test_certify_against_a_baseline_run_stops_when_the_paired_difference_is_decided(
    scenario: Path, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    base = run_to_end(arena(scenario, runs, "--battle-id", "base"))  # the fixed design: every attempt
    assert base.returncode == 0, base.stdout + base.stderr
    # The same agent again: the paired difference is about 0, so "no worse by more than 0.5" is certified early.
    claim = "pass^1>=baseline-0.5"
    argv = arena(scenario, runs, "--battle-id", "vs", "--certify", claim, "--certify-baseline", str(runs / "base"))
    done = run_to_end(argv)
    assert done.returncode == 0, done.stdout + done.stderr
    cert = read_json(runs / "vs" / "summary.json")["certification"]
    assert cert["decision"] == "certified" and cert["claim"] == "pass^1 >= baseline - 0.5"
    assert cert["threshold"] == pytest.approx(-0.5) and cert["baseline"] == str((runs / "base").resolve())
    assert cert["sequence_low"] > -0.5 and cert["attempts_used"] < cert["attempts_fixed_design"]

    refused = run_to_end(arena(scenario, runs, "--certify", claim))  # no baseline named: refused before starting
    assert refused.returncode == 2 and "--certify-baseline" in refused.stdout

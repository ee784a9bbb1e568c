"""``arena run --max-cost-usd / --max-wall-s`` (issue 27): the flags are scenario overrides checked like the file;
a battle its budget stopped gets the caveat, ``budget_stop`` and exit 6 in the verdict (a failed gate or nothing
measured win); end to end, ``--resume`` with a higher budget finishes the battle with the numbers of an uninterrupted
run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from launcher_test_helpers import REPO, subprocess_environment

from green_agent.engine.config import ConfigError
from launcher.cli.run_budget import budget_verdict
from launcher.cli.run_overrides import RunOverrides, load_run_scenario
from launcher.cli.run_verdict import RunVerdict, verdict_lines

DEMO = REPO / "scenarios" / "offline_demo.toml"
STOP = {"reason": "max_cost_usd", "limit": 0.5, "spent": 0.52, "attempts_done": 3, "attempts_total": 8}


def test_the_flags_set_the_scenarios_budgets_and_bad_values_name_the_flag() -> None:
    scenario = load_run_scenario(DEMO, RunOverrides(max_cost_usd=2.5, max_wall_s=60))
    assert (scenario.pass_k_config.max_cost_usd, scenario.pass_k_config.max_wall_s) == (2.5, 60.0)
    assert RunOverrides(max_cost_usd=2.5).given() == {"--max-cost-usd": 2.5}
    with pytest.raises(ConfigError, match=r"^--max-wall-s: .*max_wall_s"):
        load_run_scenario(DEMO, RunOverrides(max_wall_s=-1))


def test_a_budget_stop_makes_a_completed_verdict_inconclusive() -> None:
    verdict = budget_verdict({"budget_stop": STOP}, RunVerdict(outcome="completed", exit_code=0, battle_id="b"))
    assert (verdict.exit_code, verdict.outcome, verdict.budget_stop) == (6, "inconclusive", STOP)
    assert any(w.startswith("stopped by budget: max_cost_usd $0.5 reached") for w in verdict.warnings)
    lines = verdict_lines(verdict)
    assert "verdict: INCONCLUSIVE (exit 6): stopped by its budget before every attempt ran (--resume)" in lines
    assert json.loads(verdict.to_json())["budget_stop"] == STOP


@pytest.mark.parametrize("exit_code", [1, 5])
def test_a_failed_gate_or_nothing_measured_wins_over_a_budget_stop(exit_code: int) -> None:
    outcome: Any = "gate_failed" if exit_code == 1 else "nothing_measured"
    verdict = budget_verdict({"budget_stop": STOP}, RunVerdict(outcome=outcome, exit_code=exit_code))
    assert verdict.exit_code == exit_code and verdict.budget_stop == STOP


def test_without_a_well_formed_budget_stop_the_verdict_is_unchanged() -> None:
    plain = RunVerdict(outcome="completed", exit_code=0)
    assert budget_verdict({}, plain) == plain
    assert budget_verdict({"budget_stop": {"reason": "whim"}}, plain) == plain


def arena(*args: str, runs: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "launcher", "run", str(DEMO), *args, "--runs-dir", str(runs), "--json"]
    env = {**subprocess_environment(), "COLUMNS": "200"}
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)


def figures(run_dir: Path) -> dict[str, Any]:
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    return {
        "summary": summary["summary"],
        "failure_breakdown": summary["failure_breakdown"],
        "attempts": [(a["task_index"], a["attempt"], a["outcome"], a["reward"]) for a in summary["attempts"]],
    }


@pytest.mark.slow
def test_max_wall_s_stops_arena_run_with_exit_6_and_a_resume_finishes_it(tmp_path: Path) -> None:
    small = ("--tasks", "7,9", "--k", "2", "--concurrency", "1")
    full = arena(*small, "--battle-id", "full", runs=tmp_path / "full")
    assert full.returncode == 0, full.stderr[-2000:]
    # 1 ms: certainly spent once the first attempt (one at a time) has run
    stopped = arena(*small, "--battle-id", "b", "--max-wall-s", "0.001", runs=tmp_path / "runs")
    assert stopped.returncode == 6, stopped.stderr[-2000:]
    verdict = json.loads(stopped.stdout)
    assert verdict["outcome"] == "inconclusive" and verdict["budget_stop"]["reason"] == "max_wall_s"
    assert verdict["attempts"] == verdict["budget_stop"]["attempts_done"] == 1
    resumed = arena(*small, "--battle-id", "b", "--resume", "--max-wall-s", "3600", runs=tmp_path / "runs")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads(resumed.stdout).get("budget_stop") is None
    assert figures(tmp_path / "runs" / "b") == figures(tmp_path / "full" / "full")

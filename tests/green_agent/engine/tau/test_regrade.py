"""``arena regrade`` under the installed tau2 (issue 30): re-scoring a run on the tau2 it was made with changes
nothing; a trajectory that cannot be read becomes the harness's infra error (never the agent's failure), and the new
run directory is a run ``arena compare`` reads. The cross-version case (26.3 -> v1.0.1) is in test_tau2_v1.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from green_agent.engine.results import BattleResult
from launcher.cli.app import app

ROOT = Path(__file__).resolve().parents[4]

SCENARIO = """name = "regrade-telecom"
[pass_k_config]
mode = "manual"
k = 2
domain = "telecom"
split = "test"
task_index = [0, 1, 2]
calibration = true
[user_simulator]
kind = "scripted"
[white_agent]
kind = "replay"
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("regrade")
    scenario = root / "s.toml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", "from launcher.cli.app import app; app()", "run", str(scenario), "--runs-dir",
         str(root / "runs"), "--battle-id", "base", "-q"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return root / "runs" / "base"


def test_regrading_on_the_same_tau2_changes_nothing(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "same"
    result = CliRunner().invoke(app, ["regrade", str(run_dir), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["rescored"], report["kept"], report["infra_errors"]) == (6, 0, 0)
    assert report["differences"] == [] and report["changed_tasks"] == []
    old = BattleResult.model_validate_json((run_dir / "summary.json").read_text(encoding="utf-8"))
    new = BattleResult.model_validate_json((out / "summary.json").read_text(encoding="utf-8"))
    assert [a.outcome for a in new.attempts] == [a.outcome for a in old.attempts] == ["success"] * 6
    assert new.fingerprint == old.fingerprint and new.battle_id == "base-regraded"
    assert (out / "regrade.json").is_file() and any((out / "trajectories").iterdir())
    compared = CliRunner().invoke(app, ["compare", str(out), str(run_dir), "--json"])
    assert compared.exit_code == 0, compared.output


def test_an_unreadable_trajectory_is_the_harnesss_error(run_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(run_dir), str(copy)], check=True)
    old = BattleResult.model_validate_json((copy / "summary.json").read_text(encoding="utf-8"))
    victim = old.attempts[0]
    assert victim.trajectory_file is not None
    (copy / victim.trajectory_file).write_text("not json\n", encoding="utf-8")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["regrade", str(copy), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["infra_errors"] == 1
    [difference] = report["differences"]
    assert difference["task_key"] == victim.task_key and difference["attempts"][0]["after"] == "infra_error"
    new = BattleResult.model_validate_json((out / "summary.json").read_text(encoding="utf-8"))
    failed = [a for a in new.attempts if a.outcome != "success"]
    assert len(failed) == 1 and failed[0].failure is not None
    assert failed[0].failure.fault_author.value == "harness" and "not JSON" in failed[0].failure.detail


def test_bad_input_exits_2(tmp_path: Path, run_dir: Path) -> None:
    missing = CliRunner().invoke(app, ["regrade", str(tmp_path / "nothing")])
    assert missing.exit_code == 2 and "not a readable Arena run" in missing.stderr
    exists = CliRunner().invoke(app, ["regrade", str(run_dir), "--out", str(tmp_path)])
    assert exists.exit_code == 2 and "exists" in exists.stderr

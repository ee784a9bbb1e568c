"""``arena compare --fail-if``: the gate's exit codes (1 fails, 0 passes, 2 bad input), its one decision rule (the
paired sign-flip test in green_agent.statistics.decide), and the issue's end-to-end case: the offline demo against a
calibration run of the same five tasks fails ``--fail-if worse``, the reverse passes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from green_agent.statistics import decide, paired_sign_flip_test, sign_flip_p_values
from launcher.cli.app import app
from tests.launcher.cli.test_compare_command import Outcomes, make_result, tasks, write_run

REPO = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["compare", *args])


def runs(tmp_path: Path, a: Outcomes, b: Outcomes) -> tuple[str, str]:
    return str(write_run(tmp_path, make_result("cand", a))), str(write_run(tmp_path, make_result("base", b)))


def outcomes(successes: list[int], k: int = 4) -> Outcomes:
    return {
        key: ["success"] * c + ["failure"] * (k - c) for key, c in zip(tasks(len(successes)), successes, strict=True)
    }


WORSE = outcomes([1, 2, 2, 3, 1, 2, 3, 2, 1, 2, 3, 2])
BEST = outcomes([4] * 12)


@pytest.mark.parametrize(
    ("a", "b", "gate", "extra", "code"),
    [
        (WORSE, BEST, "worse", [], 1),
        (BEST, WORSE, "worse", [], 0),
        (BEST, BEST, "worse", [], 0),
        (BEST, WORSE, "not-better", [], 0),
        (WORSE, BEST, "not-better", [], 1),
        (BEST, BEST, "not-better", [], 1),
        (BEST, BEST, "not-noninferior", ["--margin", "0.1"], 0),  # 12 ties, each above -0.1
        (BEST, WORSE, "not-noninferior", ["--margin", "0.1"], 0),
        (WORSE, BEST, "not-noninferior", ["--margin", "0.1"], 1),
    ],
)
def test_gate_exit_codes(tmp_path: Path, a: Outcomes, b: Outcomes, gate: str, extra: list[str], code: int) -> None:
    run_a, run_b = runs(tmp_path, a, b)
    outcome = invoke(run_a, run_b, "--fail-if", gate, *extra, "--json")
    assert outcome.exit_code == code, outcome.output
    verdict = json.loads(outcome.stdout)["verdict"]
    assert verdict["gate"] == gate and verdict["gate_passed"] is (code == 0)
    for key in ("outcome", "ci_low", "ci_high", "p_value", "mde", "metric", "test", "rule"):
        assert key in verdict


def test_without_a_gate_the_verdict_never_changes_the_exit_code(tmp_path: Path) -> None:
    run_a, run_b = runs(tmp_path, WORSE, BEST)
    outcome = invoke(run_a, run_b, "--json")
    assert outcome.exit_code == 0
    verdict = json.loads(outcome.stdout)["verdict"]
    assert verdict["outcome"] == "worse" and verdict["gate"] is None and verdict["gate_passed"] is None


def test_noninferiority_margin_decides(tmp_path: Path) -> None:
    # A is 1/4 below B on 12 tasks, uniformly: within a margin of 0.5, not within 0.1.
    a, b = outcomes([3] * 6 + [2] * 6), outcomes([4] * 6 + [3] * 6)
    run_a, run_b = runs(tmp_path, a, b)
    assert invoke(run_a, run_b, "--fail-if", "not-noninferior", "--margin", "0.5").exit_code == 0
    assert invoke(run_a, run_b, "--fail-if", "not-noninferior", "--margin", "0.1").exit_code == 1


def test_metric_option_picks_the_deciding_metric(tmp_path: Path) -> None:
    # Same success rate (2/4 everywhere) but A reaches pass^2 on more tasks: [T, T, F, F] vs [T, F, T, F]... both
    # have c = 2, so pass^j is equal; make pass^4 differ instead: A solves 6 tasks every time, B none.
    a = outcomes([4] * 6 + [0] * 6)
    b = outcomes([2] * 12)
    run_a, run_b = runs(tmp_path, a, b)
    one = json.loads(invoke(run_a, run_b, "--json").stdout)["verdict"]
    four = json.loads(invoke(run_a, run_b, "--metric", "pass^k", "--json").stdout)["verdict"]
    assert one["metric"] == "pass^1" and one["diff"] == 0.0 and one["outcome"] == "no_difference"
    assert four["metric"] == "pass^4" and four["j"] == 4 and four["diff"] == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--metric", "pass^x"], "--metric"),
        (["--metric", "pass^9"], "--metric pass^9"),
        (["--fail-if", "sideways"], "sideways"),
        (["--fail-if", "not-noninferior", "--margin", "2"], "margin"),
    ],
)
def test_bad_gate_options_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    run_a, run_b = runs(tmp_path, WORSE, BEST)
    outcome = invoke(run_a, run_b, *args)
    assert outcome.exit_code == 2, outcome.output
    assert message in outcome.output


def test_the_interval_is_the_test_inverted() -> None:
    # 0 outside the interval exactly when the test rejects, for every alternative, exact and Monte Carlo.
    rng = np.random.default_rng(4)
    for n in (6, 10, 25):
        for _ in range(30):
            d = np.clip(rng.normal(rng.normal(0, 0.15), 0.3, size=n), -1, 1)
            for alternative in ("two-sided", "greater", "less"):
                t = paired_sign_flip_test(d, alternative=alternative, seed=1)
                assert t.ci_low is not None and t.ci_high is not None and t.p_value is not None
                assert t.rejected == (not t.ci_low <= 0.0 <= t.ci_high)
                assert t.rejected == (
                    t.p_value
                    <= (0.025 if alternative == "two-sided" else 0.05) * (2 if alternative == "two-sided" else 1)
                )


def test_exact_sign_flip_level_at_ten_tasks() -> None:
    # Under the null (differences symmetric about 0) an exact test rejects at most 5% of the time: enumerate the
    # sign patterns of one fixed set of magnitudes; exactly the rejected patterns' share is the level.
    magnitudes = np.array([0.25, 0.5, 0.25, 0.75, 0.25, 0.5, 1.0, 0.25, 0.5, 0.25])
    rejected = 0
    for pattern in range(2**10):
        signs = np.array([1.0 if pattern >> i & 1 else -1.0 for i in range(10)])
        rejected += paired_sign_flip_test(signs * magnitudes).rejected
    assert rejected / 2**10 <= 0.05


def test_decide_counts_only_tasks_with_enough_attempts() -> None:
    a = {"t1": [True, True], "t2": [True]}
    b = {"t1": [False, True], "t2": [False]}
    decision = decide(a, b, j=2)
    assert decision.test.tasks == 1 and decision.metric == "pass^2"
    assert decide(a, b, j=3).outcome == "undetermined"


@pytest.mark.slow
def test_offline_demo_against_a_calibration_of_its_tasks(tmp_path: Path) -> None:
    scenario = (REPO / "scenarios" / "calibration_retail.toml").read_text(encoding="utf-8")
    scenario = scenario.replace('mode = "all"', 'mode = "manual"\ntask_index = [7, 9, 10, 11, 12]')
    assert "task_index = [7, 9, 10, 11, 12]" in (REPO / "scenarios" / "offline_demo.toml").read_text(encoding="utf-8")
    calibration = tmp_path / "calibration_demo_tasks.toml"
    calibration.write_text(scenario, encoding="utf-8")
    directories = {}
    for name, path in (("demo", REPO / "scenarios" / "offline_demo.toml"), ("calibration", calibration)):
        completed = subprocess.run(
            [str(BIN / "arena"), "run", str(path), "--battle-id", name, "-q", "--runs-dir", str(tmp_path / "runs")],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
        directories[name] = str(tmp_path / "runs" / name)

    def compare(a: str, b: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / "arena"), "compare", a, b, "--fail-if", "worse", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    worse = compare(directories["demo"], directories["calibration"])
    assert worse.returncode == 1, worse.stdout[-2000:] + worse.stderr[-2000:]
    verdict = json.loads(worse.stdout)["verdict"]
    assert verdict["outcome"] == "worse" and verdict["p_value"] == pytest.approx(1 / 32)
    better = compare(directories["calibration"], directories["demo"])
    assert better.returncode == 0, better.stdout[-2000:] + better.stderr[-2000:]
    assert json.loads(better.stdout)["verdict"]["gate_passed"] is True


@pytest.mark.parametrize("tasks", [7, 25])
def test_batch_p_values_are_the_single_tests_p_values(tasks: int) -> None:
    rng = np.random.default_rng(tasks)
    d = np.clip(rng.normal(0.05, 0.3, size=(12, tasks)), -1, 1)
    batch = sign_flip_p_values(d, seed=3, flips=3000)
    for row, (p_greater, p_less) in zip(d, batch, strict=True):
        assert paired_sign_flip_test(row, alternative="greater", seed=3, flips=3000).p_value == p_greater
        assert paired_sign_flip_test(row, alternative="less", seed=3, flips=3000).p_value == p_less
        two = paired_sign_flip_test(row, seed=3, flips=3000).p_value
        assert two == min(1.0, 2 * min(p_greater, p_less))

"""``arena plan`` and green_agent.statistics.planning: answers from a run or stated assumptions, bad input exits 2,
and the planner's power agrees with ``arena compare``'s own test on the same simulated data (seeded)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from green_agent.statistics import paired_sign_flip_test
from green_agent.statistics.planning import (
    plan_for_power,
    shifted_probabilities,
    simulate_differences,
    simulated_power,
)
from launcher.cli.app import app
from tests.launcher.cli.test_compare_command import make_result, tasks, write_run


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["plan", *args])


def test_shift_moves_the_mean_by_exactly_delta_and_stays_in_range() -> None:
    p = np.array([0.0, 0.3, 0.9, 1.0, 0.5])
    for delta in (-0.3, -0.1, 0.1, 0.3):
        q = shifted_probabilities(p, delta)
        assert np.mean(q) - np.mean(p) == pytest.approx(delta)
        assert q.min() >= 0.0 and q.max() <= 1.0
    with pytest.raises(ValueError, match="delta"):
        shifted_probabilities(np.ones(3), 0.1)


def test_planner_power_is_the_compare_tests_power() -> None:
    # The planner's vectorised test and paired_sign_flip_test on the very same simulated differences agree.
    p = np.random.default_rng(0).beta(2.0, 1.0, 500)
    d = simulate_differences(p, tasks=10, k=4, delta=-0.25, replicates=300, seed=5)
    api = np.mean([paired_sign_flip_test(row, alternative="less").rejected for row in d])
    planner = simulated_power(p, tasks=10, k=4, delta=-0.25, alternative="less", replicates=300, seed=5)
    assert planner == pytest.approx(api, abs=1e-12)


def test_plan_for_power_finds_a_task_count_that_reaches_it() -> None:
    plan = plan_for_power(np.full(1, 0.7), k=4, delta=-0.2, replicates=400, seed=1)
    assert plan.tasks is not None and plan.achieved is not None and plan.achieved >= 0.8
    below = [point.power for point in plan.curve if point.tasks < plan.tasks]
    assert below and max(below) < 0.8 + 0.05


def test_plan_from_a_run_reports_attempts_cost_and_time(tmp_path: Path) -> None:
    outcomes = {key: ["success", "failure", "success", "success"] for key in tasks(12)}
    run = write_run(tmp_path, make_result("r1", outcomes))
    outcome = invoke(str(run), "--delta", "-0.2", "--replicates", "300", "--json")
    assert outcome.exit_code == 0, outcome.output
    data = json.loads(outcome.stdout)
    assert data["schema_id"] == "arena.plan/1" and data["k"] == 4 and data["mean_p"] == pytest.approx(0.75)
    (answer,) = data["answers"]
    assert answer["plan"]["tasks"] >= 2 and answer["plan"]["attempts_per_run"] == answer["plan"]["tasks"] * 4
    assert answer["expected_wall_s"] == pytest.approx(60.0 / 48 * answer["plan"]["attempts_per_run"])
    assert data["costs"]["cost_per_attempt_usd"] is None and answer["expected_cost_usd"] is None


def test_plan_from_stated_assumptions_prints_both_answers() -> None:
    outcome = invoke("--p", "beta:2,2", "--k", "2", "--replicates", "200", "--tasks-available", "300")
    assert outcome.exit_code == 0, outcome.output
    assert "half-width <= 0.1" in outcome.stdout and "difference of -0.1" in outcome.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "RUN) or --p"),
        (["--p", "1.5"], "--p"),
        (["--p", "beta:x"], "beta"),
        (["--p", "0.5", "--k", "2", "--j", "3"], "--j 3"),
        (["/nonexistent/run"], "nonexistent"),
        (["--p", "1.0", "--delta", "0.1"], "delta"),
    ],
)
def test_bad_input_exits_2(args: list[str], message: str) -> None:
    outcome = invoke(*args)
    assert outcome.exit_code == 2, outcome.output
    assert message in outcome.output

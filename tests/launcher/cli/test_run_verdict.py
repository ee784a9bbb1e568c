"""``arena run``'s verdict without running a battle: gates parsed and judged, exit codes from summary.json (1 gate
failed, 5 nothing measured), the verdict's size at 80 columns whatever the battle size, and gate flags refused before
anything starts (exit 2, naming the flag)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from green_agent.engine.config import ConfigError
from launcher.cli.app import app
from launcher.cli.run_verdict import (
    EXIT_GATE_FAILED,
    EXIT_NOTHING_MEASURED,
    EXIT_OK,
    GateSpec,
    evaluate_gates,
    load_summary,
    one_line,
    parse_gates,
    read_figures,
    verdict_from_summary,
    verdict_lines,
)

RUN_DIR = Path("runs/b1")


def macro_row(j: int, hat: float, at: float, width: float = 0.1) -> dict[str, Any]:
    return {
        "j": j,
        "coverage": 5,
        "total_tasks": 5,
        "pass_hat_mean": hat,
        "pass_hat_ci_low": max(0.0, hat - width),
        "pass_hat_ci_high": min(1.0, hat + width),
        "pass_at_mean": at,
        "pass_at_ci_low": max(0.0, at - width),
        "pass_at_ci_high": min(1.0, at + width),
    }


def summary(
    outcomes: list[str],
    *,
    k: int = 4,
    tasks: int = 5,
    breakdown: dict[str, int] | None = None,
    calibration: bool = False,
) -> dict[str, Any]:
    """A summary.json as the green agent writes it (only the fields the verdict reads, plus one it ignores)."""
    return {
        "schema": "arena.battle-result/1",
        "battle_id": "b1",
        "calibration": calibration,
        "config": {"k": k},
        "attempts": [{"outcome": o, "task_key": f"retail/test/{i // k}"} for i, o in enumerate(outcomes)],
        "summary": {
            "confidence": 0.95,
            "total_tasks": tasks,
            "macro": [macro_row(j, 0.6 / j, 1 - 0.4**j) for j in range(1, k + 1)],
            "micro": {"rate": 0.55, "ci_low": 0.34, "ci_high": 0.74, "method": "betting_wsr2024_ratio"},
            "interval_method": "betting_wsr2024+clopper_pearson",
            "interval_target": "tasks_of_this_kind",
        },
        "failure_breakdown": breakdown or {},
        "infrastructure_errors": outcomes.count("infra_error"),
        "status": "completed",
        "something_new": {"ignored": True},
    }


# --------------------------------------------------------------------------------------------------------- gates


def test_gate_metrics_resolve_against_k() -> None:
    gates = parse_gates(["pass^k=0.8", "pass@2=0.9", "POOLED=0.5", "pass^1=1"], "--fail-under", 4)
    assert [(g.metric, g.threshold, g.decided_by) for g in gates] == [
        ("pass^4", 0.8, "estimate"),
        ("pass@2", 0.9, "estimate"),
        ("pooled", 0.5, "estimate"),
        ("pass^1", 1.0, "estimate"),
    ]
    assert parse_gates(["pass^2=0.1"], "--fail-under-lower", 4)[0].decided_by == "lower"


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ("pass^5=0.5", "between 1 and k = 4"),
        ("pass^0=0.5", "between 1 and k = 4"),
        ("pass^4", "METRIC=VALUE"),
        ("accuracy=0.5", "METRIC=VALUE"),
        ("pass^4=high", "between 0 and 1"),
        ("pass^4=1.5", "between 0 and 1"),
        ("pass^4=nan", "between 0 and 1"),
    ],
)
def test_bad_gates_are_configuration_errors_naming_the_flag(raw: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_gates([raw], "--fail-under-lower", 4)
    assert str(caught.value).startswith("--fail-under-lower:")
    assert words in str(caught.value) and raw in str(caught.value)


def test_point_estimate_and_lower_bound_decide_their_own_gates() -> None:
    figures = read_figures(summary(["success"] * 8))
    assert figures["pass^1"].estimate == pytest.approx(0.6) and figures["pass^1"].ci_low == pytest.approx(0.5)
    assert figures["pooled"].ci_low == 0.34
    at_point = GateSpec(flag="--fail-under", metric="pass^1", threshold=0.55)
    at_lower = GateSpec(flag="--fail-under-lower", metric="pass^1", threshold=0.55)
    point, lower = evaluate_gates([at_point, at_lower], figures)
    assert point.passed and point.value == pytest.approx(0.6)
    assert not lower.passed and lower.value == pytest.approx(0.5)


def test_a_figure_the_summary_lacks_fails_its_gate() -> None:
    data = summary(["success"] * 8)
    data["summary"]["macro"] = data["summary"]["macro"][:2]  # no task had 3 or 4 counted attempts
    (result,) = evaluate_gates(parse_gates(["pass^4=0"], "--fail-under", 4), read_figures(data))
    assert result.value is None and not result.passed


# ------------------------------------------------------------------------------------------------------ exit codes


def test_exit_codes_from_the_summary() -> None:
    gates = parse_gates(["pass^1=0.5"], "--fail-under", 4)
    assert verdict_from_summary(summary(["success", "failure"] * 4), [], RUN_DIR).exit_code == EXIT_OK
    assert verdict_from_summary(summary(["success", "failure"] * 4), gates, RUN_DIR).exit_code == EXIT_OK
    failing = parse_gates(["pass^1=0.7"], "--fail-under", 4)
    verdict = verdict_from_summary(summary(["success", "failure"] * 4), failing, RUN_DIR)
    assert (verdict.exit_code, verdict.outcome, verdict.gate_passed) == (EXIT_GATE_FAILED, "gate_failed", False)
    # Every attempt an infrastructure error: nothing was measured, whatever the gate (and the gate is not judged
    # as passed or failed on numbers that do not exist).
    nothing = verdict_from_summary(summary(["infra_error"] * 4), gates, RUN_DIR)
    assert (nothing.exit_code, nothing.outcome) == (EXIT_NOTHING_MEASURED, "nothing_measured")
    assert "all 4 attempt(s) were infrastructure errors" in str(nothing.error)
    assert verdict_from_summary(summary([]), [], RUN_DIR).exit_code == EXIT_NOTHING_MEASURED
    one_counted = verdict_from_summary(summary(["infra_error"] * 3 + ["failure"]), [], RUN_DIR)
    assert one_counted.exit_code == EXIT_OK


def test_a_summary_without_statistics_still_has_a_verdict() -> None:
    """What a green agent of another version (or a test fake) may write: the verdict says n/a, it does not crash."""
    data = {"battle_id": "b2", "attempts": [{"outcome": "success"}, {"outcome": "failure"}, "junk"], "status": "x"}
    verdict = verdict_from_summary(data, parse_gates(["pooled=0.1"], "--fail-under", 2), RUN_DIR)
    assert (verdict.attempts, verdict.successes, verdict.failures) == (2, 1, 1)
    assert verdict.exit_code == EXIT_GATE_FAILED  # no pooled figure: the gate cannot pass
    assert any("status is x" in w for w in verdict.warnings)
    assert verdict_lines(verdict)[0] == "Arena pass^k evaluation: b2"


def test_load_summary_refuses_what_is_not_an_object(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ValueError, match="not a JSON object"):
        load_summary(tmp_path)
    (tmp_path / "summary.json").write_text(json.dumps(summary(["success"])), encoding="utf-8")
    assert load_summary(tmp_path)["battle_id"] == "b1"


# ------------------------------------------------------------------------------------------------------ the text


def rows_at(lines: list[str], width: int = 80) -> int:
    return sum(max(1, math.ceil(len(line) / width)) for line in lines)


@pytest.mark.parametrize(("k", "tasks"), [(2, 1), (4, 5), (8, 40), (32, 300)])
def test_the_verdict_fits_one_80x25_screen_whatever_the_battle_size(k: int, tasks: int) -> None:
    categories = [
        "format_error",
        "missing_outputs",
        "incomplete_outputs",
        "timeout",
        "communication_error",
        "white_agent_error",
        "task_incomplete",
        "unknown_failure",
    ]
    outcomes = (["success", "failure", "infra_error"] * (k * tasks))[: k * tasks]
    data = summary(outcomes, k=k, tasks=tasks, breakdown={c: i + 1 for i, c in enumerate(categories)}, calibration=True)
    gates = parse_gates(["pass^k=0.8", "pass@1=0.5"], "--fail-under", k)
    gates += parse_gates(["pooled=0.5"], "--fail-under-lower", k)
    lines = verdict_lines(verdict_from_summary(data, gates, RUN_DIR, duration_s=12.5))
    assert rows_at(lines) <= 25, "\n".join(lines)
    assert all(len(line) <= 80 for line in lines if not line.startswith(("summary:", "details"))), lines
    text = "\n".join(lines)
    assert f"pass^{k}" in text and "gate pooled lower bound 0.340 >= 0.5: FAILED" in text
    assert "verdict: GATE FAILED (exit 1)" in text
    assert "about tasks of this kind" in text and "method betting_wsr2024+clopper_pearson" in text
    assert ("infrastructure errors:" in text) == ("infra_error" in outcomes)
    assert lines[-1] == f"summary: {RUN_DIR / 'summary.json'}  (12.5 s)"
    if tasks < 10:
        assert "caveat: only" in text


def test_quiet_is_one_line() -> None:
    verdict = verdict_from_summary(summary(["success", "failure"] * 4), [], RUN_DIR)
    line = one_line(verdict)
    assert "\n" not in line
    assert line.startswith("COMPLETED; b1; pass^4 0.150 [0.050, 0.250]; pooled 0.550 [0.340, 0.740]")
    assert line.endswith(f"exit 0; {RUN_DIR / 'summary.json'}")


def test_json_round_trips_with_its_schema() -> None:
    gates = parse_gates(["pass^2=0.9"], "--fail-under-lower", 4)
    data = json.loads(verdict_from_summary(summary(["success"] * 8), gates, RUN_DIR).to_json())
    assert data["schema"] == "arena.run-verdict/1"
    assert (data["outcome"], data["exit_code"], data["gate_passed"]) == ("gate_failed", 1, False)
    assert data["gates"] == [
        {
            "flag": "--fail-under-lower",
            "metric": "pass^2",
            "threshold": 0.9,
            "decided_by": "lower",
            "value": pytest.approx(0.2),
            "passed": False,
        }
    ]
    assert [m["metric"] for m in data["metrics"]][:5] == ["pass^1", "pass^2", "pass^3", "pass^4", "pass@1"]


# --------------------------------------------------------------------------------------- the flags, before a start


def test_a_bad_gate_exits_2_before_anything_starts(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.toml"
    scenario.write_text('[pass_k_config]\nk = 4\n[white_agent]\nkind = "replay"\n', encoding="utf-8")
    runs = tmp_path / "runs"
    result = CliRunner().invoke(app, ["run", str(scenario), "--runs-dir", str(runs), "--fail-under", "pass^8=0.5"])
    assert result.exit_code == 2, result.output
    assert "--fail-under: 'pass^8=0.5': j must be between 1 and k = 4" in result.output
    assert not runs.exists()
    result = CliRunner().invoke(app, ["run", str(scenario), "--json", "--fail-under-lower", "pooled"])
    assert result.exit_code == 2
    verdict = json.loads(result.stdout.strip().splitlines()[-1])
    assert (verdict["outcome"], verdict["exit_code"]) == ("configuration_error", 2)
    assert "--fail-under-lower" in verdict["error"]

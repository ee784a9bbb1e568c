"""``arena run --json``: the verdict of a ``certify`` battle carries summary.json's ``certification`` (without its task
order), and its exit code and outcome follow the decision (issue 28, docs/results.md)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from green_agent.statistics.certification import build_certification
from launcher.cli.run_command import RunOptions, RunReport, conclude_run
from launcher.cli.run_verdict import read_certification
from tests.green_agent.engine.results.builders import battle_result

EXPECTED = {"certified": (0, "completed"), "refuted": (1, "gate_failed"), "inconclusive": (6, "inconclusive")}


def summary_with(decision: str, changes: dict[str, Any] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = battle_result().model_dump(mode="json")
    cert = build_certification(
        claim="pass^1 >= baseline - 0.05",
        j=1,
        threshold=0.475,
        confidence=0.9,
        values=[0.5, 0.75, 0.5, 0.5],
        decision=decision,  # type: ignore[arg-type]
        tasks_budget=10,
        attempts_used=18,
        attempts_fixed_design=40,
        order_seed=7,
        order=[f"retail/test/{i}" for i in range(10)],
        waiting_for="retail/test/4" if decision == "inconclusive" else None,
        baseline="/runs/base",
    ).model_dump(mode="json")
    data["certification"] = {**cert, **(changes or {})}
    return data


async def json_verdict(tmp_path: Path, summary: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    run_dir = tmp_path / "runs" / "b-1"
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    report = RunReport(exit_code=0)
    options = RunOptions(scenario_path=tmp_path / "s.toml", json_output=True)
    console = Console(file=io.StringIO(), width=80)
    await conclude_run(console, report, run_dir / "summary.json", [], options, 1.0)
    assert report.verdict is not None
    return report.exit_code, json.loads(report.verdict.to_json())


@pytest.mark.parametrize("decision", sorted(EXPECTED))
async def test_the_json_verdict_carries_the_certification_and_its_exit_code(tmp_path: Path, decision: str) -> None:
    summary = summary_with(decision)
    exit_code, verdict = await json_verdict(tmp_path, summary)
    assert (exit_code, verdict["exit_code"], verdict["outcome"]) == (*EXPECTED[decision][:1], *EXPECTED[decision])
    cert = verdict["certification"]
    expected = {k: v for k, v in summary["certification"].items() if k not in ("order", "bets")}
    assert cert == expected
    assert "order" not in cert and cert["decision"] == decision and cert["baseline"] == "/runs/base"
    assert cert["attempts_used"] == 18 and cert["attempts_fixed_design"] == 40
    assert cert["sequence_low"] is not None and "fixed-sample" in cert["interval_note"]


async def test_without_certify_the_verdict_has_null_certification(tmp_path: Path) -> None:
    summary = summary_with("certified")
    summary.pop("certification")
    _, verdict = await json_verdict(tmp_path, summary)
    assert verdict["certification"] is None


@pytest.mark.parametrize(
    "bad", [{"decision": "won"}, {"estimate": "0.5"}, {"attempts_used": -3}, {"claim": "x" * 5000}, {"order_seed": 1.5}]
)
def test_a_malformed_certification_gives_none(bad: dict[str, Any]) -> None:
    assert read_certification(summary_with("certified", bad)) is None
    assert read_certification({"certification": ["certified"]}) is None

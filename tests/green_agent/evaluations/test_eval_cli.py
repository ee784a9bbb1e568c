"""``arena score`` and ``arena eval-csv`` end to end, offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from launcher.cli.app import app
from tests.green_agent.evaluations.conftest import REPO, SAMPLE_CSV

runner = CliRunner()


def test_score_run_format_offline(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    result = runner.invoke(
        app, ["score", str(REPO / "scenarios" / "agentic_conversations.json"), "--judge", "lexical", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "inconsistent" in result.output and "pass^3" in result.output
    body = json.loads(out.read_text())
    assert body["kind"] == "run" and body["judge"]["kind"] == "lexical"
    agg = body["aggregated_metrics"]
    assert (agg["total_conversations"], agg["fully_correct_conversations"]) == (5, 4)
    assert agg["pass_at_k"] == 1.0 and agg["pass_pow_k"] == pytest.approx(0.4)


def test_score_samples_format_offline(tmp_path: Path) -> None:
    out = tmp_path / "samples.json"
    result = runner.invoke(
        app, ["score", str(REPO / "scenarios" / "agent_traces.json"), "--judge", "lexical", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "tool_call_accuracy[strict]" in result.output  # rich markup must not eat the mode
    body = json.loads(out.read_text())
    summary = {s["metric"]: s["mean"] for s in body["summary"]}
    assert summary["tool_call_accuracy[strict]"] == 0.5  # the investment call adds a compounding argument
    assert summary["tool_call_accuracy[flexible]"] == 1.0  # 3 of 3 reference arguments match
    assert body["judges"] == [
        {
            "kind": "lexical",
            "name": "lexical",
            "version": "lexical-v1",
            "method": "keyword containment and token overlap (offline, deterministic)",
        }
    ]


def test_score_json_only_and_bad_files(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["score", str(REPO / "scenarios" / "agentic_conversations.json"), "--judge", "lexical", "--json"]
    )
    assert result.exit_code == 0
    assert json.loads(result.stdout)["kind"] == "run"
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    result = runner.invoke(app, ["score", str(bad)])
    assert result.exit_code == 2 and "unrecognised document" in result.output
    no_key = tmp_path / "no_key.json"
    no_key.write_text((REPO / "scenarios" / "agentic_conversations.json").read_text())
    result = runner.invoke(app, ["score", str(no_key), "--no-cache"], env={"LLM_API_KEY": ""})
    assert result.exit_code == 2 and "Failed to create LLM connector: no API key" in result.output


def test_eval_csv_with_the_finance_demo(tmp_path: Path) -> None:
    out = tmp_path / "csv.json"
    result = runner.invoke(
        app,
        [
            "eval-csv",
            str(SAMPLE_CSV),
            "--agent",
            "finance-demo",
            "--out",
            str(out),
            "--concurrency",
            "8",
            "--log-dir",
            str(tmp_path / "logs"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "started the offline finance demo agent" in result.output
    body = json.loads(out.read_text())
    total = len(body["cases"])
    assert body["summary"]["passed"] == total - 1 and body["error"] is None


def test_eval_csv_reports_invalid_suites(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("test_id,query\nt1,hello\n")
    result = runner.invoke(app, ["eval-csv", str(bad), "--agent", "http://127.0.0.1:9"])
    assert result.exit_code == 2
    assert "expected_tool" in result.output and "missing" in result.output

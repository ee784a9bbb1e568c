"""``arena export`` on battle results built through the public models and written the way the green agent writes
them (green_agent.engine.report.write_run_dir): the leaderboard results.json shape, CSV rows, sources, and refusals.
(test_compose_loopback and test_agentbeats_scenarios export run directories of real battles.)"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from green_agent.engine.report import render_markdown, write_run_dir
from green_agent.engine.results import (
    AttemptResult,
    BattleResult,
    Failure,
    FailureCategory,
    FaultAuthor,
    RewardBreakdown,
)
from green_agent.statistics import summarize_trials
from launcher.cli.app import app
from launcher.cli.export_command import CSV_COLUMNS, ExportError, ExportFormat, export_battles

Outcome = tuple[str, FailureCategory | None, str]


def make_result(
    battle_id: str = "demo-1", outcomes: dict[int, list[Outcome]] | None = None, status: str = "completed"
) -> BattleResult:
    """A battle through the public models: per task index, (outcome, failure category, failure detail)."""
    outcomes = (
        outcomes
        if outcomes is not None
        else {
            7: [("success", None, ""), ("failure", FailureCategory.FORMAT_ERROR, '=HYPERLINK("http://x")')],
            9: [("infra_error", FailureCategory.USER_SIMULATOR_ERROR, "LLM answered 500"), ("success", None, "")],
        }
    )
    attempts: list[AttemptResult] = []
    for task_index, runs in outcomes.items():
        for number, (outcome, category, detail) in enumerate(runs, start=1):
            failure = None
            if category is not None:
                author = FaultAuthor.USER_SIMULATOR if outcome == "infra_error" else FaultAuthor.WHITE_AGENT
                failure = Failure(category=category, fault_author=author, detail=detail)
            attempts.append(
                AttemptResult(
                    battle_id=battle_id,
                    domain="retail",
                    split="test",
                    task_index=task_index,
                    task_id=f"tau2-{task_index}",
                    attempt=number,
                    context_id=f"ctx-{task_index}-{number}",
                    outcome=outcome,
                    reward=None if outcome == "infra_error" else float(outcome == "success"),
                    steps=10 + number,
                    duration_s=1.5 * number,
                    termination_reason="user_stop",
                    failure=failure,
                    breakdown=RewardBreakdown(
                        reward=float(outcome == "success"),
                        db_match=outcome == "success",
                        action_total=3,
                        action_met=3 if outcome == "success" else 1,
                    ),
                    trajectory_file=f"trajectories/{task_index}-{number}.jsonl",
                )
            )
    trials = {f"retail/test/{t}": [a.trial_outcome for a in attempts if a.task_index == t] for t in outcomes}
    summary = summarize_trials(trials, k_max=2, n_bootstrap=50).model_dump(mode="json")
    failures: dict[str, int] = {}
    for attempt in attempts:
        if attempt.failure is not None:
            failures[attempt.failure.category.value] = failures.get(attempt.failure.category.value, 0) + 1
    return BattleResult(
        battle_id=battle_id,
        white_agent_url="http://white:9004",
        config={"k": 2, "domain": "retail"},
        started_at="2026-11-22T00:00:00Z",
        finished_at="2026-11-22T00:01:00Z",
        duration_s=60.0,
        attempts=attempts,
        summary=summary,
        failure_breakdown=failures,
        infrastructure_errors=sum(1 for a in attempts if a.outcome == "infra_error"),
        status=status,
    )


def run_dir(tmp_path: Path, result: BattleResult) -> Path:
    directory = tmp_path / "runs" / result.battle_id
    write_run_dir(directory, result, render_markdown(result), [])
    return directory


def csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_results_json_is_the_leaderboard_shape_with_the_battle_result(tmp_path: Path) -> None:
    result = make_result()
    export = export_battles(run_dir(tmp_path, result), ExportFormat.RESULTS_JSON, ["white_agent=ab-123"])
    document = json.loads(export.text)
    assert document == {"participants": {"white_agent": "ab-123"}, "results": [result.model_dump(mode="json")]}
    assert BattleResult.model_validate(document["results"][0]) == result


def test_summary_json_and_run_directory_give_the_same_export(tmp_path: Path) -> None:
    directory = run_dir(tmp_path, make_result())
    from_dir = export_battles(directory, ExportFormat.CSV).text
    assert export_battles(directory / "summary.json", ExportFormat.CSV).text == from_dir


def test_csv_has_one_row_per_attempt_in_order_with_the_failure_taxonomy(tmp_path: Path) -> None:
    result = make_result()
    rows = csv_rows(export_battles(run_dir(tmp_path, result), ExportFormat.CSV).text)
    assert list(rows[0]) == list(CSV_COLUMNS)
    assert [(r["task_index"], r["attempt"], r["outcome"]) for r in rows] == [
        (str(a.task_index), str(a.attempt), a.outcome) for a in result.attempts
    ]
    failed = rows[1]
    assert failed["failure_category"] == "format_error" and failed["fault_author"] == "white_agent"
    assert failed["counted"] == "true" and failed["reward"] == "0.0" and failed["k"] == "2"
    infra = rows[2]
    assert infra["counted"] == "false" and infra["reward"] == "" and infra["fault_author"] == "user_simulator"
    assert rows[0]["failure_category"] == "" and rows[0]["db_match"] == "true" and rows[0]["action_met"] == "3"


def test_csv_does_not_let_a_spreadsheet_evaluate_agent_text(tmp_path: Path) -> None:
    rows = csv_rows(export_battles(run_dir(tmp_path, make_result()), ExportFormat.CSV).text)
    assert rows[1]["failure_detail"] == '\'=HYPERLINK("http://x")'
    assert rows[0]["duration_s"] == "1.5"  # numbers are left alone


def test_backend_battle_record_names_its_participants(tmp_path: Path) -> None:
    result = make_result()
    record = {
        "battle_id": "b-9",
        "state": "finished",
        "green_agent_id": "g-1",
        "opponents": [{"name": "white_agent", "agent_id": "w-1"}],
        "result": {"winner": "green_agent", "detail": result.model_dump(mode="json")},
    }
    path = tmp_path / "battle.json"
    path.write_text(json.dumps(record), encoding="utf-8")
    document = json.loads(export_battles(path, ExportFormat.RESULTS_JSON).text)
    assert document["participants"] == {"white_agent": "w-1"}
    overridden = json.loads(export_battles(path, ExportFormat.RESULTS_JSON, ["white_agent=ab-1", "x=y"]).text)
    assert overridden["participants"] == {"white_agent": "ab-1", "x": "y"}
    assert overridden["results"] == document["results"] == [result.model_dump(mode="json")]


def test_a_results_json_turns_into_csv_across_its_battles(tmp_path: Path) -> None:
    first, second = make_result("b-1"), make_result("b-2")
    path = tmp_path / "results.json"
    path.write_text(
        json.dumps(
            {
                "participants": {"white_agent": "w"},
                "results": [first.model_dump(mode="json"), second.model_dump(mode="json")],
            }
        )
    )
    rows = csv_rows(export_battles(path, ExportFormat.CSV).text)
    assert [r["battle_id"] for r in rows] == ["b-1"] * 4 + ["b-2"] * 4
    assert json.loads(export_battles(path, ExportFormat.RESULTS_JSON).text)["participants"] == {"white_agent": "w"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no summary.json"),
        ("not json", "not JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"battle_id": "x", "attempts": [{"domain": 1}]}', "not an Arena battle result"),
        ('{"battle_id": "x", "state": "error", "error": "launcher died", "result": null}', "launcher died"),
        ('{"hello": 1}', "neither a summary.json"),
    ],
)
def test_sources_that_are_not_finished_battles_are_refused_with_the_reason(
    tmp_path: Path, content: str | None, message: str
) -> None:
    source = tmp_path / "run"
    source.mkdir()
    if content is not None:
        source = source / "summary.json"
        source.write_text(content, encoding="utf-8")
    with pytest.raises(ExportError, match=message):
        export_battles(source, ExportFormat.RESULTS_JSON)


def test_cancelled_battles_need_allow_incomplete(tmp_path: Path) -> None:
    directory = run_dir(tmp_path, make_result(status="cancelled"))
    with pytest.raises(ExportError, match=r"cancelled.*--allow-incomplete"):
        export_battles(directory, ExportFormat.RESULTS_JSON)
    assert json.loads(export_battles(directory, ExportFormat.RESULTS_JSON, allow_incomplete=True).text)["results"]


@pytest.mark.parametrize("item", ["white_agent", "=id", "role=", ""])
def test_bad_participant_ids_are_refused(tmp_path: Path, item: str) -> None:
    with pytest.raises(ExportError, match="--participant-id"):
        export_battles(run_dir(tmp_path, make_result()), ExportFormat.RESULTS_JSON, [item])


def test_command_writes_the_file_or_standard_output(tmp_path: Path) -> None:
    directory = run_dir(tmp_path, make_result())
    runner = CliRunner()
    out = tmp_path / "export" / "results.json"
    written = runner.invoke(app, ["export", str(directory), "--out", str(out), "--participant-id", "white_agent=w"])
    assert written.exit_code == 0, written.output
    assert json.loads(out.read_text(encoding="utf-8"))["participants"] == {"white_agent": "w"}
    printed = runner.invoke(app, ["export", str(directory), "--format", "csv"])
    assert printed.exit_code == 0 and printed.output.startswith(",".join(CSV_COLUMNS))
    noted = runner.invoke(app, ["export", str(directory)])
    assert noted.exit_code == 0 and "participants is empty" in noted.output
    missing = runner.invoke(app, ["export", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "no such file or directory" in missing.output
    wrong = runner.invoke(app, ["export", str(directory), "--format", "xml"])
    assert wrong.exit_code == 2


OUTCOMES = st.sampled_from(
    [
        ("success", None, ""),
        ("failure", FailureCategory.TASK_INCOMPLETE, "db differs"),
        ("failure", FailureCategory.TIMEOUT, "+1 step over"),
        ("infra_error", FailureCategory.HARNESS_ERROR, "@evaluator raised"),
    ]
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.integers(0, 50), st.lists(OUTCOMES, min_size=1, max_size=4), min_size=1, max_size=4))
def test_csv_and_json_agree_on_every_attempt(tmp_path: Path, outcomes: dict[int, list[Any]]) -> None:
    result = make_result("prop", outcomes)
    directory = tmp_path / "runs" / "prop"
    write_run_dir(directory, result, "", [])
    rows = csv_rows(export_battles(directory, ExportFormat.CSV).text)
    attempts = json.loads(export_battles(directory, ExportFormat.RESULTS_JSON).text)["results"][0]["attempts"]
    assert len(rows) == len(attempts) == sum(len(v) for v in outcomes.values())
    for row, attempt in zip(rows, attempts, strict=True):
        assert row["outcome"] == attempt["outcome"]
        assert row["counted"] == ("false" if attempt["outcome"] == "infra_error" else "true")
        category = (attempt["failure"] or {}).get("category", "")
        assert row["failure_category"] == category
        detail = (attempt["failure"] or {}).get("detail") or ""
        assert row["failure_detail"].lstrip("'") == detail

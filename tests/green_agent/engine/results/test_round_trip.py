"""summary.json as typed data: written from the models, read back into the same models, unchanged on the way, and
of the published schema. A JSON written before the schema identifier existed reads as version 1 and is written back
with the same keys and values plus ``"schema"`` only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from green_agent.engine.config import RENAMED_FIELDS
from green_agent.engine.report import macro_pass_hat, render_markdown, winner_for, write_run_dir
from green_agent.engine.results import RESULT_SCHEMA_ID, BattleResult
from green_agent.statistics import MacroStat, TrialsSummary
from launcher.cli.export_command import ExportFormat, export_battles
from tests.green_agent.engine.results.builders import battle_result
from tests.green_agent.engine.results.conftest import TINY_BATTLE, RealRun

ROOT = Path(__file__).resolve().parents[4]
LEGACY = Path(__file__).parent / "data" / "legacy_summary.json"
"""A summary.json the offline demo wrote before the identifier existed (tau2's raw scores emptied after the first
attempt to keep the file small)."""


def schema_validator() -> Draft202012Validator:
    return Draft202012Validator(json.loads((ROOT / "docs" / "summary.schema.json").read_text(encoding="utf-8")))


def schema_errors(document: Any) -> list[str]:
    return [f"{e.json_path}: {e.message}" for e in schema_validator().iter_errors(document)]


def written(result: BattleResult, tmp_path: Path) -> str:
    run_dir = tmp_path / result.battle_id
    write_run_dir(run_dir, result, render_markdown(result), [])
    return (run_dir / "summary.json").read_text(encoding="utf-8")


def test_summary_json_round_trips_byte_for_byte_through_the_models(tmp_path: Path) -> None:
    result = battle_result()
    text = written(result, tmp_path)
    again = BattleResult.model_validate_json(text)
    assert again == result
    assert isinstance(again.summary, TrialsSummary) and isinstance(again.summary.macro[0], MacroStat)
    assert written(again, tmp_path / "again") == text


def test_summary_json_declares_its_schema_first_and_matches_it(tmp_path: Path) -> None:
    data = json.loads(written(battle_result(), tmp_path))
    assert next(iter(data)) == "schema" and data["schema"] == RESULT_SCHEMA_ID == "arena.battle-result/1"
    assert schema_errors(data) == []


def test_the_typed_summary_is_what_summarize_trials_returned(tmp_path: Path) -> None:
    result = battle_result()
    data = json.loads(written(result, tmp_path))
    assert data["summary"] == result.summary.model_dump(mode="json")
    assert data["config"] == result.config.model_dump(mode="json")
    assert [row["j"] for row in data["summary"]["macro"]] == [1, 2, 3, 4]
    assert macro_pass_hat(result, 4) == data["summary"]["macro"][3]["pass_hat_mean"]
    assert macro_pass_hat(result, 9) is None
    assert winner_for(result, "white_agent") in {"white_agent", "green_agent"}


def current_names(legacy: dict[str, Any]) -> dict[str, Any]:
    """``legacy`` as the models write it now: ``"schema"`` first, and the config fields renamed since (same place,
    same value; green_agent.engine.config.RENAMED_FIELDS)."""
    config = {RENAMED_FIELDS.get(key, key): value for key, value in legacy["config"].items()}
    return {"schema": RESULT_SCHEMA_ID, **legacy, "config": config}


def test_a_legacy_summary_reads_as_version_1_and_keeps_every_key_and_value() -> None:
    text = LEGACY.read_text(encoding="utf-8")
    legacy = json.loads(text)
    assert "schema" not in legacy and "task_id" in legacy["config"]
    result = BattleResult.model_validate_json(text)
    assert result.schema_id == RESULT_SCHEMA_ID
    dumped = result.model_dump(mode="json")
    expected = current_names(legacy)
    assert dumped == expected
    # Same keys in the same order, same values: the text differs by the schema line (and renamed config keys) only.
    assert json.dumps(dumped, indent=2, ensure_ascii=False) == json.dumps(expected, indent=2, ensure_ascii=False)
    assert schema_errors(dumped) == []
    assert schema_errors(legacy) == ["$: 'schema' is a required property"]


def test_markdown_of_a_legacy_summary_has_the_seed_table() -> None:
    result = BattleResult.model_validate_json(LEGACY.read_text(encoding="utf-8"))
    markdown = render_markdown(result)
    assert "| 1 | 0.550 | [0.400, 0.700] | 0.550 | [0.400, 0.700] | 5/5 |" in markdown
    assert "| 4 | 0.000 | [0.000, 0.000] | 1.000 | [1.000, 1.000] | 5/5 |" in markdown
    assert "- micro success rate (pooled over attempts): 0.550 [0.342, 0.742] (Wilson 95%)" in markdown


def test_a_real_battle_writes_a_typed_summary_json_and_the_same_result_artifact(real_run: RealRun) -> None:
    text = real_run.summary_path.read_text(encoding="utf-8")
    data = json.loads(text)
    assert data["schema"] == RESULT_SCHEMA_ID
    assert schema_errors(data) == []
    result = BattleResult.model_validate_json(text)
    assert result.config.k == TINY_BATTLE["k"] and result.config.domain == "mock"
    assert [a.outcome for a in result.attempts] == ["success", "success"]
    macro = result.summary.macro_at(2)
    assert macro is not None and macro.pass_hat_mean == 1.0
    # The A2A Result artifact carries the very same data (clean_json turns tuples into lists in both).
    assert real_run.outcome.result == data
    # Read back and written again: byte for byte the same file, and the same markdown as summary.md.
    rewritten = real_run.run_dir.parent / "rewritten"
    write_run_dir(rewritten, result, render_markdown(result), [])
    assert (rewritten / "summary.json").read_text(encoding="utf-8") == text
    assert (rewritten / "summary.md").read_text(encoding="utf-8") == (real_run.run_dir / "summary.md").read_text(
        encoding="utf-8"
    )


def test_export_reads_the_typed_result(real_run: RealRun) -> None:
    export = export_battles(real_run.run_dir, ExportFormat.RESULTS_JSON)
    document = json.loads(export.text)
    assert document["results"] == [json.loads(real_run.summary_path.read_text(encoding="utf-8"))]
    rows = export_battles(real_run.run_dir, ExportFormat.CSV).text.splitlines()
    assert len(rows) == 1 + TINY_BATTLE["k"] and all(",2,mock," in row for row in rows[1:])

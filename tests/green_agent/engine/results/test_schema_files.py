"""The published JSON Schema of summary.json: generated from the models, committed as docs/summary.schema.json,
copied for the battle backend (which must not import green_agent), printed by ``arena schema``."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

from jsonschema import Draft202012Validator
from typer.testing import CliRunner

from battle_backend.battles.arena_results import ARENA_SCHEMA_ID, SCHEMA_FILE
from green_agent.engine.results import RESULT_SCHEMA_ID, result_json_schema, result_json_schema_text
from launcher.cli.app import app

ROOT = Path(__file__).resolve().parents[4]
DOCS_SCHEMA = ROOT / "docs" / "summary.schema.json"
BACKEND_SCHEMA = ROOT / "battle_backend" / "schemas" / "summary.schema.json"
REGENERATE = ".venv/bin/arena schema --out docs/summary.schema.json --out battle_backend/schemas/summary.schema.json"


def drift(committed: str, generated: str, name: str) -> str | None:
    """``None`` when ``committed`` is ``generated``, else a message with the first differing lines and the fix."""
    if committed == generated:
        return None
    diff = list(difflib.unified_diff(committed.splitlines(), generated.splitlines(), name, "generated", lineterm=""))
    return (
        f"{name} is not the schema the models generate; regenerate it (from the repository root) with:\n"
        f"    {REGENERATE}\n" + "\n".join(diff[:40])
    )


def test_committed_schema_is_the_one_the_models_generate() -> None:
    problem = drift(DOCS_SCHEMA.read_text(encoding="utf-8"), result_json_schema_text(), "docs/summary.schema.json")
    assert problem is None, problem


def test_backend_copy_is_the_published_schema() -> None:
    assert BACKEND_SCHEMA == SCHEMA_FILE
    problem = drift(
        BACKEND_SCHEMA.read_text(encoding="utf-8"),
        DOCS_SCHEMA.read_text(encoding="utf-8"),
        "battle_backend/schemas/summary.schema.json",
    )
    assert problem is None, problem


def test_drift_is_reported_with_the_command_that_fixes_it() -> None:
    generated = result_json_schema_text()
    tampered = generated.replace('"const": "arena.battle-result/1"', '"const": "arena.battle-result/0"')
    assert tampered != generated
    message = drift(tampered, generated, "docs/summary.schema.json")
    assert message is not None and REGENERATE in message and "arena.battle-result/0" in message
    assert drift(generated, generated, "docs/summary.schema.json") is None


def test_the_schema_is_valid_json_schema_naming_the_identifier() -> None:
    schema = result_json_schema()
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["properties"]["schema"]["const"] == RESULT_SCHEMA_ID == ARENA_SCHEMA_ID
    assert schema["required"][0] == "schema"
    assert list(schema["properties"])[:3] == ["schema", "battle_id", "white_agent_url"]
    for name in ("TrialsSummary", "TaskStat", "MacroStat", "MicroStat", "AttemptResult", "BattleConfig"):
        assert name in schema["$defs"], name
    # Open content: a reader of version 1 accepts keys a later version 1 adds.
    assert '"additionalProperties": false' not in result_json_schema_text()


def test_arena_schema_prints_the_schema_and_writes_files(tmp_path: Path) -> None:
    runner = CliRunner()
    printed = runner.invoke(app, ["schema"])
    assert printed.exit_code == 0, printed.output
    assert printed.stdout == result_json_schema_text()
    assert json.loads(printed.stdout)["properties"]["schema"]["const"] == RESULT_SCHEMA_ID
    targets = [tmp_path / "a" / "summary.schema.json", tmp_path / "b.json"]
    wrote = runner.invoke(app, ["schema", "--out", str(targets[0]), "--out", str(targets[1])])
    assert wrote.exit_code == 0, wrote.output
    assert wrote.stdout == ""
    for target in targets:
        assert target.read_text(encoding="utf-8") == result_json_schema_text()

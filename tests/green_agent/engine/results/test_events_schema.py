"""The published JSON Schema of progress events: generated from the typed event models, committed as
docs/events.schema.json, printed by ``arena schema --events``; every event the engine builds validates against it."""

from __future__ import annotations

import json
from pathlib import Path

from jsonschema import Draft202012Validator
from typer.testing import CliRunner

from green_agent.engine.events import (
    EVENTS_SCHEMA_ID,
    AttemptFinished,
    BattleStarted,
    events_json_schema,
    events_json_schema_text,
    read_event,
)
from green_agent.engine.results import AttemptResult, Failure, FailureCategory, FaultAuthor, TerminationReason
from launcher.cli.app import app
from tests.green_agent.engine.results.test_schema_files import drift

ROOT = Path(__file__).resolve().parents[4]
DOCS_EVENTS_SCHEMA = ROOT / "docs" / "events.schema.json"


def test_committed_events_schema_is_the_one_the_models_generate() -> None:
    committed = DOCS_EVENTS_SCHEMA.read_text(encoding="utf-8")
    problem = drift(committed, events_json_schema_text(), "docs/events.schema.json")
    assert problem is None, f"{problem}\n(for this file: .venv/bin/arena schema --events --out docs/events.schema.json)"


def test_events_schema_drift_is_caught() -> None:
    generated = events_json_schema_text()
    tampered = generated.replace('"fault_author"', '"fault_owner"')
    assert tampered != generated and drift(tampered, generated, "docs/events.schema.json") is not None


def test_the_events_schema_is_valid_and_names_every_type() -> None:
    schema = events_json_schema()
    Draft202012Validator.check_schema(schema)
    assert EVENTS_SCHEMA_ID in schema["$comment"]
    assert set(schema["discriminator"]["mapping"]) == {
        "battle_started",
        "task_started",
        "attempt_started",
        "attempt_finished",
        "battle_cancelled",
        "battle_interrupted",
        "battle_finished",
        "log",
        "attempts_skipped",
    }
    assert '"additionalProperties": false' not in events_json_schema_text()


def _attempt(outcome: str = "infra_error") -> AttemptResult:
    failure = Failure(category=FailureCategory.HARNESS_ERROR, fault_author=FaultAuthor.HARNESS, detail="x")
    return AttemptResult.model_validate(
        {
            "battle_id": "b1",
            "domain": "retail",
            "split": "test",
            "context_id": "c1",
            "termination_reason": TerminationReason.USER_STOP.value,
            "task_index": 0,
            "task_id": "0",
            "attempt": 1,
            "outcome": outcome,
            "reward": None,
            "failure": failure.model_dump(mode="json"),
            "steps": 3,
            "duration_s": 1.5,
        }
    )


def test_engine_events_validate_against_the_published_schema() -> None:
    validator = Draft202012Validator(json.loads(DOCS_EVENTS_SCHEMA.read_text(encoding="utf-8")))
    started = BattleStarted(battle_id="b1", attempts_total=2, tasks=["retail-test-0000"], k=2, seed=0, mode="manual")
    finished = AttemptFinished.from_result(_attempt(), done=1, total=2)
    for event in (started.event(started.text()), finished.event(finished.text(2))):
        wire = event.wire()
        assert not list(validator.iter_errors(wire)), wire
        assert read_event(wire) is not None and event.typed() == read_event(wire)
    assert read_event({"type": "attempt_finished", "battle_id": "b1"}) is None  # missing fields: not guessed
    assert read_event({"type": "from_the_future", "battle_id": "b1"}) is None


def test_arena_schema_events_prints_the_events_schema() -> None:
    printed = CliRunner().invoke(app, ["schema", "--events"])
    assert printed.exit_code == 0, printed.output
    assert printed.stdout == events_json_schema_text()

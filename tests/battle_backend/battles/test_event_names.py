"""The names the backend reads from progress events exist in the published event schema (docs/events.schema.json).

A renamed field in the green agent's event models would otherwise leave the backend's pages silently blank: the
readers are tolerant, so a missing field is shown as a dash, not an error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from battle_backend.battles import events

SCHEMA = Path(__file__).resolve().parents[3] / "docs" / "events.schema.json"


def schema_fields(schema: dict[str, Any]) -> dict[str, set[str]]:
    """Event type -> the properties of its model, through the schema's ``type`` discriminator."""
    mapping: dict[str, str] = schema["discriminator"]["mapping"]
    models: dict[str, Any] = schema["$defs"]
    return {kind: set(models[ref.rpartition("/")[2]]["properties"]) for kind, ref in mapping.items()}


def missing_names(schema: dict[str, Any], reads: dict[str, tuple[str, ...]]) -> list[str]:
    """``type.field`` for every name read that the schema does not define (an unknown type counts too)."""
    fields = schema_fields(schema)
    return [f"{kind}.{name}" for kind, names in reads.items() for name in names if name not in fields.get(kind, set())]


def test_every_event_name_the_backend_reads_is_in_the_schema() -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert schema["discriminator"]["propertyName"] == events.TYPE
    assert missing_names(schema, events.READS) == []


@pytest.mark.parametrize(
    ("reads", "expected"),
    [
        ({events.ATTEMPT_FINISHED: ("task_key", "fault_writer")}, ["attempt_finished.fault_writer"]),
        ({"attempt_done": ("task_key",)}, ["attempt_done.task_key"]),
    ],
)
def test_the_check_catches_a_renamed_field_or_type(reads: dict[str, tuple[str, ...]], expected: list[str]) -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert missing_names(schema, reads) == expected

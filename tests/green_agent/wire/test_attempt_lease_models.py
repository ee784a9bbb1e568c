"""The green agent's attempt-lease models mirror the backend's published schema
(battle_backend/schemas/attempt-leases.schema.json), without importing the backend: the bodies we send are exactly
the published ones (and validate against the file), the bodies we read have the published fields and types with
tighter bounds of our own, and every published body has its model here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from pydantic import BaseModel, ValidationError

from green_agent.wire import attempt_leases as wire

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = json.loads((ROOT / "battle_backend/schemas/attempt-leases.schema.json").read_text(encoding="utf-8"))
SENT = (
    wire.AttemptIn,
    wire.PublishRequest,
    wire.LeaseRequest,
    wire.LeaseRefIn,
    wire.HeartbeatRequest,
    wire.RecordRequest,
    wire.InfraErrorRequest,
    wire.OwnerRequest,
)
OUR_BOUNDS = {"maxLength", "maxItems", "maxProperties"}


def _strip(value: Any, drop: set[str]) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v, drop) for k, v in value.items() if k not in drop}
    if isinstance(value, list):
        return [_strip(v, drop) for v in value]
    return value


def _ours(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema(ref_template="#/$defs/{model}")
    schema.pop("$defs", None)
    return schema


def _validate(name: str, instance: Any) -> None:
    jsonschema.validate(instance, {**SCHEMA, "$ref": f"#/$defs/{name}"}, cls=jsonschema.Draft202012Validator)


def test_the_schema_file_is_the_published_version_and_every_body_is_mirrored() -> None:
    assert SCHEMA["$id"] == wire.SCHEMA_ID
    assert sorted(SCHEMA["$defs"]) == sorted(model.__name__ for model in wire.MODELS)


@pytest.mark.parametrize("model", SENT, ids=lambda m: m.__name__)
def test_bodies_we_send_are_exactly_the_published_ones(model: type[BaseModel]) -> None:
    drop = {"description", "title"}
    assert _strip(_ours(model), drop) == _strip(SCHEMA["$defs"][model.__name__], drop)


@pytest.mark.parametrize(
    "model", [m for m in wire.MODELS if m not in SENT], ids=lambda m: m.__name__
)  # fmt: skip
def test_bodies_we_read_have_the_published_fields_and_types(model: type[BaseModel]) -> None:
    """Ours add bounds (an answer is untrusted) and ignore unknown fields (a newer backend); nothing else differs."""
    drop = {"description", "title", "additionalProperties", *OUR_BOUNDS}
    theirs = SCHEMA["$defs"][model.__name__]
    assert theirs.get("additionalProperties") is False
    assert _strip(_ours(model), drop) == _strip(theirs, drop)


def test_what_we_send_validates_against_the_published_schema() -> None:
    ref = wire.LeaseRefIn(battle_id="b1", task_key="airline/3", attempt=2, generation=4, worker_id="w1")
    bodies: list[BaseModel] = [
        wire.PublishRequest(
            pool="p",
            owner_worker="owner",
            attempts=[wire.AttemptIn(task_key="airline/3", attempt=2, payload={"index": 3})],
        ),
        wire.LeaseRequest(worker_id="w1", limit=64, ttl_s=0.05, wait_s=30),
        wire.HeartbeatRequest(lease=ref, ttl_s=3600),
        wire.RecordRequest(lease=ref, result={"reward": 1.0, "nested": {"a": [1, None]}}),
        wire.InfraErrorRequest(lease=ref, error="x" * wire.MAX_ERROR_CHARS),
        wire.OwnerRequest(worker_id="w2", pool="p"),
        wire.OwnerRequest(worker_id="w2"),
    ]
    for body in bodies:
        _validate(type(body).__name__, json.loads(body.model_dump_json()))


def test_a_granted_lease_presents_back_exactly_its_reference() -> None:
    lease = wire.LeaseOut.model_validate(
        {"battle_id": "b", "task_key": "t", "attempt": 0, "generation": 1, "worker_id": "w", "ttl_s": 5,
         "payload": {"i": 1}, "added_by_a_newer_backend": True}
    )  # fmt: skip
    _validate("LeaseRefIn", lease.ref().model_dump(mode="json"))
    assert lease.label == "b/t#0@1"


def test_answers_are_bounded_and_refusals_name_the_field() -> None:
    lease = {
        "battle_id": "b",
        "task_key": "t",
        "attempt": 0,
        "generation": 1,
        "worker_id": "w",
        "ttl_s": 5,
        "payload": {},
    }
    with pytest.raises(ValidationError, match=r"leases\n.*at most 64"):
        wire.LeaseResponse.model_validate({"leases": [lease] * 65})
    with pytest.raises(ValidationError, match="task_key"):
        wire.LeaseOut.model_validate({**lease, "task_key": "t\x00"})
    with pytest.raises(ValidationError, match="battle_id"):
        wire.LeaseOut.model_validate({**lease, "battle_id": "b" * 257})
    with pytest.raises(ValidationError, match=r"attempts\.0\.attempt"):
        wire.PublishRequest(pool="p", owner_worker="o", attempts=[{"task_key": "t", "attempt": -1}])


def test_a_takeover_token_stays_out_of_repr() -> None:
    answer = wire.OwnerResponse(owner_worker="w2", battle_token="the-secret-token")
    assert "the-secret-token" not in repr(answer) and "the-secret-token" not in str(answer)

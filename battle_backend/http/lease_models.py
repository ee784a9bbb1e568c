"""The attempt-lease API's request and response bodies (issue 29), published as
battle_backend/schemas/attempt-leases.schema.json (``python -m battle_backend.http.lease_models OUT`` writes it;
tests/battle_backend/http/test_lease_api.py compares).

Every string and list is bounded here, before the store sees it; the store bounds payloads and errors again
(:mod:`battle_backend.store.attempt_queue_rules`). Errors are 422 with the field's location, as elsewhere.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, StrictStr, field_validator

from battle_backend.store.attempt_queue_rules import (
    MAX_ATTEMPT_NUMBER,
    MAX_ATTEMPTS_PER_PUBLISH,
    MAX_ERROR_CHARS,
    MAX_LEASES_PER_CALL,
    MAX_MEMBERS_LISTED,
    MAX_MEMBERS_WINDOW_S,
    MAX_REQUEUES,
    MAX_TASK_KEY_CHARS,
    MAX_TTL_S,
    MIN_TTL_S,
)
from battle_backend.store.attempt_records import Lease, LeaseHistoryEntry, LeaseRef, PoolMembers, StoredAttempt

SCHEMA_ID = "arena.attempt-leases/1"
MAX_ID_CHARS = 256
MAX_WAIT_S = 30.0
DEFAULT_MEMBERS_WINDOW_S = 3 * MAX_WAIT_S
"""``GET /pools/{pool}/members`` counts the members seen this recently unless ``window_s`` says otherwise: a live
member calls at least every ``MAX_WAIT_S`` (a lease's long poll) or every third of its leases' TTL (heartbeats)."""
MIN_MEMBERS_WINDOW_S = 1


def _printable(value: str, field: str = "the value") -> str:
    """Names the store keeps (ids, pools, task keys) hold no control characters (PostgreSQL refuses NUL)."""
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError(f"{field} must not contain control characters")
    return value


Name = Annotated[StrictStr, Field(min_length=1, max_length=MAX_ID_CHARS), AfterValidator(_printable)]
TaskKey = Annotated[StrictStr, Field(min_length=1, max_length=MAX_TASK_KEY_CHARS)]
AttemptNumber = Annotated[StrictInt, Field(ge=0, le=MAX_ATTEMPT_NUMBER)]
Ttl = Annotated[float, Field(ge=MIN_TTL_S, le=MAX_TTL_S)]
MAX_PAGE = 200
"""Attempts per page of ``GET /battles/{id}/attempts`` (each may carry a result of up to max_request_bytes)."""


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AttemptIn(_Body):
    """One attempt the owner publishes: (task_key, attempt) is its identity; ``payload`` is opaque to the backend
    (what a worker needs to run it), at most 64 KiB as JSON."""

    task_key: TaskKey
    attempt: AttemptNumber
    payload: dict[str, Any] = Field(default_factory=dict)

    @field_validator("task_key")
    @classmethod
    def _key(cls, value: str) -> str:
        return _printable(value, "task_key")


class PublishRequest(_Body):
    """``POST /battles/{battle_id}/attempts`` with the battle's token: the owner publishes (part of) its attempts.
    Idempotent per (task_key, attempt); the first publish fixes ``pool`` and the pool key (``X-Pool-Key``)."""

    pool: Name
    owner_worker: Name
    attempts: list[AttemptIn] = Field(max_length=MAX_ATTEMPTS_PER_PUBLISH)
    max_requeues: Annotated[StrictInt, Field(ge=0, le=MAX_REQUEUES)] = 2
    owner_ttl_s: Ttl = 60.0


class PublishResponse(_Body):
    added: int
    already: int


class LeaseRequest(_Body):
    """``POST /pools/{pool}/leases`` with the pool key: up to ``limit`` attempts for ``worker_id``, waiting up to
    ``wait_s`` for one when none is available."""

    worker_id: Name
    limit: Annotated[StrictInt, Field(ge=1, le=MAX_LEASES_PER_CALL)] = 1
    ttl_s: Ttl = 60.0
    wait_s: Annotated[float, Field(ge=0.0, le=MAX_WAIT_S)] = 0.0


class LeaseRefIn(_Body):
    """A lease as its worker presents it: the attempt, the generation it was leased under (the fencing token)."""

    battle_id: Name
    task_key: Annotated[TaskKey, AfterValidator(_printable)]
    attempt: AttemptNumber
    generation: Annotated[StrictInt, Field(ge=1)]
    worker_id: Name

    def ref(self) -> LeaseRef:
        return LeaseRef(self.battle_id, self.task_key, self.attempt, self.generation, self.worker_id)


class LeaseOut(LeaseRefIn):
    """A granted lease: present its first five fields back; heartbeat before ``ttl_s`` runs out."""

    ttl_s: float
    payload: dict[str, Any]

    @classmethod
    def of(cls, lease: Lease) -> LeaseOut:
        return cls(
            battle_id=lease.battle_id,
            task_key=lease.task_key,
            attempt=lease.attempt,
            generation=lease.generation,
            worker_id=lease.worker_id,
            ttl_s=lease.ttl_s,
            payload=lease.payload,
        )


class LeaseResponse(_Body):
    leases: list[LeaseOut]


class HeartbeatRequest(_Body):
    """``POST /pools/{pool}/leases/heartbeat``: extend the lease to ``ttl_s`` from now (the database's clock)."""

    lease: LeaseRefIn
    ttl_s: Ttl = 60.0


class HeartbeatResponse(_Body):
    ttl_s: float


class RecordRequest(_Body):
    """``POST /pools/{pool}/leases/record``: the attempt's result, stored once."""

    lease: LeaseRefIn
    result: dict[str, Any]


class InfraErrorRequest(_Body):
    """``POST /pools/{pool}/leases/error``: the harness (not the agent) failed this attempt; it is requeued until
    the queue's ``max_requeues`` are used up."""

    lease: LeaseRefIn
    error: Annotated[StrictStr, Field(min_length=1, max_length=MAX_ERROR_CHARS)]


class HistoryOut(_Body):
    generation: int
    worker_id: str
    leased_at: str
    ended_at: str | None
    outcome: Literal["recorded", "infra_error", "expired"] | None
    detail: str | None

    @classmethod
    def of(cls, entry: LeaseHistoryEntry) -> HistoryOut:
        return cls.model_validate(entry.__dict__)


class AttemptOut(_Body):
    battle_id: str
    task_key: str
    attempt: int
    state: Literal["available", "leased", "done", "failed"]
    generation: int
    leased_by: str | None
    requeues: int
    payload: dict[str, Any]
    result: dict[str, Any] | None
    error: str | None
    recorded_by: str | None
    recorded_at: str | None
    history: list[HistoryOut]

    @classmethod
    def of(cls, attempt: StoredAttempt) -> AttemptOut:
        data = dict(attempt.__dict__)
        data["state"] = attempt.state.value
        data["history"] = [HistoryOut.of(h) for h in attempt.history]
        return cls.model_validate(data)


class RecordResponse(_Body):
    status: Literal["recorded", "duplicate", "requeued", "failed"]
    attempt: AttemptOut


class AttemptsResponse(_Body):
    """``GET /battles/{battle_id}/attempts`` (the battle's token or the pool key): every attempt, publish order."""

    battle_id: str
    pool: str
    owner_worker: str | None
    counts: dict[str, int]
    attempts: list[AttemptOut]
    next_offset: int | None
    """``?offset=`` of the next page (pages of at most ``limit``, 200), None after the last one."""


class OwnerRequest(_Body):
    """``POST /battles/{battle_id}/owner``: with the battle's token, the owner's heartbeat; with the pool key (and
    ``pool``), a member's takeover of a battle whose owner has been silent for ``owner_ttl_s``."""

    worker_id: Name
    pool: Name | None = None


class OwnerResponse(_Body):
    owner_worker: str
    battle_token: str | None = None
    """Only on a takeover: the new owner posts the battle's result with it."""


class MembersResponse(_Body):
    """``GET /pools/{pool}/members?window_s=`` (the pool key): the members seen (a lease or heartbeat call with this
    key) within ``window_s`` seconds of the store's clock; ``worker_ids``: the most recently seen, at most 256."""

    pool: str
    window_s: float
    count: int
    worker_ids: list[str] = Field(max_length=MAX_MEMBERS_LISTED)

    @classmethod
    def of(cls, members: PoolMembers) -> MembersResponse:
        return cls(pool=members.pool, window_s=members.window_s, count=members.count, worker_ids=members.worker_ids)


MAX_MEMBERS_WINDOW = int(MAX_MEMBERS_WINDOW_S)


MODELS: tuple[type[BaseModel], ...] = (
    PublishRequest,
    PublishResponse,
    LeaseRequest,
    LeaseResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    RecordRequest,
    InfraErrorRequest,
    RecordResponse,
    AttemptsResponse,
    OwnerRequest,
    OwnerResponse,
    MembersResponse,
)


def schema() -> dict[str, Any]:
    """The published JSON schema: every body of the API under ``$defs``."""
    defs: dict[str, Any] = {}
    for model in MODELS:
        one = model.model_json_schema(ref_template="#/$defs/{model}")
        defs.update(one.pop("$defs", {}))
        defs[model.__name__] = one
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "Arena attempt-lease API bodies",
        "$defs": dict(sorted(defs.items())),
    }


def schema_text() -> str:
    return json.dumps(schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":  # pragma: no cover - a developer's command
    Path(sys.argv[1]).write_text(schema_text(), encoding="utf-8")

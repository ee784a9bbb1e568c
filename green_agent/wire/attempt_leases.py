"""The attempt-lease API's bodies as the green agent sends and reads them (issue 29, ``arena.attempt-leases/1``).

The backend publishes the schema (battle_backend/schemas/attempt-leases.schema.json, docs/design/attempt-leases.md);
the green agent must not import the backend, so these models mirror it and
tests/green_agent/wire/test_attempt_lease_models.py checks them against that file: same bodies, same fields, and
what we send validates there.

What the backend answers is untrusted: every answer model bounds its strings and lists, forbids nothing extra (a
newer backend may add fields) and is validated before use (errors name the field).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, StrictStr

SCHEMA_ID = "arena.attempt-leases/1"
MAX_ID_CHARS = 256
MAX_TASK_KEY_CHARS = 512
MAX_ATTEMPT_NUMBER = 1_000_000
MAX_ERROR_CHARS = 4096
MAX_LEASES_PER_CALL = 64
MAX_ATTEMPTS_PER_PUBLISH = 2000
MAX_REQUEUES = 100
MAX_PAGE = 200
MIN_TTL_S, MAX_TTL_S = 0.05, 3600.0
MAX_WAIT_S = 30.0
MAX_MEMBERS_LISTED = 256
DEFAULT_MEMBERS_WINDOW_S = 3 * MAX_WAIT_S
"""``GET /pools/{pool}/members`` counts the members seen this recently unless asked otherwise."""
MIN_MEMBERS_WINDOW_S, MAX_MEMBERS_WINDOW_S = 1, 3600
MAX_HISTORY = 1000
"""Lease rows of one attempt we read at most (each requeue adds one; ``max_requeues`` is at most 100)."""


def _printable(value: str) -> str:
    """Names the store keeps (ids, pools, task keys) hold no control characters (the backend refuses them)."""
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError("must not contain control characters")
    return value


Name = Annotated[StrictStr, Field(min_length=1, max_length=MAX_ID_CHARS), AfterValidator(_printable)]
TaskKey = Annotated[StrictStr, Field(min_length=1, max_length=MAX_TASK_KEY_CHARS), AfterValidator(_printable)]
AttemptNumber = Annotated[StrictInt, Field(ge=0, le=MAX_ATTEMPT_NUMBER)]
Ttl = Annotated[float, Field(ge=MIN_TTL_S, le=MAX_TTL_S)]
Text = Annotated[str, Field(max_length=MAX_ERROR_CHARS)]


class _Sent(BaseModel):
    """A body we send: exactly the backend's fields."""

    model_config = ConfigDict(extra="forbid")


class _Read(BaseModel):
    """A body we read: fields we do not know are ignored (a newer backend), the ones we know are bounded."""

    model_config = ConfigDict(extra="ignore")


class AttemptIn(_Sent):
    """One attempt the owner publishes; ``payload`` is what a member needs to run it (at most 64 KiB as JSON)."""

    task_key: TaskKey
    attempt: AttemptNumber
    payload: dict[str, Any] = Field(default_factory=dict)


class PublishRequest(_Sent):
    pool: Name
    owner_worker: Name
    attempts: list[AttemptIn] = Field(max_length=MAX_ATTEMPTS_PER_PUBLISH)
    max_requeues: Annotated[StrictInt, Field(ge=0, le=MAX_REQUEUES)] = 2
    owner_ttl_s: Ttl = 60.0


class PublishResponse(_Read):
    added: int
    already: int


class LeaseRequest(_Sent):
    worker_id: Name
    limit: Annotated[StrictInt, Field(ge=1, le=MAX_LEASES_PER_CALL)] = 1
    ttl_s: Ttl = 60.0
    wait_s: Annotated[float, Field(ge=0.0, le=MAX_WAIT_S)] = 0.0


class LeaseRefIn(_Sent):
    """A lease as its worker presents it back: the attempt and the generation it was leased under (fencing)."""

    battle_id: Name
    task_key: TaskKey
    attempt: AttemptNumber
    generation: Annotated[StrictInt, Field(ge=1)]
    worker_id: Name


class LeaseOut(_Read):
    """A granted lease; :meth:`ref` is what heartbeat, record and error present."""

    battle_id: Name
    task_key: TaskKey
    attempt: AttemptNumber
    generation: Annotated[StrictInt, Field(ge=1)]
    worker_id: Name
    ttl_s: float
    payload: dict[str, Any]

    def ref(self) -> LeaseRefIn:
        return LeaseRefIn(
            battle_id=self.battle_id,
            task_key=self.task_key,
            attempt=self.attempt,
            generation=self.generation,
            worker_id=self.worker_id,
        )

    @property
    def label(self) -> str:
        """``battle/task#attempt@generation`` for log lines."""
        return f"{self.battle_id}/{self.task_key}#{self.attempt}@{self.generation}"


class LeaseResponse(_Read):
    leases: list[LeaseOut] = Field(max_length=MAX_LEASES_PER_CALL)


class HeartbeatRequest(_Sent):
    lease: LeaseRefIn
    ttl_s: Ttl = 60.0


class HeartbeatResponse(_Read):
    ttl_s: float


class RecordRequest(_Sent):
    lease: LeaseRefIn
    result: dict[str, Any]


class InfraErrorRequest(_Sent):
    lease: LeaseRefIn
    error: Annotated[StrictStr, Field(min_length=1, max_length=MAX_ERROR_CHARS)]


class HistoryOut(_Read):
    generation: int
    worker_id: Annotated[str, Field(max_length=MAX_ID_CHARS)]
    leased_at: Annotated[str, Field(max_length=64)]
    ended_at: Annotated[str, Field(max_length=64)] | None
    outcome: Literal["recorded", "infra_error", "expired"] | None
    detail: Text | None


class AttemptOut(_Read):
    battle_id: Annotated[str, Field(max_length=MAX_ID_CHARS)]
    task_key: Annotated[str, Field(max_length=MAX_TASK_KEY_CHARS)]
    attempt: int
    state: Literal["available", "leased", "done", "failed"]
    generation: int
    leased_by: Annotated[str, Field(max_length=MAX_ID_CHARS)] | None
    requeues: int
    payload: dict[str, Any]
    result: dict[str, Any] | None
    error: Text | None
    recorded_by: Annotated[str, Field(max_length=MAX_ID_CHARS)] | None
    recorded_at: Annotated[str, Field(max_length=64)] | None
    history: list[HistoryOut] = Field(max_length=MAX_HISTORY)


class RecordResponse(_Read):
    status: Literal["recorded", "duplicate", "requeued", "failed"]
    attempt: AttemptOut


class AttemptsResponse(_Read):
    battle_id: Annotated[str, Field(max_length=MAX_ID_CHARS)]
    pool: Annotated[str, Field(max_length=MAX_ID_CHARS)]
    owner_worker: Annotated[str, Field(max_length=MAX_ID_CHARS)] | None
    counts: dict[str, int] = Field(max_length=16)
    attempts: list[AttemptOut] = Field(max_length=MAX_PAGE)
    next_offset: int | None


class OwnerRequest(_Sent):
    worker_id: Name
    pool: Name | None = None


class OwnerResponse(_Read):
    owner_worker: Annotated[str, Field(max_length=MAX_ID_CHARS)]
    battle_token: Annotated[str, Field(max_length=1024)] | None = Field(default=None, repr=False)
    """Only on a takeover; kept out of ``repr`` (and so out of log lines)."""


class MembersResponse(_Read):
    """The pool's members seen within ``window_s``: ``count`` of them (the divisor of a per-provider cap)."""

    pool: Annotated[str, Field(max_length=MAX_ID_CHARS)]
    window_s: float
    count: int
    worker_ids: list[Annotated[str, Field(max_length=MAX_ID_CHARS)]] = Field(max_length=MAX_MEMBERS_LISTED)


MODELS: tuple[type[BaseModel], ...] = (
    AttemptIn,
    PublishRequest,
    PublishResponse,
    LeaseRequest,
    LeaseRefIn,
    LeaseOut,
    LeaseResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    RecordRequest,
    InfraErrorRequest,
    HistoryOut,
    AttemptOut,
    RecordResponse,
    AttemptsResponse,
    OwnerRequest,
    OwnerResponse,
    MembersResponse,
)
"""Every body, by the name the published schema gives it under ``$defs``."""

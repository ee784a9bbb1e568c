"""The attempt queue's records, refusals and the seam both stores implement (issue 29, backend half).

A battle worked by a pool of green agents is split into attempts, each (task key, attempt number) with an opaque
JSON payload the owning green agent published. Pool members lease attempts (a TTL, extended by heartbeats), run them
and record each result once. Every lease has a generation number (the fencing token): only the current, unexpired
lease may heartbeat, record or report an infrastructure error. The design and the states are in
docs/design/attempt-leases.md; the decisions both stores make the same way are in
:mod:`battle_backend.store.attempt_queue_rules`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol


class AttemptState(StrEnum):
    """An attempt's life: available -> leased -> done | available (requeued) | failed (requeues used up)."""

    AVAILABLE = "available"
    LEASED = "leased"
    DONE = "done"
    FAILED = "failed"


class LeaseOutcome(StrEnum):
    """How a lease ended (its history row's ``outcome``; None while it is held)."""

    RECORDED = "recorded"
    INFRA_ERROR = "infra_error"
    EXPIRED = "expired"


class RecordStatus(StrEnum):
    """What ``record`` / ``report_infra_error`` did."""

    RECORDED = "recorded"
    DUPLICATE = "duplicate"
    """The same lease recorded this attempt already: nothing was written, the stored attempt is answered."""
    REQUEUED = "requeued"
    FAILED = "failed"
    """An infrastructure error (or an expired lease) used up the attempt's requeues: it is failed for good."""


@dataclass(frozen=True)
class AttemptSpec:
    """One unit of work as the owner publishes it."""

    task_key: str
    attempt: int
    payload: dict[str, Any]


@dataclass(frozen=True)
class LeaseRef:
    """What a worker presents for its lease: the attempt, the lease generation it got and who it is."""

    battle_id: str
    task_key: str
    attempt: int
    generation: int
    worker_id: str


@dataclass(frozen=True)
class Lease:
    """A lease handed to a worker (``generation`` is its fencing token)."""

    battle_id: str
    task_key: str
    attempt: int
    generation: int
    worker_id: str
    ttl_s: float
    payload: dict[str, Any]

    @property
    def ref(self) -> LeaseRef:
        """What the worker presents afterwards."""
        return LeaseRef(self.battle_id, self.task_key, self.attempt, self.generation, self.worker_id)


@dataclass(frozen=True)
class LeaseHistoryEntry:
    """One lease of an attempt and how it ended (None: still held)."""

    generation: int
    worker_id: str
    leased_at: str
    ended_at: str | None
    outcome: str | None
    detail: str | None


@dataclass(frozen=True)
class StoredAttempt:
    """An attempt as the store holds it, with every lease it had."""

    battle_id: str
    task_key: str
    attempt: int
    state: AttemptState
    generation: int
    leased_by: str | None
    requeues: int
    payload: dict[str, Any]
    result: dict[str, Any] | None
    error: str | None
    recorded_by: str | None
    recorded_at: str | None
    history: list[LeaseHistoryEntry] = field(default_factory=list)


@dataclass(frozen=True)
class PublishOutcome:
    """How many attempts a publish added, and how many the queue held already (a retried publish adds none)."""

    added: int
    already: int


@dataclass(frozen=True)
class RecordOutcome:
    """What a record or an infrastructure-error report did, and the attempt after it."""

    status: RecordStatus
    attempt: StoredAttempt


@dataclass(frozen=True)
class QueueInfo:
    """A battle's queue: its pool, owner and counts by state."""

    battle_id: str
    pool: str
    owner_worker: str | None
    max_requeues: int
    owner_ttl_s: float
    counts: dict[str, int]


@dataclass(frozen=True)
class PoolMembers:
    """The members of a pool seen (a lease or heartbeat call with the pool's key) within ``window_s`` of the store's
    clock: ``count`` of them, and the ids of the most recently seen (at most ``MAX_MEMBERS_LISTED``)."""

    pool: str
    window_s: float
    count: int
    worker_ids: list[str]


class AttemptQueue(Protocol):
    """The attempt queue of a store (``store.attempts``). Every call is one transaction; refusals are raised before
    anything is written. Times are the store's clock (PostgreSQL: the database's ``now()``)."""

    async def publish(
        self,
        battle_id: str,
        *,
        presented_token: str,
        pool: str,
        pool_key: str,
        owner_worker: str,
        attempts: list[AttemptSpec],
        max_requeues: int,
        owner_ttl_s: float,
    ) -> PublishOutcome:
        """The owner (holder of the running battle's token) adds attempts; idempotent per (task key, attempt). The
        first publish fixes the pool and the pool key; a later one with another pool or key is refused."""

    async def lease(self, pool: str, pool_key: str, worker_id: str, *, limit: int, ttl_s: float) -> list[Lease]:
        """Up to ``limit`` available (or expired) attempts of running battles of ``pool`` published with this key."""

    async def heartbeat(self, pool: str, pool_key: str, ref: LeaseRef, ttl_s: float) -> None:
        """Extend a live lease to ``ttl_s`` from now; LeaseRefused otherwise."""

    async def record(self, pool: str, pool_key: str, ref: LeaseRef, result: dict[str, Any]) -> RecordOutcome:
        """Store the attempt's result once (the lease must be live; the same lease again: DUPLICATE)."""

    async def report_infra_error(self, pool: str, pool_key: str, ref: LeaseRef, error: str) -> RecordOutcome:
        """The harness failed this attempt: requeued (REQUEUED) until its requeues are used up (FAILED)."""

    async def list_attempts(
        self,
        battle_id: str,
        *,
        presented_token: str | None = None,
        pool_key: str | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> list[StoredAttempt]:
        """The battle's attempts in publish order (after the first ``offset``, at most ``limit``), each with its
        lease history; the battle's token or its pool key is needed."""

    async def queue_info(self, battle_id: str) -> QueueInfo | None:
        """The battle's queue, or None."""

    async def owner_heartbeat(self, battle_id: str, presented_token: str, worker_id: str) -> None:
        """The owner says it is alive (the battle's token)."""

    async def claim_owner(self, battle_id: str, pool: str, pool_key: str, worker_id: str) -> str:
        """A pool member takes over a battle whose owner has been silent for the queue's ``owner_ttl_s``: returns
        the battle's token (to post its result). OwnerAlive otherwise."""

    async def wait_for_work(self, pool: str, timeout_s: float) -> None:
        """Return when attempts of ``pool`` may have become available, or after ``timeout_s``."""

    async def attempts_page(
        self,
        battle_id: str,
        *,
        presented_token: str | None = None,
        pool_key: str | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> tuple[QueueInfo, list[StoredAttempt]]:
        """:meth:`queue_info` and :meth:`list_attempts` read in one transaction (the counts describe the page)."""

    async def members(self, pool: str, pool_key: str, window_s: float) -> PoolMembers:
        """The pool's members seen within ``window_s`` (every lease and heartbeat call records its worker, keyed by
        the pool key it presented). PoolKeyRejected when the pool's battles were published with another key."""

"""What the attempt queue decides, as pure functions both stores apply inside their own transaction.

Why a module of its own: the SQLite and the PostgreSQL queues write different SQL (a writer transaction and a
store clock; ``FOR UPDATE SKIP LOCKED`` and ``now()``), but who may publish, heartbeat or record, what a duplicate
is and when an attempt is requeued or failed must be decided the same way by both
(tests/battle_backend/store/test_attempt_queue_contract.py). Nothing here touches a database.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from battle_backend.store.attempt_errors import (
    LeaseRefused,
    PoolKeyRejected,
    PublishRefused,
)
from battle_backend.store.attempt_records import (
    AttemptSpec,
    AttemptState,
    LeaseRef,
    RecordStatus,
)
from battle_backend.store.json_text import dumps
from battle_backend.store.tokens import tokens_match

MAX_TASK_KEY_CHARS = 512
MAX_ATTEMPT_NUMBER = 1_000_000
MAX_PAYLOAD_CHARS = 64 * 1024
"""An attempt's payload as stored JSON text (the owner's opaque description of the work)."""
MAX_ERROR_CHARS = 4096
MAX_ATTEMPTS_PER_PUBLISH = 2000
MAX_ATTEMPTS_PER_BATTLE = 100_000
MAX_LEASES_PER_CALL = 64
MIN_TTL_S, MAX_TTL_S = 0.05, 3600.0
MAX_REQUEUES = 100
MAX_MEMBERS_LISTED = 256
"""Member ids one ``members`` answer lists (the most recently seen; ``count`` counts them all)."""
MAX_MEMBERS_PER_POOL = 4096
"""Members kept per (pool, key); beyond, the least recently seen are forgotten."""
MAX_UNPUBLISHED_MEMBERS = 4096
"""Members kept in all across the pools without a published battle (anyone may call lease there, with any key);
beyond, the least recently seen of them are forgotten."""
MAX_MEMBERS_WINDOW_S = 3600.0
"""The longest window a ``members`` question may ask, and how long a member's row is kept after it was last seen."""
NOT_THE_POOLS_KEY = "the presented pool key is not the one its attempts were published with"
"""Why a ``members`` question with another key than the pool's battles were published with is refused (both stores)."""


def key_digest(pool_key: str) -> str:
    """The stored form of a pool key: its SHA-256, hex (the key itself is never stored)."""
    return hashlib.sha256(pool_key.encode("utf-8", "surrogatepass")).hexdigest()


def check_pool(battle_id: str, stored_pool: str, stored_digest: str, pool: str, pool_key: str) -> None:
    """PoolKeyRejected unless the caller names the queue's pool and presents its key (constant-time comparison)."""
    if not tokens_match(stored_digest, key_digest(pool_key)):
        raise PoolKeyRejected(
            battle_id, "the presented pool key is not the one this battle's attempts were published with"
        )
    if stored_pool != pool:
        raise PoolKeyRejected(battle_id, f"the battle's attempts belong to pool {stored_pool!r}, not {pool!r}")


def checked_specs(battle_id: str, attempts: list[AttemptSpec]) -> list[tuple[AttemptSpec, str]]:
    """Each spec with its payload as JSON text, or PublishRefused naming the first bad field."""
    if len(attempts) > MAX_ATTEMPTS_PER_PUBLISH:
        raise PublishRefused(battle_id, "attempts", f"at most {MAX_ATTEMPTS_PER_PUBLISH} per publish")
    seen: set[tuple[str, int]] = set()
    checked: list[tuple[AttemptSpec, str]] = []
    for index, spec in enumerate(attempts):
        where = f"attempts[{index}]"
        if not spec.task_key or len(spec.task_key) > MAX_TASK_KEY_CHARS or "\x00" in spec.task_key:
            raise PublishRefused(battle_id, f"{where}.task_key", f"1 to {MAX_TASK_KEY_CHARS} characters, no NUL")
        if not 0 <= spec.attempt <= MAX_ATTEMPT_NUMBER:
            raise PublishRefused(battle_id, f"{where}.attempt", f"0 to {MAX_ATTEMPT_NUMBER}")
        if (spec.task_key, spec.attempt) in seen:
            raise PublishRefused(battle_id, where, "the same (task_key, attempt) twice in one publish")
        seen.add((spec.task_key, spec.attempt))
        text = dumps(spec.payload)
        if len(text) > MAX_PAYLOAD_CHARS:
            raise PublishRefused(battle_id, f"{where}.payload", f"at most {MAX_PAYLOAD_CHARS} characters as JSON")
        checked.append((spec, text))
    return checked


def check_battle_size(battle_id: str, stored: int, adding: int) -> None:
    """PublishRefused when the battle would hold more than :data:`MAX_ATTEMPTS_PER_BATTLE` attempts."""
    if stored + adding > MAX_ATTEMPTS_PER_BATTLE:
        raise PublishRefused(battle_id, "attempts", f"a battle holds at most {MAX_ATTEMPTS_PER_BATTLE} attempts")


def check_publish_settings(battle_id: str, max_requeues: int, owner_ttl_s: float) -> None:
    """PublishRefused for settings out of range."""
    if not 0 <= max_requeues <= MAX_REQUEUES:
        raise PublishRefused(battle_id, "max_requeues", f"0 to {MAX_REQUEUES}")
    if not MIN_TTL_S <= owner_ttl_s <= MAX_TTL_S:
        raise PublishRefused(battle_id, "owner_ttl_s", f"{MIN_TTL_S} to {MAX_TTL_S} seconds")


def check_ttl(ttl_s: float) -> float:
    """A lease time within bounds (ValueError otherwise: the HTTP models bound it first)."""
    if not MIN_TTL_S <= ttl_s <= MAX_TTL_S:
        raise ValueError(f"ttl_s must be {MIN_TTL_S} to {MAX_TTL_S} seconds")
    return ttl_s


def lease_refusal(ref: LeaseRef, row: Any, *, expired: bool) -> LeaseRefused | None:
    """Why ``ref`` is not the attempt's current live lease, or None. ``row`` is the attempt's row (state,
    generation, leased_by), ``expired`` whether its lease time has passed on the store's clock."""
    if row is None:
        return LeaseRefused(ref, "not_found", "the battle has no such attempt")
    if int(row["generation"]) != ref.generation:
        return LeaseRefused(
            ref, "fenced", f"lease {ref.generation} was superseded by lease {row['generation']} (fencing token)"
        )
    if row["leased_by"] != ref.worker_id:
        return LeaseRefused(ref, "wrong_worker", "the lease is held by another worker")
    if row["state"] != AttemptState.LEASED.value:
        return LeaseRefused(ref, "not_leased", f"the attempt is {row['state']}, not leased")
    if expired:
        return LeaseRefused(ref, "expired", "the lease expired before this call (the attempt may be leased again)")
    return None


def is_duplicate(ref: LeaseRef, row: Any) -> bool:
    """Whether a record is the same lease recording a done attempt again (answered DUPLICATE, nothing written)."""
    return (
        row["state"] == AttemptState.DONE.value
        and int(row["generation"]) == ref.generation
        and row["recorded_by"] == ref.worker_id
    )


def page_bounds(offset: int, limit: int | None) -> tuple[int, int]:
    """Positions (first, last] of a page: a battle's attempts are numbered 1..N in publish order, without gaps."""
    first = max(0, offset)
    return first, first + limit if limit is not None else MAX_ATTEMPTS_PER_BATTLE + 1


def after_requeue(requeues: int, max_requeues: int) -> tuple[AttemptState, RecordStatus]:
    """The attempt's state once it has been requeued ``requeues`` times in all (this one included)."""
    if requeues > max_requeues:
        return AttemptState.FAILED, RecordStatus.FAILED
    return AttemptState.AVAILABLE, RecordStatus.REQUEUED


def bounded_error(error: str) -> str:
    """An infrastructure error's text as stored (bounded)."""
    return error[:MAX_ERROR_CHARS]


class WorkSignal:
    """Wake-ups of idle lease waiters, per pool, on one event loop (one per store instance; nothing process-wide)."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}

    def notify(self, pool: str | None) -> None:
        """Work may be available in ``pool`` (None: in every pool, e.g. after a lost LISTEN connection)."""
        if pool is None:
            for event in self._events.values():
                event.set()
            return
        waiting = self._events.get(pool)
        if waiting is not None:
            waiting.set()

    async def wait(self, pool: str, timeout_s: float) -> None:
        """Until ``notify(pool)`` or ``timeout_s``."""
        known = self._events.get(pool)
        if known is None or known.is_set():
            known = asyncio.Event()
            self._events[pool] = known
        event = known
        try:
            async with asyncio.timeout(max(0.0, timeout_s)):
                await event.wait()
        except TimeoutError:
            return
        finally:
            if event.is_set() and self._events.get(pool) is event:
                del self._events[pool]

"""The attempt queue on SQLite: several green agents on one machine share a battle's attempts through one file.

Every change runs on the store's writer thread inside its group transaction (``BEGIN IMMEDIATE``: one writer at a
time), so "read the attempt, decide, write it" needs no row locks. Lease times come from ``clock`` (epoch seconds,
``time.time`` unless a test injects one): one backend process serves an SQLite file, so one clock decides. Idle
waiters are woken in-process on publish and requeue, and otherwise poll every ``poll_s`` (for expired leases).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from battle_backend.store.attempt_errors import (
    OwnerAlive,
    PublishRefused,
    QueueNotFound,
)
from battle_backend.store.attempt_queue_rules import (
    MAX_LEASES_PER_CALL,
    WorkSignal,
    after_requeue,
    bounded_error,
    check_battle_size,
    check_pool,
    check_publish_settings,
    check_ttl,
    checked_specs,
    is_duplicate,
    key_digest,
    lease_refusal,
    page_bounds,
)
from battle_backend.store.attempt_records import (
    AttemptSpec,
    AttemptState,
    Lease,
    LeaseHistoryEntry,
    LeaseOutcome,
    LeaseRef,
    PoolMembers,
    PublishOutcome,
    QueueInfo,
    RecordOutcome,
    RecordStatus,
    StoredAttempt,
)
from battle_backend.store.attempt_rows import history_entry, stored_attempt
from battle_backend.store.json_text import dumps
from battle_backend.store.protocol import BattleNotFound, TokenRejected
from battle_backend.store.records import BattleState, utc_now_iso
from battle_backend.store.sqlite import pool_members
from battle_backend.store.tokens import tokens_match

T = TypeVar("T")
Run = Callable[[Callable[[sqlite3.Connection], Any]], Awaitable[Any]]


KEY = "battle_id = ? AND task_key = ? AND attempt = ?"


class SQLiteAttemptQueue:
    """`AttemptQueue` of `SQLiteStore` (see the module docstring)."""

    def __init__(self, write: Run, read: Run, *, clock: Callable[[], float] = time.time, poll_s: float = 0.25) -> None:
        self._write = write
        self._read = read
        self.clock = clock
        """Epoch seconds; a test may replace it to expire leases without waiting."""
        self.poll_s = poll_s
        self._signal = WorkSignal()

    # --- helpers (writer thread) --------------------------------------------------------------------------
    @staticmethod
    def _queue_row(conn: sqlite3.Connection, battle_id: str) -> sqlite3.Row:
        row: sqlite3.Row | None = conn.execute(
            "SELECT q.*, b.state AS battle_state, b.battle_token FROM attempt_queues q"
            " JOIN battles b ON b.battle_id = q.battle_id WHERE q.battle_id = ?",
            (battle_id,),
        ).fetchone()
        if row is None:
            raise QueueNotFound(battle_id)
        return row

    def _history(
        self, conn: sqlite3.Connection, battle_id: str, first: int, last: int
    ) -> dict[tuple[str, int], list[LeaseHistoryEntry]]:
        history: dict[tuple[str, int], list[LeaseHistoryEntry]] = {}
        for row in conn.execute(
            "SELECT h.* FROM attempt_leases h JOIN battle_attempts a ON a.battle_id = h.battle_id"
            " AND a.task_key = h.task_key AND a.attempt = h.attempt"
            " WHERE h.battle_id = ? AND a.position > ? AND a.position <= ? ORDER BY h.generation",
            (battle_id, first, last),
        ):
            history.setdefault((row["task_key"], int(row["attempt"])), []).append(history_entry(row))
        return history

    def _attempt(self, conn: sqlite3.Connection, ref: LeaseRef) -> StoredAttempt:
        row = conn.execute(f"SELECT * FROM battle_attempts WHERE {KEY}", (ref.battle_id, ref.task_key, ref.attempt))
        found = row.fetchone()
        history = [
            history_entry(h)
            for h in conn.execute(
                f"SELECT * FROM attempt_leases WHERE {KEY} ORDER BY generation",
                (ref.battle_id, ref.task_key, ref.attempt),
            )
        ]
        return stored_attempt(found, history)

    def _end_lease(self, conn: sqlite3.Connection, battle_id: str, task_key: str, attempt: int, generation: int,
                   outcome: LeaseOutcome, detail: str | None) -> None:  # fmt: skip
        conn.execute(
            f"UPDATE attempt_leases SET ended_at = ?, outcome = ?, detail = ? WHERE {KEY} AND generation = ?",
            (utc_now_iso(), outcome.value, detail, battle_id, task_key, attempt, generation),
        )

    def _locked_lease(self, conn: sqlite3.Connection, pool: str, pool_key: str, ref: LeaseRef) -> sqlite3.Row | None:
        """The attempt's row after the pool and lease checks (the writer transaction is the lock)."""
        queue = self._queue_row(conn, ref.battle_id)
        check_pool(ref.battle_id, queue["pool"], queue["key_sha256"], pool, pool_key)
        row: sqlite3.Row | None = conn.execute(
            f"SELECT * FROM battle_attempts WHERE {KEY}", (ref.battle_id, ref.task_key, ref.attempt)
        ).fetchone()
        return row

    # --- AttemptQueue ---------------------------------------------------------------------------------------
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
        """Add attempts (idempotent per key); the first publish fixes pool and key."""
        check_publish_settings(battle_id, max_requeues, owner_ttl_s)
        specs = checked_specs(battle_id, attempts)
        digest = key_digest(pool_key)

        def fn(conn: sqlite3.Connection) -> PublishOutcome:
            battle = conn.execute(
                "SELECT state, battle_token, green_pool FROM battles WHERE battle_id = ?", (battle_id,)
            ).fetchone()
            if battle is None:
                raise BattleNotFound(battle_id)
            if not tokens_match(battle["battle_token"], presented_token):
                raise TokenRejected(battle_id, "the presented battle token is not this battle's")
            if battle["state"] != BattleState.RUNNING.value:
                raise PublishRefused(battle_id, "battle_id", f"the battle is {battle['state']}, not running")
            if battle["green_pool"] is not None and battle["green_pool"] != pool:
                raise PublishRefused(battle_id, "pool", f"the battle runs on pool {battle['green_pool']!r}")
            queue = conn.execute("SELECT * FROM attempt_queues WHERE battle_id = ?", (battle_id,)).fetchone()
            now = self.clock()
            if queue is None:
                conn.execute(
                    "INSERT INTO attempt_queues (battle_id, pool, key_sha256, max_requeues, owner_worker,"
                    " owner_seen_at, owner_ttl_s, published_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (battle_id, pool, digest, max_requeues, owner_worker, now, owner_ttl_s, utc_now_iso()),
                )
            else:
                if queue["pool"] != pool:
                    raise PublishRefused(battle_id, "pool", f"the attempts were published for pool {queue['pool']!r}")
                if not tokens_match(queue["key_sha256"], digest):
                    raise PublishRefused(battle_id, "pool_key", "not the key the first publish used")
                conn.execute("UPDATE attempt_queues SET owner_seen_at = ? WHERE battle_id = ?", (now, battle_id))
            start = conn.execute(
                "SELECT COALESCE(MAX(position), 0) FROM battle_attempts WHERE battle_id = ?", (battle_id,)
            ).fetchone()[0]
            added = 0
            for spec, payload in specs:
                cur = conn.execute(
                    "INSERT OR IGNORE INTO battle_attempts (battle_id, task_key, attempt, position, payload, state)"
                    " VALUES (?, ?, ?, ?, ?, 'available')",
                    (battle_id, spec.task_key, spec.attempt, start + added + 1, payload),
                )
                added += cur.rowcount
            check_battle_size(battle_id, start, added)  # raising undoes this publish (its savepoint)
            return PublishOutcome(added=added, already=len(specs) - added)

        outcome: PublishOutcome = await self._write(fn)
        if outcome.added:
            self._signal.notify(pool)
        return outcome

    async def lease(self, pool: str, pool_key: str, worker_id: str, *, limit: int, ttl_s: float) -> list[Lease]:
        """The oldest available or expired attempts of the pool's running battles, leased to ``worker_id``."""
        check_ttl(ttl_s)
        limit = max(1, min(limit, MAX_LEASES_PER_CALL))
        digest = key_digest(pool_key)

        def fn(conn: sqlite3.Connection) -> list[Lease]:
            now = self.clock()
            leases: list[Lease] = []
            while len(leases) < limit:
                rows = conn.execute(
                    "SELECT a.*, q.max_requeues FROM battle_attempts a"
                    " JOIN attempt_queues q ON q.battle_id = a.battle_id"
                    " JOIN battles b ON b.battle_id = a.battle_id"
                    " WHERE q.pool = ? AND q.key_sha256 = ? AND b.state = 'running'"
                    " AND (a.state = 'available' OR (a.state = 'leased' AND a.lease_expires <= ?))"
                    " ORDER BY q.rowid, a.position LIMIT ?",
                    (pool, digest, now, limit - len(leases)),
                ).fetchall()
                if not rows:
                    break
                for row in rows:
                    lease = self._take(conn, row, worker_id, now, ttl_s)
                    if lease is not None:
                        leases.append(lease)
            pool_members.seen(conn, pool, digest, worker_id, now)  # the caller is a live member of the pool
            return leases

        return list(await self._write(fn))

    def _take(self, conn: sqlite3.Connection, row: sqlite3.Row, worker_id: str, now: float,
              ttl_s: float) -> Lease | None:  # fmt: skip
        key = (row["battle_id"], row["task_key"], row["attempt"])
        requeues = int(row["requeues"])
        if row["state"] == AttemptState.LEASED.value:  # expired: that lease ends, and counts as a requeue
            self._end_lease(conn, *key, int(row["generation"]), LeaseOutcome.EXPIRED, "lease time ran out")
            requeues += 1
            state, _status = after_requeue(requeues, int(row["max_requeues"]))
            if state is AttemptState.FAILED:
                conn.execute(
                    f"UPDATE battle_attempts SET state = 'failed', requeues = ?, leased_by = NULL,"
                    f" lease_expires = NULL, error = ? WHERE {KEY}",
                    (requeues, f"its lease expired {requeues} times", *key),
                )
                return None
        generation = int(row["generation"]) + 1
        conn.execute(
            f"UPDATE battle_attempts SET state = 'leased', generation = ?, leased_by = ?, lease_expires = ?,"
            f" requeues = ? WHERE {KEY}",
            (generation, worker_id, now + ttl_s, requeues, *key),
        )
        conn.execute(
            "INSERT INTO attempt_leases (battle_id, task_key, attempt, generation, worker_id, leased_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (*key, generation, worker_id, utc_now_iso()),
        )
        return Lease(*key, generation, worker_id, ttl_s, json.loads(row["payload"]))

    async def heartbeat(self, pool: str, pool_key: str, ref: LeaseRef, ttl_s: float) -> None:
        """Extend the live lease."""
        check_ttl(ttl_s)

        def fn(conn: sqlite3.Connection) -> None:
            now = self.clock()
            row = self._locked_lease(conn, pool, pool_key, ref)
            refusal = lease_refusal(ref, row, expired=row is not None and self._expired(row, now))
            if refusal is not None:
                raise refusal
            conn.execute(
                f"UPDATE battle_attempts SET lease_expires = ? WHERE {KEY}",
                (now + ttl_s, ref.battle_id, ref.task_key, ref.attempt),
            )
            pool_members.seen(conn, pool, key_digest(pool_key), ref.worker_id, now)  # a busy member leases nothing

        await self._write(fn)

    @staticmethod
    def _expired(row: sqlite3.Row, now: float) -> bool:
        return row["lease_expires"] is not None and float(row["lease_expires"]) <= now

    async def record(self, pool: str, pool_key: str, ref: LeaseRef, result: dict[str, Any]) -> RecordOutcome:
        """Store the result once."""
        text = dumps(result)

        def fn(conn: sqlite3.Connection) -> RecordOutcome:
            now = self.clock()
            row = self._locked_lease(conn, pool, pool_key, ref)
            if row is not None and is_duplicate(ref, row):
                return RecordOutcome(RecordStatus.DUPLICATE, self._attempt(conn, ref))
            refusal = lease_refusal(ref, row, expired=row is not None and self._expired(row, now))
            if refusal is not None:
                raise refusal
            conn.execute(
                f"UPDATE battle_attempts SET state = 'done', result = ?, recorded_by = ?, recorded_at = ?,"
                f" lease_expires = NULL WHERE {KEY}",
                (text, ref.worker_id, utc_now_iso(), ref.battle_id, ref.task_key, ref.attempt),
            )
            self._end_lease(conn, ref.battle_id, ref.task_key, ref.attempt, ref.generation, LeaseOutcome.RECORDED,
                            None)  # fmt: skip
            return RecordOutcome(RecordStatus.RECORDED, self._attempt(conn, ref))

        outcome: RecordOutcome = await self._write(fn)
        return outcome

    async def report_infra_error(self, pool: str, pool_key: str, ref: LeaseRef, error: str) -> RecordOutcome:
        """Requeue, or fail once the requeues are used up; the lease's history row keeps the error."""
        detail = bounded_error(error)

        def fn(conn: sqlite3.Connection) -> RecordOutcome:
            now = self.clock()
            row = self._locked_lease(conn, pool, pool_key, ref)
            refusal = lease_refusal(ref, row, expired=row is not None and self._expired(row, now))
            if refusal is not None or row is None:
                raise refusal or AssertionError("unreachable")
            max_requeues = int(self._queue_row(conn, ref.battle_id)["max_requeues"])
            requeues = int(row["requeues"]) + 1
            state, status = after_requeue(requeues, max_requeues)
            conn.execute(
                f"UPDATE battle_attempts SET state = ?, requeues = ?, leased_by = NULL, lease_expires = NULL,"
                f" error = ? WHERE {KEY}",
                (state.value, requeues, detail, ref.battle_id, ref.task_key, ref.attempt),
            )
            self._end_lease(conn, ref.battle_id, ref.task_key, ref.attempt, ref.generation, LeaseOutcome.INFRA_ERROR,
                            detail)  # fmt: skip
            return RecordOutcome(status, self._attempt(conn, ref))

        outcome: RecordOutcome = await self._write(fn)
        if outcome.status is RecordStatus.REQUEUED:
            self._signal.notify(pool)
        return outcome

    async def list_attempts(
        self,
        battle_id: str,
        *,
        presented_token: str | None = None,
        pool_key: str | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> list[StoredAttempt]:
        """Every attempt in publish order, with its history (the battle's token or the queue's pool key)."""

        def fn(conn: sqlite3.Connection) -> list[StoredAttempt]:
            return self._page(conn, battle_id, presented_token, pool_key, offset, limit)

        return list(await self._read(fn))

    def _page(self, conn: sqlite3.Connection, battle_id: str, presented_token: str | None, pool_key: str | None,
              offset: int, limit: int | None) -> list[StoredAttempt]:  # fmt: skip
        queue = self._queue_row(conn, battle_id)
        allowed = (presented_token is not None and tokens_match(queue["battle_token"], presented_token)) or (
            pool_key is not None and tokens_match(queue["key_sha256"], key_digest(pool_key))
        )
        if not allowed:
            raise TokenRejected(battle_id, "the battle's token or its pool key is needed to read its attempts")
        first, last = page_bounds(offset, limit)
        history = self._history(conn, battle_id, first, last)
        rows = conn.execute(
            "SELECT * FROM battle_attempts WHERE battle_id = ? AND position > ? AND position <= ? ORDER BY position",
            (battle_id, first, last),
        )
        return [stored_attempt(r, history.get((r["task_key"], int(r["attempt"])), [])) for r in rows]

    async def attempts_page(
        self,
        battle_id: str,
        *,
        presented_token: str | None = None,
        pool_key: str | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> tuple[QueueInfo, list[StoredAttempt]]:
        """The queue's counts and a page of its attempts from one read transaction."""

        def fn(conn: sqlite3.Connection) -> tuple[QueueInfo, list[StoredAttempt]]:
            attempts = self._page(conn, battle_id, presented_token, pool_key, offset, limit)
            info = self._info(conn, battle_id)
            assert info is not None  # _page found the queue in this transaction
            return info, attempts

        page: tuple[QueueInfo, list[StoredAttempt]] = await self._read(fn)
        return page

    async def members(self, pool: str, pool_key: str, window_s: float) -> PoolMembers:
        """The pool's members seen within ``window_s`` of the store's clock."""
        digest, now = key_digest(pool_key), self.clock()
        found: PoolMembers = await self._read(lambda conn: pool_members.members(conn, pool, digest, window_s, now))
        return found

    async def queue_info(self, battle_id: str) -> QueueInfo | None:
        """The queue and its counts by state."""
        info: QueueInfo | None = await self._read(lambda conn: self._info(conn, battle_id))
        return info

    def _info(self, conn: sqlite3.Connection, battle_id: str) -> QueueInfo | None:
        try:
            queue = self._queue_row(conn, battle_id)
        except QueueNotFound:
            return None
        counts = {state.value: 0 for state in AttemptState}
        for row in conn.execute(
            "SELECT state, COUNT(*) AS n FROM battle_attempts WHERE battle_id = ? GROUP BY state", (battle_id,)
        ):
            counts[row["state"]] = int(row["n"])
        return QueueInfo(
            battle_id, queue["pool"], queue["owner_worker"], int(queue["max_requeues"]),
            float(queue["owner_ttl_s"]), counts,
        )  # fmt: skip

    async def owner_heartbeat(self, battle_id: str, presented_token: str, worker_id: str) -> None:
        """The owner is alive (and may name itself anew)."""

        def fn(conn: sqlite3.Connection) -> None:
            queue = self._queue_row(conn, battle_id)
            if not tokens_match(queue["battle_token"], presented_token):
                raise TokenRejected(battle_id, "the presented battle token is not this battle's")
            conn.execute(
                "UPDATE attempt_queues SET owner_seen_at = ?, owner_worker = ? WHERE battle_id = ?",
                (self.clock(), worker_id, battle_id),
            )

        await self._write(fn)

    async def claim_owner(self, battle_id: str, pool: str, pool_key: str, worker_id: str) -> str:
        """Take over a battle whose owner went silent; returns its token."""

        def fn(conn: sqlite3.Connection) -> str:
            queue = self._queue_row(conn, battle_id)
            check_pool(battle_id, queue["pool"], queue["key_sha256"], pool, pool_key)
            now = self.clock()
            alive = float(queue["owner_seen_at"]) + float(queue["owner_ttl_s"]) > now
            if alive and queue["owner_worker"] != worker_id:
                raise OwnerAlive(battle_id, queue["owner_worker"])
            if queue["battle_state"] != BattleState.RUNNING.value:
                raise PublishRefused(battle_id, "battle_id", f"the battle is {queue['battle_state']}, not running")
            conn.execute(
                "UPDATE attempt_queues SET owner_worker = ?, owner_seen_at = ? WHERE battle_id = ?",
                (worker_id, now, battle_id),
            )
            return str(queue["battle_token"])

        token: str = await self._write(fn)
        return token

    async def wait_for_work(self, pool: str, timeout_s: float) -> None:
        """Woken by a publish or requeue in this process, else after ``min(timeout_s, poll_s)``."""
        await self._signal.wait(pool, min(timeout_s, self.poll_s))

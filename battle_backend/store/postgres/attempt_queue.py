"""The attempt queue on PostgreSQL: green agents on any machine share a battle's attempts through the database.

- Leasing: ``SELECT ... FOR UPDATE OF a SKIP LOCKED`` picks the oldest available or expired attempts of the pool's
  running battles, so concurrent leasers (on any replica) never wait on each other and never take the same row;
  the lease's expiry is ``now() + ttl`` on the database's clock, so workers' and replicas' clocks need not agree.
- Heartbeat, record and infrastructure-error reports lock the attempt's row (``FOR UPDATE``) and apply the shared
  rules (:mod:`battle_backend.store.attempt_queue_rules`): only the current, unexpired lease (its generation is the
  fencing token) may act.
- Wake-ups: a publish or a requeue sends ``NOTIFY arena_attempts`` (the pool's name) from inside its transaction;
  every replica's listener (:mod:`battle_backend.store.postgres.listener`) wakes its idle lease waiters. Expired
  leases send nothing, so waiters also look again every ``poll_s``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

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
from battle_backend.store.postgres import pool_members
from battle_backend.store.postgres.listener import ATTEMPTS_CHANNEL
from battle_backend.store.protocol import BattleNotFound, TokenRejected
from battle_backend.store.records import BattleState, utc_now_iso
from battle_backend.store.tokens import tokens_match

if TYPE_CHECKING:
    from battle_backend.store.postgres.pool import Conn, PostgresPool

MAX_NOTIFY_POOL_CHARS = 4000
"""Longer pool names are not sent (NOTIFY payloads stop at 8000 bytes): their waiters find work by polling."""
KEY = "battle_id = %s AND task_key = %s AND attempt = %s"
EXPIRED = "(lease_expires IS NOT NULL AND lease_expires <= now())"


class PostgresAttemptQueue:
    """`AttemptQueue` of `PostgresStore` (see the module docstring); ``store`` lends its transactions."""

    def __init__(self, store: PostgresPool, *, poll_s: float = 1.0) -> None:
        self._store = store
        self.poll_s = poll_s
        self.signal = WorkSignal()
        """Woken by the listener on other replicas' publishes and requeues, and by this replica's own."""

    # --- helpers --------------------------------------------------------------------------------------------
    async def _notify(self, conn: Conn, pool: str) -> None:
        if len(pool) <= MAX_NOTIFY_POOL_CHARS:
            await conn.execute("SELECT pg_notify(%s, %s)", (ATTEMPTS_CHANNEL, pool))

    async def _queue_row(self, conn: Conn, battle_id: str, *, lock: bool = False) -> Mapping[str, Any]:
        row = await self._store._row(
            conn,
            "SELECT q.*, b.state AS battle_state, b.battle_token,"
            " q.owner_seen_at + make_interval(secs => q.owner_ttl_s) > now() AS owner_alive"
            " FROM attempt_queues q JOIN battles b ON b.battle_id = q.battle_id"
            " WHERE q.battle_id = %s" + (" FOR UPDATE OF q" if lock else ""),
            (battle_id,),
        )
        if row is None:
            raise QueueNotFound(battle_id)
        return row

    async def _attempt_row(self, conn: Conn, ref: LeaseRef) -> Mapping[str, Any] | None:
        return await self._store._row(
            conn,
            f"SELECT *, {EXPIRED} AS expired FROM battle_attempts WHERE {KEY} FOR UPDATE",
            (ref.battle_id, ref.task_key, ref.attempt),
        )

    async def _attempt(self, conn: Conn, ref: LeaseRef) -> StoredAttempt:
        row = await self._store._row(
            conn, f"SELECT * FROM battle_attempts WHERE {KEY}", (ref.battle_id, ref.task_key, ref.attempt)
        )
        history = await self._store._rows(
            conn,
            f"SELECT * FROM attempt_leases WHERE {KEY} ORDER BY generation",
            (ref.battle_id, ref.task_key, ref.attempt),
        )
        assert row is not None
        return stored_attempt(row, [history_entry(h) for h in history])

    @staticmethod
    async def _end_lease(conn: Conn, key: tuple[str, str, int], generation: int, outcome: LeaseOutcome,
                         detail: str | None) -> None:  # fmt: skip
        await conn.execute(
            f"UPDATE attempt_leases SET ended_at = %s, outcome = %s, detail = %s WHERE {KEY} AND generation = %s",
            (utc_now_iso(), outcome.value, detail, *key, generation),
        )

    async def _live_lease(self, conn: Conn, pool: str, pool_key: str, ref: LeaseRef) -> Mapping[str, Any] | None:
        queue = await self._queue_row(conn, ref.battle_id)
        check_pool(ref.battle_id, queue["pool"], queue["key_sha256"], pool, pool_key)
        return await self._attempt_row(conn, ref)

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

        async def fn(conn: Conn) -> PublishOutcome:
            battle = await self._store._row(
                conn,
                "SELECT state, battle_token, green_pool FROM battles WHERE battle_id = %s FOR UPDATE",
                (battle_id,),
            )
            if battle is None:
                raise BattleNotFound(battle_id)
            if not tokens_match(battle["battle_token"], presented_token):
                raise TokenRejected(battle_id, "the presented battle token is not this battle's")
            if battle["state"] != BattleState.RUNNING.value:
                raise PublishRefused(battle_id, "battle_id", f"the battle is {battle['state']}, not running")
            if battle["green_pool"] is not None and battle["green_pool"] != pool:
                raise PublishRefused(battle_id, "pool", f"the battle runs on pool {battle['green_pool']!r}")
            queue = await self._store._row(conn, "SELECT * FROM attempt_queues WHERE battle_id = %s", (battle_id,))
            if queue is None:
                await conn.execute(
                    "INSERT INTO attempt_queues (battle_id, pool, key_sha256, max_requeues, owner_worker,"
                    " owner_seen_at, owner_ttl_s, published_at) VALUES (%s, %s, %s, %s, %s, now(), %s, %s)",
                    (battle_id, pool, digest, max_requeues, owner_worker, owner_ttl_s, utc_now_iso()),
                )
            else:
                if queue["pool"] != pool:
                    raise PublishRefused(battle_id, "pool", f"the attempts were published for pool {queue['pool']!r}")
                if not tokens_match(queue["key_sha256"], digest):
                    raise PublishRefused(battle_id, "pool_key", "not the key the first publish used")
                await conn.execute("UPDATE attempt_queues SET owner_seen_at = now() WHERE battle_id = %s", (battle_id,))
            top = await self._store._row(
                conn, "SELECT COALESCE(MAX(position), 0) AS top FROM battle_attempts WHERE battle_id = %s", (battle_id,)
            )
            start = int(top["top"]) if top else 0
            added = 0
            for spec, payload in specs:
                cur = await conn.execute(
                    "INSERT INTO battle_attempts (battle_id, task_key, attempt, position, payload, state)"
                    " VALUES (%s, %s, %s, %s, %s, 'available') ON CONFLICT DO NOTHING",
                    (battle_id, spec.task_key, spec.attempt, start + added + 1, payload),
                )
                added += max(cur.rowcount, 0)
            check_battle_size(battle_id, start, added)  # raising rolls this publish back
            if added:
                await self._notify(conn, pool)
            return PublishOutcome(added=added, already=len(specs) - added)

        outcome: PublishOutcome = await self._store._write(fn)
        if outcome.added:
            self.signal.notify(pool)
        return outcome

    async def lease(self, pool: str, pool_key: str, worker_id: str, *, limit: int, ttl_s: float) -> list[Lease]:
        """``FOR UPDATE SKIP LOCKED``: the oldest available or expired attempts nobody else is taking right now."""
        check_ttl(ttl_s)
        limit = max(1, min(limit, MAX_LEASES_PER_CALL))
        digest = key_digest(pool_key)

        async def fn(conn: Conn) -> list[Lease]:
            leases: list[Lease] = []
            while len(leases) < limit:
                rows = await self._store._rows(
                    conn,
                    "SELECT a.*, q.max_requeues FROM battle_attempts a"
                    " JOIN attempt_queues q ON q.battle_id = a.battle_id"
                    " JOIN battles b ON b.battle_id = a.battle_id"
                    " WHERE q.pool = %s AND q.key_sha256 = %s AND b.state = 'running'"
                    " AND (a.state = 'available' OR (a.state = 'leased' AND a.lease_expires <= now()))"
                    " ORDER BY q.position, a.position LIMIT %s FOR UPDATE OF a SKIP LOCKED",
                    (pool, digest, limit - len(leases)),
                )
                if not rows:
                    break
                for row in rows:
                    lease = await self._take(conn, row, worker_id, ttl_s)
                    if lease is not None:
                        leases.append(lease)
            await pool_members.seen(self._store, conn, pool, digest, worker_id)  # last: after the attempt rows
            return leases

        return list(await self._store._write(fn))

    async def _take(self, conn: Conn, row: dict[str, Any], worker_id: str, ttl_s: float) -> Lease | None:
        key = (str(row["battle_id"]), str(row["task_key"]), int(row["attempt"]))
        requeues = int(row["requeues"])
        if row["state"] == AttemptState.LEASED.value:  # expired: that lease ends, and counts as a requeue
            await self._end_lease(conn, key, int(row["generation"]), LeaseOutcome.EXPIRED, "lease time ran out")
            requeues += 1
            state, _status = after_requeue(requeues, int(row["max_requeues"]))
            if state is AttemptState.FAILED:
                await conn.execute(
                    f"UPDATE battle_attempts SET state = 'failed', requeues = %s, leased_by = NULL,"
                    f" lease_expires = NULL, error = %s WHERE {KEY}",
                    (requeues, f"its lease expired {requeues} times", *key),
                )
                return None
        generation = int(row["generation"]) + 1
        await conn.execute(
            f"UPDATE battle_attempts SET state = 'leased', generation = %s, leased_by = %s,"
            f" lease_expires = now() + make_interval(secs => %s), requeues = %s WHERE {KEY}",
            (generation, worker_id, ttl_s, requeues, *key),
        )
        await conn.execute(
            "INSERT INTO attempt_leases (battle_id, task_key, attempt, generation, worker_id, leased_at)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (*key, generation, worker_id, utc_now_iso()),
        )
        return Lease(*key, generation, worker_id, ttl_s, json.loads(row["payload"]))

    async def heartbeat(self, pool: str, pool_key: str, ref: LeaseRef, ttl_s: float) -> None:
        """Extend the live lease to ``now() + ttl_s``."""
        check_ttl(ttl_s)

        async def fn(conn: Conn) -> None:
            row = await self._live_lease(conn, pool, pool_key, ref)
            refusal = lease_refusal(ref, row, expired=bool(row and row["expired"]))
            if refusal is not None:
                raise refusal
            await conn.execute(
                f"UPDATE battle_attempts SET lease_expires = now() + make_interval(secs => %s) WHERE {KEY}",
                (ttl_s, ref.battle_id, ref.task_key, ref.attempt),
            )
            await pool_members.seen(self._store, conn, pool, key_digest(pool_key), ref.worker_id)  # busy: no lease

        await self._store._write(fn)

    async def record(self, pool: str, pool_key: str, ref: LeaseRef, result: dict[str, Any]) -> RecordOutcome:
        """Store the result once."""
        text = dumps(result)

        async def fn(conn: Conn) -> RecordOutcome:
            row = await self._live_lease(conn, pool, pool_key, ref)
            if row is not None and is_duplicate(ref, row):
                return RecordOutcome(RecordStatus.DUPLICATE, await self._attempt(conn, ref))
            refusal = lease_refusal(ref, row, expired=bool(row and row["expired"]))
            if refusal is not None:
                raise refusal
            await conn.execute(
                f"UPDATE battle_attempts SET state = 'done', result = %s, recorded_by = %s, recorded_at = %s,"
                f" lease_expires = NULL WHERE {KEY}",
                (text, ref.worker_id, utc_now_iso(), ref.battle_id, ref.task_key, ref.attempt),
            )
            key = (ref.battle_id, ref.task_key, ref.attempt)
            await self._end_lease(conn, key, ref.generation, LeaseOutcome.RECORDED, None)
            return RecordOutcome(RecordStatus.RECORDED, await self._attempt(conn, ref))

        outcome: RecordOutcome = await self._store._write(fn)
        return outcome

    async def report_infra_error(self, pool: str, pool_key: str, ref: LeaseRef, error: str) -> RecordOutcome:
        """Requeue, or fail once the requeues are used up; the lease's history row keeps the error."""
        detail = bounded_error(error)

        async def fn(conn: Conn) -> RecordOutcome:
            row = await self._live_lease(conn, pool, pool_key, ref)
            refusal = lease_refusal(ref, row, expired=bool(row and row["expired"]))
            if refusal is not None or row is None:
                raise refusal or AssertionError("unreachable")
            max_requeues = int((await self._queue_row(conn, ref.battle_id))["max_requeues"])
            requeues = int(row["requeues"]) + 1
            state, status = after_requeue(requeues, max_requeues)
            await conn.execute(
                f"UPDATE battle_attempts SET state = %s, requeues = %s, leased_by = NULL, lease_expires = NULL,"
                f" error = %s WHERE {KEY}",
                (state.value, requeues, detail, ref.battle_id, ref.task_key, ref.attempt),
            )
            key = (ref.battle_id, ref.task_key, ref.attempt)
            await self._end_lease(conn, key, ref.generation, LeaseOutcome.INFRA_ERROR, detail)
            if status is RecordStatus.REQUEUED:
                await self._notify(conn, pool)
            return RecordOutcome(status, await self._attempt(conn, ref))

        outcome: RecordOutcome = await self._store._write(fn)
        if outcome.status is RecordStatus.REQUEUED:
            self.signal.notify(pool)
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

        async def fn(conn: Conn) -> list[StoredAttempt]:
            return await self._page(conn, battle_id, presented_token, pool_key, offset, limit)

        return list(await self._store._read(fn))

    async def _page(self, conn: Conn, battle_id: str, presented_token: str | None, pool_key: str | None,
                    offset: int, limit: int | None) -> list[StoredAttempt]:  # fmt: skip
        queue = await self._queue_row(conn, battle_id)
        allowed = (presented_token is not None and tokens_match(queue["battle_token"], presented_token)) or (
            pool_key is not None and tokens_match(queue["key_sha256"], key_digest(pool_key))
        )
        if not allowed:
            raise TokenRejected(battle_id, "the battle's token or its pool key is needed to read its attempts")
        first, last = page_bounds(offset, limit)
        histories = await self._store._rows(
            conn,
            "SELECT h.* FROM attempt_leases h JOIN battle_attempts a ON a.battle_id = h.battle_id"
            " AND a.task_key = h.task_key AND a.attempt = h.attempt"
            " WHERE h.battle_id = %s AND a.position > %s AND a.position <= %s ORDER BY h.generation",
            (battle_id, first, last),
        )
        rows = await self._store._rows(
            conn,
            "SELECT * FROM battle_attempts WHERE battle_id = %s AND position > %s AND position <= %s ORDER BY position",
            (battle_id, first, last),
        )

        def build() -> list[StoredAttempt]:
            history: dict[tuple[str, int], list[LeaseHistoryEntry]] = {}
            for h in histories:
                history.setdefault((h["task_key"], int(h["attempt"])), []).append(history_entry(h))
            return [stored_attempt(r, history.get((r["task_key"], int(r["attempt"])), [])) for r in rows]

        size = sum(len(r["payload"]) + len(r["result"] or "") for r in rows)
        return await self._store._decode(build, size)  # large results are decoded off the event loop

    async def attempts_page(
        self,
        battle_id: str,
        *,
        presented_token: str | None = None,
        pool_key: str | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> tuple[QueueInfo, list[StoredAttempt]]:
        """The queue's counts and a page of its attempts from one read transaction (REPEATABLE READ)."""

        async def fn(conn: Conn) -> tuple[QueueInfo, list[StoredAttempt]]:
            attempts = await self._page(conn, battle_id, presented_token, pool_key, offset, limit)
            info = await self._info(conn, battle_id)
            assert info is not None  # _page found the queue in this transaction
            return info, attempts

        page: tuple[QueueInfo, list[StoredAttempt]] = await self._store._read(fn)
        return page

    async def members(self, pool: str, pool_key: str, window_s: float) -> PoolMembers:
        """The pool's members seen within ``window_s`` of the database's ``now()``."""
        digest = key_digest(pool_key)
        found: PoolMembers = await self._store._read(
            lambda conn: pool_members.members(self._store, conn, pool, digest, window_s)
        )
        return found

    async def queue_info(self, battle_id: str) -> QueueInfo | None:
        """The queue and its counts by state."""
        info: QueueInfo | None = await self._store._read(lambda conn: self._info(conn, battle_id))
        return info

    async def _info(self, conn: Conn, battle_id: str) -> QueueInfo | None:
        try:
            queue = await self._queue_row(conn, battle_id)
        except QueueNotFound:
            return None
        counts = {state.value: 0 for state in AttemptState}
        for row in await self._store._rows(
            conn,
            "SELECT state, COUNT(*) AS n FROM battle_attempts WHERE battle_id = %s GROUP BY state",
            (battle_id,),
        ):
            counts[row["state"]] = int(row["n"])
        return QueueInfo(
            battle_id, queue["pool"], queue["owner_worker"], int(queue["max_requeues"]),
            float(queue["owner_ttl_s"]), counts,
        )  # fmt: skip

    async def owner_heartbeat(self, battle_id: str, presented_token: str, worker_id: str) -> None:
        """The owner is alive (``now()``)."""

        async def fn(conn: Conn) -> None:
            queue = await self._queue_row(conn, battle_id, lock=True)
            if not tokens_match(queue["battle_token"], presented_token):
                raise TokenRejected(battle_id, "the presented battle token is not this battle's")
            await conn.execute(
                "UPDATE attempt_queues SET owner_seen_at = now(), owner_worker = %s WHERE battle_id = %s",
                (worker_id, battle_id),
            )

        await self._store._write(fn)

    async def claim_owner(self, battle_id: str, pool: str, pool_key: str, worker_id: str) -> str:
        """Take over a battle whose owner went silent (the queue row locked: one claimer wins)."""

        async def fn(conn: Conn) -> str:
            queue = await self._queue_row(conn, battle_id, lock=True)
            check_pool(battle_id, queue["pool"], queue["key_sha256"], pool, pool_key)
            if queue["owner_alive"] and queue["owner_worker"] != worker_id:
                raise OwnerAlive(battle_id, queue["owner_worker"])
            if queue["battle_state"] != BattleState.RUNNING.value:
                raise PublishRefused(battle_id, "battle_id", f"the battle is {queue['battle_state']}, not running")
            await conn.execute(
                "UPDATE attempt_queues SET owner_worker = %s, owner_seen_at = now() WHERE battle_id = %s",
                (worker_id, battle_id),
            )
            return str(queue["battle_token"])

        token: str = await self._store._write(fn)
        return token

    async def wait_for_work(self, pool: str, timeout_s: float) -> None:
        """Woken by a NOTIFY of this pool (any replica), else after ``min(timeout_s, poll_s)``."""
        await self.signal.wait(pool, min(timeout_s, self.poll_s))

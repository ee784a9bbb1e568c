"""The pool's live members on PostgreSQL (issues 27 and 29): every lease and heartbeat call records its worker and
the database's ``now()``, so green agents on any machine can divide a per-provider cap by the members seen recently
(docs/design/providers.md, "Across a pool"). The rules are the SQLite store's
(:mod:`battle_backend.store.sqlite.pool_members`): a member counts under the pool key it presented, only when that is
the pool's key (or the pool has no published battle yet); rows not seen for :data:`MAX_MEMBERS_WINDOW_S` are
deleted, at most :data:`MAX_MEMBERS_PER_POOL` kept per (pool, key) and :data:`MAX_UNPUBLISHED_MEMBERS` in all across
the pools without a published battle. ``seen`` runs last in the caller's
transaction (after the attempt rows it locked), so lease and heartbeat transactions take their locks in one order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from battle_backend.store.attempt_errors import PoolKeyRejected
from battle_backend.store.attempt_queue_rules import (
    MAX_MEMBERS_LISTED,
    MAX_MEMBERS_PER_POOL,
    MAX_MEMBERS_WINDOW_S,
    MAX_UNPUBLISHED_MEMBERS,
    NOT_THE_POOLS_KEY,
)
from battle_backend.store.attempt_records import PoolMembers

if TYPE_CHECKING:
    from battle_backend.store.postgres.pool import Conn, PostgresPool


_UNPUBLISHED = "NOT EXISTS (SELECT 1 FROM attempt_queues q WHERE q.pool = m.pool)"


async def _digests(store: PostgresPool, conn: Conn, pool: str) -> set[str]:
    rows = await store._rows(conn, "SELECT DISTINCT key_sha256 FROM attempt_queues WHERE pool = %s", (pool,))
    return {str(row["key_sha256"]) for row in rows}


async def _key_is_foreign(store: PostgresPool, conn: Conn, pool: str, digest: str) -> bool:
    digests = await _digests(store, conn, pool)
    return bool(digests) and digest not in digests


async def seen(store: PostgresPool, conn: Conn, pool: str, digest: str, worker_id: str) -> None:
    """Record that ``worker_id`` called now (nothing for a key that is not the pool's)."""
    await conn.execute(
        "DELETE FROM pool_members WHERE last_seen < now() - make_interval(secs => %s)", (MAX_MEMBERS_WINDOW_S,)
    )
    digests = await _digests(store, conn, pool)
    if digests and digest not in digests:
        return
    await conn.execute(
        "INSERT INTO pool_members (pool, key_sha256, worker_id, last_seen) VALUES (%s, %s, %s, now())"
        " ON CONFLICT (pool, key_sha256, worker_id) DO UPDATE SET last_seen = now()",
        (pool, digest, worker_id),
    )
    row = await store._row(
        conn, "SELECT COUNT(*) AS n FROM pool_members WHERE pool = %s AND key_sha256 = %s", (pool, digest)
    )
    kept = int(row["n"]) if row else 0
    if kept > MAX_MEMBERS_PER_POOL:
        await conn.execute(
            "DELETE FROM pool_members WHERE pool = %s AND key_sha256 = %s AND worker_id IN (SELECT worker_id FROM"
            " pool_members WHERE pool = %s AND key_sha256 = %s ORDER BY last_seen, worker_id LIMIT %s)",
            (pool, digest, pool, digest, kept - MAX_MEMBERS_PER_POOL),
        )
    if not digests:  # a pool nobody published to: bounded with all such pools
        row = await store._row(conn, f"SELECT COUNT(*) AS n FROM pool_members m WHERE {_UNPUBLISHED}", ())
        unpublished = int(row["n"]) if row else 0
        if unpublished > MAX_UNPUBLISHED_MEMBERS:
            await conn.execute(
                "DELETE FROM pool_members WHERE (pool, key_sha256, worker_id) IN (SELECT pool, key_sha256, worker_id"
                f" FROM pool_members m WHERE {_UNPUBLISHED} ORDER BY last_seen, pool, key_sha256, worker_id"
                " LIMIT %s FOR UPDATE SKIP LOCKED)",  # rows another call holds are not waited for (no deadlock)
                (unpublished - MAX_UNPUBLISHED_MEMBERS,),
            )


async def members(store: PostgresPool, conn: Conn, pool: str, digest: str, window_s: float) -> PoolMembers:
    """The members seen within ``window_s`` of ``now()`` (PoolKeyRejected for a key that is not the pool's)."""
    if await _key_is_foreign(store, conn, pool, digest):
        raise PoolKeyRejected("", NOT_THE_POOLS_KEY, pool=pool)
    since = "now() - make_interval(secs => %s)"
    row = await store._row(
        conn,
        f"SELECT COUNT(*) AS n FROM pool_members WHERE pool = %s AND key_sha256 = %s AND last_seen >= {since}",
        (pool, digest, window_s),
    )
    ids = await store._rows(
        conn,
        f"SELECT worker_id FROM pool_members WHERE pool = %s AND key_sha256 = %s AND last_seen >= {since}"
        " ORDER BY last_seen DESC, worker_id LIMIT %s",
        (pool, digest, window_s, MAX_MEMBERS_LISTED),
    )
    return PoolMembers(pool, window_s, int(row["n"]) if row else 0, [str(r["worker_id"]) for r in ids])

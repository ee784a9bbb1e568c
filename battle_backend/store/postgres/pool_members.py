"""The pool's live members on PostgreSQL (issues 27 and 29): every lease and heartbeat call records its worker and
the database's ``now()``, so green agents on any machine can divide a per-provider cap by the members seen recently
(docs/design/providers.md, "Across a pool"). The rules are the SQLite store's
(:mod:`battle_backend.store.sqlite.pool_members`): a member counts under the pool key it presented, only when that is
the pool's key (or the pool has no published battle yet); rows not seen for :data:`MAX_MEMBERS_WINDOW_S` are
deleted and at most :data:`MAX_MEMBERS_PER_POOL` kept per (pool, key). ``seen`` runs last in the caller's
transaction (after the attempt rows it locked), so lease and heartbeat transactions take their locks in one order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from battle_backend.store.attempt_errors import PoolKeyRejected
from battle_backend.store.attempt_queue_rules import MAX_MEMBERS_LISTED, MAX_MEMBERS_PER_POOL, MAX_MEMBERS_WINDOW_S
from battle_backend.store.attempt_records import PoolMembers

NOT_THE_POOLS_KEY = "the presented pool key is not the one its attempts were published with"

if TYPE_CHECKING:
    from battle_backend.store.postgres.pool import Conn, PostgresPool


async def _key_is_foreign(store: PostgresPool, conn: Conn, pool: str, digest: str) -> bool:
    rows = await store._rows(conn, "SELECT DISTINCT key_sha256 FROM attempt_queues WHERE pool = %s", (pool,))
    digests = {row["key_sha256"] for row in rows}
    return bool(digests) and digest not in digests


async def seen(store: PostgresPool, conn: Conn, pool: str, digest: str, worker_id: str) -> None:
    """Record that ``worker_id`` called now (nothing for a key that is not the pool's)."""
    await conn.execute(
        "DELETE FROM pool_members WHERE last_seen < now() - make_interval(secs => %s)", (MAX_MEMBERS_WINDOW_S,)
    )
    if await _key_is_foreign(store, conn, pool, digest):
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

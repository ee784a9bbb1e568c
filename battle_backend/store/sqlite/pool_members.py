"""The pool's live members on SQLite (issues 27 and 29): every lease and heartbeat call records its worker and the
store's clock, so green agents can divide a per-provider cap by the members seen recently
(docs/design/providers.md, "Across a pool").

A member is recorded under the SHA-256 of the pool key it presented, and only when that key is the pool's (the key
its battles were published with) or the pool has no published battle yet: a worker with another key never counts
in the pool. Rows are bounded: a member not seen for :data:`MAX_MEMBERS_WINDOW_S` is deleted, and at most
:data:`MAX_MEMBERS_PER_POOL` are kept per (pool, key), and :data:`MAX_UNPUBLISHED_MEMBERS` in all across the pools
without a published battle (anyone may call lease there, with any key). These run inside the caller's transaction
(the writer's for ``seen``, a reader's for ``members``).
"""

from __future__ import annotations

import sqlite3

from battle_backend.store.attempt_errors import PoolKeyRejected
from battle_backend.store.attempt_queue_rules import (
    MAX_MEMBERS_LISTED,
    MAX_MEMBERS_PER_POOL,
    MAX_MEMBERS_WINDOW_S,
    MAX_UNPUBLISHED_MEMBERS,
    NOT_THE_POOLS_KEY,
)
from battle_backend.store.attempt_records import PoolMembers


def _digests(conn: sqlite3.Connection, pool: str) -> set[str]:
    """The keys (SHA-256) the pool's battles were published with (none: no published battle)."""
    known = conn.execute("SELECT key_sha256 FROM attempt_queues WHERE pool = ? GROUP BY key_sha256", (pool,))
    return {str(row[0]) for row in known}


def _key_is_foreign(conn: sqlite3.Connection, pool: str, digest: str) -> bool:
    """True when the pool's battles were published with another key than ``digest``."""
    digests = _digests(conn, pool)
    return bool(digests) and digest not in digests


_UNPUBLISHED = "NOT EXISTS (SELECT 1 FROM attempt_queues q WHERE q.pool = pool_members.pool)"


def seen(conn: sqlite3.Connection, pool: str, digest: str, worker_id: str, now: float) -> None:
    """Record that ``worker_id`` called now (nothing for a key that is not the pool's)."""
    conn.execute("DELETE FROM pool_members WHERE last_seen < ?", (now - MAX_MEMBERS_WINDOW_S,))
    digests = _digests(conn, pool)
    if digests and digest not in digests:
        return
    conn.execute(
        "INSERT INTO pool_members (pool, key_sha256, worker_id, last_seen) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (pool, key_sha256, worker_id) DO UPDATE SET last_seen = MAX(last_seen, excluded.last_seen)",
        (pool, digest, worker_id, now),
    )
    (kept,) = conn.execute(
        "SELECT COUNT(*) FROM pool_members WHERE pool = ? AND key_sha256 = ?", (pool, digest)
    ).fetchone()
    if kept > MAX_MEMBERS_PER_POOL:
        conn.execute(
            "DELETE FROM pool_members WHERE pool = ? AND key_sha256 = ? AND worker_id IN (SELECT worker_id FROM"
            " pool_members WHERE pool = ? AND key_sha256 = ? ORDER BY last_seen, worker_id LIMIT ?)",
            (pool, digest, pool, digest, kept - MAX_MEMBERS_PER_POOL),
        )
    if not digests:  # a pool nobody published to: bounded with all such pools
        (unpublished,) = conn.execute(f"SELECT COUNT(*) FROM pool_members WHERE {_UNPUBLISHED}").fetchone()
        if unpublished > MAX_UNPUBLISHED_MEMBERS:
            conn.execute(
                f"DELETE FROM pool_members WHERE rowid IN (SELECT rowid FROM pool_members WHERE {_UNPUBLISHED}"
                " ORDER BY last_seen, rowid LIMIT ?)",
                (unpublished - MAX_UNPUBLISHED_MEMBERS,),
            )


def members(conn: sqlite3.Connection, pool: str, digest: str, window_s: float, now: float) -> PoolMembers:
    """The members seen within ``window_s`` (PoolKeyRejected for a key that is not the pool's)."""
    if _key_is_foreign(conn, pool, digest):
        raise PoolKeyRejected("", NOT_THE_POOLS_KEY, pool=pool)
    since = now - window_s
    (count,) = conn.execute(
        "SELECT COUNT(*) FROM pool_members WHERE pool = ? AND key_sha256 = ? AND last_seen >= ?", (pool, digest, since)
    ).fetchone()
    ids = conn.execute(
        "SELECT worker_id FROM pool_members WHERE pool = ? AND key_sha256 = ? AND last_seen >= ?"
        " ORDER BY last_seen DESC, worker_id LIMIT ?",
        (pool, digest, since, MAX_MEMBERS_LISTED),
    )
    return PoolMembers(pool, window_s, int(count), [str(row[0]) for row in ids])

"""PostgreSQL implementation of `BattleStore`: one database server shared by several backend replicas.

Why it looks like this:
- psycopg 3's asyncio connections from a pool: every query is awaited on the event loop without a thread, and a
  replica holds a bounded number of connections (``pool_max``) however many requests arrive.
- One transaction per call. Whatever must hold across replicas is decided inside it by the database: the battle's
  row is locked first (``SELECT ... FOR UPDATE``), so its next sequence number, its state (one accepted result) and
  its token are read and written by one transaction at a time, whichever replica received the event; agent rows are
  then locked in one statement in ``agent_id`` order, so two transactions can never wait on each other in a cycle.
  A deadlock or serialization failure the database still reports is retried (a few times) from the start.
- Every committed change sends ``NOTIFY arena_changes`` from inside its transaction (delivered only if it commits,
  in commit order): each replica LISTENs on a connection of its own (:mod:`battle_backend.store.postgres.listener`) and
  hands the other replicas' changes to its live views and scheduler (see ``set_notice_handler``).
- Progress events: one call of the database function ``arena_append_event`` each, written by one task per battle
  (:mod:`battle_backend.store.postgres.appends`), which commits the events that waited meanwhile together.
- Replicas: ``replicas`` holds each one's heartbeat (the database's clock) and lease time; a battle's ``owner`` is the
  replica that started it. ``claim_orphaned_battles`` moves the running battles of a replica whose own lease expired,
  or which shut down (it deletes its row), to the caller, by a compare-and-set on the previous owner, so two claimers
  never take the same one.
- The schema is Alembic's (:mod:`battle_backend.store.postgres.schema`), migrated on ``open`` in a worker thread.

Values are kept exactly as the SQLite store keeps them (JSON text from :mod:`battle_backend.store.json_text`, read back
by :mod:`battle_backend.store.rows`), so both stores answer the same battle the same way. Decoding many or large
JSON values runs in a worker thread, so a multi-megabyte result never stalls the event loop.
"""

from __future__ import annotations

from typing import Any

from battle_backend.store.postgres.attempt_queue import PostgresAttemptQueue
from battle_backend.store.postgres.pool import is_postgres_url, safe_url, storable
from battle_backend.store.postgres.transitions import PostgresTransitions

__all__ = ["PostgresStore", "is_postgres_url", "safe_url", "storable"]


class PostgresStore(PostgresTransitions):
    """`BattleStore` on a PostgreSQL database that several replicas may share: the pool and replicas
    (:mod:`~battle_backend.store.postgres.pool`), agents and battles (:mod:`~battle_backend.store.postgres.battles`)
    and state transitions (:mod:`~battle_backend.store.postgres.transitions`), one class each, stacked."""

    def __init__(self, url: str, **options: Any) -> None:
        super().__init__(url, **options)
        self.attempts = PostgresAttemptQueue(self)
        """The attempt queue (issue 29): :mod:`battle_backend.store.postgres.attempt_queue`."""
        self.listener.attempt_handler = self.attempts.signal.notify

"""The PostgreSQL store's plumbing and replicas: the connection pool, transactions, notices, leases.

Why a module of its own: everything here is the same whatever is written (connections from psycopg 3's asyncio pool,
one transaction per call retried on deadlock or serialization failure, an outage answered 503 quickly, the replica's
heartbeat and lease, the claiming of orphaned battles); what each call writes is in
:mod:`battle_backend.store.postgres.battles` and :mod:`battle_backend.store.postgres.transitions`. The design as a
whole is described in :mod:`battle_backend.store.postgres.store`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio.to_thread
import psycopg
import sqlalchemy.exc
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from battle_backend.store.json_text import has_lone_surrogate
from battle_backend.store.postgres import schema as postgres_schema
from battle_backend.store.postgres.appends import BattleAppends
from battle_backend.store.postgres.listener import CHANNEL, NoticeListener, notice_payload
from battle_backend.store.protocol import (
    NoticeHandler,
    StoreUnavailable,
    WriteFailed,
)
from battle_backend.store.records import (
    BattleState,
)
from battle_backend.store.rows import (
    Row,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")
Conn = psycopg.AsyncConnection[dict[str, Any]]

RETRIED_ERRORS = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)
"""Failures of a transaction that say nothing about the write itself: it is run again from the start."""
TRANSACTION_ATTEMPTS = 4
OUTAGE_WAIT_S = 0.5
"""How long a request waits for a pooled connection before it decides whether the database is down (the pool failed
to open a connection meanwhile, or the last request found none): long enough for a database that is up, short enough
that a request during an outage is answered 503 at once instead of after the pool's full wait."""
INLINE_DECODE_CHARS = 64 * 1024
"""Rows whose JSON text is smaller than this in all are decoded on the event loop; larger ones in a worker thread."""
BATTLE_ROW = (
    "SELECT battle_id, green_agent_id, opponents, state, battle_token, last_seq, green_pool, owner FROM battles"
)


def storable(value: str) -> bool:
    """Whether PostgreSQL can hold ``value`` in a text column: no NUL character, no lone surrogate. An id that is
    not storable cannot name anything stored, so lookups answer "not found" instead of failing on it (it may come
    from a URL path or an MCP argument, i.e. from anyone)."""
    return "\x00" not in value and not has_lone_surrogate(value)


def is_postgres_url(value: str) -> bool:
    """Whether ``value`` names a PostgreSQL database (``postgresql://`` or ``postgres://``)."""
    return value.startswith(("postgresql://", "postgres://"))


def safe_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for logs and /health)."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "postgresql://(unparseable URL)"
    host = params.get("host", "")
    port = params.get("port", "")
    user = params.get("user", "")
    dbname = params.get("dbname", "")
    secret = ":***" if params.get("password") else ""
    where = f"{host}:{port}" if port else str(host)
    return f"postgresql://{user}{secret}{'@' if user else ''}{where}/{dbname}"


class PostgresPool:
    """The plumbing of `PostgresStore`: pool, transactions, notices, replicas (see the module docstring)."""

    def __init__(
        self,
        url: str,
        *,
        pool_min: int = 1,
        pool_max: int = 10,
        replica_name: str = "",
        connect_timeout_s: float = 30.0,
        lease_s: float = 15.0,
        wait_s: float = 5.0,
    ) -> None:
        if not is_postgres_url(url):
            raise ValueError("a PostgreSQL store needs a postgresql:// URL")
        self._url = url
        # TCP keepalives: a connection the network silently dropped (the LISTEN one waits for ever otherwise) is
        # noticed within about half a minute
        self._conninfo = make_conninfo(
            url,
            application_name="arena-battle-backend",
            keepalives=1,
            keepalives_idle=10,
            keepalives_interval=5,
            keepalives_count=3,
        )
        self._replica_id = f"pg-{uuid.uuid4()}"
        self._replica_name = replica_name
        self._connect_timeout_s = connect_timeout_s
        self._lease_s = lease_s
        self._wait_s = wait_s
        self._unreachable = False
        """Set when a request found no connection (or lost it), cleared by the next one that got through."""
        self._heartbeat_conn: psycopg.AsyncConnection[Any] | None = None
        self._pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            self._conninfo,
            min_size=pool_min,
            max_size=pool_max,
            open=False,
            kwargs={"autocommit": True, "row_factory": dict_row},
            # a connection broken by a database restart is replaced when it is handed out, instead of failing the
            # request that got it
            check=AsyncConnectionPool.check_connection,
            name="arena-battle-store",
        )
        self._listener = NoticeListener(self._conninfo, self._replica_id)
        self._appends = BattleAppends(self._write, self._replica_id)
        self._closed = False

    # --- identity -----------------------------------------------------------------------------------------
    @property
    def replica_id(self) -> str:
        """This replica's id (``pg-<uuid>``, new on every start)."""
        return self._replica_id

    @property
    def shared(self) -> bool:
        """Several replicas may use the database at once."""
        return True

    @property
    def description(self) -> str:
        """The database URL without its password."""
        return f"PostgreSQL {safe_url(self._url)}"

    @property
    def appends(self) -> BattleAppends:
        """The per-battle writers (their counters tell the batching factor)."""
        return self._appends

    @property
    def listener(self) -> NoticeListener:
        """The LISTEN connection (its counters and state are useful to tests and /health)."""
        return self._listener

    # --- plumbing -----------------------------------------------------------------------------------------
    async def open(self) -> None:
        """Migrate (worker thread, advisory lock), open the pool, register this replica, start listening."""
        revision = await self._migrate()
        await self._pool.open(wait=True, timeout=self._connect_timeout_s)
        try:
            await self.heartbeat()
            await self._listener.start()
        except BaseException:
            await self._close_connections()
            raise
        logger.info("battle store %s at revision %s (replica %s)", self.description, revision, self._replica_id)

    async def _migrate(self) -> str:
        """Migrate, waiting up to ``connect_timeout_s`` for a database that is not accepting connections yet (a
        replica and its database started together); any other failure is raised at once."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._connect_timeout_s
        while True:
            try:
                return await anyio.to_thread.run_sync(postgres_schema.migrate, self._url)
            except sqlalchemy.exc.OperationalError as exc:
                if loop.time() >= deadline:
                    raise
                logger.warning("battle store: %s not reachable yet (%s); retrying", self.description, exc.orig)
                await asyncio.sleep(1.0)

    async def close(self) -> None:
        """Retire this replica (its running battles become claimable at once), stop listening, close the pool."""
        if self._closed:
            return
        self._closed = True
        await self._appends.aclose()
        try:
            async with self._pool.connection() as conn:
                await conn.execute("DELETE FROM replicas WHERE replica_id = %s", (self._replica_id,))
        except psycopg.Error as exc:
            logger.warning("battle store: could not retire replica %s: %s", self._replica_id, exc)
        await self._close_connections()

    async def _close_connections(self) -> None:
        try:
            await self._listener.stop()
        finally:
            if self._heartbeat_conn is not None:
                with contextlib.suppress(psycopg.Error):
                    await self._heartbeat_conn.close()
                self._heartbeat_conn = None
            await self._pool.close()

    def set_notice_handler(self, handler: NoticeHandler | None) -> None:
        """Other replicas' changes go to ``handler`` (on the event loop)."""
        self._listener.handler = handler

    @property
    def unreachable(self) -> bool:
        """Whether the database looks down right now: the last request could not get or keep a connection (then
        requests wait only ``OUTAGE_WAIT_S`` for one)."""
        return self._unreachable

    def _connection_failures(self) -> int:
        """Connections the pool failed to open so far (connections it found broken and replaced do not count: a
        database that restarted or failed over is up)."""
        return int(self._pool.get_stats().get("connections_errors", 0))

    async def _checkout(self, stack: contextlib.AsyncExitStack) -> Conn:
        """A pooled connection entered on ``stack``. The first ``OUTAGE_WAIT_S`` decide: a connection, or a pool that
        could not open or keep one meanwhile (the database is down: PoolTimeout at once, instead of after the pool's
        own 30 s), or a pool that is merely busy (then the wait goes on, up to ``wait_s`` in all). While the database
        is known to be down, ``OUTAGE_WAIT_S`` is all a request waits."""
        failures = self._connection_failures()
        first = min(OUTAGE_WAIT_S, self._wait_s)
        try:
            return await stack.enter_async_context(self._pool.connection(timeout=first))
        except PoolTimeout:
            if self.unreachable or self._connection_failures() > failures or self._wait_s <= first:
                raise
        return await stack.enter_async_context(self._pool.connection(timeout=self._wait_s - first))

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[Conn]:
        """A pooled connection (see ``_checkout``). A connection-level failure marks the database down; a use of a
        connection that went through marks it up again."""
        try:
            async with contextlib.AsyncExitStack() as stack:
                yield await self._checkout(stack)
        except psycopg.OperationalError as exc:  # PoolTimeout included; a deadlock says nothing about the server
            if not isinstance(exc, RETRIED_ERRORS):
                self._unreachable = True
            raise
        self._unreachable = False

    async def _write(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        """Run ``fn`` in one transaction (retried from the start on a deadlock or serialization failure); returns
        once it committed. A store refusal (StoreError) raised by ``fn`` rolls back and propagates; a failure of the
        database itself becomes WriteFailed (nothing stored)."""
        for attempt in range(1, TRANSACTION_ATTEMPTS + 1):
            try:
                async with self._connection() as conn, conn.transaction():
                    return await fn(conn)
            except RETRIED_ERRORS as exc:
                if attempt == TRANSACTION_ATTEMPTS:
                    raise WriteFailed(f"the transaction kept failing: {type(exc).__name__}: {exc}") from exc
                logger.info("battle store: %s, transaction retried (attempt %d)", type(exc).__name__, attempt + 1)
                await asyncio.sleep(0.005 * attempt)
            except psycopg.Error as exc:  # connection lost, read-only after a failover, disk full, ...
                raise WriteFailed(f"{type(exc).__name__}: {exc}") from exc
        raise AssertionError("unreachable")

    async def _read(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        """Run ``fn`` in one read-only transaction (a consistent snapshot: REPEATABLE READ). A database that cannot
        be reached (no connection within the wait, a connection lost) raises StoreUnavailable (503)."""
        try:
            async with self._connection() as conn, conn.transaction():
                await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                return await fn(conn)
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(f"the database cannot be reached: {type(exc).__name__}: {exc}") from exc

    @staticmethod
    async def _rows(conn: Conn, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[dict[str, Any]]:
        cur = await conn.execute(sql, params)
        return await cur.fetchall()

    @staticmethod
    async def _row(conn: Conn, sql: str, params: Sequence[Any] = ()) -> Row | None:
        cur = await conn.execute(sql, params)
        return await cur.fetchone()

    @staticmethod
    async def _decode(build: Callable[[], T], size: int) -> T:
        """Turn rows into records: inline when their JSON is small, in a worker thread when it is not."""
        if size < INLINE_DECODE_CHARS:
            return build()
        return await anyio.to_thread.run_sync(build)

    async def _notify(self, conn: Conn, kind: str, key: str, state: BattleState | None = None) -> None:
        """Tell the other replicas, when this transaction commits."""
        payload = notice_payload(self._replica_id, kind, key, state.value if state is not None else None)
        await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))

    # --- replicas -----------------------------------------------------------------------------------------
    async def heartbeat(self) -> None:
        """Insert or renew this replica's row (``heartbeat_at = now()`` on the database's clock, with its lease time)
        on a connection of its own, so that a pool busy with requests can never delay a renewal past the lease.
        WriteFailed when the database cannot be reached."""
        for attempt in (1, 2):
            try:
                if self._heartbeat_conn is None or self._heartbeat_conn.closed:
                    self._heartbeat_conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
            except psycopg.OperationalError as exc:
                raise WriteFailed(f"the lease could not be renewed: {exc}") from exc
            try:
                await self._heartbeat_conn.execute(
                    "INSERT INTO replicas (replica_id, description, lease_s) VALUES (%s, %s, %s)"
                    " ON CONFLICT (replica_id) DO UPDATE SET heartbeat_at = now(), lease_s = EXCLUDED.lease_s",
                    (self._replica_id, self._replica_name, self._lease_s),
                )
                return
            except psycopg.OperationalError as exc:
                with contextlib.suppress(psycopg.Error):
                    await self._heartbeat_conn.close()
                self._heartbeat_conn = None
                if attempt == 2:
                    raise WriteFailed(f"the lease could not be renewed: {exc}") from exc

    async def claim_orphaned_battles(self) -> list[str]:
        """Running battles whose owner is gone (no row, or a heartbeat older than that owner's own lease) become
        this replica's, each by a compare-and-set on its previous owner, so each battle is claimed once. Rows of
        replicas silent for a day are deleted on the way."""

        async def fn(conn: Conn) -> list[str]:
            await conn.execute("DELETE FROM replicas WHERE heartbeat_at < now() - interval '1 day'")
            rows = await self._rows(
                conn,
                # Compare-and-set on the owner each candidate had when it was read: a claimer that lost the race
                # finds another owner on the row it waited for and updates nothing (a locking subquery with an
                # anti-join is not enough: READ COMMITTED re-checks the locked row, not the join).
                "WITH candidates AS ("
                "  SELECT b.battle_id, b.owner FROM battles b"
                "  WHERE b.state = 'running' AND b.owner IS DISTINCT FROM %(me)s AND NOT EXISTS ("
                "    SELECT 1 FROM replicas r WHERE r.replica_id = b.owner"
                "    AND r.heartbeat_at > now() - make_interval(secs => r.lease_s)))"
                " UPDATE battles t SET owner = %(me)s FROM candidates c"
                " WHERE t.battle_id = c.battle_id AND t.owner IS NOT DISTINCT FROM c.owner AND t.state = 'running'"
                " RETURNING t.battle_id, t.position",
                {"me": self._replica_id},
            )
            return [row["battle_id"] for row in sorted(rows, key=lambda row: row["position"])]

        return await self._write(fn)

    async def owned_running_battles(self) -> list[str]:
        """The running battles this replica owns."""

        async def fn(conn: Conn) -> list[str]:
            rows = await self._rows(
                conn,
                "SELECT battle_id FROM battles WHERE state = 'running' AND owner = %s ORDER BY position",
                (self._replica_id,),
            )
            return [row["battle_id"] for row in rows]

        return await self._read(fn)

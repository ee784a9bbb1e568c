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

import asyncio
import contextlib
import json
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

from battle_backend.store.json_text import dumps, has_lone_surrogate
from battle_backend.store.postgres import schema as postgres_schema
from battle_backend.store.postgres.appends import BattleAppends, PendingAppend, token_digest
from battle_backend.store.postgres.listener import CHANNEL, NoticeListener, notice_payload
from battle_backend.store.protocol import (
    AgentDeleteOutcome,
    BattleExists,
    BattleNotFound,
    NoticeHandler,
    StartOutcome,
    StoreUnavailable,
    WriteFailed,
)
from battle_backend.store.records import (
    OPEN_STATES,
    AgentRecord,
    BattleHistoryEntry,
    BattleRecord,
    BattleState,
    EventRecord,
    FinishSpec,
    system_event,
    utc_now_iso,
)
from battle_backend.store.rows import (
    BATTLE_COLUMNS,
    EVENT_COLUMNS,
    Row,
    agent_record,
    battle_record,
    event_record,
    history_entry,
)
from battle_backend.store.transition_rules import (
    HISTORY_COLUMNS,
    AgentFacts,
    PoolMember,
    append_refusal,
    choose_green,
    error_outcome,
    finish_outcome,
    new_agent,
    new_battle,
    participant_ids,
    plan_outcomes,
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


class PostgresStore:
    """`BattleStore` on a PostgreSQL database that several replicas may share."""

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

    # --- agents -------------------------------------------------------------------------------------------
    async def create_agent(self, register_info: dict[str, Any], agent_card: dict[str, Any]) -> AgentRecord:
        """Store a new agent: unlocked, not ready, rated 1000 unless green."""
        agent = new_agent(register_info, agent_card)

        async def fn(conn: Conn) -> None:
            await conn.execute(
                "INSERT INTO agents (agent_id, register_info, agent_card, elo_rating, created_at, pool)"
                " VALUES (%s, %s, %s, %s, %s, %s)",
                (
                    agent.agent_id,
                    dumps(agent.register_info),
                    dumps(agent.agent_card),
                    agent.elo_rating,
                    agent.created_at,
                    agent.pool,
                ),
            )

        await self._write(fn)
        return agent

    async def _history(self, conn: Conn, agent_ids: list[str] | None) -> dict[str, list[BattleHistoryEntry]]:
        if agent_ids is None:
            rows = await self._rows(conn, "SELECT * FROM agent_battle_history ORDER BY position")
        else:
            rows = await self._rows(
                conn, "SELECT * FROM agent_battle_history WHERE agent_id = ANY(%s) ORDER BY position", (agent_ids,)
            )
        out: dict[str, list[BattleHistoryEntry]] = {}
        for row in rows:
            out.setdefault(row["agent_id"], []).append(history_entry(row))
        return out

    async def get_agent(self, agent_id: str) -> AgentRecord | None:
        """One agent with its history."""
        if not storable(agent_id):
            return None

        async def fn(conn: Conn) -> AgentRecord | None:
            row = await self._row(conn, "SELECT * FROM agents WHERE agent_id = %s", (agent_id,))
            if row is None:
                return None
            history = await self._history(conn, [agent_id])
            return agent_record(row, history.get(agent_id, []))

        return await self._read(fn)

    async def list_agents(self) -> list[AgentRecord]:
        """Every agent, oldest first."""

        async def fn(conn: Conn) -> list[AgentRecord]:
            history = await self._history(conn, None)
            rows = await self._rows(conn, "SELECT * FROM agents ORDER BY position")
            return [agent_record(row, history.get(row["agent_id"], [])) for row in rows]

        return await self._read(fn)

    async def set_agent_ready(self, agent_id: str, ready: bool) -> bool:
        """Set the ready flag the launcher reports (and tell the replicas waiting for it)."""
        if not storable(agent_id):
            return False

        async def fn(conn: Conn) -> bool:
            cur = await conn.execute("UPDATE agents SET ready = %s WHERE agent_id = %s", (ready, agent_id))
            if cur.rowcount > 0 and ready:
                await self._notify(conn, "agent_ready", agent_id)
            return cur.rowcount > 0

        return await self._write(fn)

    async def delete_agent(self, agent_id: str) -> AgentDeleteOutcome:
        """Delete an agent and its history unless a battle holds it."""
        if not storable(agent_id):
            return AgentDeleteOutcome.NOT_FOUND

        async def fn(conn: Conn) -> AgentDeleteOutcome:
            row = await self._row(conn, "SELECT locked_by FROM agents WHERE agent_id = %s FOR UPDATE", (agent_id,))
            if row is None:
                return AgentDeleteOutcome.NOT_FOUND
            if row["locked_by"]:
                return AgentDeleteOutcome.LOCKED
            await conn.execute("DELETE FROM agent_battle_history WHERE agent_id = %s", (agent_id,))
            await conn.execute("DELETE FROM agents WHERE agent_id = %s", (agent_id,))
            return AgentDeleteOutcome.DELETED

        return await self._write(fn)

    # --- battles ------------------------------------------------------------------------------------------
    async def create_battle(
        self,
        green_agent_id: str,
        opponents: list[dict[str, Any]],
        config: dict[str, Any],
        backend_url: str | None,
        *,
        battle_id: str | None = None,
        green_pool: str | None = None,
        owned: bool = False,
    ) -> BattleRecord:
        """Store a queued battle (BattleExists for a given ``battle_id`` the database already holds); an ``owned``
        one belongs to this replica at once, so no other replica's scheduler starts it."""
        battle = new_battle(
            green_agent_id,
            opponents,
            config,
            backend_url,
            battle_id=battle_id,
            green_pool=green_pool,
            owner=self._replica_id if owned else None,
        )
        opponents_text, config_text = dumps(opponents), dumps(config)

        async def fn(conn: Conn) -> None:
            row = await self._row(
                conn,
                "INSERT INTO battles"
                " (battle_id, green_agent_id, opponents, config, state, created_at, backend_url, green_pool, owner)"
                " VALUES (%s, %s, %s, %s, 'queued', %s, %s, %s, %s)"
                " ON CONFLICT (battle_id) DO NOTHING RETURNING 1 AS ok",
                (
                    battle.battle_id,
                    green_agent_id,
                    opponents_text,
                    config_text,
                    battle.created_at,
                    backend_url,
                    green_pool,
                    battle.owner,
                ),
            )
            if row is None:
                raise BattleExists(battle.battle_id)
            await self._notify(conn, "battle", battle.battle_id, BattleState.QUEUED)

        await self._write(fn)
        return battle

    async def _events(self, conn: Conn, battle_id: str, after_seq: int, limit: int | None) -> list[dict[str, Any]]:
        sql = f"SELECT {EVENT_COLUMNS} FROM battle_events WHERE battle_id = %s AND seq > %s ORDER BY seq"
        params: list[Any] = [battle_id, after_seq]
        if limit is not None:
            sql += " LIMIT %s"
            params.append(limit)
        return await self._rows(conn, sql, params)

    async def get_battle(self, battle_id: str, *, include_events: bool = True) -> BattleRecord | None:
        """One battle (events included unless asked not to)."""
        if not storable(battle_id):
            return None

        async def fn(conn: Conn) -> tuple[Row | None, list[dict[str, Any]]]:
            row = await self._row(conn, f"SELECT {BATTLE_COLUMNS} FROM battles WHERE battle_id = %s", (battle_id,))
            if row is None or not include_events:
                return row, []
            return row, await self._events(conn, battle_id, 0, None)

        row, events = await self._read(fn)
        if row is None:
            return None
        size = sum(len(event["payload"]) for event in events) + len(row["result"] or "")
        return await self._decode(
            lambda: battle_record(row, [event_record(battle_id, event) for event in events]), size
        )

    async def list_battles(self, *, include_events: bool = False) -> list[BattleRecord]:
        """Every battle, oldest first."""

        async def fn(conn: Conn) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
            rows = await self._rows(conn, f"SELECT {BATTLE_COLUMNS} FROM battles ORDER BY position")
            events: dict[str, list[dict[str, Any]]] = {}
            if include_events:
                for event in await self._rows(
                    conn, f"SELECT battle_id, {EVENT_COLUMNS} FROM battle_events ORDER BY battle_id, seq"
                ):
                    events.setdefault(event["battle_id"], []).append(event)
            return rows, events

        rows, events = await self._read(fn)
        size = sum(len(row["result"] or "") + len(row["config"]) for row in rows)
        size += sum(len(event["payload"]) for batch in events.values() for event in batch)

        def build() -> list[BattleRecord]:
            return [
                battle_record(
                    row, [event_record(row["battle_id"], event) for event in events.get(row["battle_id"], [])]
                )
                for row in rows
            ]

        return await self._decode(build, size)

    async def battle_ids_in_state(self, state: BattleState) -> list[str]:
        """Oldest first: for queued battles this is the queue."""

        async def fn(conn: Conn) -> list[str]:
            rows = await self._rows(
                conn, "SELECT battle_id FROM battles WHERE state = %s ORDER BY position", (state.value,)
            )
            return [row["battle_id"] for row in rows]

        return await self._read(fn)

    async def list_events(self, battle_id: str, *, after_seq: int = 0, limit: int | None = None) -> list[EventRecord]:
        """Events after a sequence number (the SSE stream resumes with this)."""
        if not storable(battle_id):
            return []
        rows = await self._read(lambda conn: self._events(conn, battle_id, after_seq, limit))
        size = sum(len(row["payload"]) for row in rows)
        return await self._decode(lambda: [event_record(battle_id, row) for row in rows], size)

    # --- transitions (one transaction each, the battle's row locked first) ---------------------------------
    async def _battle_row(self, conn: Conn, battle_id: str) -> Row | None:
        return await self._row(conn, f"{BATTLE_ROW} WHERE battle_id = %s FOR UPDATE", (battle_id,))

    async def _append(
        self,
        conn: Conn,
        battle_id: str,
        last_seq: int,
        payload_text: str,
        payload: dict[str, Any],
        event_id: str | None,
        *,
        verified: bool = True,
    ) -> EventRecord:
        seq = last_seq + 1
        received_at = utc_now_iso()
        await conn.execute("UPDATE battles SET last_seq = %s WHERE battle_id = %s", (seq, battle_id))
        await conn.execute(
            "INSERT INTO battle_events (battle_id, seq, payload, received_at, event_id, verified)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (battle_id, seq, payload_text, received_at, event_id, verified),
        )
        return EventRecord(battle_id=battle_id, seq=seq, payload=payload, received_at=received_at, verified=verified)

    async def _lock_agents(self, conn: Conn, agent_ids: list[str], pool: str | None = None) -> list[dict[str, Any]]:
        """Lock the rows of these agents (and of every member of ``pool``) in one statement, in agent_id order."""
        return await self._rows(
            conn,
            "SELECT agent_id, locked_by, register_info, agent_card, elo_rating, pool, position FROM agents"
            " WHERE agent_id = ANY(%s) OR (%s::text IS NOT NULL AND pool = %s) ORDER BY agent_id FOR UPDATE",
            (agent_ids, pool, pool),
        )

    async def _participants(self, conn: Conn, row: Row) -> tuple[list[dict[str, Any]], dict[str, AgentFacts]]:
        """The battle's opponents and its participants that still exist, their rows locked."""
        opponents = json.loads(row["opponents"])
        ids = participant_ids(row["green_agent_id"], opponents)
        agents = {
            agent["agent_id"]: AgentFacts(
                agent_id=agent["agent_id"],
                register_info=json.loads(agent["register_info"]),
                agent_card=json.loads(agent["agent_card"]),
                elo_rating=agent["elo_rating"],
            )
            for agent in await self._lock_agents(conn, ids)
        }
        return opponents, agents

    async def _record_outcomes(
        self,
        conn: Conn,
        row: Row,
        opponents: list[dict[str, Any]],
        agents: dict[str, AgentFacts],
        outcome: Callable[[str], tuple[str, int]],
    ) -> None:
        """History entries and rating changes for every participant, then release the battle's locks."""
        battle_id = row["battle_id"]
        for entry in plan_outcomes(battle_id, row["green_agent_id"], opponents, agents, outcome):
            await conn.execute(
                "UPDATE agents SET elo_rating = %s WHERE agent_id = %s AND elo_rating IS NOT NULL",
                (entry.final_rating, entry.agent_id),
            )
            await conn.execute(
                f"INSERT INTO agent_battle_history ({HISTORY_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (agent_id, battle_id) DO NOTHING",
                entry.history_values(),
            )
        await conn.execute("UPDATE agents SET locked_by = NULL, ready = FALSE WHERE locked_by = %s", (battle_id,))

    async def _finish(self, conn: Conn, row: Row, spec: FinishSpec, result_text: str) -> None:
        """Finish: result, ELO (none when ``spec.rated`` is False), history, unlock, notice."""
        opponents, agents = await self._participants(conn, row)
        outcome = finish_outcome(spec, row["green_agent_id"], opponents, agents)
        await self._record_outcomes(conn, row, opponents, agents, outcome)
        await conn.execute(
            "UPDATE battles SET state = 'finished', result = %s, finished_at = %s WHERE battle_id = %s",
            (result_text, utc_now_iso(), row["battle_id"]),
        )
        await self._notify(conn, "battle", row["battle_id"], BattleState.FINISHED)

    async def append_event(
        self,
        battle_id: str,
        payload: dict[str, Any],
        *,
        finish: FinishSpec | None = None,
        presented_token: str | None = None,
        enforce_token: bool = False,
        event_id: str | None = None,
        trusted: bool = False,
    ) -> EventRecord:
        """One event, one row; committed when this returns. The battle's row lock orders concurrent appends from
        every replica; the unique index on (battle_id, verified, event_id) backs up the duplicate check made under
        that lock (a key is looked up in the event's own space: verified or not).
        A progress event goes through the battle's writer on this replica (:mod:`battle_backend.store.postgres.appends`:
        one database call, batched with the battle's other waiting events); a result, which finishes the battle,
        gets a transaction of its own, in its turn among them."""
        if not storable(battle_id):
            raise BattleNotFound(battle_id)
        if event_id is not None and not storable(event_id):
            raise ValueError("event_id: a NUL character or a lone surrogate cannot be stored")
        if finish is not None:  # a result may be megabytes: encoded off the event loop
            payload_text, result_text = await anyio.to_thread.run_sync(
                lambda: (dumps(payload), dumps(finish.result_body()))
            )
        else:
            payload_text, result_text = dumps(payload), ""
        verified = trusted or presented_token is not None

        async def finish_alone(conn: Conn) -> EventRecord:
            """The result's own transaction: the contract's checks (those arena_append_event makes in the database for
            progress events), then the finish."""
            row = await self._battle_row(conn, battle_id)
            if row is None:
                raise BattleNotFound(battle_id)
            stored = None
            if event_id is not None:
                stored = await self._row(
                    conn,
                    f"SELECT {EVENT_COLUMNS} FROM battle_events"
                    " WHERE battle_id = %s AND verified = %s AND event_id = %s",
                    (battle_id, verified, event_id),
                )
            refusal = append_refusal(
                battle_id,
                row["state"],
                row["battle_token"],
                presented_token=presented_token,
                enforce_token=enforce_token,
                event_id=event_id,
                stored=event_record(battle_id, stored) if stored is not None else None,
            )
            if refusal is not None:
                raise refusal
            record = await self._append(
                conn, battle_id, row["last_seq"], payload_text, payload, event_id, verified=verified
            )
            assert finish is not None  # progress events take the writer's path (arena_append_event)
            await self._finish(conn, row, finish, result_text)
            return record

        item = PendingAppend(
            battle_id=battle_id,
            payload=payload,
            payload_text=payload_text,
            event_id=event_id,
            token_sha256=token_digest(presented_token),
            enforce_token=enforce_token,
            trusted=trusted,
            future=asyncio.get_running_loop().create_future(),
            alone=(lambda: self._write(finish_alone)) if finish is not None else None,
        )
        return await self._appends.submit(item)

    async def start_battle(self, battle_id: str, battle_token: str) -> StartOutcome:
        """queued -> running with every participant locked and this replica the owner, or an outcome saying why
        not. The battle's row lock makes the start happen once, whichever replicas try."""
        if not storable(battle_id):
            return StartOutcome.NOT_QUEUED
        started = system_event("Battle started")

        async def fn(conn: Conn) -> StartOutcome:
            row = await self._battle_row(conn, battle_id)
            if row is None or row["state"] != BattleState.QUEUED.value:
                return StartOutcome.NOT_QUEUED
            if row["owner"] is not None and row["owner"] != self._replica_id:
                return StartOutcome.NOT_QUEUED  # another replica writes it itself (an import)
            opponents = json.loads(row["opponents"])
            pool = row["green_pool"]
            candidates = participant_ids(row["green_agent_id"], opponents)
            locked = {agent["agent_id"]: agent for agent in await self._lock_agents(conn, candidates, pool)}
            green_id = row["green_agent_id"]
            if pool is not None:
                members = sorted((a for a in locked.values() if a["pool"] == pool), key=lambda a: a["position"])
                if not members:
                    return StartOutcome.MISSING_AGENT
                chosen = choose_green(green_id, [PoolMember(m["agent_id"], bool(m["locked_by"])) for m in members])
                if chosen is None:
                    return StartOutcome.AGENTS_BUSY
                green_id = chosen
            ids = participant_ids(green_id, opponents)
            if any(agent_id not in locked for agent_id in ids):
                return StartOutcome.MISSING_AGENT
            if any(locked[agent_id]["locked_by"] for agent_id in ids):
                return StartOutcome.AGENTS_BUSY
            await conn.execute(
                "UPDATE agents SET locked_by = %s, ready = FALSE WHERE agent_id = ANY(%s)", (battle_id, ids)
            )
            await conn.execute(
                "UPDATE battles SET state = 'running', started_at = %s, battle_token = %s, owner = %s,"
                " green_agent_id = %s WHERE battle_id = %s",
                (utc_now_iso(), battle_token, self._replica_id, green_id, battle_id),
            )
            record = await self._append(conn, battle_id, row["last_seq"], dumps(started), started, None)
            agents_locked = system_event("Agents locked", {"agent_ids": ids})
            await self._append(conn, battle_id, record.seq, dumps(agents_locked), agents_locked, None)
            await self._notify(conn, "battle", battle_id, BattleState.RUNNING)
            return StartOutcome.STARTED

        return await self._write(fn)

    async def set_deadline(self, battle_id: str, deadline_at: float, battle_timeout: float) -> bool:
        """Persist the timeout so that whichever replica owns the battle next re-arms it."""
        if not storable(battle_id):
            return False

        async def fn(conn: Conn) -> bool:
            cur = await conn.execute(
                "UPDATE battles SET deadline_at = %s, battle_timeout = %s WHERE battle_id = %s AND state = 'running'",
                (deadline_at, battle_timeout, battle_id),
            )
            return cur.rowcount > 0

        return await self._write(fn)

    async def fail_battle(
        self, battle_id: str, reason: str, *, from_states: Sequence[BattleState] = OPEN_STATES
    ) -> bool:
        """-> error, atomically with the system event, error history and unlock."""
        if not storable(battle_id):
            return False
        event = system_event(f"Battle error: {reason}")

        async def fn(conn: Conn) -> bool:
            row = await self._battle_row(conn, battle_id)
            if row is None or BattleState(row["state"]) not in from_states:
                return False
            await self._append(conn, battle_id, row["last_seq"], dumps(event), event, None)
            opponents, agents = await self._participants(conn, row)
            await self._record_outcomes(conn, row, opponents, agents, error_outcome)
            await conn.execute(
                "UPDATE battles SET state = 'error', error = %s, finished_at = %s WHERE battle_id = %s",
                (reason, utc_now_iso(), battle_id),
            )
            await self._notify(conn, "battle", battle_id, BattleState.ERROR)
            return True

        return await self._write(fn)

    async def finish_battle(
        self,
        battle_id: str,
        finish: FinishSpec,
        event: dict[str, Any],
        *,
        from_states: Sequence[BattleState] = (BattleState.RUNNING,),
    ) -> bool:
        """-> finished without a posted result (the timeout draw)."""
        if not storable(battle_id):
            return False
        result_text = dumps(finish.result_body())

        async def fn(conn: Conn) -> bool:
            row = await self._battle_row(conn, battle_id)
            if row is None or BattleState(row["state"]) not in from_states:
                return False
            await self._append(conn, battle_id, row["last_seq"], dumps(event), event, None)
            await self._finish(conn, row, finish, result_text)
            return True

        return await self._write(fn)

    async def add_system_event(self, battle_id: str, event: dict[str, Any]) -> EventRecord | None:
        """Append unless the battle is gone or terminal."""
        if not storable(battle_id):
            return None
        text = dumps(event)

        async def fn(conn: Conn) -> EventRecord | None:
            row = await self._battle_row(conn, battle_id)
            if row is None or BattleState(row["state"]).is_terminal:
                return None
            record = await self._append(conn, battle_id, row["last_seq"], text, event, None)
            await self._notify(conn, "battle", battle_id)
            return record

        return await self._write(fn)

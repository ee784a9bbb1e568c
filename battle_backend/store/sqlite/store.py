"""SQLite implementation of `BattleStore`.

Why it looks like this:
- One writer thread owns the only writing connection, so writes are serialised without lock contention and never
  block the event loop; a small reader pool (own connections, WAL) serves reads concurrently.
- Group commit (:mod:`battle_backend.store.sqlite.writer`): the writes waiting when the writer is free are committed in
  one transaction, each in its own savepoint, and each caller is answered once that transaction committed. A burst
  of events from 20 posters costs a few commits instead of one each, and a refused event fails alone.
- Every event is its own row, inserted together with the battle's sequence counter: no read-modify-write of a JSON
  blob, so concurrent posters cannot overwrite each other (the AgentBeats backend can).
- WAL with synchronous=NORMAL: each commit is in the WAL file (written by the OS, not yet fsynced) before any
  caller is answered, so killing the process loses nothing committed; only an OS crash or power cut could drop the
  last commits, which is the trade SQLite recommends for WAL. synchronous=FULL (an option) fsyncs the WAL on every
  commit (group commit makes that one fsync per batch, not per event) for durability across power loss too; see
  :data:`SYNCHRONOUS`.

This module is the plumbing (threads, connections, transactions) and the public methods, each deciding whether its
change may happen; rows become records in :mod:`battle_backend.store.sqlite.rows`, and the writes of the state
transitions
(event append, finish with ELO, unlock) are in :mod:`battle_backend.store.sqlite.transitions`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, TypeVar

from battle_backend.store import sql
from battle_backend.store.json_text import dumps
from battle_backend.store.protocol import (
    AgentDeleteOutcome,
    BattleExists,
    BattleNotFound,
    NoticeHandler,
    StartOutcome,
)
from battle_backend.store.records import (
    OPEN_STATES,
    AgentRecord,
    BattleRecord,
    BattleState,
    EventRecord,
    FinishSpec,
    system_event,
    utc_now_iso,
)
from battle_backend.store.rows import agent_record, battle_record
from battle_backend.store.sql import SQLITE
from battle_backend.store.sqlite import transitions
from battle_backend.store.sqlite.attempt_queue import SQLiteAttemptQueue
from battle_backend.store.sqlite.rows import events_after, history_entries
from battle_backend.store.sqlite.schema import migrate
from battle_backend.store.sqlite.writer import GroupCommitWriter
from battle_backend.store.transition_rules import (
    PoolMember,
    append_refusal,
    choose_green,
    new_agent,
    new_battle,
    participant_ids,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

Synchronous = Literal["NORMAL", "FULL"]
SYNCHRONOUS: Synchronous = "NORMAL"
"""SQLite's ``synchronous`` setting by default. In WAL mode NORMAL makes each commit durable against a crash of the
process (the commit is in the WAL file before any caller is answered) and fsyncs only at checkpoints; FULL adds an
fsync of the WAL per commit, i.e. per group-committed batch, so that a commit also survives an OS crash or a power
cut (``--sqlite-synchronous full``)."""


class SQLiteStore:
    """`BattleStore` on one SQLite file."""

    def __init__(self, path: Path | str, *, reader_threads: int = 2, synchronous: Synchronous | None = None) -> None:
        self._path = str(path)
        self._replica_id = f"sqlite-{uuid.uuid4()}"
        self._synchronous = synchronous or SYNCHRONOUS
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        self._writer = self._make_writer()
        self._readers = ThreadPoolExecutor(max_workers=reader_threads, thread_name_prefix="arena-db-reader")
        self._closed = False
        self.attempts = SQLiteAttemptQueue(self._write, self._read)  # issue 29: the attempt queue

    def _make_writer(self) -> GroupCommitWriter:
        """The group-commit writer (a method so that a test's subclass can hand in one that fails on purpose)."""
        return GroupCommitWriter(self._connection)

    @property
    def writer(self) -> GroupCommitWriter:
        """The writer thread and its counters (``units / batches`` is the group-commit factor)."""
        return self._writer

    @property
    def path(self) -> str:
        """The database file."""
        return self._path

    @property
    def replica_id(self) -> str:
        """This process's identity as owner of the battles it starts."""
        return self._replica_id

    @property
    def shared(self) -> bool:
        """One SQLite file serves one backend process: no other replicas."""
        return False

    @property
    def description(self) -> str:
        """The file."""
        return f"SQLite {self._path}"

    def set_notice_handler(self, handler: NoticeHandler | None) -> None:
        """Nothing to deliver: every change of an SQLite store is made by this process, which publishes it itself."""

    async def heartbeat(self) -> None:
        """No lease to renew: no other replica could take this one's battles."""

    async def claim_orphaned_battles(self) -> list[str]:
        """Every running battle this process does not own was left by a previous process (the file has one
        process at a time): take them all, whatever the lease."""

        def fn(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute(
                "SELECT battle_id FROM battles WHERE state = 'running' AND (owner IS NULL OR owner != ?)"
                " ORDER BY rowid",
                (self._replica_id,),
            ).fetchall()
            ids = [row["battle_id"] for row in rows]
            conn.executemany("UPDATE battles SET owner = ? WHERE battle_id = ?", [(self._replica_id, i) for i in ids])
            return ids

        return await self._write(fn)

    async def owned_running_battles(self) -> list[str]:
        """The running battles this process owns."""

        def fn(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute(
                "SELECT battle_id FROM battles WHERE state = 'running' AND owner = ? ORDER BY rowid",
                (self._replica_id,),
            )
            return [row["battle_id"] for row in rows]

        return await self._read(fn)

    # --- plumbing -----------------------------------------------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        """This thread's connection (each worker thread opens its own)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False, timeout=30.0)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA busy_timeout=30000")
            self._local.conn = conn
            with self._connections_lock:
                self._connections.append(conn)
        return conn

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the writer thread inside the next group transaction (its own savepoint: when ``fn`` raises,
        its writes are undone and the exception is this call's alone); returns once that transaction committed."""
        return await self._writer.write(fn)

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on a reader thread inside one read transaction (a consistent snapshot)."""

        def job() -> T:
            conn = self._connection()
            conn.execute("BEGIN")
            try:
                return fn(conn)
            finally:
                conn.execute("COMMIT")

        return await asyncio.get_running_loop().run_in_executor(self._readers, job)

    async def open(self) -> None:
        """Create the file's schema or migrate it (on the writer thread, before any other use)."""
        Path(self._path).parent.mkdir(parents=True, exist_ok=True)

        version = await self._writer.run_alone(migrate)
        logger.info("battle store %s at schema version %d", self._path, version)

    async def close(self) -> None:
        """Finish queued work, then close every connection."""
        if self._closed:
            return
        self._closed = True
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._writer.close)
        await loop.run_in_executor(None, self._readers.shutdown, True)
        with self._connections_lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()

    # --- agents -------------------------------------------------------------------------------------------
    async def create_agent(self, register_info: dict[str, Any], agent_card: dict[str, Any]) -> AgentRecord:
        """Store a new agent: unlocked, not ready, rated 1000 unless green."""
        agent = new_agent(register_info, agent_card)

        def fn(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO agents"
                " (agent_id, register_info, agent_card, locked_by, ready, elo_rating, created_at, pool)"
                " VALUES (?, ?, ?, NULL, 0, ?, ?, ?)",
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

    async def get_agent(self, agent_id: str) -> AgentRecord | None:
        """One agent with its history."""

        def fn(conn: sqlite3.Connection) -> AgentRecord | None:
            row = conn.execute(SQLITE(sql.AGENT_BY_ID), (agent_id,)).fetchone()
            if row is None:
                return None
            return agent_record(row, history_entries(conn, [agent_id]).get(agent_id, []))

        return await self._read(fn)

    async def list_agents(self) -> list[AgentRecord]:
        """Every agent, oldest first."""

        def fn(conn: sqlite3.Connection) -> list[AgentRecord]:
            history = history_entries(conn, None)
            rows = conn.execute("SELECT * FROM agents ORDER BY created_at, rowid").fetchall()
            return [agent_record(row, history.get(row["agent_id"], [])) for row in rows]

        return await self._read(fn)

    async def set_agent_ready(self, agent_id: str, ready: bool) -> bool:
        """Set the ready flag the launcher reports."""

        def fn(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(SQLITE(sql.SET_AGENT_READY), (1 if ready else 0, agent_id))
            return cur.rowcount > 0

        return await self._write(fn)

    async def delete_agent(self, agent_id: str) -> AgentDeleteOutcome:
        """Delete an agent and its history unless a battle holds it."""

        def fn(conn: sqlite3.Connection) -> AgentDeleteOutcome:
            row = conn.execute("SELECT locked_by FROM agents WHERE agent_id = ?", (agent_id,)).fetchone()
            if row is None:
                return AgentDeleteOutcome.NOT_FOUND
            if row["locked_by"]:
                return AgentDeleteOutcome.LOCKED
            conn.execute(SQLITE(sql.DELETE_AGENT_HISTORY), (agent_id,))
            conn.execute(SQLITE(sql.DELETE_AGENT), (agent_id,))
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
        """Store a queued battle (BattleExists for a given ``battle_id`` the file already holds)."""
        battle = new_battle(
            green_agent_id,
            opponents,
            config,
            backend_url,
            battle_id=battle_id,
            green_pool=green_pool,
            owner=self._replica_id if owned else None,
        )

        def fn(conn: sqlite3.Connection) -> None:
            if transitions.battle_row(conn, battle.battle_id) is not None:
                raise BattleExists(battle.battle_id)
            conn.execute(
                SQLITE(sql.INSERT_BATTLE),
                (
                    battle.battle_id,
                    green_agent_id,
                    dumps(opponents),
                    dumps(config),
                    battle.created_at,
                    backend_url,
                    green_pool,
                    battle.owner,
                ),
            )

        await self._write(fn)
        return battle

    async def get_battle(self, battle_id: str, *, include_events: bool = True) -> BattleRecord | None:
        """One battle (events included unless asked not to)."""

        def fn(conn: sqlite3.Connection) -> BattleRecord | None:
            row = conn.execute(SQLITE(sql.BATTLE_BY_ID), (battle_id,)).fetchone()
            if row is None:
                return None
            events = events_after(conn, battle_id, 0, None) if include_events else None
            return battle_record(row, events)

        return await self._read(fn)

    async def list_battles(self, *, include_events: bool = False) -> list[BattleRecord]:
        """Every battle, oldest first."""

        def fn(conn: sqlite3.Connection) -> list[BattleRecord]:
            rows = conn.execute(SQLITE(sql.ALL_BATTLES)).fetchall()
            return [
                battle_record(row, events_after(conn, row["battle_id"], 0, None) if include_events else None)
                for row in rows
            ]

        return await self._read(fn)

    async def battle_ids_in_state(self, state: BattleState) -> list[str]:
        """Oldest first: for queued battles this is the queue."""

        def fn(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute(SQLITE(sql.BATTLE_IDS_IN_STATE), (state.value,))
            return [row["battle_id"] for row in rows]

        return await self._read(fn)

    async def list_events(self, battle_id: str, *, after_seq: int = 0, limit: int | None = None) -> list[EventRecord]:
        """Events after a sequence number (the SSE stream resumes with this)."""
        return await self._read(lambda conn: events_after(conn, battle_id, after_seq, limit))

    # --- transitions (all on the writer thread, one transaction each) -----------------------------------
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
        """One event, one row, one transaction (finishing the battle too when ``finish`` is given); a repeated
        ``event_id`` in the event's key space (verified or not) writes nothing (DuplicateEvent). The writer thread
        serialises the check and the insert (an earlier event of the same group transaction is seen, so a key
        repeated within one batch is caught too); the unique index on (battle_id, verified, event_id) backs it up."""
        verified = trusted or presented_token is not None

        def fn(conn: sqlite3.Connection) -> EventRecord:
            row = transitions.battle_row(conn, battle_id)
            if row is None:
                raise BattleNotFound(battle_id)
            refusal = append_refusal(
                battle_id,
                row["state"],
                row["battle_token"],
                presented_token=presented_token,
                enforce_token=enforce_token,
                event_id=event_id,
                stored=(
                    transitions.event_with_id(conn, battle_id, event_id, verified=verified)
                    if event_id is not None
                    else None
                ),
            )
            if refusal is not None:
                raise refusal
            record = transitions.append_event(conn, battle_id, row["last_seq"], payload, event_id, verified=verified)
            if finish is not None:
                transitions.finish(conn, row, finish)
            return record

        return await self._write(fn)

    async def start_battle(self, battle_id: str, battle_token: str) -> StartOutcome:
        """queued -> running with every participant locked, or an outcome saying why not."""

        def fn(conn: sqlite3.Connection) -> StartOutcome:
            row = transitions.battle_row(conn, battle_id)
            if row is None or row["state"] != BattleState.QUEUED.value:
                return StartOutcome.NOT_QUEUED
            green_id = row["green_agent_id"]
            if row["green_pool"] is not None:
                members = conn.execute(
                    "SELECT agent_id, locked_by FROM agents WHERE pool = ? ORDER BY created_at, rowid",
                    (row["green_pool"],),
                ).fetchall()
                if not members:
                    return StartOutcome.MISSING_AGENT
                chosen = choose_green(green_id, [PoolMember(m["agent_id"], bool(m["locked_by"])) for m in members])
                if chosen is None:
                    return StartOutcome.AGENTS_BUSY
                green_id = chosen
            ids = participant_ids(green_id, json.loads(row["opponents"]))
            marks = ",".join("?" * len(ids))
            agents = conn.execute(f"SELECT agent_id, locked_by FROM agents WHERE agent_id IN ({marks})", ids).fetchall()
            if len(agents) != len(ids):
                return StartOutcome.MISSING_AGENT
            if any(agent["locked_by"] for agent in agents):
                return StartOutcome.AGENTS_BUSY
            conn.execute(f"UPDATE agents SET locked_by = ?, ready = 0 WHERE agent_id IN ({marks})", [battle_id, *ids])
            conn.execute(
                "UPDATE battles SET state = 'running', started_at = ?, battle_token = ?, owner = ?, green_agent_id = ?"
                " WHERE battle_id = ?",
                (utc_now_iso(), battle_token, self._replica_id, green_id, battle_id),
            )
            record = transitions.append_event(conn, battle_id, row["last_seq"], system_event("Battle started"))
            transitions.append_event(conn, battle_id, record.seq, system_event("Agents locked", {"agent_ids": ids}))
            return StartOutcome.STARTED

        return await self._write(fn)

    async def set_deadline(self, battle_id: str, deadline_at: float, battle_timeout: float) -> bool:
        """Persist the timeout so that a restarted backend re-arms it."""

        def fn(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "UPDATE battles SET deadline_at = ?, battle_timeout = ? WHERE battle_id = ? AND state = 'running'",
                (deadline_at, battle_timeout, battle_id),
            )
            return cur.rowcount > 0

        return await self._write(fn)

    async def fail_battle(
        self, battle_id: str, reason: str, *, from_states: Sequence[BattleState] = OPEN_STATES
    ) -> bool:
        """-> error, atomically with the system event, error history and unlock."""

        def fn(conn: sqlite3.Connection) -> bool:
            row = transitions.battle_row(conn, battle_id)
            if row is None or BattleState(row["state"]) not in from_states:
                return False
            transitions.append_event(conn, battle_id, row["last_seq"], system_event(f"Battle error: {reason}"))
            transitions.record_outcomes(conn, row, lambda _agent_id: ("error", 0))
            conn.execute(
                "UPDATE battles SET state = 'error', error = ?, finished_at = ? WHERE battle_id = ?",
                (reason, utc_now_iso(), battle_id),
            )
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

        def fn(conn: sqlite3.Connection) -> bool:
            row = transitions.battle_row(conn, battle_id)
            if row is None or BattleState(row["state"]) not in from_states:
                return False
            transitions.append_event(conn, battle_id, row["last_seq"], event)
            transitions.finish(conn, row, finish)
            return True

        return await self._write(fn)

    async def add_system_event(self, battle_id: str, event: dict[str, Any]) -> EventRecord | None:
        """Append unless the battle is gone or terminal."""

        def fn(conn: sqlite3.Connection) -> EventRecord | None:
            row = transitions.battle_row(conn, battle_id)
            if row is None or BattleState(row["state"]).is_terminal:
                return None
            return transitions.append_event(conn, battle_id, row["last_seq"], event)

        return await self._write(fn)

"""SQLite implementation of `BattleStore`.

Why it looks like this:
- One writer thread owns the only writing connection, so writes are serialised without lock contention and never
  block the event loop; a small reader pool (own connections, WAL) serves reads concurrently.
- Every event is its own row, inserted in its own transaction together with the battle's sequence counter: no
  read-modify-write of a JSON blob, so concurrent posters cannot overwrite each other (the AgentBeats backend can).
- WAL with synchronous=NORMAL: each commit is in the WAL file before the call returns, so killing the process loses
  nothing committed (only an OS crash or power cut could drop the last commits).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from battle_backend.body_limits import has_lone_surrogate, scrub_text
from battle_backend.elo import INITIAL_RATING, Participant, outcome_for, resolve_winner
from battle_backend.records import (
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
from battle_backend.security import tokens_match
from battle_backend.sqlite_schema import migrate
from battle_backend.store import (
    AgentDeleteOutcome,
    BattleClosed,
    BattleNotFound,
    StartOutcome,
    TokenRejected,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

_BATTLE_COLUMNS = (
    "battle_id, green_agent_id, opponents, config, state, created_at, started_at, finished_at, deadline_at, "
    "battle_timeout, result, error, backend_url, battle_token, last_seq"
)


def _dumps(value: Any) -> str:
    """Compact JSON; the stored text is what every reader parses, so it must be sendable as it is.

    The API and the service bound every value before it gets here; this is the last line: NaN/Infinity raise (they
    could never be sent out again) and a lone surrogate, which SQLite cannot encode, is replaced by U+FFFD with a
    warning instead of failing the transaction.
    """
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    if has_lone_surrogate(text):
        logger.warning("a lone surrogate reached the store; replaced by U+FFFD")
        text = scrub_text(text)
    return text


class SQLiteStore:
    """`BattleStore` on one SQLite file."""

    def __init__(self, path: Path | str, *, reader_threads: int = 2) -> None:
        self._path = str(path)
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="arena-db-writer")
        self._readers = ThreadPoolExecutor(max_workers=reader_threads, thread_name_prefix="arena-db-reader")
        self._closed = False

    @property
    def path(self) -> str:
        """The database file."""
        return self._path

    # --- plumbing -----------------------------------------------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        """This thread's connection (each worker thread opens its own)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False, timeout=30.0)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA busy_timeout=30000")
            self._local.conn = conn
            with self._connections_lock:
                self._connections.append(conn)
        return conn

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` inside one IMMEDIATE transaction on the writer thread."""

        def job() -> T:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return result

        return await asyncio.get_running_loop().run_in_executor(self._writer, job)

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

        def job() -> int:
            return migrate(self._connection())

        version = await asyncio.get_running_loop().run_in_executor(self._writer, job)
        logger.info("battle store %s at schema version %d", self._path, version)

    async def close(self) -> None:
        """Finish queued work, then close every connection."""
        if self._closed:
            return
        self._closed = True
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._writer.shutdown, True)
        await loop.run_in_executor(None, self._readers.shutdown, True)
        with self._connections_lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()

    # --- row conversion -----------------------------------------------------------------------------------
    @staticmethod
    def _history(conn: sqlite3.Connection, agent_ids: Iterable[str] | None) -> dict[str, list[BattleHistoryEntry]]:
        if agent_ids is None:
            rows = conn.execute("SELECT * FROM agent_battle_history ORDER BY rowid").fetchall()
        else:
            ids = list(agent_ids)
            marks = ",".join("?" * len(ids))
            rows = conn.execute(
                f"SELECT * FROM agent_battle_history WHERE agent_id IN ({marks}) ORDER BY rowid", ids
            ).fetchall()
        out: dict[str, list[BattleHistoryEntry]] = {}
        for row in rows:
            out.setdefault(row["agent_id"], []).append(
                BattleHistoryEntry(
                    battle_id=row["battle_id"],
                    result=row["result"],
                    elo_change=row["elo_change"],
                    final_rating=row["final_rating"],
                    opponents=json.loads(row["opponents"]),
                    green_agent_id=row["green_agent_id"],
                    timestamp=row["timestamp"],
                )
            )
        return out

    @staticmethod
    def _agent(row: sqlite3.Row, history: list[BattleHistoryEntry]) -> AgentRecord:
        return AgentRecord(
            agent_id=row["agent_id"],
            register_info=json.loads(row["register_info"]),
            agent_card=json.loads(row["agent_card"]),
            status="locked" if row["locked_by"] else "unlocked",
            ready=bool(row["ready"]),
            elo_rating=row["elo_rating"],
            created_at=row["created_at"],
            history=history,
        )

    @staticmethod
    def _battle(row: sqlite3.Row, events: list[EventRecord] | None = None) -> BattleRecord:
        return BattleRecord(
            battle_id=row["battle_id"],
            green_agent_id=row["green_agent_id"],
            opponents=json.loads(row["opponents"]),
            config=json.loads(row["config"]),
            state=BattleState(row["state"]),
            created_at=row["created_at"],
            last_seq=row["last_seq"],
            started_at=row["started_at"],
            finished_at=row["finished_at"],
            deadline_at=row["deadline_at"],
            battle_timeout=row["battle_timeout"],
            result=json.loads(row["result"]) if row["result"] else None,
            error=row["error"],
            backend_url=row["backend_url"],
            battle_token=row["battle_token"],
            events=events or [],
        )

    @staticmethod
    def _events(conn: sqlite3.Connection, battle_id: str, after_seq: int, limit: int | None) -> list[EventRecord]:
        sql = "SELECT seq, payload, received_at FROM battle_events WHERE battle_id = ? AND seq > ? ORDER BY seq"
        params: list[Any] = [battle_id, after_seq]
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [
            EventRecord(
                battle_id=battle_id, seq=row["seq"], payload=json.loads(row["payload"]), received_at=row["received_at"]
            )
            for row in conn.execute(sql, params)
        ]

    # --- agents -------------------------------------------------------------------------------------------
    async def create_agent(self, register_info: dict[str, Any], agent_card: dict[str, Any]) -> AgentRecord:
        """Store a new agent: unlocked, not ready, rated 1000 unless green."""
        agent_id = str(uuid.uuid4())
        rating = None if register_info.get("is_green") else INITIAL_RATING
        created_at = utc_now_iso()

        def fn(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO agents (agent_id, register_info, agent_card, locked_by, ready, elo_rating, created_at)"
                " VALUES (?, ?, ?, NULL, 0, ?, ?)",
                (agent_id, _dumps(register_info), _dumps(agent_card), rating, created_at),
            )

        await self._write(fn)
        return AgentRecord(
            agent_id=agent_id,
            register_info=dict(register_info),
            agent_card=dict(agent_card),
            status="unlocked",
            ready=False,
            elo_rating=rating,
            created_at=created_at,
        )

    async def get_agent(self, agent_id: str) -> AgentRecord | None:
        """One agent with its history."""

        def fn(conn: sqlite3.Connection) -> AgentRecord | None:
            row = conn.execute("SELECT * FROM agents WHERE agent_id = ?", (agent_id,)).fetchone()
            if row is None:
                return None
            return self._agent(row, self._history(conn, [agent_id]).get(agent_id, []))

        return await self._read(fn)

    async def list_agents(self) -> list[AgentRecord]:
        """Every agent, oldest first."""

        def fn(conn: sqlite3.Connection) -> list[AgentRecord]:
            history = self._history(conn, None)
            rows = conn.execute("SELECT * FROM agents ORDER BY created_at, rowid").fetchall()
            return [self._agent(row, history.get(row["agent_id"], [])) for row in rows]

        return await self._read(fn)

    async def set_agent_ready(self, agent_id: str, ready: bool) -> bool:
        """Set the ready flag the launcher reports."""

        def fn(conn: sqlite3.Connection) -> bool:
            cur = conn.execute("UPDATE agents SET ready = ? WHERE agent_id = ?", (1 if ready else 0, agent_id))
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
            conn.execute("DELETE FROM agent_battle_history WHERE agent_id = ?", (agent_id,))
            conn.execute("DELETE FROM agents WHERE agent_id = ?", (agent_id,))
            return AgentDeleteOutcome.DELETED

        return await self._write(fn)

    # --- battles ------------------------------------------------------------------------------------------
    async def create_battle(
        self, green_agent_id: str, opponents: list[dict[str, Any]], config: dict[str, Any], backend_url: str | None
    ) -> BattleRecord:
        """Store a queued battle."""
        battle_id = str(uuid.uuid4())
        created_at = utc_now_iso()

        def fn(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO battles (battle_id, green_agent_id, opponents, config, state, created_at, backend_url)"
                " VALUES (?, ?, ?, ?, 'queued', ?, ?)",
                (battle_id, green_agent_id, _dumps(opponents), _dumps(config), created_at, backend_url),
            )

        await self._write(fn)
        return BattleRecord(
            battle_id=battle_id,
            green_agent_id=green_agent_id,
            opponents=[dict(op) for op in opponents],
            config=dict(config),
            state=BattleState.QUEUED,
            created_at=created_at,
            last_seq=0,
            backend_url=backend_url,
        )

    async def get_battle(self, battle_id: str, *, include_events: bool = True) -> BattleRecord | None:
        """One battle (events included unless asked not to)."""

        def fn(conn: sqlite3.Connection) -> BattleRecord | None:
            row = conn.execute(f"SELECT {_BATTLE_COLUMNS} FROM battles WHERE battle_id = ?", (battle_id,)).fetchone()
            if row is None:
                return None
            events = self._events(conn, battle_id, 0, None) if include_events else None
            return self._battle(row, events)

        return await self._read(fn)

    async def list_battles(self, *, include_events: bool = False) -> list[BattleRecord]:
        """Every battle, oldest first."""

        def fn(conn: sqlite3.Connection) -> list[BattleRecord]:
            rows = conn.execute(f"SELECT {_BATTLE_COLUMNS} FROM battles ORDER BY rowid").fetchall()
            return [
                self._battle(row, self._events(conn, row["battle_id"], 0, None) if include_events else None)
                for row in rows
            ]

        return await self._read(fn)

    async def battle_ids_in_state(self, state: BattleState) -> list[str]:
        """Oldest first: for queued battles this is the queue."""

        def fn(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute("SELECT battle_id FROM battles WHERE state = ? ORDER BY rowid", (state.value,))
            return [row["battle_id"] for row in rows]

        return await self._read(fn)

    async def list_events(self, battle_id: str, *, after_seq: int = 0, limit: int | None = None) -> list[EventRecord]:
        """Events after a sequence number (the SSE stream resumes with this)."""
        return await self._read(lambda conn: self._events(conn, battle_id, after_seq, limit))

    # --- transitions (all on the writer thread, one transaction each) -----------------------------------
    @staticmethod
    def _append(conn: sqlite3.Connection, battle_id: str, last_seq: int, payload: dict[str, Any]) -> EventRecord:
        seq = last_seq + 1
        received_at = utc_now_iso()
        conn.execute("UPDATE battles SET last_seq = ? WHERE battle_id = ?", (seq, battle_id))
        conn.execute(
            "INSERT INTO battle_events (battle_id, seq, payload, received_at) VALUES (?, ?, ?, ?)",
            (battle_id, seq, _dumps(payload), received_at),
        )
        return EventRecord(battle_id=battle_id, seq=seq, payload=payload, received_at=received_at)

    @staticmethod
    def _battle_row(conn: sqlite3.Connection, battle_id: str) -> sqlite3.Row | None:
        return conn.execute(
            "SELECT battle_id, green_agent_id, opponents, state, battle_token, last_seq"
            " FROM battles WHERE battle_id = ?",
            (battle_id,),
        ).fetchone()

    @staticmethod
    def _participant_ids(row: sqlite3.Row) -> list[str]:
        opponents = json.loads(row["opponents"])
        ids = [row["green_agent_id"], *[str(op["agent_id"]) for op in opponents]]
        return list(dict.fromkeys(ids))

    def _record_outcomes(
        self,
        conn: sqlite3.Connection,
        row: sqlite3.Row,
        outcome: Callable[[str], tuple[str, int]],
    ) -> None:
        """Write each participant's history entry and rating change, and release the locks this battle holds."""
        battle_id = row["battle_id"]
        opponents = json.loads(row["opponents"])
        opponent_ids = [str(op["agent_id"]) for op in opponents]
        now = utc_now_iso()
        for agent_id in self._participant_ids(row):
            agent = conn.execute(
                "SELECT register_info, elo_rating FROM agents WHERE agent_id = ?", (agent_id,)
            ).fetchone()
            if agent is None:
                continue
            is_green = bool(json.loads(agent["register_info"]).get("is_green"))
            result, change = outcome(agent_id)
            rating = agent["elo_rating"]
            if not is_green and rating is not None:
                rating += change
            else:
                rating = None
            conn.execute(
                "UPDATE agents SET elo_rating = ? WHERE agent_id = ? AND elo_rating IS NOT NULL", (rating, agent_id)
            )
            conn.execute(
                "INSERT OR IGNORE INTO agent_battle_history"
                " (agent_id, battle_id, result, elo_change, final_rating, opponents, green_agent_id, timestamp)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (agent_id, battle_id, result, change, rating, _dumps(opponent_ids), row["green_agent_id"], now),
            )
        conn.execute("UPDATE agents SET locked_by = NULL, ready = 0 WHERE locked_by = ?", (battle_id,))

    def _finish(self, conn: sqlite3.Connection, row: sqlite3.Row, finish: FinishSpec) -> None:
        """Finish inside the caller's transaction: result, ELO, history, unlock."""
        participants: list[Participant] = []
        for agent_id in self._participant_ids(row):
            agent = conn.execute(
                "SELECT register_info, agent_card FROM agents WHERE agent_id = ?", (agent_id,)
            ).fetchone()
            if agent is None:
                continue
            info = json.loads(agent["register_info"])
            card = json.loads(agent["agent_card"])
            participants.append(
                Participant(
                    agent_id=agent_id,
                    alias=info.get("alias"),
                    card_name=card.get("name"),
                    is_green=bool(info.get("is_green")),
                )
            )
        winner_id = resolve_winner(finish.winner, row["green_agent_id"], json.loads(row["opponents"]), participants)
        self._record_outcomes(conn, row, lambda agent_id: outcome_for(agent_id, finish.winner, winner_id))
        conn.execute(
            "UPDATE battles SET state = 'finished', result = ?, finished_at = ? WHERE battle_id = ?",
            (_dumps(finish.result_body()), utc_now_iso(), row["battle_id"]),
        )

    async def append_event(
        self,
        battle_id: str,
        payload: dict[str, Any],
        *,
        finish: FinishSpec | None = None,
        presented_token: str | None = None,
        enforce_token: bool = False,
    ) -> EventRecord:
        """One event, one row, one transaction (finishing the battle too when ``finish`` is given)."""

        def fn(conn: sqlite3.Connection) -> EventRecord:
            row = self._battle_row(conn, battle_id)
            if row is None:
                raise BattleNotFound(battle_id)
            if presented_token is not None:
                if not tokens_match(row["battle_token"], presented_token):
                    raise TokenRejected(battle_id, "the presented battle token is not this battle's")
            elif enforce_token:
                raise TokenRejected(battle_id, "no battle token was presented")
            state = BattleState(row["state"])
            if state.is_terminal:
                raise BattleClosed(battle_id, state)
            record = self._append(conn, battle_id, row["last_seq"], payload)
            if finish is not None:
                self._finish(conn, row, finish)
            return record

        return await self._write(fn)

    async def start_battle(self, battle_id: str, battle_token: str) -> StartOutcome:
        """queued -> running with every participant locked, or an outcome saying why not."""

        def fn(conn: sqlite3.Connection) -> StartOutcome:
            row = self._battle_row(conn, battle_id)
            if row is None or row["state"] != BattleState.QUEUED.value:
                return StartOutcome.NOT_QUEUED
            ids = self._participant_ids(row)
            marks = ",".join("?" * len(ids))
            agents = conn.execute(f"SELECT agent_id, locked_by FROM agents WHERE agent_id IN ({marks})", ids).fetchall()
            if len(agents) != len(ids):
                return StartOutcome.MISSING_AGENT
            if any(agent["locked_by"] for agent in agents):
                return StartOutcome.AGENTS_BUSY
            conn.execute(f"UPDATE agents SET locked_by = ?, ready = 0 WHERE agent_id IN ({marks})", [battle_id, *ids])
            conn.execute(
                "UPDATE battles SET state = 'running', started_at = ?, battle_token = ? WHERE battle_id = ?",
                (utc_now_iso(), battle_token, battle_id),
            )
            record = self._append(conn, battle_id, row["last_seq"], system_event("Battle started"))
            self._append(conn, battle_id, record.seq, system_event("Agents locked", {"agent_ids": ids}))
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
            row = self._battle_row(conn, battle_id)
            if row is None or BattleState(row["state"]) not in from_states:
                return False
            self._append(conn, battle_id, row["last_seq"], system_event(f"Battle error: {reason}"))
            self._record_outcomes(conn, row, lambda _agent_id: ("error", 0))
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
            row = self._battle_row(conn, battle_id)
            if row is None or BattleState(row["state"]) not in from_states:
                return False
            self._append(conn, battle_id, row["last_seq"], event)
            self._finish(conn, row, finish)
            return True

        return await self._write(fn)

    async def add_system_event(self, battle_id: str, event: dict[str, Any]) -> EventRecord | None:
        """Append unless the battle is gone or terminal."""

        def fn(conn: sqlite3.Connection) -> EventRecord | None:
            row = self._battle_row(conn, battle_id)
            if row is None or BattleState(row["state"]).is_terminal:
                return None
            return self._append(conn, battle_id, row["last_seq"], event)

        return await self._write(fn)

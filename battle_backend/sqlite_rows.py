"""SQLite rows and records: how the battle store writes values into columns and reads rows back into records.

Why a module of its own: every read of :class:`battle_backend.sqlite_store.SQLiteStore` (agents with their ELO
history, battles with their events) and every write of a JSON column goes through these few functions, so the
column layout of :mod:`battle_backend.sqlite_schema` and the JSON encoding rules live in one place, apart from the
threading and transaction plumbing of the store and from the state transitions
(:mod:`battle_backend.sqlite_transitions`). Everything here runs inside a transaction its caller opened.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterable
from typing import Any

from battle_backend.body_limits import has_lone_surrogate, scrub_text
from battle_backend.records import AgentRecord, BattleHistoryEntry, BattleRecord, BattleState, EventRecord

logger = logging.getLogger(__name__)

BATTLE_COLUMNS = (
    "battle_id, green_agent_id, opponents, config, state, created_at, started_at, finished_at, deadline_at, "
    "battle_timeout, result, error, backend_url, battle_token, last_seq"
)
"""The columns :func:`battle_record` reads."""


def dumps(value: Any) -> str:
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


def history_entries(conn: sqlite3.Connection, agent_ids: Iterable[str] | None) -> dict[str, list[BattleHistoryEntry]]:
    """The ELO history of the given agents (every agent when ``agent_ids`` is None), oldest first per agent."""
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


def agent_record(row: sqlite3.Row, history: list[BattleHistoryEntry]) -> AgentRecord:
    """An ``agents`` row with its history."""
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


def battle_record(row: sqlite3.Row, events: list[EventRecord] | None = None) -> BattleRecord:
    """A ``battles`` row (selected with :data:`BATTLE_COLUMNS`) with its events, when given."""
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


def events_after(conn: sqlite3.Connection, battle_id: str, after_seq: int, limit: int | None) -> list[EventRecord]:
    """A battle's events with a sequence number above ``after_seq``, in order, at most ``limit`` of them."""
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

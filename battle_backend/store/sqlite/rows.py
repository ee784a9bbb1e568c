"""SQLite queries that read records: agents' ELO histories and battles' events, for the SQLite store's reads.

How a row becomes a record is database-neutral and lives in :mod:`battle_backend.store.rows`; the column layout is
:mod:`battle_backend.store.sqlite.schema`'s. Everything here runs inside a transaction its caller opened.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

from battle_backend.store.records import BattleHistoryEntry, EventRecord
from battle_backend.store.rows import EVENT_COLUMNS, event_record, history_entry


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
        out.setdefault(row["agent_id"], []).append(history_entry(row))
    return out


def events_after(conn: sqlite3.Connection, battle_id: str, after_seq: int, limit: int | None) -> list[EventRecord]:
    """A battle's events with a sequence number above ``after_seq``, in order, at most ``limit`` of them."""
    sql = f"SELECT {EVENT_COLUMNS} FROM battle_events WHERE battle_id = ? AND seq > ? ORDER BY seq"
    params: list[Any] = [battle_id, after_seq]
    if limit is not None:
        sql += " LIMIT ?"
        params.append(limit)
    return [event_record(battle_id, row) for row in conn.execute(sql, params)]

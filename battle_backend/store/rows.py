"""Rows and records: how a row of any store (an ``sqlite3.Row`` or a psycopg dict row, same column names) becomes
the immutable record the rest of the backend uses.

Why a module of its own: both stores keep the same columns with the same JSON text in them, so reading them back
must be one piece of code, or the two databases would answer the same battle differently.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from battle_backend.store.records import AgentRecord, BattleHistoryEntry, BattleRecord, BattleState, EventRecord

Row = Mapping[str, Any]
"""A row addressed by column name."""

BATTLE_COLUMNS = (
    "battle_id, green_agent_id, opponents, config, state, created_at, started_at, finished_at, deadline_at, "
    "battle_timeout, result, error, backend_url, battle_token, last_seq, green_pool, owner"
)
"""The columns :func:`battle_record` reads."""


def history_entry(row: Row) -> BattleHistoryEntry:
    """An ``agent_battle_history`` row."""
    return BattleHistoryEntry(
        battle_id=row["battle_id"],
        result=row["result"],
        elo_change=row["elo_change"],
        final_rating=row["final_rating"],
        opponents=json.loads(row["opponents"]),
        green_agent_id=row["green_agent_id"],
        timestamp=row["timestamp"],
    )


EVENT_COLUMNS = "seq, payload, received_at, verified"
"""The columns :func:`event_record` reads."""


def event_record(battle_id: str, row: Row) -> EventRecord:
    """A ``battle_events`` row (:data:`EVENT_COLUMNS`)."""
    return EventRecord(
        battle_id=battle_id,
        seq=row["seq"],
        payload=json.loads(row["payload"]),
        received_at=row["received_at"],
        verified=bool(row["verified"]),
    )


def agent_record(row: Row, history: list[BattleHistoryEntry]) -> AgentRecord:
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


def battle_record(row: Row, events: list[EventRecord] | None = None) -> BattleRecord:
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
        green_pool=row["green_pool"],
        owner=row["owner"],
        events=events or [],
    )

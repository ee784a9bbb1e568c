"""The writes a battle's state transitions are made of, each inside the transaction of the store method calling it.

Why a module of its own: appending an event (with the battle's sequence counter), finishing a battle (result, ELO,
history, unlocking its agents) and failing one share these steps, and they are the part of the store where the
AgentBeats semantics live (who wins, who is rated, which locks are released). :mod:`battle_backend.store.sqlite.store`
decides *when* a transition may happen (compare-and-set on the state, the battle token) and runs it on its writer
thread; this module says *what* it writes. Nothing here opens or commits a transaction.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any

from battle_backend.store import transition_rules as rules
from battle_backend.store.json_text import dumps
from battle_backend.store.records import EventRecord, FinishSpec, utc_now_iso
from battle_backend.store.rows import EVENT_COLUMNS, event_record


def battle_row(conn: sqlite3.Connection, battle_id: str) -> sqlite3.Row | None:
    """The columns a transition needs (state, token, participants, sequence counter), or None for no such battle."""
    row: sqlite3.Row | None = conn.execute(
        "SELECT battle_id, green_agent_id, opponents, state, battle_token, last_seq, green_pool FROM battles"
        " WHERE battle_id = ?",
        (battle_id,),
    ).fetchone()
    return row


def append_event(
    conn: sqlite3.Connection,
    battle_id: str,
    last_seq: int,
    payload: dict[str, Any],
    event_id: str | None = None,
    *,
    verified: bool = True,
) -> EventRecord:
    """One event row, numbered ``last_seq + 1`` (with the poster's idempotency key, if any, in the key space of
    ``verified``), and the battle's counter moved to it."""
    seq = last_seq + 1
    received_at = utc_now_iso()
    conn.execute("UPDATE battles SET last_seq = ? WHERE battle_id = ?", (seq, battle_id))
    conn.execute(
        "INSERT INTO battle_events (battle_id, seq, payload, received_at, event_id, verified)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (battle_id, seq, dumps(payload), received_at, event_id, int(verified)),
    )
    return EventRecord(battle_id=battle_id, seq=seq, payload=payload, received_at=received_at, verified=verified)


def event_with_id(conn: sqlite3.Connection, battle_id: str, event_id: str, *, verified: bool) -> EventRecord | None:
    """The battle's event stored under the idempotency key ``event_id`` in the key space of ``verified``, or None."""
    row = conn.execute(
        f"SELECT {EVENT_COLUMNS} FROM battle_events WHERE battle_id = ? AND verified = ? AND event_id = ?",
        (battle_id, int(verified), event_id),
    ).fetchone()
    return None if row is None else event_record(battle_id, row)


def participant_ids(row: sqlite3.Row) -> list[str]:
    """The green agent, then the opponents, each once."""
    return rules.participant_ids(row["green_agent_id"], json.loads(row["opponents"]))


def agent_facts(conn: sqlite3.Connection, agent_ids: list[str]) -> dict[str, rules.AgentFacts]:
    """The participants that still exist, by id."""
    marks = ",".join("?" * len(agent_ids))
    rows = conn.execute(
        f"SELECT agent_id, register_info, agent_card, elo_rating FROM agents WHERE agent_id IN ({marks})", agent_ids
    ).fetchall()
    return {
        row["agent_id"]: rules.AgentFacts(
            agent_id=row["agent_id"],
            register_info=json.loads(row["register_info"]),
            agent_card=json.loads(row["agent_card"]),
            elo_rating=row["elo_rating"],
        )
        for row in rows
    }


def record_outcomes(conn: sqlite3.Connection, row: sqlite3.Row, outcome: Callable[[str], tuple[str, int]]) -> None:
    """Write each participant's history entry and rating change, and release the locks this battle holds."""
    battle_id = row["battle_id"]
    opponents = json.loads(row["opponents"])
    agents = agent_facts(conn, participant_ids(row))
    for entry in rules.plan_outcomes(battle_id, row["green_agent_id"], opponents, agents, outcome):
        conn.execute(
            "UPDATE agents SET elo_rating = ? WHERE agent_id = ? AND elo_rating IS NOT NULL",
            (entry.final_rating, entry.agent_id),
        )
        conn.execute(
            f"INSERT OR IGNORE INTO agent_battle_history ({rules.HISTORY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            entry.history_values(),
        )
    conn.execute("UPDATE agents SET locked_by = NULL, ready = 0 WHERE locked_by = ?", (battle_id,))


def finish(conn: sqlite3.Connection, row: sqlite3.Row, spec: FinishSpec) -> None:
    """Finish the battle: result, ELO (none when ``spec.rated`` is False), history, unlock."""
    opponents = json.loads(row["opponents"])
    agents = agent_facts(conn, participant_ids(row))
    record_outcomes(conn, row, rules.finish_outcome(spec, row["green_agent_id"], opponents, agents))
    conn.execute(
        "UPDATE battles SET state = 'finished', result = ?, finished_at = ? WHERE battle_id = ?",
        (dumps(spec.result_body()), utc_now_iso(), row["battle_id"]),
    )

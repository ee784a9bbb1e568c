"""The writes a battle's state transitions are made of, each inside the transaction of the store method calling it.

Why a module of its own: appending an event (with the battle's sequence counter), finishing a battle (result, ELO,
history, unlocking its agents) and failing one share these steps, and they are the part of the store where the
AgentBeats semantics live (who wins, who is rated, which locks are released). :mod:`battle_backend.sqlite_store`
decides *when* a transition may happen (compare-and-set on the state, the battle token) and runs it on its writer
thread; this module says *what* it writes. Nothing here opens or commits a transaction.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any

from battle_backend.elo import Participant, outcome_for, resolve_winner
from battle_backend.records import EventRecord, FinishSpec, utc_now_iso
from battle_backend.sqlite_rows import dumps


def battle_row(conn: sqlite3.Connection, battle_id: str) -> sqlite3.Row | None:
    """The columns a transition needs (state, token, participants, sequence counter), or None for no such battle."""
    return conn.execute(
        "SELECT battle_id, green_agent_id, opponents, state, battle_token, last_seq FROM battles WHERE battle_id = ?",
        (battle_id,),
    ).fetchone()


def append_event(
    conn: sqlite3.Connection, battle_id: str, last_seq: int, payload: dict[str, Any], event_id: str | None = None
) -> EventRecord:
    """One event row, numbered ``last_seq + 1`` (with the poster's idempotency key, if any), and the battle's counter
    moved to it."""
    seq = last_seq + 1
    received_at = utc_now_iso()
    conn.execute("UPDATE battles SET last_seq = ? WHERE battle_id = ?", (seq, battle_id))
    conn.execute(
        "INSERT INTO battle_events (battle_id, seq, payload, received_at, event_id) VALUES (?, ?, ?, ?, ?)",
        (battle_id, seq, dumps(payload), received_at, event_id),
    )
    return EventRecord(battle_id=battle_id, seq=seq, payload=payload, received_at=received_at)


def event_with_id(conn: sqlite3.Connection, battle_id: str, event_id: str) -> EventRecord | None:
    """The battle's event stored under the idempotency key ``event_id``, or None."""
    row = conn.execute(
        "SELECT seq, payload, received_at FROM battle_events WHERE battle_id = ? AND event_id = ?",
        (battle_id, event_id),
    ).fetchone()
    if row is None:
        return None
    return EventRecord(
        battle_id=battle_id, seq=row["seq"], payload=json.loads(row["payload"]), received_at=row["received_at"]
    )


def participant_ids(row: sqlite3.Row) -> list[str]:
    """The green agent, then the opponents, each once."""
    opponents = json.loads(row["opponents"])
    ids = [row["green_agent_id"], *[str(op["agent_id"]) for op in opponents]]
    return list(dict.fromkeys(ids))


def record_outcomes(conn: sqlite3.Connection, row: sqlite3.Row, outcome: Callable[[str], tuple[str, int]]) -> None:
    """Write each participant's history entry and rating change, and release the locks this battle holds."""
    battle_id = row["battle_id"]
    opponents = json.loads(row["opponents"])
    opponent_ids = [str(op["agent_id"]) for op in opponents]
    now = utc_now_iso()
    for agent_id in participant_ids(row):
        agent = conn.execute("SELECT register_info, elo_rating FROM agents WHERE agent_id = ?", (agent_id,)).fetchone()
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
            (agent_id, battle_id, result, change, rating, dumps(opponent_ids), row["green_agent_id"], now),
        )
    conn.execute("UPDATE agents SET locked_by = NULL, ready = 0 WHERE locked_by = ?", (battle_id,))


def finish(conn: sqlite3.Connection, row: sqlite3.Row, spec: FinishSpec) -> None:
    """Finish the battle: result, ELO (none when ``spec.rated`` is False), history, unlock."""
    participants: list[Participant] = []
    for agent_id in participant_ids(row):
        agent = conn.execute("SELECT register_info, agent_card FROM agents WHERE agent_id = ?", (agent_id,)).fetchone()
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
    winner_id = resolve_winner(spec.winner, row["green_agent_id"], json.loads(row["opponents"]), participants)

    def outcome(agent_id: str) -> tuple[str, int]:
        result, change = outcome_for(agent_id, spec.winner, winner_id)
        return result, change if spec.rated else 0

    record_outcomes(conn, row, outcome)
    conn.execute(
        "UPDATE battles SET state = 'finished', result = ?, finished_at = ? WHERE battle_id = ?",
        (dumps(spec.result_body()), utc_now_iso(), row["battle_id"]),
    )

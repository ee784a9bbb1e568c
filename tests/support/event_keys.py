"""The idempotency keys a battle's events were stored under, read from a backend's SQLite file.

Why from the file: the backend no longer shows ``event_id`` in ``GET /battles/{id}`` (a poster's keys are its own;
anyone reading the battle learnt the keys the green agent would use next). Tests and benchmarks that check the keys
a reporter sent read them where the backend keeps them. No pytest here: benchmarks import this module too.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path


def stored_event_keys(db: Path, battle_id: str, *, verified_only: bool = True) -> list[str]:
    """The non-NULL ``event_id`` of the battle's events in sequence order (only those posted with the battle's
    token, unless ``verified_only`` is False)."""
    where = " AND verified = 1" if verified_only else ""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        rows = conn.execute(
            f"SELECT event_id FROM battle_events WHERE battle_id = ? AND event_id IS NOT NULL{where} ORDER BY seq",
            (battle_id,),
        ).fetchall()
    return [str(key) for (key,) in rows]

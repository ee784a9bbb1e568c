"""Attempt-queue rows as records, shared by both stores (their tables have the same columns)."""

from __future__ import annotations

import json
from typing import Any

from battle_backend.store.attempt_records import AttemptState, LeaseHistoryEntry, StoredAttempt


def stored_attempt(row: Any, history: list[LeaseHistoryEntry]) -> StoredAttempt:
    """An attempt row as a record (both stores' rows have the same columns)."""
    return StoredAttempt(
        battle_id=row["battle_id"],
        task_key=row["task_key"],
        attempt=int(row["attempt"]),
        state=AttemptState(row["state"]),
        generation=int(row["generation"]),
        leased_by=row["leased_by"],
        requeues=int(row["requeues"]),
        payload=json.loads(row["payload"]),
        result=json.loads(row["result"]) if row["result"] is not None else None,
        error=row["error"],
        recorded_by=row["recorded_by"],
        recorded_at=row["recorded_at"],
        history=history,
    )


def history_entry(row: Any) -> LeaseHistoryEntry:
    """A lease history row as a record."""
    return LeaseHistoryEntry(
        generation=int(row["generation"]),
        worker_id=row["worker_id"],
        leased_at=row["leased_at"],
        ended_at=row["ended_at"],
        outcome=row["outcome"],
        detail=row["detail"],
    )

"""The green agent's progress events as the backend reads them: type and field names of the published schema.

Why a module of its own: the names come from docs/events.schema.json (the green agent's typed events, published
beside summary.schema.json); the backend imports nothing of the green agent, so the names it reads are written here
once and a test (tests/battle_backend/battles/test_event_names.py) checks each against the schema. The readers stay
tolerant: an event from a foreign AgentBeats agent may lack any of these fields or hold anything in them, and is
read through :mod:`battle_backend.battles.tolerant`.
"""

from __future__ import annotations

from typing import Final

TYPE: Final = "type"
"""The discriminator of every event's ``detail``."""

BATTLE_STARTED: Final = "battle_started"
ATTEMPT_STARTED: Final = "attempt_started"
ATTEMPT_FINISHED: Final = "attempt_finished"

ATTEMPTS_SKIPPED: Final = "attempts_skipped"
"""A pass^k certify battle did not run a task's remaining attempts (one failed): not attempts, not failures."""

ATTEMPT_EVENTS: Final = (ATTEMPT_STARTED, ATTEMPT_FINISHED)
"""The events that mean an attempt ran (the ETA's clock starts at the first)."""

# battle_started
ATTEMPTS_TOTAL: Final = "attempts_total"
K: Final = "k"
RESUMED_ATTEMPTS: Final = "resumed_attempts"
TASKS: Final = "tasks"
CALIBRATION: Final = "calibration"

# attempt_finished
TASK_KEY: Final = "task_key"
ATTEMPT: Final = "attempt"
OUTCOME: Final = "outcome"
REWARD: Final = "reward"
CATEGORY: Final = "category"
FAULT_AUTHOR: Final = "fault_author"
FAILURE_DETAIL: Final = "failure_detail"
STEPS: Final = "steps"
DURATION_S: Final = "duration_s"
EXPLANATION: Final = "explanation"
TRAJECTORY: Final = "trajectory"
DONE: Final = "done"
# attempts_skipped (and TASK_KEY)
ATTEMPTS: Final = "attempts"
TOTAL: Final = "total"

READS: Final[dict[str, tuple[str, ...]]] = {
    BATTLE_STARTED: (TYPE, ATTEMPTS_TOTAL, K, RESUMED_ATTEMPTS, TASKS, CALIBRATION),
    ATTEMPT_STARTED: (TYPE,),
    ATTEMPTS_SKIPPED: (TYPE, TASK_KEY, ATTEMPTS),
    ATTEMPT_FINISHED: (
        TYPE,
        TASK_KEY,
        ATTEMPT,
        OUTCOME,
        REWARD,
        CATEGORY,
        FAULT_AUTHOR,
        FAILURE_DETAIL,
        STEPS,
        DURATION_S,
        EXPLANATION,
        TRAJECTORY,
        DONE,
        TOTAL,
    ),
}
"""Event type -> the fields of its ``detail`` the backend reads (each must be in the schema's model of that type)."""

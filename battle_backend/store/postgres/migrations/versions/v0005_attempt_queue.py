"""The attempt queue (issue 29): a battle's attempts published by its owning green agent, leased by pool members.

- ``attempt_queues``: one per battle (its pool, the SHA-256 of the pool key, the requeue limit, the owner's
  liveness on the database's clock); ``position`` keeps publish order across battles.
- ``battle_attempts``: one row per (task_key, attempt): state, the current lease's generation (the fencing token),
  holder and expiry (``timestamptz``, compared with ``now()``), requeues, result.
- ``attempt_leases``: every lease an attempt had and how it ended (recorded | infra_error | expired; NULL while held).

Revision ID: v0005
Revises: v0004
"""

from __future__ import annotations

from alembic import op

revision = "v0005"
down_revision = "v0004"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE attempt_queues (
    battle_id     TEXT PRIMARY KEY REFERENCES battles (battle_id) ON DELETE CASCADE,
    position      BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    pool          TEXT NOT NULL,
    key_sha256    TEXT NOT NULL,
    max_requeues  INTEGER NOT NULL,
    owner_worker  TEXT,
    owner_seen_at TIMESTAMPTZ NOT NULL,
    owner_ttl_s   DOUBLE PRECISION NOT NULL,
    published_at  TEXT NOT NULL
);
CREATE INDEX attempt_queues_pool ON attempt_queues (pool, position);
CREATE TABLE battle_attempts (
    battle_id     TEXT NOT NULL REFERENCES attempt_queues (battle_id) ON DELETE CASCADE,
    task_key      TEXT NOT NULL,
    attempt       INTEGER NOT NULL,
    position      INTEGER NOT NULL,
    payload       TEXT NOT NULL,
    state         TEXT NOT NULL CHECK (state IN ('available', 'leased', 'done', 'failed')),
    generation    INTEGER NOT NULL DEFAULT 0,
    leased_by     TEXT,
    lease_expires TIMESTAMPTZ,
    requeues      INTEGER NOT NULL DEFAULT 0,
    result        TEXT,
    error         TEXT,
    recorded_by   TEXT,
    recorded_at   TEXT,
    PRIMARY KEY (battle_id, task_key, attempt)
);
CREATE INDEX battle_attempts_open ON battle_attempts (battle_id, state, position);
CREATE TABLE attempt_leases (
    battle_id  TEXT NOT NULL,
    task_key   TEXT NOT NULL,
    attempt    INTEGER NOT NULL,
    generation INTEGER NOT NULL,
    worker_id  TEXT NOT NULL,
    leased_at  TEXT NOT NULL,
    ended_at   TEXT,
    outcome    TEXT,
    detail     TEXT,
    PRIMARY KEY (battle_id, task_key, attempt, generation),
    FOREIGN KEY (battle_id, task_key, attempt) REFERENCES battle_attempts (battle_id, task_key, attempt)
        ON DELETE CASCADE
);
"""


def upgrade() -> None:
    """Create the three tables."""
    op.execute(UPGRADE)


def downgrade() -> None:
    """Drop them (every published attempt and its history is lost)."""
    op.execute("DROP TABLE attempt_leases; DROP TABLE battle_attempts; DROP TABLE attempt_queues;")

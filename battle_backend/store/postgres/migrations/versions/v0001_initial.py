"""The battle store's tables on PostgreSQL: the SQLite schema at its version 3, plus the replicas table.

JSON columns are ``text`` holding the exact JSON the backend wrote (:mod:`battle_backend.store.json_text`), as in
SQLite: an event is served back byte for byte as stored (jsonb would reorder keys and refuse ``\\u0000``).
Timestamps the API shows are ISO text written by the backend, as in SQLite; lease times use the database's clock.
``position`` columns keep insertion order (SQLite's rowid).

Revision ID: v0001
Revises: (none)
"""

from __future__ import annotations

from alembic import op

revision = "v0001"
down_revision = None
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE replicas (
    replica_id   TEXT PRIMARY KEY,
    description  TEXT NOT NULL DEFAULT '',
    started_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE agents (
    position      BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    agent_id      TEXT PRIMARY KEY,
    register_info TEXT NOT NULL,
    agent_card    TEXT NOT NULL,
    locked_by     TEXT,
    ready         BOOLEAN NOT NULL DEFAULT FALSE,
    elo_rating    INTEGER,
    created_at    TEXT NOT NULL,
    pool          TEXT
);
CREATE INDEX agents_pool ON agents (pool) WHERE pool IS NOT NULL;
CREATE TABLE agent_battle_history (
    position       BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    agent_id       TEXT NOT NULL,
    battle_id      TEXT NOT NULL,
    result         TEXT NOT NULL,
    elo_change     INTEGER NOT NULL,
    final_rating   INTEGER,
    opponents      TEXT NOT NULL,
    green_agent_id TEXT NOT NULL,
    timestamp      TEXT NOT NULL,
    UNIQUE (agent_id, battle_id)
);
CREATE INDEX agent_battle_history_agent ON agent_battle_history (agent_id, position);
CREATE TABLE battles (
    position       BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    battle_id      TEXT PRIMARY KEY,
    green_agent_id TEXT NOT NULL,
    opponents      TEXT NOT NULL,
    config         TEXT NOT NULL,
    state          TEXT NOT NULL CHECK (state IN ('queued', 'running', 'finished', 'error')),
    created_at     TEXT NOT NULL,
    started_at     TEXT,
    finished_at    TEXT,
    deadline_at    DOUBLE PRECISION,
    battle_timeout DOUBLE PRECISION,
    result         TEXT,
    error          TEXT,
    backend_url    TEXT,
    battle_token   TEXT,
    last_seq       INTEGER NOT NULL DEFAULT 0,
    green_pool     TEXT,
    owner          TEXT
);
CREATE INDEX battles_state ON battles (state, position);
CREATE TABLE battle_events (
    battle_id   TEXT NOT NULL REFERENCES battles (battle_id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,
    payload     TEXT NOT NULL,
    received_at TEXT NOT NULL,
    event_id    TEXT,
    PRIMARY KEY (battle_id, seq)
);
CREATE UNIQUE INDEX battle_events_event_id ON battle_events (battle_id, event_id) WHERE event_id IS NOT NULL;
"""


def upgrade() -> None:
    """Create every table."""
    op.execute(UPGRADE)


def downgrade() -> None:
    """Drop every table (a fresh database again)."""
    op.execute("DROP TABLE battle_events, battles, agent_battle_history, agents, replicas")

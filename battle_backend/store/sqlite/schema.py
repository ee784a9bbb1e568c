"""The SQLite schema as numbered migrations, applied in order on start (``schema_version`` holds the last one).

Add a migration by appending (N+1, sql); never edit an applied one. A database newer than this code is refused
rather than guessed at.
"""

from __future__ import annotations

import sqlite3

from battle_backend.store.protocol import SchemaTooNew

SCHEMA_V1 = """
CREATE TABLE agents (
    agent_id      TEXT PRIMARY KEY,
    register_info TEXT NOT NULL,           -- JSON: the registration body as sent
    agent_card    TEXT NOT NULL,           -- JSON: the card fetched at registration
    locked_by     TEXT,                    -- battle id holding the lock; NULL = unlocked
    ready         INTEGER NOT NULL DEFAULT 0,
    elo_rating    INTEGER,                 -- NULL for green agents
    created_at    TEXT NOT NULL
);
CREATE TABLE agent_battle_history (
    agent_id       TEXT NOT NULL,
    battle_id      TEXT NOT NULL,
    result         TEXT NOT NULL,          -- win | loss | draw | error
    elo_change     INTEGER NOT NULL,
    final_rating   INTEGER,
    opponents      TEXT NOT NULL,          -- JSON list of agent ids
    green_agent_id TEXT NOT NULL,
    timestamp      TEXT NOT NULL,
    UNIQUE (agent_id, battle_id)
);
CREATE INDEX agent_battle_history_agent ON agent_battle_history (agent_id);
CREATE TABLE battles (
    battle_id      TEXT PRIMARY KEY,
    green_agent_id TEXT NOT NULL,
    opponents      TEXT NOT NULL,          -- JSON list of {name, agent_id, role?}
    config         TEXT NOT NULL,          -- JSON object
    state          TEXT NOT NULL CHECK (state IN ('queued', 'running', 'finished', 'error')),
    created_at     TEXT NOT NULL,
    started_at     TEXT,
    finished_at    TEXT,
    deadline_at    REAL,                   -- epoch seconds of the battle timeout
    battle_timeout REAL,
    result         TEXT,                   -- JSON {winner, detail, finish_time}
    error          TEXT,
    backend_url    TEXT,
    battle_token   TEXT,
    last_seq       INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX battles_state ON battles (state);
CREATE TABLE battle_events (
    battle_id   TEXT NOT NULL REFERENCES battles (battle_id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,
    payload     TEXT NOT NULL,             -- JSON: the event as posted (plus a timestamp when it had none)
    received_at TEXT NOT NULL,
    PRIMARY KEY (battle_id, seq)
) WITHOUT ROWID;
"""

SCHEMA_V2 = """
-- The poster's idempotency key ("event_id" of POST /battles/{id}); NULL for events posted without one and for
-- every event stored before this migration (their payloads are left as they are).
ALTER TABLE battle_events ADD COLUMN event_id TEXT;
CREATE UNIQUE INDEX battle_events_event_id ON battle_events (battle_id, event_id) WHERE event_id IS NOT NULL;
"""

SCHEMA_V3 = """
-- Green-agent pools (agents.pool: the pool a green agent joined; battles.green_pool: the pool a battle may run on)
-- and battle ownership (battles.owner: the replica running the battle's tasks; NULL before this migration, which
-- makes those battles claimable by the next process, as running battles of a previous process always were).
ALTER TABLE agents ADD COLUMN pool TEXT;
CREATE INDEX agents_pool ON agents (pool) WHERE pool IS NOT NULL;
ALTER TABLE battles ADD COLUMN green_pool TEXT;
ALTER TABLE battles ADD COLUMN owner TEXT;
"""

SCHEMA_V4 = """
-- Who posted an event: verified (1) for the battle's token holder, the backend itself and imports, unverified (0)
-- for a post without the battle's token. Idempotency keys live in two separate spaces, one per value, so a tokenless
-- poster can never make a token holder's event a "duplicate" of its own. Events stored before this migration keep
-- counting as they did (verified): which of them came with a token was not recorded.
ALTER TABLE battle_events ADD COLUMN verified INTEGER NOT NULL DEFAULT 1;
DROP INDEX battle_events_event_id;
CREATE UNIQUE INDEX battle_events_event_key ON battle_events (battle_id, verified, event_id) WHERE event_id IS NOT NULL;
"""

SCHEMA_V5 = """
-- The attempt queue (issue 29): a battle's attempts published by its owning green agent, leased by pool members.
-- attempt_queues: one per battle (its pool, the SHA-256 of the pool key, the requeue limit, the owner's liveness);
-- battle_attempts: one row per (task_key, attempt), its current lease (generation = the fencing token) and result;
-- attempt_leases: every lease an attempt had and how it ended (recorded | infra_error | expired; NULL while held).
-- Lease and owner times are epoch seconds of the store's clock.
CREATE TABLE attempt_queues (
    battle_id     TEXT PRIMARY KEY REFERENCES battles (battle_id) ON DELETE CASCADE,
    pool          TEXT NOT NULL,
    key_sha256    TEXT NOT NULL,
    max_requeues  INTEGER NOT NULL,
    owner_worker  TEXT,
    owner_seen_at REAL NOT NULL,
    owner_ttl_s   REAL NOT NULL,
    published_at  TEXT NOT NULL
);
CREATE INDEX attempt_queues_pool ON attempt_queues (pool);
CREATE TABLE battle_attempts (
    battle_id     TEXT NOT NULL REFERENCES attempt_queues (battle_id) ON DELETE CASCADE,
    task_key      TEXT NOT NULL,
    attempt       INTEGER NOT NULL,
    position      INTEGER NOT NULL,
    payload       TEXT NOT NULL,
    state         TEXT NOT NULL CHECK (state IN ('available', 'leased', 'done', 'failed')),
    generation    INTEGER NOT NULL DEFAULT 0,
    leased_by     TEXT,
    lease_expires REAL,
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

SCHEMA_V6 = """
-- Pool members (issues 27 and 29): every lease and heartbeat call records its worker, under the SHA-256 of the pool
-- key it presented, with the store's clock (epoch seconds); green agents divide their per-provider caps by the
-- members seen recently. And the index a page of a battle's attempts reads by (battle_id, position).
CREATE TABLE pool_members (
    pool       TEXT NOT NULL,
    key_sha256 TEXT NOT NULL,
    worker_id  TEXT NOT NULL,
    last_seen  REAL NOT NULL,
    PRIMARY KEY (pool, key_sha256, worker_id)
);
CREATE INDEX pool_members_seen ON pool_members (last_seen);
CREATE INDEX battle_attempts_position ON battle_attempts (battle_id, position);
"""

MIGRATIONS: tuple[tuple[int, str], ...] = (
    (1, SCHEMA_V1),
    (2, SCHEMA_V2),
    (3, SCHEMA_V3),
    (4, SCHEMA_V4),
    (5, SCHEMA_V5),
    (6, SCHEMA_V6),
)
LATEST_VERSION = MIGRATIONS[-1][0]


def current_version(conn: sqlite3.Connection) -> int:
    """0 for a fresh file."""
    conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def migrate(conn: sqlite3.Connection) -> int:
    """Apply every pending migration, each in its own transaction; returns the version reached."""
    version = current_version(conn)
    if version > LATEST_VERSION:
        raise SchemaTooNew(
            f"database schema version {version} is newer than this backend understands ({LATEST_VERSION})"
        )
    for number, sql in MIGRATIONS:
        if number <= version:
            continue
        try:
            conn.executescript(
                f"BEGIN IMMEDIATE;\n{sql}\nINSERT INTO schema_version (version) VALUES ({number});\nCOMMIT;"
            )
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        version = number
    return version

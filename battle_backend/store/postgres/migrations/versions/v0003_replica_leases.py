"""Replicas' own lease times, and an event's ``received_at`` from the database's clock.

- ``replicas.lease_s``: each replica records the lease it renews (``--replica-lease``); a replica's battles are taken
  over when *its* lease ran out, so replicas started with different settings never take each other's live battles.
- ``arena_append_event`` without the client's ``received_at``: the function stamps the event with the database's
  clock while it holds the battle's row lock, so within a battle ``received_at`` follows the sequence numbers, whichever
  replica received each event (client clocks, and the time an event waited in a replica's queue, no longer show).
  The format is the backend's (ISO 8601, microseconds, ``Z``).

Revision ID: v0003
Revises: v0002
"""

from __future__ import annotations

from alembic import op

revision = "v0003"
down_revision = "v0002"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE replicas ADD COLUMN lease_s DOUBLE PRECISION NOT NULL DEFAULT 15;
DROP FUNCTION arena_append_event(TEXT, TEXT, TEXT, TEXT, BYTEA, BOOLEAN, TEXT);
CREATE FUNCTION arena_append_event(
    p_battle_id TEXT,
    p_payload TEXT,
    p_event_id TEXT,
    p_token_sha256 BYTEA,
    p_enforce_token BOOLEAN,
    p_origin TEXT
) RETURNS TABLE (r_outcome TEXT, r_seq INTEGER, r_payload TEXT, r_received_at TEXT, r_state TEXT)
LANGUAGE plpgsql AS $$
DECLARE
    b RECORD;
    e RECORD;
    received TEXT;
BEGIN
    SELECT bt.state, bt.battle_token, bt.last_seq INTO b FROM battles bt WHERE bt.battle_id = p_battle_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::TEXT, NULL::INTEGER, NULL::TEXT, NULL::TEXT, NULL::TEXT;
        RETURN;
    END IF;
    IF p_token_sha256 IS NOT NULL THEN
        IF b.battle_token IS NULL OR b.battle_token = ''
           OR sha256(convert_to(b.battle_token, 'UTF8')) <> p_token_sha256 THEN
            RETURN QUERY SELECT 'token_wrong'::TEXT, NULL::INTEGER, NULL::TEXT, NULL::TEXT, b.state;
            RETURN;
        END IF;
    ELSIF p_enforce_token THEN
        RETURN QUERY SELECT 'token_missing'::TEXT, NULL::INTEGER, NULL::TEXT, NULL::TEXT, b.state;
        RETURN;
    END IF;
    IF p_event_id IS NOT NULL THEN
        SELECT ev.seq, ev.payload, ev.received_at INTO e
          FROM battle_events ev WHERE ev.battle_id = p_battle_id AND ev.event_id = p_event_id;
        IF FOUND THEN
            RETURN QUERY SELECT 'duplicate'::TEXT, e.seq, e.payload, e.received_at, b.state;
            RETURN;
        END IF;
    END IF;
    IF b.state IN ('finished', 'error') THEN
        RETURN QUERY SELECT 'closed'::TEXT, NULL::INTEGER, NULL::TEXT, NULL::TEXT, b.state;
        RETURN;
    END IF;
    received := to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"');
    UPDATE battles SET last_seq = b.last_seq + 1 WHERE battle_id = p_battle_id;
    INSERT INTO battle_events (battle_id, seq, payload, received_at, event_id)
        VALUES (p_battle_id, b.last_seq + 1, p_payload, received, p_event_id);
    PERFORM pg_notify(
        'arena_changes',
        json_build_object('o', p_origin, 'k', 'battle', 'id', p_battle_id, 's', NULL)::TEXT
    );
    RETURN QUERY SELECT 'stored'::TEXT, b.last_seq + 1, NULL::TEXT, received, b.state;
END
$$;
"""


def upgrade() -> None:
    """Add the column, replace the function."""
    op.execute(UPGRADE)


def downgrade() -> None:
    """Back to v0002's function and a replicas table without lease times."""
    from battle_backend.store.postgres.migrations.versions.v0002_append_function import UPGRADE as V0002_FUNCTION

    op.execute("DROP FUNCTION arena_append_event(TEXT, TEXT, TEXT, BYTEA, BOOLEAN, TEXT)")
    op.execute(V0002_FUNCTION)
    op.execute("ALTER TABLE replicas DROP COLUMN lease_s")

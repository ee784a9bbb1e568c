"""Verified and unverified events: two separate idempotency-key spaces.

- ``battle_events.verified``: TRUE for an event posted with the battle's token (the green agent), written by the
  backend itself or imported by the operator; FALSE for one posted without the token (anyone may post those unless
  ``--require-token``). Events stored before this revision keep counting as they did (TRUE): which of them came
  with a token was not recorded.
- The unique key is ``(battle_id, verified, event_id)``: a tokenless poster who posts first under a key the green
  agent will use can no longer make the green agent's event (or its result) a "duplicate" that is dropped.
- ``arena_append_event`` looks a key up in the event's own space and stores the flag; ``p_trusted`` marks an event
  verified without a token (an import).

Revision ID: v0004
Revises: v0003
"""

from __future__ import annotations

from alembic import op

revision = "v0004"
down_revision = "v0003"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE battle_events ADD COLUMN verified BOOLEAN NOT NULL DEFAULT TRUE;
DROP INDEX battle_events_event_id;
CREATE UNIQUE INDEX battle_events_event_key ON battle_events (battle_id, verified, event_id)
    WHERE event_id IS NOT NULL;
DROP FUNCTION arena_append_event(TEXT, TEXT, TEXT, BYTEA, BOOLEAN, TEXT);
CREATE FUNCTION arena_append_event(
    p_battle_id TEXT,
    p_payload TEXT,
    p_event_id TEXT,
    p_token_sha256 BYTEA,
    p_enforce_token BOOLEAN,
    p_trusted BOOLEAN,
    p_origin TEXT
) RETURNS TABLE (
    r_outcome TEXT, r_seq INTEGER, r_payload TEXT, r_received_at TEXT, r_state TEXT, r_verified BOOLEAN
)
LANGUAGE plpgsql AS $$
DECLARE
    b RECORD;
    e RECORD;
    received TEXT;
    v BOOLEAN := p_trusted OR p_token_sha256 IS NOT NULL;
BEGIN
    SELECT bt.state, bt.battle_token, bt.last_seq INTO b FROM battles bt WHERE bt.battle_id = p_battle_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::TEXT, NULL::INTEGER, NULL::TEXT, NULL::TEXT, NULL::TEXT, v;
        RETURN;
    END IF;
    IF p_token_sha256 IS NOT NULL THEN
        IF b.battle_token IS NULL OR b.battle_token = ''
           OR sha256(convert_to(b.battle_token, 'UTF8')) <> p_token_sha256 THEN
            RETURN QUERY SELECT 'token_wrong'::TEXT, NULL::INTEGER, NULL::TEXT, NULL::TEXT, b.state, v;
            RETURN;
        END IF;
    ELSIF p_enforce_token THEN
        RETURN QUERY SELECT 'token_missing'::TEXT, NULL::INTEGER, NULL::TEXT, NULL::TEXT, b.state, v;
        RETURN;
    END IF;
    IF p_event_id IS NOT NULL THEN
        SELECT ev.seq, ev.payload, ev.received_at INTO e
          FROM battle_events ev WHERE ev.battle_id = p_battle_id AND ev.verified = v AND ev.event_id = p_event_id;
        IF FOUND THEN
            RETURN QUERY SELECT 'duplicate'::TEXT, e.seq, e.payload, e.received_at, b.state, v;
            RETURN;
        END IF;
    END IF;
    IF b.state IN ('finished', 'error') THEN
        RETURN QUERY SELECT 'closed'::TEXT, NULL::INTEGER, NULL::TEXT, NULL::TEXT, b.state, v;
        RETURN;
    END IF;
    received := to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"');
    UPDATE battles SET last_seq = b.last_seq + 1 WHERE battle_id = p_battle_id;
    INSERT INTO battle_events (battle_id, seq, payload, received_at, event_id, verified)
        VALUES (p_battle_id, b.last_seq + 1, p_payload, received, p_event_id, v);
    PERFORM pg_notify(
        'arena_changes',
        json_build_object('o', p_origin, 'k', 'battle', 'id', p_battle_id, 's', NULL)::TEXT
    );
    RETURN QUERY SELECT 'stored'::TEXT, b.last_seq + 1, NULL::TEXT, received, b.state, v;
END
$$;
"""


def upgrade() -> None:
    """Add the column and the two-space key, replace the function."""
    op.execute(UPGRADE)


def downgrade() -> None:
    """Back to v0003's function and one key space (fails while a battle holds one key in both spaces)."""
    from battle_backend.store.postgres.migrations.versions.v0003_replica_leases import UPGRADE as V0003

    function = V0003[V0003.index("CREATE FUNCTION") :]
    op.execute("DROP FUNCTION arena_append_event(TEXT, TEXT, TEXT, BYTEA, BOOLEAN, BOOLEAN, TEXT)")
    op.execute(function)
    op.execute("DROP INDEX battle_events_event_key")
    op.execute(
        "CREATE UNIQUE INDEX battle_events_event_id ON battle_events (battle_id, event_id) WHERE event_id IS NOT NULL"
    )
    op.execute("ALTER TABLE battle_events DROP COLUMN verified")

"""``arena_append_event``: one event appended in one round trip (lock, token, key, state, insert, notice).

Why a function: every event of a battle takes its turn on the battle's row lock, and with one statement per step
the lock is held across several round trips to a busy backend (measured: about 75% of the holder's time was spent
waiting for the client's next statement). Inside the database the checks and writes take microseconds. The rules
are those of ``BattleStore.append_event``, checked in the same order: unknown battle, token, idempotency key,
closed battle. Refusals are returned as an outcome, never raised, so that one refused event does not abort the
other events committed in the same transaction (``PostgresStore`` batches a battle's waiting events).

The token is compared as SHA-256 digests: the client sends the digest of the presented token, so a comparison that
stops at the first differing byte tells a guesser nothing about the token itself.

Revision ID: v0002
Revises: v0001
"""

from __future__ import annotations

from alembic import op

revision = "v0002"
down_revision = "v0001"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE FUNCTION arena_append_event(
    p_battle_id TEXT,
    p_payload TEXT,
    p_received_at TEXT,
    p_event_id TEXT,
    p_token_sha256 BYTEA,
    p_enforce_token BOOLEAN,
    p_origin TEXT
) RETURNS TABLE (r_outcome TEXT, r_seq INTEGER, r_payload TEXT, r_received_at TEXT, r_state TEXT)
LANGUAGE plpgsql AS $$
DECLARE
    b RECORD;
    e RECORD;
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
    UPDATE battles SET last_seq = b.last_seq + 1 WHERE battle_id = p_battle_id;
    INSERT INTO battle_events (battle_id, seq, payload, received_at, event_id)
        VALUES (p_battle_id, b.last_seq + 1, p_payload, p_received_at, p_event_id);
    PERFORM pg_notify(
        'arena_changes',
        json_build_object('o', p_origin, 'k', 'battle', 'id', p_battle_id, 's', NULL)::TEXT
    );
    RETURN QUERY SELECT 'stored'::TEXT, b.last_seq + 1, NULL::TEXT, NULL::TEXT, b.state;
END
$$;
"""


def upgrade() -> None:
    """Create the function."""
    op.execute(UPGRADE)


def downgrade() -> None:
    """Drop it (the store of revision v0001 appends with single statements)."""
    op.execute("DROP FUNCTION arena_append_event(TEXT, TEXT, TEXT, TEXT, BYTEA, BOOLEAN, TEXT)")

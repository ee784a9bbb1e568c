"""Pool members (issues 27 and 29) and the attempt page's index.

- ``pool_members``: every lease and heartbeat call records its worker under the SHA-256 of the pool key it
  presented, with the database's ``now()``; green agents divide their per-provider caps by the members seen within
  a window (``GET /pools/{pool}/members``).
- ``battle_attempts_position``: a page of a battle's attempts is read by (battle_id, position).

Revision ID: v0006
Revises: v0005
"""

from __future__ import annotations

from alembic import op

revision = "v0006"
down_revision = "v0005"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE pool_members (
    pool       TEXT NOT NULL,
    key_sha256 TEXT NOT NULL,
    worker_id  TEXT NOT NULL,
    last_seen  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (pool, key_sha256, worker_id)
);
CREATE INDEX pool_members_seen ON pool_members (last_seen);
CREATE INDEX battle_attempts_position ON battle_attempts (battle_id, position);
"""


def upgrade() -> None:
    """Create the table and the index."""
    op.execute(UPGRADE)


def downgrade() -> None:
    """Drop them (who was seen is forgotten; nothing else is lost)."""
    op.execute("DROP INDEX battle_attempts_position; DROP TABLE pool_members;")

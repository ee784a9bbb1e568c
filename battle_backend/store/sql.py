"""The SQL both stores run, written once: statements that differ between SQLite and PostgreSQL only in their
placeholder (``?`` / ``%s``) and in the column that keeps insertion order (``rowid`` / ``position``).

Why: the two stores must answer the same battle the same way (tests/battle_backend/store/test_store_contract.py);
a statement written twice drifts. Where the databases really differ (locking with ``FOR UPDATE``, ``ON CONFLICT``,
``ANY(%s)``, boolean columns), each store keeps its own text.
"""

from __future__ import annotations

from dataclasses import dataclass

from battle_backend.store.rows import BATTLE_COLUMNS


@dataclass(frozen=True)
class Dialect:
    """How one database spells what the shared statements leave open."""

    mark: str
    """The parameter placeholder."""
    order: str
    """The column that keeps insertion order."""

    def __call__(self, template: str) -> str:
        """``template`` (written with ``?`` placeholders and ``{order}``) in this dialect."""
        return template.replace("?", self.mark).replace("{order}", self.order)


SQLITE = Dialect(mark="?", order="rowid")
POSTGRES = Dialect(mark="%s", order="position")

AGENT_BY_ID = "SELECT * FROM agents WHERE agent_id = ?"
SET_AGENT_READY = "UPDATE agents SET ready = ? WHERE agent_id = ?"
DELETE_AGENT_HISTORY = "DELETE FROM agent_battle_history WHERE agent_id = ?"
DELETE_AGENT = "DELETE FROM agents WHERE agent_id = ?"
INSERT_BATTLE = (
    "INSERT INTO battles"
    " (battle_id, green_agent_id, opponents, config, state, created_at, backend_url, green_pool, owner)"
    " VALUES (?, ?, ?, ?, 'queued', ?, ?, ?, ?)"
)
BATTLE_BY_ID = f"SELECT {BATTLE_COLUMNS} FROM battles WHERE battle_id = ?"
ALL_BATTLES = f"SELECT {BATTLE_COLUMNS} FROM battles ORDER BY {{order}}"
BATTLE_IDS_IN_STATE = "SELECT battle_id FROM battles WHERE state = ? ORDER BY {order}"

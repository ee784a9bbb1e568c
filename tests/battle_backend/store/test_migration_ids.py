"""The Alembic revisions keep the ids a database migrated by any earlier layout holds in ``alembic_version``.

The scripts moved from ``battle_backend/pg_migrations`` to ``battle_backend/store/postgres/migrations``; Alembic
finds a database's place by revision id only, so the ids (and their order) must never change with a move.
"""

from __future__ import annotations

from pathlib import Path

from alembic.script import ScriptDirectory

from battle_backend.store.postgres.schema import alembic_config

RELEASED = ["v0001", "v0002", "v0003", "v0004"]
"""Every revision a released backend may have written, oldest first."""


def test_released_revision_ids_are_unchanged_and_in_order() -> None:
    scripts = ScriptDirectory.from_config(alembic_config())
    chain = [rev.revision for rev in reversed(list(scripts.walk_revisions()))]
    assert chain[: len(RELEASED)] == RELEASED


def test_the_scripts_live_beside_the_postgres_store() -> None:
    scripts = ScriptDirectory.from_config(alembic_config())
    here = Path(__file__).resolve().parents[3] / "battle_backend" / "store" / "postgres" / "migrations"
    assert Path(scripts.dir).resolve() == here

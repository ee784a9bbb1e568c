"""The PostgreSQL schema: Alembic migrations (``battle_backend/store/postgres/migrations``) applied on start.

Why Alembic: replicas of several versions may meet one database; a real migration history (revision ids, a head,
``alembic_version``) says exactly what a database holds and refuses what it does not know, where hand-written version
checks drift. Why an advisory lock: replicas started together would otherwise race to create the same tables; the
first takes the lock and migrates, the others wait and then find nothing to do.

This runs synchronously (Alembic is synchronous): :class:`~battle_backend.store.postgres.store.PostgresStore` calls it
in a worker thread, never on the event loop.
"""

from __future__ import annotations

import threading

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from battle_backend.store.protocol import SchemaTooNew

_ALEMBIC_LOCK = threading.Lock()
"""Alembic keeps the running migration in module globals (``alembic.context``, ``alembic.op``): two stores migrating
two databases at once in one process would run each other's DDL. This lock guards that library global, nothing of
ours; the advisory lock below serialises replicas (processes) on one database."""

MIGRATION_LOCK_KEY = 0x4152454E41  # "ARENA": any constant that other users of the database are unlikely to take
"""The advisory lock id held while migrating."""


def alembic_config() -> Config:
    """Alembic's configuration, built in code (no ini file): the scripts are the ``migrations`` package here."""
    config = Config()
    config.set_main_option("script_location", "battle_backend.store.postgres:migrations")
    return config


def head_revision() -> str:
    """The newest revision this code knows."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def sqlalchemy_url(url: str) -> str:
    """``postgresql://...`` as SQLAlchemy's psycopg 3 dialect wants it (``postgresql+psycopg://...``)."""
    parsed = make_url(url)
    return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)


def migrate(url: str) -> str:
    """Bring the database at ``url`` to the head revision under the advisory lock; returns the revision reached.
    Raises SchemaTooNew when the database holds a revision this code does not know."""
    with _ALEMBIC_LOCK:
        return _migrate(url)


def _migrate(url: str) -> str:
    config = alembic_config()
    scripts = ScriptDirectory.from_config(config)
    engine = create_engine(sqlalchemy_url(url), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
            conn.commit()  # a session-level advisory lock outlives the transaction that took it
            try:
                current = MigrationContext.configure(conn).get_current_revision()
                conn.commit()
                if current is not None and current not in {script.revision for script in scripts.walk_revisions()}:
                    raise SchemaTooNew(
                        f"database schema revision {current!r} is newer than this backend understands "
                        f"(its newest is {scripts.get_current_head()!r})"
                    )
                config.attributes["connection"] = conn
                command.upgrade(config, "head")
                conn.commit()
                reached = MigrationContext.configure(conn).get_current_revision()
                conn.commit()
            finally:
                conn.rollback()
                conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK_KEY})
                conn.commit()
    finally:
        engine.dispose()
    assert reached is not None
    return reached

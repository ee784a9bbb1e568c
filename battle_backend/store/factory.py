"""Which store a backend uses, chosen by what ``--db`` names: a SQLite file (the embedded default) or a PostgreSQL
URL (a database server that several replicas share)."""

from __future__ import annotations

from pathlib import Path

from battle_backend.settings import BackendSettings
from battle_backend.store.postgres.store import PostgresStore, is_postgres_url
from battle_backend.store.protocol import BattleStore
from battle_backend.store.sqlite.store import SQLiteStore

SQLITE_URL_PREFIX = "sqlite:///"


def parse_db(value: str) -> tuple[Path | None, str | None]:
    """``--db`` as (SQLite path, PostgreSQL URL), exactly one of them set: ``postgresql://...`` / ``postgres://...``
    is a URL; ``sqlite:///path`` and anything else a file path."""
    value = value.strip()
    if not value:
        raise ValueError("--db is empty: give a SQLite file path or a postgresql:// URL")
    if is_postgres_url(value):
        return None, value
    if value.startswith(SQLITE_URL_PREFIX):
        value = value[len(SQLITE_URL_PREFIX) :]
        if not value:
            raise ValueError("--db sqlite:/// needs a file path after it")
        return Path(value), None  # sqlite:///rel/path is relative, sqlite:////abs/path absolute
    if "://" in value:
        raise ValueError(f"--db {value.split('://')[0]}:// is not supported: give a SQLite path or a postgresql:// URL")
    return Path(value), None


def make_store(settings: BackendSettings) -> BattleStore:
    """A store for the settings (not opened yet)."""
    if settings.db_url is not None:
        return PostgresStore(
            settings.db_url,
            # a few connections open from the start: a first burst of posters need not wait for new ones (each
            # costs tens of milliseconds to establish)
            pool_min=min(4, settings.db_pool_size),
            pool_max=settings.db_pool_size,
            lease_s=settings.replica_lease_s,
            wait_s=settings.db_wait_s,
        )
    return SQLiteStore(settings.db_path, synchronous=settings.sqlite_synchronous)

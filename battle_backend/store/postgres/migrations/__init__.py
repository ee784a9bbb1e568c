"""Alembic's migration scripts for the PostgreSQL store (applied by :mod:`battle_backend.store.postgres.schema`).

Add a migration as a new file in ``versions/`` whose ``down_revision`` is the current head; never edit an applied
one. The SQLite store keeps its own numbered migrations (:mod:`battle_backend.store.sqlite.schema`).
"""

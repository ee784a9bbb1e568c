"""Alembic's environment: run the migrations on the connection :mod:`battle_backend.store.postgres.schema` hands over.

That caller holds the advisory lock that serialises replicas starting together, so this file opens nothing itself
and never reads an ini file or the environment.
"""

from __future__ import annotations

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=None, transactional_ddl=True)
with context.begin_transaction():
    context.run_migrations()

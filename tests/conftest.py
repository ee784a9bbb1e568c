"""Fixtures for the whole suite: a real PostgreSQL server the run starts and stops itself (tests/support/postgres.py).

``postgres_bin``: Debian's server binaries' directory.
``postgres_server``: one server per session (Debian's binaries, durability off), stopped at session end.
``postgres_url``: a fresh, uniquely named database on it per test, dropped afterwards.

Without Debian's server binaries (``apt-get install postgresql``) these tests are skipped, except in CI (``CI`` set),
where .ci/run installs them and their absence is a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.postgres import PG_LIB, PostgresServer, find_postgres_bin


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


if os.environ.get("ARENA_LOOP", "").strip().lower() == "uvloop":
    # CI's second run (.ci/run): in-process async tests run on uvloop too (green agents started as processes read
    # the same variable). Defined only then: by default pytest-asyncio's own loop is used, unchanged.

    def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, Any]:
        import uvloop

        return {"uvloop": uvloop.new_event_loop}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that uses the server carries the ``postgres`` marker (``-m "not postgres"`` leaves them out)."""
    for item in items:
        if "postgres_bin" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.postgres)


@pytest.fixture(scope="session")
def postgres_bin() -> Path:
    """Debian's PostgreSQL bin directory (the newest version). Skips without it, or fails in CI."""
    bin_dir = find_postgres_bin()
    if bin_dir is None:
        where = os.environ.get("ARENA_PG_BIN") or f"{PG_LIB}/<version>/bin"
        reason = (
            f"PostgreSQL server binaries not found (no initdb, postgres and pg_ctl in {where}; "
            "apt-get install postgresql, or set ARENA_PG_BIN)"
        )
        if _in_ci():
            pytest.fail(f"CI must install Debian's postgresql package (.ci/run does): {reason}", pytrace=False)
        pytest.skip(reason)
    return bin_dir


@pytest.fixture(scope="session")
def postgres_server(postgres_bin: Path) -> Iterator[PostgresServer]:
    """A started server (``fast=True``: no fsync; ``max_connections=200``) shared by the session."""
    server = PostgresServer(fast=True, max_connections=200, bin_dir=postgres_bin)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """``postgresql://arena@127.0.0.1:<port>/<fresh database>``; the database is dropped (WITH FORCE) afterwards."""
    url = postgres_server.create_database()
    try:
        yield url
    finally:
        postgres_server.drop_database(url.rsplit("/", 1)[1])

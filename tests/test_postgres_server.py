"""The throwaway PostgreSQL server (tests/support/postgres.py) and its fixtures (tests/conftest.py): it starts,
answers, gives each test its own database, and leaves nothing behind when stopped: no process, no port, no files."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import psycopg
import pytest
from psycopg.rows import TupleRow

from tests.support.postgres import PostgresError, PostgresServer, find_postgres_bin

pytestmark = pytest.mark.postgres

REPO = Path(__file__).resolve().parents[1]


def _port_refuses(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        try:
            sock.connect(("127.0.0.1", port))
        except ConnectionRefusedError:
            return True
        return False


def _processes_in(data_dir: Path) -> list[psutil.Process]:
    """Live processes working in ``data_dir`` (the postmaster and every backend chdir there), deleted or not."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.cwd().startswith(str(data_dir)) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _table_names(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
    return {row[0] for row in rows}


def test_session_server_answers(postgres_server: PostgresServer) -> None:
    assert postgres_server.url == f"postgresql://arena@127.0.0.1:{postgres_server.port}/postgres"
    with psycopg.connect(postgres_server.url) as conn:
        version, user, fsync, max_connections, listen = (
            conn.execute(
                "SELECT version(), current_user, current_setting('fsync'), current_setting('max_connections'),"
                " current_setting('listen_addresses')"
            ).fetchone()
            or ()
        )
    assert str(version).startswith("PostgreSQL ")
    assert (user, fsync, max_connections, listen) == ("arena", "off", "200", "127.0.0.1")
    # As root the server runs as Debian's postgres user (it refuses root); otherwise as us.
    expected_user = "postgres" if os.geteuid() == 0 else psutil.Process().username()
    assert postgres_server.pid is not None
    assert psutil.Process(postgres_server.pid).username() == expected_user


def test_postgres_url_is_a_fresh_database(postgres_server: PostgresServer, postgres_url: str) -> None:
    assert postgres_url.startswith(f"postgresql://arena@127.0.0.1:{postgres_server.port}/arena_")
    assert _table_names(postgres_url) == set()
    other_url = postgres_server.create_database()
    try:
        assert other_url != postgres_url
        # Both open at once; a table in one is not in the other.
        with psycopg.connect(postgres_url) as first, psycopg.connect(other_url) as second:
            first.execute("CREATE TABLE only_here (x int)")
            first.execute("INSERT INTO only_here VALUES (1)")
            first.commit()
            second.execute("CREATE TABLE only_there (y text)")
            second.commit()
        assert _table_names(postgres_url) == {"only_here"}
        assert _table_names(other_url) == {"only_there"}
    finally:
        postgres_server.drop_database(other_url.rsplit("/", 1)[1])
    with psycopg.connect(postgres_server.url) as conn:
        names = {row[0] for row in conn.execute("SELECT datname FROM pg_database").fetchall()}
    assert other_url.rsplit("/", 1)[1] not in names
    assert postgres_url.rsplit("/", 1)[1] in names


_seen_urls: list[str] = []


@pytest.mark.parametrize("turn", [1, 2])
def test_each_test_gets_its_own_database(turn: int, postgres_server: PostgresServer, postgres_url: str) -> None:
    """The second turn sees a new, empty database, and the first turn's database dropped."""
    assert _table_names(postgres_url) == set()
    with psycopg.connect(postgres_url) as conn:
        conn.execute("CREATE TABLE left_behind (turn int)")
        conn.execute("INSERT INTO left_behind VALUES (%s)", (turn,))
    with psycopg.connect(postgres_server.url) as conn:
        names = {row[0] for row in conn.execute("SELECT datname FROM pg_database").fetchall()}
    for earlier in _seen_urls:
        assert earlier != postgres_url
        assert earlier.rsplit("/", 1)[1] not in names
    _seen_urls.append(postgres_url)


def test_drop_database_ends_open_connections(postgres_server: PostgresServer) -> None:
    url = postgres_server.create_database()
    conn = psycopg.connect(url)
    try:
        conn.execute("SELECT 1")
        postgres_server.drop_database(url.rsplit("/", 1)[1])
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
    finally:
        conn.close()


def test_stop_leaves_no_process_port_or_files(postgres_bin: Path) -> None:
    server = PostgresServer(bin_dir=postgres_bin, fast=True)
    server.start()
    client: psycopg.Connection[TupleRow] | None = None
    try:
        pid, port, data_dir = server.pid, server.port, server.data_dir
        assert pid is not None
        assert (data_dir / "PG_VERSION").is_file()
        # A client still connected does not hold up the (fast) shutdown.
        client = psycopg.connect(server.url, autocommit=True)
        row = client.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        backend_pid = int(row[0])
        server_pids = {proc.pid for proc in _processes_in(data_dir)}
        assert {pid, backend_pid} < server_pids  # and the checkpointer, the WAL writer, ...

        server.stop()

        assert not psutil.pid_exists(pid)
        assert _processes_in(data_dir) == []
        assert not any(psutil.pid_exists(server_pid) for server_pid in server_pids)
        assert _port_refuses(port)
        assert not data_dir.parent.exists()
        assert server.pid is None
        with pytest.raises(psycopg.OperationalError):
            client.execute("SELECT 1")
        server.stop()  # idempotent
        with pytest.raises(PostgresError):
            _ = server.url
    finally:
        if client is not None:
            client.close()
        server.stop()


def test_context_manager_and_restart(postgres_bin: Path) -> None:
    server = PostgresServer(bin_dir=postgres_bin, fast=False)
    for _ in range(2):  # stopped servers can be started again, on a fresh cluster
        with server as running:
            with psycopg.connect(running.url) as conn:
                assert conn.execute("SHOW fsync").fetchone() == ("on",)
            data_dir = running.data_dir
        assert not data_dir.exists()
        assert server.pid is None


def test_a_forgotten_server_is_stopped_at_exit(postgres_bin: Path) -> None:
    """A script (a benchmark, say) that never calls stop(): the server is gone when its interpreter exits."""
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from tests.support.postgres import PostgresServer
        server = PostgresServer(bin_dir=Path({str(postgres_bin)!r}))
        server.start()
        print(server.pid, server.port, server.data_dir, flush=True)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False, cwd="/"
    )
    assert result.returncode == 0, result.stderr
    pid_text, port_text, data_dir_text = result.stdout.split()
    assert _processes_in(Path(data_dir_text)) == []
    assert not psutil.pid_exists(int(pid_text))
    assert _port_refuses(int(port_text))
    assert not Path(data_dir_text).exists()


def test_a_server_that_cannot_start_reports_its_log_and_cleans_up(postgres_bin: Path) -> None:
    server = PostgresServer(bin_dir=postgres_bin, settings={"max_connections": "lots"})
    with pytest.raises(PostgresError, match="max_connections") as failure:
        server.start()
    assert "exited with code" in str(failure.value)
    assert server.pid is None and server.log_path is None


def test_missing_binaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARENA_PG_BIN", str(tmp_path))
    assert find_postgres_bin() is None
    server = PostgresServer()
    with pytest.raises(PostgresError, match="binaries not found"):
        server.start()
    server.stop()


def test_database_names_are_checked(postgres_server: PostgresServer) -> None:
    with pytest.raises(ValueError, match="database name"):
        postgres_server.create_database('x"; DROP DATABASE postgres; --')
    with pytest.raises(ValueError, match="database name"):
        postgres_server.drop_database("Upper")

"""A throwaway PostgreSQL server for tests and benchmarks: Debian's server binaries (``/usr/lib/postgresql/<ver>/bin``,
from the ``postgresql`` package; CI installs it in .ci/run), a fresh cluster in a temporary directory, one postmaster
on 127.0.0.1 and a free port, stopped and deleted on exit.

No pytest here: benchmark scripts import this module too (the fixtures are in tests/conftest.py).

As root, ``initdb`` and ``postgres`` refuse to run, so they run as Debian's ``postgres`` system user (the temporary
directory is handed to that user); as any other user they run as that user. The postmaster is our direct child, in a
session of its own, so :meth:`PostgresServer.stop` can always end it and the processes under it, and it is also
told to shut down if the process that started it dies (``setpriv --pdeathsig``). A server the caller forgets to stop
is stopped at interpreter exit (``atexit``).

Usage::

    with PostgresServer(fast=True) as server:
        url = server.create_database()  # postgresql://arena@127.0.0.1:<port>/<new database>
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import psutil
import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from launcher.ports import LOOPBACK, free_port

PG_LIB = Path("/usr/lib/postgresql")
"""Where Debian's ``postgresql-<ver>`` packages put each version's ``bin`` directory."""

REQUIRED_BINARIES = ("initdb", "postgres", "pg_ctl")
SUPERUSER = "arena"
SYSTEM_USER = "postgres"
"""The system user Debian's package creates; the server runs as this user when we are root."""

FAST_SETTINGS: Mapping[str, str] = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
"""Durability off (``fast=True``): for tests only, whose data dies with the server anyway. Benchmarks measure the
server as deployed and keep the defaults."""

Setting = str | int | float | bool

_NOT_READY_YET = ("starting up", "not yet accepting connections", "shutting down")
"""Connection refusals (English: initdb --locale=C) that readiness polling waits out; any other FATAL ends it."""

_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class PostgresError(RuntimeError):
    """The server could not be set up, started or stopped (the message carries the relevant log)."""


def find_postgres_bin() -> Path | None:
    """The newest ``/usr/lib/postgresql/<ver>/bin`` holding initdb, postgres and pg_ctl, or None.

    ``ARENA_PG_BIN`` names another bin directory (for example a self-built server); it must hold the same three.
    """
    override = os.environ.get("ARENA_PG_BIN")
    if override:
        path = Path(override)
        return path if _has_binaries(path) else None
    candidates: list[tuple[int, Path]] = []
    with contextlib.suppress(OSError):
        for entry in PG_LIB.iterdir():
            if entry.name.isdigit() and _has_binaries(entry / "bin"):
                candidates.append((int(entry.name), entry / "bin"))
    return max(candidates)[1] if candidates else None


def _has_binaries(bin_dir: Path) -> bool:
    return all(os.access(bin_dir / name, os.X_OK) for name in REQUIRED_BINARIES)


def _setting_text(value: Setting) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


class PostgresServer:
    """One PostgreSQL cluster and postmaster, from :meth:`start` to :meth:`stop` (or a ``with`` block).

    ``fast=True`` turns durability off (:data:`FAST_SETTINGS`); ``settings`` are further ``postgres -c name=value``
    options and win over both ``fast`` and ``max_connections``.
    """

    def __init__(
        self,
        *,
        fast: bool = False,
        max_connections: int = 100,
        settings: Mapping[str, Setting] | None = None,
        bin_dir: Path | None = None,
        start_timeout_s: float = 60.0,
        stop_timeout_s: float = 30.0,
    ) -> None:
        self.fast = fast
        self.settings: dict[str, str] = {"max_connections": str(max_connections)}
        if fast:
            self.settings.update(FAST_SETTINGS)
        self.settings.update({name: _setting_text(value) for name, value in (settings or {}).items()})
        self._bin_dir = bin_dir
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.host = LOOPBACK
        self.user = SUPERUSER
        self._port: int | None = None
        self._base: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._owner_pid: int | None = None
        self._lock = threading.Lock()

    # --- lifecycle -------------------------------------------------------------------------------------------------

    def __enter__(self) -> PostgresServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        """initdb into a fresh temporary directory, start the postmaster, wait until it accepts connections."""
        with self._lock:
            if self._proc is not None:
                raise PostgresError("this PostgresServer is already started")
            bin_dir = self._bin_dir or find_postgres_bin()
            if bin_dir is None or not _has_binaries(bin_dir):
                raise PostgresError(
                    f"PostgreSQL server binaries not found (no {PG_LIB}/<version>/bin with "
                    f"{', '.join(REQUIRED_BINARIES)}; apt-get install postgresql, or set ARENA_PG_BIN)"
                )
            self._bin_dir = bin_dir
            self._owner_pid = os.getpid()
            # Registered before anything can be left behind: whatever start() leaves is removed at exit.
            atexit.register(self.stop)
            try:
                self._base = self._make_base_dir()
                self._initdb()
                self._start_postmaster()
            except BaseException:
                self._stop_locked()
                raise

    def stop(self) -> None:
        """Fast shutdown (clients are disconnected), immediate shutdown then SIGKILL if it takes longer than
        ``stop_timeout_s``; then the temporary directory is deleted. Idempotent; a no-op in a forked child."""
        with self._lock:
            self._stop_locked()

    def _stop_locked(self) -> None:
        if self._owner_pid is not None and self._owner_pid != os.getpid():
            return  # a forked child: the server belongs to the parent
        proc, self._proc = self._proc, None
        if proc is not None:
            _stop_process(proc, self.stop_timeout_s)
        base, self._base = self._base, None
        if base is not None:
            shutil.rmtree(base, ignore_errors=True)
        self._port = None
        atexit.unregister(self.stop)

    # --- connection details ----------------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None or self._proc is None:
            raise PostgresError("the server is not running")
        return self._port

    @property
    def url(self) -> str:
        """The ``postgres`` maintenance database as the superuser: ``postgresql://arena@127.0.0.1:<port>/postgres``."""
        return self.database_url("postgres")

    def database_url(self, name: str) -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{name}"

    @property
    def pid(self) -> int | None:
        """The postmaster's process id while running."""
        return self._proc.pid if self._proc is not None else None

    @property
    def data_dir(self) -> Path:
        if self._base is None:
            raise PostgresError("the server is not running")
        return self._base / "data"

    @property
    def log_path(self) -> Path | None:
        return self._base / "postgres.log" if self._base is not None else None

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of initdb's and the server's output (for error messages)."""
        path = self.log_path
        if path is None:
            return ""
        try:
            text = path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def connect(self, dbname: str = "postgres") -> psycopg.Connection[TupleRow]:
        """A new autocommit connection (the caller closes it, e.g. ``with server.connect() as conn``)."""
        return psycopg.connect(self.database_url(dbname), autocommit=True, connect_timeout=10)

    # --- databases -------------------------------------------------------------------------------------------------

    def create_database(self, name: str | None = None) -> str:
        """``CREATE DATABASE`` (a fresh name unless given); returns its URL."""
        name = name or f"arena_{uuid.uuid4().hex[:16]}"
        _check_identifier(name)
        with self.connect() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.database_url(name)

    def drop_database(self, name: str) -> None:
        """``DROP DATABASE IF EXISTS ... WITH (FORCE)``: open connections to it are terminated first."""
        _check_identifier(name)
        with self.connect() as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    # --- internals -------------------------------------------------------------------------------------------------

    def _run_as_server_user(self) -> bool:
        return os.geteuid() == 0

    def _make_base_dir(self) -> Path:
        base = Path(tempfile.mkdtemp(prefix="arena-pg-"))
        if self._run_as_server_user():
            try:
                account = pwd.getpwnam(SYSTEM_USER)
            except KeyError:
                shutil.rmtree(base, ignore_errors=True)
                raise PostgresError(
                    f"running as root, but there is no {SYSTEM_USER!r} system user to run the server as "
                    "(Debian's postgresql package creates it)"
                ) from None
            os.chown(base, account.pw_uid, account.pw_gid)
        (base / "postgres.log").touch()
        return base

    def _command(self, argv: list[str], *, pdeathsig: bool) -> list[str]:
        """``argv`` as the server user when we are root, and with a parent-death signal when asked (SIGINT, a fast
        shutdown, if the process that started it dies). ``setpriv`` execs in place: the pid stays the postmaster's."""
        wrapper: list[str] = []
        if self._run_as_server_user():
            wrapper += ["--reuid", SYSTEM_USER, "--regid", SYSTEM_USER, "--init-groups"]
        # The kernel sends the signal when the *thread* that started the child ends, so only from the main thread.
        if pdeathsig and threading.current_thread() is threading.main_thread():
            wrapper += ["--pdeathsig", "INT"]
        if not wrapper:
            return argv
        setpriv = shutil.which("setpriv", path="/usr/bin:/bin:/usr/sbin:/sbin")
        if setpriv is None:
            if self._run_as_server_user():
                raise PostgresError("running as root needs util-linux's setpriv to run the server as 'postgres'")
            return argv
        return [setpriv, *wrapper, "--", *argv]

    def _env(self) -> dict[str, str]:
        # Our PG* variables (PGDATA, PGPORT, PGHOST, ...) must not steer initdb or the server.
        env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
        env["LC_ALL"] = "C"
        if self._run_as_server_user():
            env["HOME"] = pwd.getpwnam(SYSTEM_USER).pw_dir
            env["USER"] = env["LOGNAME"] = SYSTEM_USER
        return env

    def _initdb(self) -> None:
        assert self._base is not None and self._bin_dir is not None
        argv = [
            str(self._bin_dir / "initdb"),
            "--pgdata",
            str(self._base / "data"),
            "--username",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
            "--no-instructions",
        ]
        with (self._base / "postgres.log").open("ab") as log:
            result = subprocess.run(
                self._command(argv, pdeathsig=False),
                cwd=self._base,
                env=self._env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=max(self.start_timeout_s, 60.0),
                check=False,
            )
        if result.returncode != 0:
            hint = ""
            if self._run_as_server_user():
                hint = f" (it runs as {SYSTEM_USER!r}, which must be able to reach {self._base}: check TMPDIR)"
            raise PostgresError(f"initdb failed (exit {result.returncode}){hint}:\n{self.log_tail()}")

    def _start_postmaster(self) -> None:
        """Start on a free port; if another process took the port in between, try another (three times)."""
        for attempt in range(3):
            port = free_port()
            error = self._try_start(port)
            if error is None:
                return
            port_taken = "could not bind" in error or "already in use" in error
            if not port_taken or attempt == 2:
                raise PostgresError(error)

    def _try_start(self, port: int) -> str | None:
        """None once the server accepts connections on ``port``, else why not (with the log's tail)."""
        assert self._base is not None and self._bin_dir is not None
        settings = {"listen_addresses": self.host, "port": str(port), "unix_socket_directories": "", **self.settings}
        argv = [str(self._bin_dir / "postgres"), "-D", str(self._base / "data")]
        for name, value in settings.items():
            argv += ["-c", f"{name}={value}"]
        log_path = self._base / "postgres.log"
        log_start = log_path.stat().st_size
        with log_path.open("ab") as log:
            proc = subprocess.Popen(
                self._command(argv, pdeathsig=True),
                cwd=self._base,
                env=self._env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a terminal's Ctrl-C reaches only us; stop() then shuts the server down
            )
        self._proc, self._port = proc, port
        url = self.database_url("postgres")
        deadline = time.monotonic() + self.start_timeout_s
        last_error = ""
        while True:
            code = proc.poll()
            if code is not None:
                self._proc = None
                text = log_path.read_bytes()[log_start:].decode(errors="replace")
                return f"postgres exited with code {code} before accepting connections:\n{_tail(text)}"
            try:
                with psycopg.connect(url, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return None
            except psycopg.OperationalError as exc:
                last_error = str(exc).strip()
                if "FATAL" in last_error and not any(text in last_error for text in _NOT_READY_YET):
                    # The server answers but refuses us (a role or database missing, ...): waiting will not help.
                    _stop_process(proc, self.stop_timeout_s)
                    self._proc = None
                    return f"postgres refused the connection: {last_error}\n{self.log_tail()}"
            if time.monotonic() > deadline:
                _stop_process(proc, self.stop_timeout_s)
                self._proc = None
                return (
                    f"postgres did not accept connections on {self.host}:{port} within {self.start_timeout_s:.0f} s "
                    f"(last error: {last_error}):\n{self.log_tail()}"
                )
            time.sleep(0.02)


def _stop_process(proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Fast shutdown (SIGINT: the postmaster ends its backends, then itself); after ``timeout_s`` an immediate one
    (SIGQUIT); after as long again SIGKILL to the postmaster and every process under it. Reaps it.

    Backends call setsid(), so they are not in the postmaster's process group: they are found as its children."""
    if proc.poll() is not None:
        return  # already gone (and reaped); its backends exit on their own when they see the postmaster die
    for sig in (signal.SIGINT, signal.SIGQUIT):
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout_s)
            return
        except subprocess.TimeoutExpired:
            pass
    # Not reaped yet, so its pid cannot have been reused.
    try:
        victims = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        victims = []
    for victim in victims:
        with contextlib.suppress(psutil.NoSuchProcess):
            victim.kill()
    proc.wait()
    psutil.wait_procs(victims[1:], timeout=5)


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _check_identifier(name: str) -> None:
    if not _IDENTIFIER.fullmatch(name):
        raise ValueError(f"not a plain lower-case database name: {name!r}")

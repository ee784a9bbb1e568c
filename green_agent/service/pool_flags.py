"""``arena-green --pool NAME --pool-backend URL --pool-key-file PATH --pool-capacity N --pool-worker-id ID`` read into
:class:`~green_agent.service.pool_settings.PoolSettings` (issue 29), each bad value refused naming its flag.

The pool key is a shared secret: it is read once from a file (``--pool-key-file``: one trailing newline stripped; a
missing, empty, oversized or non-regular file refused) or from ``$ARENA_POOL_KEY``, never taken on the command line
(it would show in ``ps``) and never printed.
"""

from __future__ import annotations

import argparse
import os
import socket
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from pydantic import TypeAdapter

from green_agent.service.pool_member import MAX_CAPACITY
from green_agent.service.pool_settings import DEFAULT_CAPACITY, PoolSettings
from green_agent.wire.attempt_leases import MAX_ID_CHARS, Name

POOL_KEY_ENV: Final = "ARENA_POOL_KEY"
"""Environment variable holding the pool key (``--pool-key-file`` wins)."""
MAX_POOL_KEY_BYTES = 4096


_NAME: TypeAdapter[str] = TypeAdapter(Name)


def default_worker_id() -> str:
    """``<hostname>-<pid>``: unique per process on a machine, readable in the lease history."""
    host = "".join(c if c.isalnum() or c in "-_." else "-" for c in socket.gethostname())[:100] or "host"
    return f"{host}-{os.getpid()}"


def read_pool_key(path: Path | None, env: str | None, *, flag: str = "--pool-key-file") -> str:
    """The pool key from ``path`` (one trailing newline stripped) or else ``env``; ValueError naming
    ``flag`` (or the variable) when it is missing, empty, too large, not a regular file or not UTF-8 text."""
    if path is None:
        if not env:
            raise ValueError(f"{flag}: a pool needs its key ({flag} PATH or ${POOL_KEY_ENV})")
        return _checked_key(env.encode("utf-8", "surrogateescape"), POOL_KEY_ENV)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as error:
        raise ValueError(f"{flag}: cannot open {path}: {error.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{flag}: {path} is not a regular file")
        if info.st_size > MAX_POOL_KEY_BYTES + 1:
            raise ValueError(f"{flag}: {path} holds more than {MAX_POOL_KEY_BYTES} bytes")
        data = os.read(fd, MAX_POOL_KEY_BYTES + 2)
    except OSError as error:
        raise ValueError(f"{flag}: cannot read {path}: {error.strerror}") from None
    finally:
        os.close(fd)
    return _checked_key(data, flag)


def _checked_key(data: bytes, where: str) -> str:
    if data.endswith(b"\n"):
        data = data[:-1]
        if data.endswith(b"\r"):
            data = data[:-1]
    if len(data) > MAX_POOL_KEY_BYTES:
        raise ValueError(f"{where}: the pool key is longer than {MAX_POOL_KEY_BYTES} bytes")
    if not data.strip():
        raise ValueError(f"{where}: the pool key is empty")
    try:
        key = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{where}: the pool key is not UTF-8 text") from None
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in key):
        raise ValueError(f"{where}: the pool key holds control characters (it travels in an HTTP header)")
    return key


def pool_settings(
    *,
    name: str,
    backend_url: str | None,
    key_file: Path | None,
    key_env: str | None,
    capacity: int,
    worker_id: str | None,
) -> PoolSettings:
    """Check the ``--pool*`` flags together; :class:`ValueError` names the first bad one."""
    try:
        _NAME.validate_python(name)
    except ValueError:
        raise ValueError(f"--pool: 1 to {MAX_ID_CHARS} characters, no control characters") from None
    if not backend_url:
        raise ValueError("--pool-backend: required with --pool (the backend whose store holds the queue)")
    if not backend_url.startswith(("http://", "https://")) or len(backend_url) > 4096:
        raise ValueError("--pool-backend: an http:// or https:// URL")
    if not 1 <= capacity <= MAX_CAPACITY:
        raise ValueError(f"--pool-capacity: must be 1 to {MAX_CAPACITY}")
    worker = worker_id if worker_id is not None else default_worker_id()
    try:
        _NAME.validate_python(worker)  # the backend's rules for a worker id
    except ValueError:
        raise ValueError(f"--pool-worker-id: 1 to {MAX_ID_CHARS} characters without control characters") from None
    key = read_pool_key(key_file, key_env)
    return PoolSettings(name=name, backend_url=backend_url.rstrip("/"), key=key, worker_id=worker, capacity=capacity)


def add_pool_flags(parser: argparse.ArgumentParser) -> None:
    """``arena-green``'s pool flags (issue 29; docs/deploy.md)."""
    group = parser.add_argument_group("pool membership (one battle worked by several green agents)")
    group.add_argument(
        "--pool",
        default=None,
        metavar="NAME",
        help="join pool NAME: lease attempts of its battles from --pool-backend and run them beside the A2A server",
    )
    group.add_argument(
        "--pool-backend", default=None, metavar="URL", help="the battle backend whose store holds the pool's queue"
    )
    group.add_argument(
        "--pool-key-file",
        type=Path,
        default=None,
        metavar="PATH",
        help=f"file holding the pool key shared by the pool's green agents (default: ${POOL_KEY_ENV}); never logged",
    )
    group.add_argument(
        "--pool-capacity",
        type=int,
        default=None,
        metavar="N",
        help=f"attempts this member runs at once (1 to {MAX_CAPACITY}, default {DEFAULT_CAPACITY})",
    )
    group.add_argument(
        "--pool-worker-id",
        default=None,
        metavar="ID",
        help="this member's name in the lease history (default HOSTNAME-PID)",
    )


def pool_settings_from(args: argparse.Namespace, environ: Mapping[str, str]) -> PoolSettings | None:
    """The settings the parsed flags give (None without ``--pool``; a pool flag without it is refused, naming it)."""
    if args.pool is None:
        for flag, value in (
            ("--pool-backend", args.pool_backend),
            ("--pool-key-file", args.pool_key_file),
            ("--pool-worker-id", args.pool_worker_id),
            ("--pool-capacity", args.pool_capacity),
        ):
            if value is not None:
                raise ValueError(f"{flag}: only with --pool NAME")
        return None
    return pool_settings(
        name=args.pool,
        backend_url=args.pool_backend,
        key_file=args.pool_key_file,
        key_env=environ.get(POOL_KEY_ENV),
        capacity=DEFAULT_CAPACITY if args.pool_capacity is None else args.pool_capacity,
        worker_id=args.pool_worker_id,
    )

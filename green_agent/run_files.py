"""Reading a run directory as hostile input: regular files inside the directory only, sizes bounded before any parse.

Why: a run directory (``runs/<battle id>/``) is handed around: ``arena view``, ``arena export``, ``arena compare`` and
``--resume`` read directories that someone else may have written. Its files are input like any request body. A
trajectory that is a symlink to ``/dev/zero`` never ends, a FIFO blocks the reader forever, a symlink to a file
elsewhere would put that file on a page, and a 400 MB ``summary.json`` costs gigabytes to parse. So every reader
of a run directory opens its files through :func:`open_run_file` (or :func:`read_run_file`):

* the path is relative to the run directory, without ``..`` or an absolute part, and after resolving symlinks it
  must still lie inside the (resolved) run directory; symlinks that stay inside are followed;
* each directory on the way is opened relative to the previous one with ``O_NOFOLLOW`` and the file itself with
  ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO or a device cannot block the open), and the *opened* descriptor is checked
  with ``fstat``: a regular file, at most ``max_bytes`` long. A file swapped between the check and the open is
  caught by the second check;
* reading stops at ``max_bytes``: a file that grows past it while being read raises instead of being read on.

Every refusal is a :class:`RunFileRefused`, an ``OSError`` naming the file and the reason, so the readers' existing
``except OSError`` paths (a file that cannot be read) handle it. A missing file is ``FileNotFoundError`` as
before. All of this is blocking: async code calls it in a worker thread.
"""

from __future__ import annotations

import errno
import fcntl
import io
import os
import stat
from pathlib import Path, PurePath, PurePosixPath
from typing import BinaryIO, Final, Literal

__all__ = [
    "MAX_ATTEMPTS_FILE_BYTES",
    "MAX_EVENTS_FILE_BYTES",
    "MAX_MANIFEST_BYTES",
    "MAX_MARKDOWN_BYTES",
    "MAX_RECORD_BYTES",
    "MAX_SUMMARY_BYTES",
    "MAX_TRAJECTORY_FILE_BYTES",
    "RunFileRefused",
    "open_regular_file",
    "open_run_file",
    "read_run_file",
    "run_file_exists",
]

MiB: Final = 1024 * 1024
MAX_SUMMARY_BYTES: Final = 64 * MiB
"""summary.json (a battle of 2000 attempts with explanations is a few megabytes)."""
MAX_MANIFEST_BYTES: Final = 16 * MiB
"""run.json (the config and the task keys)."""
MAX_ATTEMPTS_FILE_BYTES: Final = 256 * MiB
"""attempts.jsonl (one line per attempt, retries appended; each line is also bounded by its reader)."""
MAX_EVENTS_FILE_BYTES: Final = 64 * MiB
"""events.jsonl (the battle's progress log)."""
MAX_TRAJECTORY_FILE_BYTES: Final = 64 * MiB
"""One attempt's trajectories/*.jsonl (lines are capped at 256 KiB when written)."""
MAX_MARKDOWN_BYTES: Final = 16 * MiB
"""summary.md."""
MAX_RECORD_BYTES: Final = 1 * MiB
"""Small records such as scenario.json (the scenario ``arena run`` started the battle with)."""

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


RefusalReason = Literal["outside", "not_regular", "too_large"]


class RunFileRefused(OSError):
    """A run-directory file that is not read: outside the directory, not a regular file, or too large
    (:attr:`reason`); the message names the file and why."""

    def __init__(self, message: str, reason: RefusalReason) -> None:
        super().__init__(message)
        self.reason: RefusalReason = reason


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def _check(st: os.stat_result, shown: str, max_bytes: int) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise RunFileRefused(f"{shown}: {_kind(st.st_mode)}, not a regular file: not read", "not_regular")
    if st.st_size > max_bytes:
        raise RunFileRefused(f"{shown}: {st.st_size} bytes, over the limit of {max_bytes}: not read", "too_large")


def _relative_parts(relative: str | PurePath) -> tuple[str, ...]:
    text = str(relative).replace("\\", "/")
    pure = PurePosixPath(text)
    parts = tuple(part for part in pure.parts if part not in ("", "."))
    if pure.is_absolute() or ".." in parts or not parts or "\x00" in text:
        raise RunFileRefused(f"{text!r}: leads outside the run directory: not read", "outside")
    return parts


class _BoundedRaw(io.RawIOBase):
    """An opened file descriptor that refuses to deliver more than ``limit`` bytes (a file growing while read)."""

    def __init__(self, fd: int, limit: int, shown: str) -> None:
        self._fd = fd
        self._left = limit
        self._limit = limit
        self._shown = shown

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        want = min(len(view), self._left + 1)
        if want == 0:
            return 0
        data = os.read(self._fd, want)
        if len(data) > self._left:
            raise RunFileRefused(f"{self._shown}: grew past the limit of {self._limit} bytes while read", "too_large")
        self._left -= len(data)
        view[: len(data)] = data
        return len(data)

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


def _wrap(fd: int, shown: str, max_bytes: int) -> BinaryIO:
    try:
        st = os.fstat(fd)
        _check(st, shown, max_bytes)  # the descriptor actually opened: no check-then-open race
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        raw = _BoundedRaw(fd, max_bytes, shown)
    except BaseException:
        os.close(fd)
        raise
    return io.BufferedReader(raw)


def open_run_file(run_dir: Path, relative: str | PurePath, *, max_bytes: int) -> BinaryIO:
    """``run_dir / relative`` opened for reading (binary), if it is a regular file of at most ``max_bytes`` inside
    ``run_dir``; :class:`RunFileRefused` otherwise, ``FileNotFoundError`` when it does not exist. Blocking."""
    parts = _relative_parts(relative)
    shown = str(run_dir.joinpath(*parts))
    root = os.path.realpath(run_dir)
    target = os.path.realpath(os.path.join(root, *parts))
    if os.path.commonpath([root, target]) != root or target == root:
        raise RunFileRefused(f"{shown}: leads outside the run directory: not read", "outside")
    inside = os.path.relpath(target, root).split(os.sep)
    dir_fd = os.open(root, _DIR_FLAGS & ~os.O_NOFOLLOW)  # the run directory itself may be reached by a symlink
    try:
        for name in inside[:-1]:
            try:
                next_fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError as error:
                if error.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise RunFileRefused(f"{shown}: {name} is not a directory inside the run", "outside") from None
                raise
            os.close(dir_fd)
            dir_fd = next_fd
        _check(os.stat(inside[-1], dir_fd=dir_fd, follow_symlinks=False), shown, max_bytes)
        try:
            fd = os.open(inside[-1], _FILE_FLAGS, dir_fd=dir_fd)
        except OSError as error:
            if error.errno == errno.ELOOP:  # swapped for a symlink since the check
                raise RunFileRefused(f"{shown}: a symbolic link, not a regular file: not read", "not_regular") from None
            raise
    finally:
        os.close(dir_fd)
    return _wrap(fd, shown, max_bytes)


def read_run_file(run_dir: Path, relative: str | PurePath, *, max_bytes: int) -> bytes:
    """The bytes of ``run_dir / relative`` under the rules of :func:`open_run_file`. Blocking."""
    with open_run_file(run_dir, relative, max_bytes=max_bytes) as handle:
        return handle.read()


def run_file_exists(run_dir: Path, relative: str | PurePath) -> bool:
    """Whether ``run_dir / relative`` names something (a file, a link, anything; without following a final link):
    for messages and "is there one at all" decisions only; reading goes through :func:`open_run_file`."""
    try:
        os.lstat(run_dir.joinpath(*_relative_parts(relative)))
    except (OSError, ValueError):
        return False
    return True


def open_regular_file(path: Path, *, max_bytes: int) -> BinaryIO:
    """A single file named by its user (``arena export FILE``): opened with ``O_NONBLOCK`` and checked with ``fstat``
    (a regular file of at most ``max_bytes``; symlinks followed, the user chose the path). Blocking."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    return _wrap(fd, str(path), max_bytes)

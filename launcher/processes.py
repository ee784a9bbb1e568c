"""Child-process supervision: start agents, wait until they answer, stop them without leaving anything behind.

Why this exists: ``arena run`` and the launcher servers start A2A servers as subprocesses. A child that never comes up
must fail fast with its exit code and the end of its stderr (not a bare timeout), and every child, including the
workers it forks itself, must be gone when we return: on success, on errors, on Ctrl-C and on SIGTERM.

How:
- each child gets its own session (hence its own process group), so Ctrl-C in the terminal reaches only us and we
  decide the shutdown order, and stopping the group also reaches the child's own children (e.g. process pools);
- on Linux the child also asks the kernel to send it SIGTERM when its parent dies (``PR_SET_PDEATHSIG``), the last
  line of defence when we are killed with SIGKILL;
- stdout/stderr go to log files (never into our terminal, where the rich display lives);
- stopping is SIGTERM to the group, a grace period, then SIGKILL to the group.

Call :func:`start_process` from a long-lived thread (the event loop's thread): the kernel's parent-death signal fires
when the *thread* that forked the child exits.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

import httpx
import psutil

logger = logging.getLogger(__name__)

DEFAULT_GRACE_S = 5.0
"""Seconds a child gets to exit after SIGTERM before SIGKILL."""

_PR_SET_PDEATHSIG = 1
_POLL_S = 0.05


class ProcessError(RuntimeError):
    """Base class for supervision failures; the message is meant for the user."""


class ChildExitedError(ProcessError):
    """A child exited when it should have been running (before it was ready, or during the battle)."""

    def __init__(self, name: str, returncode: int, stderr_tail: str, log_path: Path | None, when: str) -> None:
        self.name = name
        self.returncode = returncode
        self.stderr_tail = stderr_tail
        self.log_path = log_path
        self.when = when
        super().__init__(self._compose())

    def _compose(self) -> str:
        lines = [f"{self.name} {describe_returncode(self.returncode)} {self.when}"]
        if self.stderr_tail:
            lines.append(f"last lines of its stderr ({self.log_path}):")
            lines.extend(f"  | {line}" for line in self.stderr_tail.splitlines())
        elif self.log_path is not None:
            lines.append(f"(its stderr log {self.log_path} is empty)")
        return "\n".join(lines)


class StartupTimeoutError(ProcessError):
    """A child kept running but never answered its readiness URL before the deadline."""

    def __init__(self, name: str, url: str, timeout_s: float, stderr_tail: str, log_path: Path | None) -> None:
        self.name = name
        self.url = url
        self.timeout_s = timeout_s
        self.stderr_tail = stderr_tail
        self.log_path = log_path
        message = f"{name} did not answer {url} within {timeout_s:g} s"
        if stderr_tail:
            message += f"\nlast lines of its stderr ({log_path}):\n" + "\n".join(
                f"  | {line}" for line in stderr_tail.splitlines()
            )
        super().__init__(message)


def describe_returncode(returncode: int) -> str:
    """``exited with code 3`` or ``was killed by signal SIGKILL`` (Popen reports signals as negative codes)."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        return f"was killed by signal {name}"
    return f"exited with code {returncode}"


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()
"""libc's prctl, resolved once before any fork (the pre-exec hook must not load libraries)."""


def _die_with_parent_hook(parent_pid: int) -> Callable[[], None] | None:
    prctl = _PRCTL
    if prctl is None:
        return None

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent_pid:  # the parent died between fork and prctl
            os.kill(os.getpid(), signal.SIGTERM)

    return hook


def tail_text(path: Path | None, max_lines: int = 20, max_bytes: int = 16_384) -> str:
    """The last lines of a (log) file, decoded leniently; empty when missing."""
    if path is None:
        return ""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            data = handle.read()
    except OSError:
        return ""
    lines = data.decode("utf-8", errors="replace").splitlines()
    return "\n".join(lines[-max_lines:]).strip("\n")


@dataclass
class ManagedProcess:
    """A started child and where its output goes."""

    name: str
    argv: list[str]
    popen: subprocess.Popen[bytes]
    stdout_path: Path
    stderr_path: Path
    started_at: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        """None while running (polls, and reaps the child once it has exited)."""
        return self.popen.poll()

    @property
    def running(self) -> bool:
        return self.returncode is None

    def stderr_tail(self, max_lines: int = 20) -> str:
        return tail_text(self.stderr_path, max_lines)

    def exited_error(self, when: str) -> ChildExitedError:
        """The error describing this child's exit (call once :attr:`returncode` is not None)."""
        returncode = self.returncode
        assert returncode is not None, "exited_error() called on a running process"
        return ChildExitedError(self.name, returncode, self.stderr_tail(), self.stderr_path, when)


def start_process(
    name: str,
    argv: Sequence[str],
    *,
    log_dir: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    die_with_parent: bool = True,
) -> ManagedProcess:
    """Start ``argv`` in its own session with output to ``log_dir/<name>.{stdout,stderr}.log`` (appended).

    ``env`` replaces the inherited environment when given (API keys reach children only through the environment,
    never through ``argv``). ``PYTHONUNBUFFERED=1`` is added so logs are current when we show their tail.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    stdout_path = log_dir / f"{name}.stdout.log"
    stderr_path = log_dir / f"{name}.stderr.log"
    child_env = dict(os.environ if env is None else env)
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    hook = _die_with_parent_hook(os.getpid()) if die_with_parent else None
    with stdout_path.open("ab") as out, stderr_path.open("ab") as err:
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=child_env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=hook,
        )
    logger.debug("started %s (pid %d): %s", name, popen.pid, " ".join(argv))
    return ManagedProcess(name=name, argv=list(argv), popen=popen, stdout_path=stdout_path, stderr_path=stderr_path)


def _signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to a process group; False when the group no longer exists."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - only if the pid was reused by someone else's process
        return False
    return True


def _group_alive(pgid: int) -> bool:
    """True while any process of the group is still running. Signal 0 says whether the group has members at all;
    zombies count there, and a child's helpers (multiprocessing's resource tracker and fork server) are zombies
    once they exited, until whichever process they were handed to reaps them, which a container's init may take
    seconds to do. A dead process holds nothing, so the group is alive only while a member is not a zombie."""
    if not _signal_group(pgid, 0):
        return False
    for process in psutil.process_iter(["status"]):
        with contextlib.suppress(psutil.Error, OSError):  # it may exit meanwhile
            if process.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(process.pid) == pgid:
                return True
    return False


def _stop_steps(proc: ManagedProcess, grace_s: float) -> tuple[int, float]:
    """Send SIGTERM to the group; return (pgid, deadline)."""
    pgid = proc.pid  # start_new_session=True: the child leads its own group
    if proc.running:
        _signal_group(pgid, signal.SIGTERM)
    elif _group_alive(pgid):
        # The leader is gone but something it started is still in the group: ask it to leave too.
        _signal_group(pgid, signal.SIGTERM)
    return pgid, time.monotonic() + grace_s


def _finish_stop(proc: ManagedProcess, pgid: int) -> int | None:
    _signal_group(pgid, signal.SIGKILL)
    try:
        return proc.popen.wait(timeout=5.0)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored; uninterruptible sleep only
        logger.warning("%s (pid %d) did not die after SIGKILL", proc.name, proc.pid)
        return None


async def stop_process(proc: ManagedProcess, grace_s: float = DEFAULT_GRACE_S) -> int | None:
    """SIGTERM the child's process group, wait up to ``grace_s``, then SIGKILL the group. Returns the exit code.

    Idempotent: stopping an exited child only sweeps its group.
    """
    pgid, deadline = _stop_steps(proc, grace_s)
    while time.monotonic() < deadline and (proc.running or _group_alive(pgid)):
        await asyncio.sleep(_POLL_S)
    if proc.running:
        logger.info("%s (pid %d) ignored SIGTERM for %.1f s; sending SIGKILL", proc.name, proc.pid, grace_s)
    return _finish_stop(proc, pgid)


def stop_process_sync(proc: ManagedProcess, grace_s: float = DEFAULT_GRACE_S) -> int | None:
    """Blocking :func:`stop_process` for places without an event loop (atexit, signal fallbacks)."""
    pgid, deadline = _stop_steps(proc, grace_s)
    while time.monotonic() < deadline and (proc.running or _group_alive(pgid)):
        time.sleep(_POLL_S)
    return _finish_stop(proc, pgid)


def _no_proxy_client(timeout_s: float) -> httpx.AsyncClient:
    # Loopback health checks must never go through an HTTP proxy configured in the environment.
    return httpx.AsyncClient(timeout=timeout_s, trust_env=False)


async def wait_until_ready(
    proc: ManagedProcess,
    url: str,
    *,
    timeout_s: float = 60.0,
    interval_s: float = 0.1,
) -> None:
    """Poll ``url`` until it answers 200, while checking the child is still alive.

    Raises :class:`ChildExitedError` (exit code + stderr tail) as soon as the child exits, and
    :class:`StartupTimeoutError` at the deadline.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    async with _no_proxy_client(timeout_s=min(5.0, max(0.5, timeout_s))) as client:
        while True:
            if not proc.running:
                raise proc.exited_error("before it was ready")
            try:
                response = await client.get(url)
                if response.status_code == 200:
                    logger.debug("%s is ready at %s", proc.name, url)
                    return
            except httpx.TransportError:
                pass
            if loop.time() >= deadline:
                if not proc.running:
                    raise proc.exited_error("before it was ready")
                raise StartupTimeoutError(proc.name, url, timeout_s, proc.stderr_tail(), proc.stderr_path)
            await asyncio.sleep(interval_s)


async def url_answers(url: str, timeout_s: float = 2.0) -> bool:
    """True when ``url`` answers 200 right now."""
    async with _no_proxy_client(timeout_s) as client:
        try:
            return (await client.get(url)).status_code == 200
        except httpx.TransportError:
            return False


class ProcessGroup:
    """Async context manager owning the children of one run: everything it started is stopped on exit.

    Exit paths covered: normal exit, exceptions, cancellation (Ctrl-C under ``asyncio.run`` cancels the main task),
    SIGTERM/SIGHUP (turned into a cancellation of the task that entered the group, recorded in
    :attr:`received_signal`), and interpreter exit (an ``atexit`` hook stops leftovers synchronously, e.g. after a
    second Ctrl-C interrupted the asynchronous shutdown).
    """

    def __init__(self, log_dir: Path, *, grace_s: float = DEFAULT_GRACE_S, handle_signals: bool = True) -> None:
        self.log_dir = log_dir
        self.grace_s = grace_s
        self.handle_signals = handle_signals
        self.received_signal: signal.Signals | None = None
        self._processes: list[ManagedProcess] = []
        self._installed: list[tuple[signal.Signals, object]] = []
        self._owner: asyncio.Task[object] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def processes(self) -> list[ManagedProcess]:
        return list(self._processes)

    async def __aenter__(self) -> Self:
        self._loop = asyncio.get_running_loop()
        self._owner = asyncio.current_task()
        atexit.register(self._atexit_cleanup)
        if self.handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGHUP):
                previous = signal.getsignal(sig)
                try:
                    self._loop.add_signal_handler(sig, self._on_signal, sig)
                except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover - non-Unix loops
                    continue
                self._installed.append((sig, previous))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            # Shielded so that a cancellation arriving mid-shutdown does not abandon half-stopped children.
            await asyncio.shield(self.stop_all())
        finally:
            self._restore_signals()
            if not self._processes:  # otherwise the atexit hook still has work to do
                atexit.unregister(self._atexit_cleanup)

    def _on_signal(self, sig: signal.Signals) -> None:
        logger.info("received %s; stopping", sig.name)
        if self.received_signal is None:
            self.received_signal = sig
            if self._owner is not None and not self._owner.done():
                self._owner.cancel(f"received {sig.name}")

    def _restore_signals(self) -> None:
        if self._loop is None:
            return
        for sig, previous in self._installed:
            with contextlib.suppress(Exception):
                self._loop.remove_signal_handler(sig)
                if callable(previous) or previous in (signal.SIG_DFL, signal.SIG_IGN):
                    signal.signal(sig, previous)  # type: ignore[arg-type]
        self._installed.clear()

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> ManagedProcess:
        """Start a child (see :func:`start_process`) and take ownership of it."""
        proc = start_process(name, argv, log_dir=self.log_dir, env=env, cwd=cwd)
        self._processes.append(proc)
        return proc

    async def start_and_wait(
        self,
        name: str,
        argv: Sequence[str],
        ready_url: str,
        *,
        timeout_s: float = 60.0,
        env: Mapping[str, str] | None = None,
    ) -> ManagedProcess:
        """Start a child and wait until ``ready_url`` answers (see :func:`wait_until_ready`)."""
        proc = self.start(name, argv, env=env)
        await wait_until_ready(proc, ready_url, timeout_s=timeout_s)
        return proc

    def check_alive(self) -> None:
        """Raise :class:`ChildExitedError` if any owned child has exited."""
        for proc in self._processes:
            if not proc.running:
                raise proc.exited_error("while the battle was running")

    async def watch(self, interval_s: float = 0.2) -> None:
        """Return never; raise :class:`ChildExitedError` once any owned child exits (run it beside the work)."""
        while True:
            self.check_alive()
            await asyncio.sleep(interval_s)

    async def stop(self, proc: ManagedProcess) -> int | None:
        """Stop one owned child (it stays owned until it is really gone)."""
        returncode = await stop_process(proc, self.grace_s)
        if proc in self._processes:
            self._processes.remove(proc)
        return returncode

    async def stop_all(self) -> None:
        """Stop every owned child, concurrently."""
        procs = list(reversed(self._processes))
        if procs:
            await asyncio.gather(*(self.stop(p) for p in procs), return_exceptions=True)

    def _atexit_cleanup(self) -> None:
        for proc in list(self._processes):
            with contextlib.suppress(Exception):
                stop_process_sync(proc, grace_s=min(self.grace_s, 2.0))
        self._processes.clear()

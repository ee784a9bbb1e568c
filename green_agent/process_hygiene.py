"""Child processes that never outlive the green agent.

Why: the green agent starts worker processes (tau2 scoring workers, tool sandboxes forked from a fork server). If
the green agent is killed with SIGKILL it cannot stop them, and a worker busy in C code (a hostile tool call) would
run on as an orphan. On Linux the kernel can deliver a signal to a process when its parent dies
(``prctl(PR_SET_PDEATHSIG)``); elsewhere a watchdog thread notices the re-parenting within a second (best effort:
it cannot interrupt C code that holds the GIL).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import signal
import sys
import threading
import time

_PR_SET_PDEATHSIG = 1


@functools.cache
def _libc() -> ctypes.CDLL:
    """libc, looked up once per process: ``find_library`` runs ldconfig (~5 ms), and every sandbox and worker
    forked from a process that already looked it up inherits the answer."""
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def die_with_parent(*, watchdog_interval_s: float = 1.0) -> None:
    """Make this process exit when its parent exits (call first thing in a child process)."""
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent or parent == 1:  # the parent died before the signal was armed
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(watchdog_interval_s)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()

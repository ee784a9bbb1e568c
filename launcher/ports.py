"""Free loopback ports for the agents ``arena run`` starts.

Why a helper: every agent and launcher binds its own port, and tests run side by side on one machine, so fixed
ports (9006, 9004, ...) would collide. The kernel hands out an unused ephemeral port when we bind port 0; we release it
and pass the number to the child. A small race (another process grabbing it in between) remains; the supervisor's
readiness wait reports the child's bind error if that ever happens.
"""

from __future__ import annotations

import socket
from contextlib import ExitStack
from urllib.parse import urlsplit

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """One currently unused TCP port on ``host``."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """``count`` distinct unused TCP ports on ``host``.

    All sockets stay open until every port is chosen, so the kernel cannot hand out the same port twice.
    """
    if count < 1:
        raise ValueError("count must be >= 1")
    with ExitStack() as stack:
        ports: list[int] = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(sock.getsockname()[1])
        return ports


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    """Whether ``port`` on ``host`` can be bound now (as uvicorn binds it: a port in TIME_WAIT is free). Blocking:
    call it in a worker thread from async code."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def loopback_url(port: int, host: str = LOOPBACK) -> str:
    """``http://host:port`` without a trailing slash (the form agent cards and ``--card-url`` use)."""
    return f"http://{host}:{port}"


LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
"""Host names that always mean this machine (what ``arena run`` starts, and what may be opened without a warning)."""


def is_loopback_url(url: str) -> bool:
    """Whether ``url`` points at this machine by one of :data:`LOOPBACK_HOSTS`."""
    return (urlsplit(url).hostname or "") in LOOPBACK_HOSTS

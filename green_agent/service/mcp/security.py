"""HTTP-level protections shared by the control endpoint (/mcp/) and the attempt endpoints (/mcp-attempts/...).

Why a module: both endpoints must apply the same Host/Origin checks (DNS-rebinding protection stays on, only the
allowed names change for containers), and both are built from mcp's ``MCPServer``/``Server``, whose constructor
raises the root logger to INFO and installs a handler; :func:`keep_root_logging` undoes that so the green agent
stays quiet unless asked otherwise.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from urllib.parse import urlsplit

from mcp.server.transport_security import TransportSecuritySettings

DEFAULT_ALLOWED_HOSTS: tuple[str, ...] = ("127.0.0.1:*", "localhost:*", "[::1]:*")
"""Host header values accepted when nothing else is configured: loopback on any port."""


def host_of(url: str) -> str | None:
    """The ``host:port`` a client puts in the Host header when it calls ``url`` (port omitted if the URL has none)."""
    parts = urlsplit(url)
    if not parts.hostname:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{host}:{parts.port}" if parts.port else host


def transport_security(allowed_hosts: Sequence[str] | None, public_url: str | None) -> TransportSecuritySettings:
    """DNS-rebinding protection: loopback, the configured hosts, and the host of ``public_url`` (what we announce).

    ``allowed_hosts`` entries are Host header values added to the loopback defaults: ``name:port``, ``name:*`` (any
    port) or a bare ``name`` (requests without a port, e.g. behind a proxy on port 80). Loopback names stay allowed:
    a rebinding attack arrives with the attacker's host name, never with these. Origins are derived from the hosts
    (http and https), so a browser-based client on an allowed host works too; clients that send no Origin header
    are not affected.
    """
    hosts = list(DEFAULT_ALLOWED_HOSTS)
    public_host = host_of(public_url) if public_url else None
    for host in [*(allowed_hosts or ()), *([public_host] if public_host else [])]:
        if host not in hosts:
            hosts.append(host)
    origins = [f"{scheme}://{host}" for host in hosts for scheme in ("http", "https")]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


@contextlib.contextmanager
def keep_root_logging() -> Iterator[None]:
    """Restore the root logger's level and handlers after the block (mcp's MCPServer() reconfigures them)."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        yield
    finally:
        root.setLevel(level)
        root.handlers[:] = handlers

"""httpcore's connection pool with its bookkeeping in linear time: what a battle's A2A pool needs at hundreds of
attempts in flight (issue 27).

Why: on every request that starts or ends, httpcore 1.0's pool walks its connections to drop closed, expired and
surplus idle ones, and for each idle connection counts every connection again (a list built to take its length):
quadratic in the connections. With a worker's 128 attempts in flight that bookkeeping was a fifth of the worker's
CPU (py-spy, benchmarks/bench_latency_hiding.py at 2 s / 256). :class:`LinearPool` makes the same decisions in one
pass: the count is the connections not yet dropped, as the stock loop's ``len`` sees it after its removals
(tests/green_agent/engine/test_http_pool.py runs both on the same pools). Requests, errors and everything else are
httpcore's own.

The same loop asks every idle connection whether its socket became readable (the server closed it): through anyio,
each answer built the stream's whole attribute table, with a ``getpeername`` call, to find the socket (a tenth of a
worker's CPU after the fix above). :class:`_SocketCachingBackend` keeps each stream's socket from its connect and
answers with httpcore's own ``is_socket_readable`` on it: the same function on the same socket.

:func:`linear_pool` puts both under an ``httpx.AsyncHTTPTransport`` when its pool is the stock one of a version whose
code this mirrors (1.0.x); otherwise the transport keeps its own.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx
from httpcore._async.interfaces import AsyncConnectionInterface
from httpcore._utils import is_socket_readable

COPIED_FROM = "1.0."
"""The httpcore versions whose ``_assign_requests_to_connections`` this mirrors."""


class LinearPool(httpcore.AsyncConnectionPool):
    """``httpcore.AsyncConnectionPool`` with ``_assign_requests_to_connections`` in O(connections + queued x
    connections) instead of O(connections^2); the same connections dropped, closed and assigned."""

    def _assign_requests_to_connections(self) -> list[AsyncConnectionInterface]:
        closing_connections: list[AsyncConnectionInterface] = []
        kept: list[AsyncConnectionInterface] = []
        remaining = len(self._connections)  # what the stock loop's len() sees: all, less those removed so far
        for connection in self._connections:
            if connection.is_closed():
                remaining -= 1
            elif connection.has_expired() or (connection.is_idle() and remaining > self._max_keepalive_connections):
                remaining -= 1  # expired, or idle beyond the keep-alive bound: closed
                closing_connections.append(connection)
            else:
                kept.append(connection)
        self._connections = kept

        # Queued requests, as httpcore assigns them (copied: reuse an available connection, else open one while
        # under max_connections, else replace an idle one).
        queued_requests = [request for request in self._requests if request.is_queued()]
        for pool_request in queued_requests:
            origin = pool_request.request.url.origin
            available = next(
                (c for c in self._connections if c.can_handle_request(origin) and c.is_available()),
                None,
            )
            if available is not None:
                pool_request.assign_to_connection(available)
            elif len(self._connections) < self._max_connections:
                connection = self.create_connection(origin)
                self._connections.append(connection)
                pool_request.assign_to_connection(connection)
            else:
                idle = next((c for c in self._connections if c.is_idle()), None)
                if idle is not None:
                    self._connections.remove(idle)
                    closing_connections.append(idle)
                    connection = self.create_connection(origin)
                    self._connections.append(connection)
                    pool_request.assign_to_connection(connection)
        return closing_connections


class _SocketCachingStream(httpcore.AsyncNetworkStream):
    """A network stream answering ``is_readable`` from the socket it had when opened (everything else: its own)."""

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner
        self._socket: socket.socket | None = inner.get_extra_info("socket")

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        return _SocketCachingStream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable" and self._socket is not None:
            return is_socket_readable(self._socket)
        return self._inner.get_extra_info(info)


class _SocketCachingBackend(httpcore.AsyncNetworkBackend):
    """The pool's network backend, its streams wrapped in :class:`_SocketCachingStream`."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend) -> None:
        self._inner = inner

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return _SocketCachingStream(stream)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        return _SocketCachingStream(await self._inner.connect_unix_socket(path, timeout, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def linear_pool(transport: httpx.AsyncHTTPTransport) -> httpx.AsyncHTTPTransport:
    """``transport`` with its pool's bookkeeping linear (see the module's docstring); unchanged when its pool is not
    the stock ``AsyncConnectionPool`` of httpcore 1.0.x (a proxy, another version)."""
    pool = getattr(transport, "_pool", None)
    if type(pool) is httpcore.AsyncConnectionPool and httpcore.__version__.startswith(COPIED_FROM):
        pool.__class__ = LinearPool
        pool._network_backend = _SocketCachingBackend(pool._network_backend)
    return transport

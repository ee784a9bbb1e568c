"""httpcore's connection pool with its bookkeeping in linear time: what a battle's A2A pool needs at hundreds of
attempts in flight (issue 27).

Why: on every request that starts or ends, httpcore 1.0's pool walks its connections to drop closed, expired and
surplus idle ones, and for each idle connection counts every connection again (a list built to take its length):
quadratic in the connections. With a worker's 128 attempts in flight that bookkeeping was a fifth of the worker's
CPU (py-spy, benchmarks/bench_latency_hiding.py at 2 s / 256). :class:`LinearPool` makes the same decisions in one
pass: the count is the connections not yet dropped, as the stock loop's ``len`` sees it after its removals
(tests/green_agent/engine/test_http_pool.py runs both on the same pools). Requests, errors and everything else are
httpcore's own.

:func:`linear_pool` puts it under an ``httpx.AsyncHTTPTransport`` when its pool is the stock one of a version whose
loop this copies (1.0.x); otherwise the transport keeps its own.
"""

from __future__ import annotations

import httpcore
import httpx
from httpcore._async.interfaces import AsyncConnectionInterface

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


def linear_pool(transport: httpx.AsyncHTTPTransport) -> httpx.AsyncHTTPTransport:
    """``transport`` with its pool's bookkeeping linear (see the module's docstring); unchanged when its pool is not
    the stock ``AsyncConnectionPool`` of httpcore 1.0.x (a proxy, another version)."""
    pool = getattr(transport, "_pool", None)
    if type(pool) is httpcore.AsyncConnectionPool and httpcore.__version__.startswith(COPIED_FROM):
        pool.__class__ = LinearPool
    return transport

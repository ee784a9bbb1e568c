"""green_agent/engine/http_pool.py: the linear pool drops, closes and assigns exactly what httpcore's own does."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx
import pytest

from green_agent.engine.capped_transport import capped_http_client
from green_agent.engine.http_pool import LinearPool, _SocketCachingBackend, linear_pool
from launcher.ports import free_port

ORIGIN = httpcore.URL("http://127.0.0.1:9/").origin
OTHER = httpcore.URL("http://127.0.0.1:10/").origin


@dataclass(eq=False)
class Connection:
    """A connection as the pool's bookkeeping sees it."""

    name: str
    origin: Any
    closed: bool = False
    expired: bool = False
    idle: bool = False
    available: bool = False

    def is_closed(self) -> bool:
        return self.closed

    def has_expired(self) -> bool:
        return self.expired

    def is_idle(self) -> bool:
        return self.idle

    def is_available(self) -> bool:
        return self.available

    def can_handle_request(self, origin: Any) -> bool:
        return bool(origin == self.origin)


@dataclass(eq=False)
class Request:
    name: str
    origin: Any
    queued: bool = True
    assigned: str | None = None

    @property
    def request(self) -> Any:
        return type("R", (), {"url": type("U", (), {"origin": self.origin})()})()

    def is_queued(self) -> bool:
        return self.queued

    def assign_to_connection(self, connection: Any) -> None:
        self.assigned = connection.name
        self.queued = False


def _pool(cls: type[httpcore.AsyncConnectionPool], state: dict[str, Any]) -> tuple[Any, list[Request]]:
    pool: Any = cls(max_connections=state["max_connections"], max_keepalive_connections=state["max_keepalive"])
    pool._connections = [Connection(**c) for c in state["connections"]]
    requests = [Request(**r) for r in state["requests"]]
    pool._requests = requests
    created = iter(range(10_000))
    pool.create_connection = lambda origin: Connection(f"new-{next(created)}", origin)
    return pool, requests


def _random_state(rng: random.Random) -> dict[str, Any]:
    connections = [
        {
            "name": f"c{i}",
            "origin": rng.choice([ORIGIN, OTHER]),
            "closed": rng.random() < 0.1,
            "expired": rng.random() < 0.1,
            "idle": (idle := rng.random() < 0.4),
            "available": idle or rng.random() < 0.1,
        }
        for i in range(rng.randrange(0, 40))
    ]
    requests = [
        {"name": f"r{i}", "origin": rng.choice([ORIGIN, OTHER]), "queued": rng.random() < 0.7}
        for i in range(rng.randrange(0, 12))
    ]
    return {
        "max_connections": rng.randrange(1, 45),
        "max_keepalive": rng.randrange(0, 45),
        "connections": connections,
        "requests": requests,
    }


def _outcome(pool: Any, requests: list[Request]) -> tuple[list[str], list[str], list[str | None]]:
    closing = [c.name for c in pool._assign_requests_to_connections()]
    return closing, [c.name for c in pool._connections], [r.assigned for r in requests]


@pytest.mark.parametrize("seed", range(300))
def test_the_linear_pool_decides_as_httpcore_does(seed: int) -> None:
    state = _random_state(random.Random(seed))
    stock = _outcome(*_pool(httpcore.AsyncConnectionPool, state))
    linear = _outcome(*_pool(LinearPool, state))
    assert linear == stock


def test_many_idle_connections_cost_linear_bookkeeping() -> None:
    """The stock pool asks every connection is_idle() once per idle connection; the linear one once."""
    calls = {"n": 0}

    class Counted(Connection):
        def is_idle(self) -> bool:
            calls["n"] += 1
            return self.idle

    state = {"max_connections": 500, "max_keepalive": 500, "connections": [], "requests": []}
    for cls in (httpcore.AsyncConnectionPool, LinearPool):
        pool, _ = _pool(cls, state)
        pool._connections = [Counted(f"c{i}", ORIGIN, idle=True, available=True) for i in range(200)]
        calls["n"] = 0
        pool._assign_requests_to_connections()
        assert len(pool._connections) == 200
        if cls is LinearPool:
            assert calls["n"] == 200
        else:
            assert calls["n"] > 200 * 200  # what the linear pool avoids (fails if httpcore fixes it: drop the module)


def test_the_battle_client_uses_it_and_other_transports_are_left_alone() -> None:
    client = capped_http_client(max_bytes=1024, max_connections=8)
    inner = client._transport._inner  # type: ignore[attr-defined]
    assert type(inner._pool) is LinearPool
    assert isinstance(inner._pool._network_backend, _SocketCachingBackend)
    proxied = httpx.AsyncHTTPTransport(proxy="http://127.0.0.1:9")
    assert type(linear_pool(proxied)._pool) is not LinearPool


def test_readability_is_answered_as_httpcore_answers_it() -> None:
    """The caching stream says a socket is readable exactly when httpcore's own stream does: idle, with bytes from
    the server, after the server closed, after closing it ourselves."""

    async def main() -> None:
        accepted: asyncio.Queue[asyncio.StreamWriter] = asyncio.Queue()

        async def handler(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await accepted.put(writer)

        port = free_port()
        server = await asyncio.start_server(handler, "127.0.0.1", port)
        stock_backend = httpcore.AnyIOBackend()
        caching = _SocketCachingBackend(httpcore.AnyIOBackend())
        stock = await stock_backend.connect_tcp("127.0.0.1", port)
        cached = await caching.connect_tcp("127.0.0.1", port)
        peers = [await accepted.get(), await accepted.get()]

        def both(info: str) -> tuple[object, object]:
            return stock.get_extra_info(info), cached.get_extra_info(info)

        assert both("is_readable") == (False, False)
        assert both("server_addr")[0] == both("server_addr")[1] == ("127.0.0.1", port)
        for peer in peers:
            peer.write(b"x")
            await peer.drain()
        await asyncio.wait_for(cached.read(1), 5)  # both now hold one byte each...
        await asyncio.wait_for(stock.read(1), 5)
        for peer in peers:
            peer.close()
            await peer.wait_closed()
        assert both("is_readable") == (True, True)  # ...and the server's close
        await stock.aclose()
        await cached.aclose()
        assert both("is_readable") == (True, True)
        server.close()
        await server.wait_closed()

    asyncio.run(main())


def test_a_connection_the_server_closed_is_not_reused() -> None:
    """What the readability check is for: a kept-alive connection the server closed meanwhile is dropped, and the
    next request goes over a new one instead of failing."""

    async def main() -> None:
        closed = asyncio.Event()
        connections = 0

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal connections
            connections += 1
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()
            writer.close()  # without "connection: close": the client keeps it, then finds it readable (EOF)
            await writer.wait_closed()
            closed.set()

        port = free_port()
        server = await asyncio.start_server(handler, "127.0.0.1", port)
        async with capped_http_client(max_bytes=1024, max_connections=4) as http:
            assert (await http.get(f"http://127.0.0.1:{port}/")).text == "ok"
            await closed.wait()
            assert (await http.get(f"http://127.0.0.1:{port}/")).text == "ok"
        assert connections == 2
        server.close()
        await server.wait_closed()

    asyncio.run(main())

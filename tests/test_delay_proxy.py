"""benchmarks/delay_proxy.py (the delay proxy of bench_latency_hiding and the pool battle tests): every POST waits
the delay, bodies travel intact both ways (Content-Length and chunked), headers are forwarded with the upstream's
Host, and a dead upstream is a 502."""

from __future__ import annotations

import asyncio
import importlib.util
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from launcher.ports import free_ports

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "delay_proxy.py"
_SPEC = importlib.util.spec_from_file_location("delay_proxy", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
delay_proxy: Any = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(delay_proxy)


async def _upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Echoes a request's body (Content-Length) with its Host and X-Probe headers; /chunked answers chunked."""
    try:
        while True:
            first, headers = await delay_proxy.read_head(reader)
            body = await delay_proxy.read_body(reader, headers, to_eof=False)
            seen = b"host=" + (delay_proxy.header(headers, b"host") or b"") + b";probe="
            seen += delay_proxy.header(headers, b"x-probe") or b""
            if b" /chunked " in first:
                writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nx-seen: " + seen + b"\r\n\r\n")
                for part in (body[:10], body[10:5000], body[5000:]):
                    if part:
                        writer.write(b"%x\r\n" % len(part) + part + b"\r\n")
                writer.write(b"0\r\n\r\n")
            else:
                writer.write(b"HTTP/1.1 201 Created\r\ncontent-length: %d\r\nx-seen: " % len(body) + seen + b"\r\n\r\n")
                writer.write(body)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


async def _wait_for(port: int) -> None:
    for _ in range(500):
        try:
            _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.01)
            continue
        writer.close()
        return
    raise AssertionError(f"nothing listens on {port}")


def test_the_proxy_delays_posts_and_forwards_bodies_intact(monkeypatch: pytest.MonkeyPatch) -> None:
    delays: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float, result: Any = None) -> Any:
        if seconds == 0.125:  # the proxy's delay
            delays.append(seconds)
            seconds = 0
        return await real_sleep(seconds, result)

    monkeypatch.setattr(delay_proxy.asyncio, "sleep", sleep)

    async def main() -> None:
        upstream_port, proxy_port, dead_port = free_ports(3)
        upstream = await asyncio.start_server(_upstream, "127.0.0.1", upstream_port)
        proxy = asyncio.create_task(delay_proxy.run(proxy_port, f"http://127.0.0.1:{upstream_port}", 0.125))
        dead = asyncio.create_task(delay_proxy.run(dead_port, f"http://127.0.0.1:{upstream_port}", 0.0))
        try:
            await _wait_for(proxy_port)
            body = os.urandom(200_000) + b"\r\n\r\n"
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{proxy_port}") as http:
                reply = await http.post("/echo", content=body, headers={"x-probe": "yes"})
                assert (reply.status_code, reply.content) == (201, body)
                assert reply.headers["x-seen"] == f"host=127.0.0.1:{upstream_port};probe=yes"
                chunked = await http.post("/chunked", content=body)
                assert (chunked.status_code, chunked.content) == (200, body)
                got = await http.get("/echo")
                assert (got.status_code, got.content) == (201, b"")
            assert delays == [0.125, 0.125]  # the POSTs waited, the GET did not
            upstream.close()
            await upstream.wait_closed()
            await _wait_for(dead_port)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{dead_port}") as http:
                assert (await http.get("/echo")).status_code == 502
        finally:
            for task in (proxy, dead):
                task.cancel()
            await asyncio.gather(proxy, dead, return_exceptions=True)

    asyncio.run(main())


def test_an_upstream_that_does_not_answer_in_time_is_not_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """TimeoutError is an OSError: the upstream's time limit must not start the retries meant for broken connections
    (three times the limit, and the call sent three times)."""
    monkeypatch.setattr(delay_proxy, "UPSTREAM_TIMEOUT_S", 0.2)
    connections: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)  # reads nothing, answers nothing

    async def main() -> None:
        (port,) = free_ports(1)
        server = await asyncio.start_server(silent, "127.0.0.1", port)
        try:
            upstream = delay_proxy.Upstream(f"http://127.0.0.1:{port}")
            with pytest.raises(TimeoutError):
                await upstream.exchange(b"POST / HTTP/1.1\r\ncontent-length: 0\r\n\r\n", head_only=False)
            assert len(connections) == 1 and upstream.idle == delay_proxy.deque()
        finally:
            for writer in connections:
                writer.close()
            server.close()
            await server.wait_closed()

    asyncio.run(main())

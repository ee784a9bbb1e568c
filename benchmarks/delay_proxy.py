"""The delay proxy of benchmarks/bench_latency_hiding.py: every POST (an A2A call) waits ``delay`` seconds, then is
forwarded to the upstream agent; every other request is forwarded at once. Bodies travel intact both ways.

Why not uvicorn + httpx (what it was): at 256 calls in flight httpx's connection pool scans all its connections for
every request (quadratic), and the proxy took 4-10 CPU-s of a 40 CPU-s battle on the 2 cores the measured parties
share. This one speaks just the HTTP/1.1 of loopback clients on asyncio streams (uvloop when installed): a request
head, a body by Content-Length or chunked; the reply is buffered and sent with its Content-Length.

Upstream connections are kept alive for at most ``KEEPALIVE_S`` (uvicorn closes idle ones after 5 s); a request on
a connection that fails is tried again on a new one, three tries in all, then answered with a 502 (before: 500); one
the upstream does not answer within ``UPSTREAM_TIMEOUT_S`` is answered with a 502 at once (not retried).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from urllib.parse import urlsplit

HOP = {b"host", b"content-length", b"transfer-encoding", b"connection", b"keep-alive"}
HEAD_LIMIT = 64 * 1024
KEEPALIVE_S = 2.0
CLIENT_IDLE_S = 60.0
"""Longer than any client keeps a connection idle (the green agent: 1 s): a server closing a kept-alive connection
as its client reuses it resets that request, and a client whose loop lags on a loaded machine reuses late."""
UPSTREAM_TIMEOUT_S = 600.0
TRIES = 3

Head = tuple[bytes, list[tuple[bytes, bytes]]]
"""The first line and the headers (names lower-cased)."""


class Malformed(Exception):
    """A message this proxy cannot read."""


async def read_head(reader: asyncio.StreamReader) -> Head:
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError as error:
        raise Malformed("head too large") from error
    lines = raw[:-4].split(b"\r\n")
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            raise Malformed(f"bad header line {line[:80]!r}")
        headers.append((name.strip().lower(), value.strip()))
    return lines[0], headers


def header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for key, value in headers:
        if key == name:
            return value
    return None


async def read_body(reader: asyncio.StreamReader, headers: list[tuple[bytes, bytes]], *, to_eof: bool) -> bytes:
    """The body by Content-Length, chunked (decoded), or (a reply without either) until the connection closes."""
    if (header(headers, b"transfer-encoding") or b"").lower().endswith(b"chunked"):
        chunks: list[bytes] = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                    pass
                return b"".join(chunks)
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
    length = header(headers, b"content-length")
    if length is not None:
        return await reader.readexactly(int(length))
    return await reader.read() if to_eof else b""


def message(first: bytes, headers: list[tuple[bytes, bytes]], body: bytes, extra: list[bytes]) -> bytes:
    lines = [first, *(k + b": " + v for k, v in headers if k not in HOP), *extra, b"content-length: %d" % len(body)]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


class Upstream:
    """Kept-alive connections to the upstream agent (newest first, each for at most KEEPALIVE_S idle)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.host_header = f"{self.host}:{self.port}".encode()
        self.idle: deque[tuple[asyncio.StreamReader, asyncio.StreamWriter, float]] = deque()

    async def connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bool]:
        now = time.monotonic()
        while self.idle:
            reader, writer, expires = self.idle.pop()
            if expires > now and not reader.at_eof():
                return reader, writer, True
            writer.close()
        reader, writer = await asyncio.open_connection(self.host, self.port, limit=HEAD_LIMIT)
        return reader, writer, False

    async def exchange(self, request: bytes, *, head_only: bool) -> tuple[Head, bytes]:
        """The upstream's reply to ``request`` (its body unless ``head_only``: a reply to HEAD has none)."""
        for attempt in range(TRIES):
            reader, writer, _reused = await self.connection()
            try:
                writer.write(request)
                async with asyncio.timeout(UPSTREAM_TIMEOUT_S):
                    first, headers = await read_head(reader)
                    status = first.split(b" ", 2)[1] if first.count(b" ") else b""
                    no_body = head_only or status in (b"204", b"304") or status.startswith(b"1")
                    body = b"" if no_body else await read_body(reader, headers, to_eof=True)
            except TimeoutError:  # an OSError too, but an upstream that did not answer in time is not tried again
                writer.close()
                raise
            except (OSError, asyncio.IncompleteReadError, Malformed, ValueError, IndexError):
                writer.close()
                if attempt == TRIES - 1:
                    raise
                continue
            if (header(headers, b"connection") or b"").lower() == b"close" or reader.at_eof():
                writer.close()
            else:
                self.idle.append((reader, writer, time.monotonic() + KEEPALIVE_S))
            return (first, headers), body
        raise AssertionError("unreachable")


async def serve_client(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, upstream: Upstream, delay_s: float
) -> None:
    try:
        while True:
            try:
                async with asyncio.timeout(CLIENT_IDLE_S):
                    first, headers = await read_head(reader)
            except (TimeoutError, asyncio.IncompleteReadError, Malformed, OSError):
                return
            method, target, _version = first.split(b" ", 2)
            body = await read_body(reader, headers, to_eof=False)
            if method == b"POST" and delay_s > 0:
                await asyncio.sleep(delay_s)
            request = message(method + b" " + target + b" HTTP/1.1", headers, body, [b"host: " + upstream.host_header])
            try:
                (status_line, reply_headers), reply = await upstream.exchange(request, head_only=method == b"HEAD")
            except Exception:
                writer.write(message(b"HTTP/1.1 502 Bad Gateway", [], b"upstream failed", []))
                await writer.drain()
                return
            writer.write(message(status_line, reply_headers, reply, []))
            await writer.drain()
            if (header(headers, b"connection") or b"").lower() == b"close":
                return
    except (OSError, asyncio.IncompleteReadError, ValueError):
        return
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def run(port: int, upstream_url: str, delay_s: float) -> None:
    upstream = Upstream(upstream_url)
    server = await asyncio.start_server(
        lambda r, w: serve_client(r, w, upstream, delay_s), "127.0.0.1", port, limit=HEAD_LIMIT, backlog=4096
    )
    try:
        async with server:
            await server.serve_forever()
    finally:
        while upstream.idle:
            upstream.idle.pop()[1].close()


def serve(port: int, upstream: str, delay_s: float) -> None:
    """Serve until killed (uvloop's event loop when installed: less CPU per call)."""
    try:
        import uvloop

        factory = uvloop.new_event_loop
    except ImportError:
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(run(port, upstream, delay_s))

"""An httpx transport that caps how much of a response body is read: the white agent's replies stay bounded.

Why a module of its own: capping bytes is transport plumbing (httpx streams, Content-Length, chunked bodies), while
:mod:`green_agent.engine.white_client` is about the A2A exchange and how its failures are classified. The client
only needs to know that an oversized body surfaces as :class:`ReplyTooLarge` somewhere in an SDK exception's cause
chain. Battles make one :func:`capped_http_client` for all their attempts (their own connection pool); the CSV
runner of the evaluations makes one per suite.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx

from green_agent.engine.http_pool import linear_pool
from green_agent.text_safety import clean_json_escapes

HEAD_BYTES = 16 * 1024
"""Bytes of a refused body kept to show what the agent sent (the attempt keeps 4096 characters of them)."""
HEAD_READ_S = 1.0
"""Longest wait for the first bytes of a body refused for its declared Content-Length (then refused with less)."""


class ReplyTooLarge(httpx.TransportError):
    """Raised by :class:`CappedTransport` while reading a response body past its cap (memory stays bounded)."""

    def __init__(self, max_bytes: int, url: str, head: bytes = b"") -> None:
        super().__init__(f"the response from {url} is larger than {max_bytes} bytes")
        self.max_bytes = max_bytes
        self.head = head
        """The first bytes of the body read before the cap (at most HEAD_BYTES; the format_error's record)."""


def _head(chunks: list[bytes]) -> bytes:
    """The first HEAD_BYTES of the chunks (without joining them all)."""
    taken: list[bytes] = []
    size = 0
    for chunk in chunks:
        if size >= HEAD_BYTES:
            break
        taken.append(chunk[: HEAD_BYTES - size])
        size += len(taken[-1])
    return b"".join(taken)


async def _read_head(stream: httpx.SyncByteStream | httpx.AsyncByteStream) -> bytes:
    """The first HEAD_BYTES of a body refused for its declared size, read for at most HEAD_READ_S (a body that
    trickles keeps what arrived): what the attempt shows of the reply. Never raises for the body's sake."""
    chunks: list[bytes] = []
    size = 0
    if not isinstance(stream, httpx.AsyncByteStream):
        return b""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(HEAD_READ_S):
            async for chunk in stream:
                chunks.append(chunk[: HEAD_BYTES - size])
                size += len(chunks[-1])
                if size >= HEAD_BYTES:
                    break
    return b"".join(chunks)


class _CappedStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, max_bytes: int, url: str) -> None:
        self._inner = inner
        self._max_bytes = max_bytes
        self._url = url

    async def __aiter__(self) -> AsyncIterator[bytes]:
        # The whole (capped) body is collected, then handed on with JSON-escaped lone surrogates replaced: the
        # SDK's protobuf conversion cannot hold them and would fail the exchange for one "\ud800" in a text.
        chunks: list[bytes] = []
        received = 0
        async for chunk in self._inner:
            received += len(chunk)
            if received > self._max_bytes:
                raise ReplyTooLarge(self._max_bytes, self._url, _head([*chunks, chunk]))
            chunks.append(chunk)
        yield clean_json_escapes(b"".join(chunks))

    async def aclose(self) -> None:
        await self._inner.aclose()


class CappedTransport(httpx.AsyncBaseTransport):
    """An httpx transport that stops reading any response body at ``max_bytes`` (chunked or not).

    Why at the transport: the a2a-sdk reads whole bodies itself, so this is the one place where an endless or huge
    reply can be cut before it is buffered. A declared Content-Length above the cap is refused after reading only the
    body's first HEAD_BYTES (to show what the agent sent).
    """

    def __init__(self, inner: httpx.AsyncBaseTransport, *, max_bytes: int) -> None:
        self._inner = inner
        self.max_bytes = max_bytes

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        url = str(request.url)
        declared = response.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            head = await _read_head(response.stream)
            await response.aclose()
            raise ReplyTooLarge(self.max_bytes, url, head)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_CappedStream(response.stream, self.max_bytes, url),
            extensions=response.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


def capped_http_client(*, max_bytes: int, max_connections: int, timeout_s: float = 30.0) -> httpx.AsyncClient:
    """An HTTP client for talking to white agents: bounded reply bodies, no proxies from the environment."""
    # Idle connections are dropped after 1 s, well before common servers close them (uvicorn: 5 s): reusing a
    # connection the server is closing fails the request with a bare ReadError, which would be blamed on the agent.
    limits = httpx.Limits(max_connections=max_connections, keepalive_expiry=1.0)
    # The pool's bookkeeping in linear time (green_agent/engine/http_pool.py): hundreds of attempts share this pool.
    transport = CappedTransport(linear_pool(httpx.AsyncHTTPTransport(limits=limits)), max_bytes=max_bytes)
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), transport=transport)

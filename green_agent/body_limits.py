"""Bounded request bodies for every HTTP endpoint of the green agent (A2A, MCP, /run, evaluations).

Why a middleware: the a2a-sdk, the MCP SDK and Starlette's form parser each read a whole body before anything of
ours runs, and a chunked request has no Content-Length to check. This middleware reads the body itself, stops at
the byte cap (413, also for chunked bodies: memory stays bounded by the cap), and for JSON bodies checks nesting
depth and number length before any parser sees them (400): Python's ``json`` raises ``RecursionError`` on deep
nesting and ``ValueError`` on integers of more than 4300 digits, which handlers would otherwise turn into 500s.
The checks are linear and run in a worker thread for large bodies, so a hostile upload never stalls the loop. JSON
bodies also have escaped lone surrogates replaced (U+FFFD) before any handler sees them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping

import numpy as np
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from green_agent.text_safety import clean_json_escapes

DEFAULT_MAX_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_DEPTH = 64
MAX_NUMBER_DIGITS = 1000
_OFF_LOOP_BYTES = 64 * 1024

_STEP = np.zeros(256, dtype=np.int8)
_STEP[[ord("["), ord("{")]] = 1
_STEP[[ord("]"), ord("}")]] = -1
_QUOTE, _BACKSLASH = ord('"'), ord("\\")


def _run_lengths_before(mask: np.ndarray) -> np.ndarray:
    """For each position i, how many consecutive ``mask`` positions end at i (0 where ``mask`` is false)."""
    index = np.arange(mask.size, dtype=np.int32)
    last_break = np.maximum.accumulate(np.where(mask, -1, index))
    return np.where(mask, index - last_break, 0)


class BodyRejected(Exception):
    """A body the green agent refuses to parse; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def json_shape_problem(body: bytes, *, max_depth: int = DEFAULT_MAX_DEPTH) -> str | None:
    """Why ``body`` (JSON text) is too deep or holds a number too long to parse safely; None when it is fine.

    Linear and vectorised (numpy, a few passes over the bytes): quotes not escaped by an odd run of backslashes
    delimit strings; brackets and digits outside strings are what counts. Bodies that are not valid JSON are left
    to the parser (it reports them); this only guards against what would crash it.
    """
    if not body:
        return None
    data = np.frombuffer(body, dtype=np.uint8)
    backslashes = _run_lengths_before(data == _BACKSLASH)
    preceding = np.concatenate(([0], backslashes[:-1]))
    toggles = (data == _QUOTE) & (preceding % 2 == 0)
    outside = (np.cumsum(toggles, dtype=np.int32) % 2 == 0) & ~toggles
    digits = outside & (data >= ord("0")) & (data <= ord("9"))
    if digits.any() and int(_run_lengths_before(digits).max()) > MAX_NUMBER_DIGITS:
        return f"a number in the body has more than {MAX_NUMBER_DIGITS} digits"
    depth = np.cumsum(np.where(outside, _STEP[data], 0), dtype=np.int32)
    deepest = int(depth.max())
    if deepest > max_depth:
        return f"JSON nested {deepest} levels deep; at most {max_depth} are accepted"
    return None


def _is_json(scope: Scope, body: bytes) -> bool:
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-type":
            return b"json" in value.lower()
    return body[:1] in (b"{", b"[")


class BodyLimitMiddleware:
    """Reads each HTTP request body up to ``max_bytes`` (per-path overrides in ``path_max_bytes``), then replays it.

    413 when the body is larger (Content-Length checked first, then the bytes actually received); 400 when a JSON
    body is nested deeper than ``max_depth`` or holds an absurdly long number. Responses name the limit.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_depth: int = DEFAULT_MAX_DEPTH,
        path_max_bytes: Mapping[str, int] | None = None,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_depth = max_depth
        self.path_max_bytes = dict(path_max_bytes or {})

    def _cap(self, path: str) -> int:
        for prefix, cap in self.path_max_bytes.items():
            if path.startswith(prefix):
                return cap
        return self.max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method", "GET") in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        try:
            body = await self._read(scope, receive)
            if body and _is_json(scope, body):
                check = json_shape_problem
                problem = (
                    await asyncio.to_thread(check, body, max_depth=self.max_depth)
                    if len(body) > _OFF_LOOP_BYTES
                    else check(body, max_depth=self.max_depth)
                )
                if problem:
                    raise BodyRejected(400, f"request body refused: {problem}")
                # Escaped lone surrogates ("\ud800") decode to text no UTF-8 response or file can hold; the SDKs
                # echo some of it (a JSON-RPC id) into their answers. Replaced here, before any parser sees them.
                body = clean_json_escapes(body)
        except BodyRejected as rejected:
            await _answer(send, rejected.status, rejected.message)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _read(self, scope: Scope, receive: Receive) -> bytes:
        cap = self._cap(scope.get("path", ""))
        for name, value in scope.get("headers", []):
            if name.lower() == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    raise BodyRejected(400, "request body refused: Content-Length is not a number") from None
                if declared > cap:
                    raise BodyRejected(413, f"request body refused: larger than the limit of {cap} bytes")
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise BodyRejected(400, "client disconnected")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > cap:
                raise BodyRejected(413, f"request body refused: larger than the limit of {cap} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


async def _answer(send: Send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})

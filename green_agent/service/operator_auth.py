"""The operator token: who may steer the green agent (start assessments, cancel, read results, evaluate).

Why a token even on loopback: the agent under test often runs on the same host as the assessor, so "it came from
127.0.0.1" says nothing about who sent it. Anyone who can reach the green agent may *be assessed* (AgentBeats
``battle_start`` / ``battle_info`` stay open, as the AgentBeats protocol expects), but only the operator may
*control* it: A2A assessment requests and task reads/cancels, the MCP control tools, /run and /evaluations.

The token comes from ``--operator-token``, else the ``ARENA_OPERATOR_TOKEN`` environment variable, else it is
generated at start and printed once to stderr (as Jupyter does); ``arena run`` generates one for the green agent it
starts and passes it through the environment (never on a command line, where ``ps`` shows it). Requests present it
as ``Authorization: Bearer <token>``; browser pages may pass ``?token=<token>`` once, which sets an HttpOnly cookie.

Routing policy (:class:`OperatorAuthMiddleware`, default deny): the agent card, /health, the A2A endpoint (which
checks per JSON-RPC method and per message kind itself, see :mod:`green_agent.service.a2a_auth`) and the per-attempt
MCP tool
endpoints (each has its own attempt token) are reachable without the operator token; every other path needs it.
"""

from __future__ import annotations

import hmac
import os
import secrets
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Receive, Scope, Send

from green_agent.wire.process import TOKEN_ENV as TOKEN_ENV  # the launcher's name for it, too

COOKIE_NAME = "arena_operator"
MIN_TOKEN_LENGTH = 16

OPEN_PATHS: frozenset[str] = frozenset({"/health"})
"""Exact paths anyone may read: liveness."""

OPEN_PREFIXES: tuple[str, ...] = ("/.well-known/",)
"""Path prefixes anyone may read: the agent card."""

SELF_CHECKED_PATHS: tuple[str, ...] = ("/mcp-attempts/",)
"""Paths that check a credential of their own (per-attempt MCP tool endpoints)."""


class TokenError(ValueError):
    """An operator token that is too short to be a secret."""


@dataclass(frozen=True)
class OperatorToken:
    """The green agent's operator secret; compared in constant time, never logged (``repr`` hides it)."""

    value: str
    generated: bool = False

    def __post_init__(self) -> None:
        if len(self.value) < MIN_TOKEN_LENGTH:
            raise TokenError(f"operator token: at least {MIN_TOKEN_LENGTH} characters are required")

    def __repr__(self) -> str:
        return f"OperatorToken(generated={self.generated})"

    def matches(self, presented: str | None) -> bool:
        """True when ``presented`` is this token (constant-time comparison)."""
        if not presented:
            return False
        return hmac.compare_digest(presented.encode("utf-8", "surrogatepass"), self.value.encode("utf-8"))

    def authorizes(self, headers: Iterable[tuple[bytes, bytes]], query_string: bytes = b"") -> bool:
        """True when the request carries this token: bearer header, the page cookie, or ``?token=``."""
        return any(self.matches(candidate) for candidate in presented_tokens(headers, query_string))

    @classmethod
    def new(cls) -> OperatorToken:
        """A fresh random token (URL-safe, 256 bits)."""
        return cls(secrets.token_urlsafe(32), generated=True)


def resolve_operator_token(flag: str | None, environ: dict[str, str] | None = None) -> OperatorToken:
    """The token from the flag, else from :data:`TOKEN_ENV`, else a generated one (``generated=True``)."""
    env = os.environ if environ is None else environ
    value = flag or env.get(TOKEN_ENV) or ""
    if value:
        return OperatorToken(value.strip())
    return OperatorToken.new()


def presented_tokens(headers: Iterable[tuple[bytes, bytes]], query_string: bytes = b"") -> list[str]:
    """Every operator-token candidate a request carries (Authorization bearer, cookie, ``token`` query)."""
    found: list[str] = []
    for raw_name, raw_value in headers:
        name = raw_name.lower()
        value = raw_value.decode("latin-1")
        if name == b"authorization":
            scheme, _, credential = value.partition(" ")
            if scheme.lower() == "bearer" and credential.strip():
                found.append(credential.strip())
        elif name == b"cookie":
            cookie: SimpleCookie = SimpleCookie()
            try:
                cookie.load(value)
            except Exception:
                continue
            if COOKIE_NAME in cookie:
                found.append(cookie[COOKIE_NAME].value)
    if query_string:
        found.extend(parse_qs(query_string.decode("latin-1")).get("token", []))
    return found


def bearer_header(token: str) -> dict[str, str]:
    """The header a client sends to authenticate as the operator."""
    return {"Authorization": f"Bearer {token}"}


class OperatorAuthMiddleware:
    """ASGI middleware: every path except the open / self-checked ones (and the A2A root) needs the operator token.

    Default deny, so a route added later is protected unless someone decides otherwise here. A valid ``?token=``
    on a page request also sets an HttpOnly, SameSite=Strict cookie, so a browser can use the evaluations page.
    """

    def __init__(self, app: ASGIApp, token: OperatorToken, *, a2a_paths: tuple[str, ...] = ("/",)) -> None:
        self.app = app
        self.token = token
        self.a2a_paths = a2a_paths

    def _open(self, path: str) -> bool:
        if path in self.a2a_paths:
            return True  # the A2A endpoint authorises per JSON-RPC method (see green_agent.service.a2a_auth)
        return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES) or path.startswith(SELF_CHECKED_PATHS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self._open(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers", [])
        query = scope.get("query_string", b"")
        if not self.token.authorizes(headers, query):
            await _unauthorized(scope, receive, send)
            return
        query_ok = any(self.token.matches(t) for t in parse_qs(query.decode("latin-1")).get("token", []))
        if not query_ok or scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_cookie(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                cookie = f"{COOKIE_NAME}={self.token.value}; HttpOnly; SameSite=Strict; Path=/"
                message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", cookie.encode())]}
            await send(message)

        await self.app(scope, receive, send_with_cookie)


async def _unauthorized(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 4401})
        return
    body = (
        b'{"error": "unauthorized: this endpoint needs the green agent\'s operator token '
        b'(Authorization: Bearer <token>)"}'
    )
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b'Bearer realm="arena-green-agent"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})

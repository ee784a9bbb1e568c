"""The few AgentBeats HTTP calls ``arena run --backend`` makes, with what it needs to ride out a backend outage.

Why a module of its own: :mod:`launcher.cli.backend_run` drives the battle; this is the client underneath it (also
used by ``arena compare``). Same paths and bodies on our backend and on AgentBeats. Every failure is a
:class:`BackendError` that says whether the backend may come back (``transient``) and whether the request reached it
at all (``sent``), so a caller can retry a GET through an outage and a POST only when it cannot have been applied.
The backend's answers are untrusted: at most :data:`MAX_ANSWER_BYTES` of one are read.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import httpx

logger = logging.getLogger(__name__)

SETUP_ATTEMPTS = 4
"""Tries of each call made before the battle exists (health, registrations, battle creation)."""
MAX_ANSWER_BYTES = 256 * 1024 * 1024
"""The most of one backend answer that is read (a large battle's history is tens of MB)."""


class BackendError(RuntimeError):
    """The backend refused a call or could not be reached; the message names the call and the answer."""

    def __init__(self, message: str, *, transient: bool = False, sent: bool = True) -> None:
        super().__init__(message)
        self.transient = transient
        """The backend may come back: a connection error, a timeout, 5xx, 408 or 429."""
        self.sent = sent
        """False when the request never reached the backend (connection refused): any call may be repeated."""


class BackendApi:
    """The few AgentBeats calls ``arena run`` makes (same paths and bodies on our backend and on AgentBeats)."""

    def __init__(self, http: httpx.AsyncClient, base_url: str) -> None:
        self.http = http
        self.base_url = base_url.rstrip("/")

    async def _call(
        self, method: str, path: str, *, expect: tuple[int, ...], body: Any = None, attempts: int = 1
    ) -> Any:
        """One call, tried up to ``attempts`` times while the backend cannot be reached (a GET on any transient
        error, a POST only when the request never got there: it must not be applied twice)."""
        for attempt in range(1, attempts + 1):
            try:
                return await self._call_once(method, path, expect=expect, body=body)
            except BackendError as error:
                repeatable = error.transient if method == "GET" else not error.sent
                if attempt >= attempts or not repeatable:
                    raise
                logger.info("%s; trying again (%d of %d)", error, attempt + 1, attempts)
                await asyncio.sleep(min(0.5 * 2 ** (attempt - 1), 4.0))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _call_once(self, method: str, path: str, *, expect: tuple[int, ...], body: Any) -> Any:
        url = self.base_url + path
        try:
            async with self.http.stream(method, url, json=body) as response:
                content = await _read_capped(response, f"{method} {url}")
        except httpx.HTTPError as error:
            sent = not isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout))
            raise BackendError(
                f"{method} {url}: the backend did not answer ({type(error).__name__}: {error})",
                transient=True,
                sent=sent,
            ) from error
        status = response.status_code
        if status not in expect:
            text = content[:500].decode("utf-8", "replace")
            raise BackendError(
                f"{method} {url} answered HTTP {status}: {text}", transient=status >= 500 or status in (408, 429)
            )
        if status == 204 or not content:
            return None
        try:
            return json.loads(content)
        except ValueError as error:
            text = content[:200].decode("utf-8", "replace")
            raise BackendError(f"{method} {url} answered something that is not JSON: {text}") from error

    async def health(self) -> dict[str, Any]:
        body = await self._call("GET", "/health", expect=(200,), attempts=SETUP_ATTEMPTS)
        return body if isinstance(body, dict) else {}

    async def register(self, body: dict[str, Any]) -> str:
        """``POST /agents``; the new agent's id."""
        record = await self._call("POST", "/agents", expect=(200, 201), body=body, attempts=SETUP_ATTEMPTS)
        agent_id = record.get("agent_id") if isinstance(record, dict) else None
        if not isinstance(agent_id, str) or not agent_id:
            raise BackendError(f"POST {self.base_url}/agents answered without an agent_id: {str(record)[:300]}")
        return agent_id

    async def agents(self) -> list[dict[str, Any]]:
        """``GET /agents``: the registered agents (records that are not objects are left out)."""
        records = await self._call("GET", "/agents", expect=(200,), attempts=SETUP_ATTEMPTS)
        if not isinstance(records, list):
            raise BackendError(f"GET {self.base_url}/agents answered {str(records)[:200]}")
        return [record for record in records if isinstance(record, dict)]

    async def create_battle(self, body: dict[str, Any]) -> str:
        """``POST /battles``; the new battle's id."""
        record = await self._call("POST", "/battles", expect=(200, 201), body=body, attempts=SETUP_ATTEMPTS)
        battle_id = record.get("battle_id") if isinstance(record, dict) else None
        if not isinstance(battle_id, str) or not battle_id:
            raise BackendError(f"POST {self.base_url}/battles answered without a battle_id: {str(record)[:300]}")
        return battle_id

    async def battle(self, battle_id: str) -> dict[str, Any]:
        record = await self._call("GET", f"/battles/{battle_id}", expect=(200,))
        if not isinstance(record, dict):
            raise BackendError(f"GET {self.base_url}/battles/{battle_id} answered {str(record)[:200]}")
        return record


async def _read_capped(response: httpx.Response, call: str) -> bytes:
    """The body, refused (BackendError) past :data:`MAX_ANSWER_BYTES`: the backend's answers are not trusted."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            raise BackendError(f"{call} answered more than {MAX_ANSWER_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)

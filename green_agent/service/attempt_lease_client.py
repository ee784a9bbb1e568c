"""The green agent's client of the backend's attempt-lease API (issue 29; docs/design/attempt-leases.md).

One :class:`AttemptLeaseClient` per pool member: the owner's calls (publish, read, owner heartbeat) take the
battle's token per call; a member's calls (lease, heartbeat, record, error, read, takeover, members) carry the pool
key.
Neither secret is ever put in a body, a log line or ``repr``.

Outages: 5xx, 408, 429, connection errors and timeouts are retried with the backend reporter's backoff
(:class:`~green_agent.service.outbox.RetryPolicy`, ``Retry-After`` honoured up to its cap) until the call's
deadline (``outage_s``, or the caller's ``deadline``: a heartbeat gives up when its lease would have run out), then
:class:`LeaseBackendDown`. Every call is idempotent on the backend except ``lease``: a lease whose answer was lost
leaves those attempts leased to us until their TTL runs out; they are then leased again (and counted as a requeue).

Refusals raise a subclass of :class:`AttemptLeaseError` naming what the backend refused: :class:`LeaseLost` (409: the
lease is not the attempt's live one; ``reason`` fenced, expired, wrong_worker, not_leased, not_found),
:class:`OwnerStillAlive` (409 on a takeover), :class:`PoolRefused` (401/403: the token or pool key, or another
pool), :class:`AttemptQueueMissing` (404), :class:`LeaseRequestRefused` (422 naming the field, or any other 4xx).
A duplicate record is no error: :meth:`AttemptLeaseClient.record` answers ``status == "duplicate"`` (stored once).

Answers are untrusted: at most ``max_answer_bytes`` are read (as sent, not decompressed), large ones decoded off
the event loop, and each is validated by its model in :mod:`green_agent.wire.attempt_leases`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Sequence
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from green_agent.service.outbox import RetryPolicy, _read_bounded, clean_text
from green_agent.wire.attempt_leases import (
    DEFAULT_MEMBERS_WINDOW_S,
    MAX_ATTEMPTS_PER_PUBLISH,
    MAX_ERROR_CHARS,
    MAX_LEASES_PER_CALL,
    MAX_MEMBERS_WINDOW_S,
    MAX_PAGE,
    MIN_MEMBERS_WINDOW_S,
    AttemptIn,
    AttemptsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    InfraErrorRequest,
    LeaseOut,
    LeaseRequest,
    LeaseResponse,
    MembersResponse,
    OwnerRequest,
    OwnerResponse,
    PublishRequest,
    PublishResponse,
    RecordRequest,
    RecordResponse,
)

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)
DEFAULT_MAX_ANSWER_BYTES = 64 * 1024 * 1024
"""A page of 200 attempts may carry 200 results; ask for smaller pages (``limit``) where results are large."""
THREAD_DECODE_BYTES = 256 * 1024
"""Answers larger than this are decoded in a thread, off the event loop."""


class AttemptLeaseError(RuntimeError):
    """The backend refused a lease call, or could not be reached in time; ``status`` is its HTTP status (None for
    an outage) and ``detail`` its answer, cleaned for a log line."""

    def __init__(self, what: str, status: int | None, detail: str) -> None:
        super().__init__(f"{what}: {detail}" if status is None else f"{what}: HTTP {status}: {detail}")
        self.what = what
        self.status = status
        self.detail = detail


class LeaseLost(AttemptLeaseError):
    """409: the presented lease is no longer the attempt's live one (``reason``: fenced, expired, wrong_worker,
    not_leased, not_found). Stop working on the attempt; its result must be dropped."""

    def __init__(self, what: str, status: int, detail: str, reason: str) -> None:
        super().__init__(what, status, detail)
        self.reason = reason


class OwnerStillAlive(AttemptLeaseError):
    """409 on a takeover: the owner heartbeated within the queue's ``owner_ttl_s``."""


class PoolRefused(AttemptLeaseError):
    """401/403: the battle's token or the pool key is missing or wrong, or the pool is not the battle's."""


class AttemptQueueMissing(AttemptLeaseError):
    """404: no such battle, or it has no attempt queue."""


class LeaseRequestRefused(AttemptLeaseError):
    """422 (the message names the field) or another 4xx the backend answered."""


class LeaseBackendDown(AttemptLeaseError):
    """The backend did not answer usefully (5xx, 408, 429, transport errors, timeouts) until the call's deadline,
    or its answer was not a valid body."""


class AttemptLeaseClient:
    """Async client of one pool's lease API on one backend (``async with`` or :meth:`aclose`)."""

    def __init__(
        self,
        backend_url: str,
        pool: str,
        pool_key: str,
        *,
        httpx_client: httpx.AsyncClient | None = None,
        retry: RetryPolicy | None = None,
        request_timeout_s: float = 10.0,
        outage_s: float = 120.0,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    ) -> None:
        self._base = backend_url.rstrip("/")
        self.pool = pool
        self._key = pool_key
        self._external = httpx_client
        self._http = httpx_client or httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(request_timeout_s))
        self._retry = retry or RetryPolicy()
        self._timeout_s = request_timeout_s
        self._outage_s = outage_s
        self._max_answer_bytes = max_answer_bytes

    def __repr__(self) -> str:
        return f"AttemptLeaseClient(backend={self._base!r}, pool={self.pool!r}, pool_key='set')"

    async def aclose(self) -> None:
        if self._external is None:
            await self._http.aclose()

    async def __aenter__(self) -> AttemptLeaseClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------------------------------------ the owner

    async def publish(
        self,
        battle_id: str,
        token: str,
        *,
        owner_worker: str,
        attempts: Sequence[AttemptIn],
        max_requeues: int = 2,
        owner_ttl_s: float = 60.0,
    ) -> PublishResponse:
        """Publish ``attempts`` (in requests of at most 2000; idempotent per (task_key, attempt))."""
        added = already = 0
        for start in range(0, max(len(attempts), 1), MAX_ATTEMPTS_PER_PUBLISH):
            body = PublishRequest(
                pool=self.pool,
                owner_worker=owner_worker,
                attempts=list(attempts[start : start + MAX_ATTEMPTS_PER_PUBLISH]),
                max_requeues=max_requeues,
                owner_ttl_s=owner_ttl_s,
            )
            answer = await self._call(
                "publish", "POST", f"/battles/{quote(battle_id, safe='')}/attempts", PublishResponse,
                body=body, token=token, key=True,
            )  # fmt: skip
            added, already = added + answer.added, already + answer.already
        return PublishResponse(added=added, already=already)

    async def read(
        self, battle_id: str, *, token: str | None = None, offset: int = 0, limit: int = 50
    ) -> AttemptsResponse:
        """A page of the battle's attempts (publish order) with the battle's token, else with the pool key."""
        limit = max(1, min(limit, MAX_PAGE))
        path = f"/battles/{quote(battle_id, safe='')}/attempts?offset={max(0, offset)}&limit={limit}"
        return await self._call("read", "GET", path, AttemptsResponse, token=token, key=token is None)

    async def owner_heartbeat(self, battle_id: str, token: str, worker_id: str) -> OwnerResponse:
        """The owner is alive (members may take the battle over once it has been silent for ``owner_ttl_s``)."""
        body = OwnerRequest(worker_id=worker_id)
        path = f"/battles/{quote(battle_id, safe='')}/owner"
        return await self._call("owner heartbeat", "POST", path, OwnerResponse, body=body, token=token)

    async def take_over(self, battle_id: str, worker_id: str) -> OwnerResponse:
        """Claim a battle whose owner has been silent; the answer carries the battle's token."""
        body = OwnerRequest(worker_id=worker_id, pool=self.pool)
        path = f"/battles/{quote(battle_id, safe='')}/owner"
        return await self._call("takeover", "POST", path, OwnerResponse, body=body, key=True)

    # ------------------------------------------------------------------------------------------------ members

    async def lease(self, worker_id: str, *, limit: int, ttl_s: float, wait_s: float = 0.0) -> list[LeaseOut]:
        """Up to ``limit`` attempts (at most 64), waiting up to ``wait_s`` (30) for one when none is free."""
        body = LeaseRequest(
            worker_id=worker_id, limit=max(1, min(limit, MAX_LEASES_PER_CALL)), ttl_s=ttl_s, wait_s=wait_s
        )
        answer = await self._call(
            "lease", "POST", f"/pools/{quote(self.pool, safe='')}/leases", LeaseResponse,
            body=body, key=True, extra_timeout_s=body.wait_s,
        )  # fmt: skip
        if len(answer.leases) > body.limit:
            raise LeaseBackendDown(
                "lease", None, f"the backend granted {len(answer.leases)} leases, {body.limit} asked"
            )
        return answer.leases

    async def members(
        self, *, window_s: float = DEFAULT_MEMBERS_WINDOW_S, deadline: float | None = None
    ) -> MembersResponse:
        """The pool's members seen within ``window_s`` (whole seconds, MIN_MEMBERS_WINDOW_S to MAX_MEMBERS_WINDOW_S):
        every lease and heartbeat call records its worker. ``deadline`` (``time.monotonic()``) bounds the retries."""
        seconds = max(MIN_MEMBERS_WINDOW_S, min(round(window_s), MAX_MEMBERS_WINDOW_S))
        path = f"/pools/{quote(self.pool, safe='')}/members?window_s={seconds}"
        return await self._call("members", "GET", path, MembersResponse, key=True, deadline=deadline)

    async def heartbeat(self, lease: LeaseOut, ttl_s: float, *, deadline: float | None = None) -> HeartbeatResponse:
        """Extend ``lease`` to ``ttl_s`` from now; ``deadline`` (``time.monotonic()``) bounds the retries."""
        body = HeartbeatRequest(lease=lease.ref(), ttl_s=ttl_s)
        path = f"/pools/{quote(self.pool, safe='')}/leases/heartbeat"
        return await self._call("heartbeat", "POST", path, HeartbeatResponse, body=body, key=True, deadline=deadline)

    async def record(self, lease: LeaseOut, result: dict[str, Any]) -> RecordResponse:
        """Store the attempt's result once (``status``: recorded, or duplicate for a retry of the same lease)."""
        body = RecordRequest(lease=lease.ref(), result=result)
        path = f"/pools/{quote(self.pool, safe='')}/leases/record"
        return await self._call("record", "POST", path, RecordResponse, body=body, key=True)

    async def report_error(self, lease: LeaseOut, error: str) -> RecordResponse:
        """The harness failed the attempt (``status``: requeued, or failed once its requeues are used up)."""
        text = clean_text(error, self._key)[:MAX_ERROR_CHARS] or "infrastructure error"
        body = InfraErrorRequest(lease=lease.ref(), error=text)
        path = f"/pools/{quote(self.pool, safe='')}/leases/error"
        return await self._call("error report", "POST", path, RecordResponse, body=body, key=True)

    # ------------------------------------------------------------------------------------------------ internals

    def _headers(self, token: str | None, key: bool) -> dict[str, str]:
        headers = {"Accept-Encoding": "identity"}
        if token:
            headers["X-Battle-Token"] = token
        if key:
            headers["X-Pool-Key"] = self._key
        return headers

    async def _call(
        self,
        what: str,
        method: str,
        path: str,
        model: type[M],
        *,
        body: BaseModel | None = None,
        token: str | None = None,
        key: bool = False,
        extra_timeout_s: float = 0.0,
        deadline: float | None = None,
    ) -> M:
        """One API call, retried through outages until ``deadline`` (default: ``outage_s`` from now)."""
        content = body.model_dump_json().encode("utf-8") if body is not None else None
        headers = self._headers(token, key)
        if content is not None:
            headers["Content-Type"] = "application/json"
        secrets = [s for s in (token, self._key) if s]
        end = deadline if deadline is not None else time.monotonic() + self._outage_s
        timeout = self._timeout_s + extra_timeout_s
        attempt, last = 0, "no attempt made"
        while True:
            attempt += 1
            status, raw, retry_after = await self._send(method, path, content, headers, timeout)
            if status is not None and 200 <= status < 300:
                if len(raw) > self._max_answer_bytes:  # not retried: the same call would get the same answer
                    raise LeaseBackendDown(what, None, f"answer larger than {self._max_answer_bytes} bytes")
                return await self._decode(what, model, raw)
            text = _clean(raw.decode("utf-8", "replace"), secrets)
            if status is not None and not (status >= 500 or status in (408, 429)):
                raise _refusal(what, status, text, raw)
            last = f"HTTP {status}: {text}" if status is not None else text
            delay = self._retry.delay_after(attempt)
            if retry_after is not None:
                delay = min(max(delay, retry_after), self._retry.max_delay_s)
            remaining = end - time.monotonic()
            if remaining <= delay:
                raise LeaseBackendDown(what, None, f"no answer after {attempt} tries (last: {last})")
            logger.debug("%s: backend unavailable (%s); retrying in %.2f s", what, last, delay)
            await asyncio.sleep(delay)

    async def _send(
        self, method: str, path: str, content: bytes | None, headers: dict[str, str], timeout: float
    ) -> tuple[int | None, bytes, float | None]:
        """(status, at most max_answer_bytes of the body, Retry-After) or (None, why, None) on a transport error."""
        try:
            async with (
                asyncio.timeout(timeout * 2),
                self._http.stream(method, self._base + path, content=content, headers=headers, timeout=timeout) as resp,
            ):
                raw = await _read_bounded(resp, self._max_answer_bytes + 1)
        except TimeoutError:
            return None, f"no answer within {timeout * 2:g} s".encode(), None
        except httpx.HTTPError as error:
            return None, f"{type(error).__name__}: {error}".rstrip(": ").encode("utf-8", "replace"), None
        return resp.status_code, raw, _retry_after(resp)

    async def _decode(self, what: str, model: type[M], raw: bytes) -> M:
        try:
            if len(raw) > THREAD_DECODE_BYTES:
                return await asyncio.to_thread(model.model_validate_json, raw)
            return model.model_validate_json(raw)
        except ValidationError as error:
            first = error.errors()[0] if error.errors() else {"loc": (), "msg": str(error)}
            where = ".".join(str(p) for p in first.get("loc", ()))
            raise LeaseBackendDown(what, None, f"invalid answer at {where or 'the body'}: {first.get('msg')}") from None


def _clean(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "[secret]")
    return clean_text(text, None)


def _refusal(what: str, status: int, text: str, raw: bytes) -> AttemptLeaseError:
    """The backend's 4xx as the exception naming what it refused."""
    detail: Any = None
    try:
        detail = json.loads(raw[:65536]).get("detail") if raw else None
    except (ValueError, AttributeError):
        detail = None
    if status == 409 and isinstance(detail, dict):
        reason = str(detail.get("reason", ""))[:64]
        if reason == "owner_alive":
            return OwnerStillAlive(what, status, text)
        return LeaseLost(what, status, text, reason or "unknown")
    if status in (401, 403):
        return PoolRefused(what, status, text)
    if status == 404:
        return AttemptQueueMissing(what, status, text)
    if status == 422 and isinstance(detail, list) and detail and isinstance(detail[0], dict):
        loc = ".".join(str(p) for p in detail[0].get("loc", []) if p != "body")
        return LeaseRequestRefused(what, status, clean_text(f"{loc}: {detail[0].get('msg', '')}", None))
    return LeaseRequestRefused(what, status, text)


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after", "").strip()[:32]
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if 0 <= seconds < 3600 else None

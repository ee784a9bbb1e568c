"""Posting battle progress and the result to an AgentBeats backend: in order, durably, never holding up the battle.

Why: a poster on the event loop stalls the battle when the backend is slow; giving each event ~6 s of retries lost
events in a 30 s outage, and the result when the battle ended during it. :meth:`BackendReporter.progress` and
:meth:`BackendReporter.result` only enqueue; one task posts the events **strictly in the order reported**
(``interact_history`` is arrival order), retrying the head of the queue until it is settled, never skipping ahead.

Delivery (``POST {backend_url}/battles/{battle_id}``): 2xx delivered. 5xx, 408, 429, connection errors and timeouts
are retried with backoff (0.2 s doubling to 5 s; ``Retry-After`` honoured up to that cap) while the event is within
its **retention** (default 1 hour, counted from when the event was reported; the time is in the outbox, so a
restarted green agent keeps the same deadline), then given up as ``expired``. Any other 4xx is a permanent refusal
(recorded; the next event goes); 400 on the result means the battle is already finished. Every event carries the
idempotency key ``"event_id": "<battle id>:<reporter nonce>:<seq>"`` (top level), so a retry after a lost answer is
stored once by our backend; the random nonce keeps keys of different reporters of one battle apart (a resumed battle,
a refusal, an outbox whose last lines were lost in a crash), so a new event is never mistaken for a repeat. The
result is sent at most once per reporter. Nothing is ever raised to the caller.

Durability (:meth:`~BackendReporter.open_outbox`): events and outcomes are appended to the battle's outbox file
(:mod:`green_agent.service.outbox`) off the event loop; what is undelivered at close stays there and
:meth:`~BackendReporter.replay` delivers it from a later process. :meth:`~BackendReporter.undelivered` lists what
was refused, expired or still pending at close.

The battle token is sent only as headers (``Authorization: Bearer``, ``X-Battle-Token``), never put in a body, the
outbox, a log line or ``repr``. So a replay after a restart has none (it comes only in battle_start): it posts
without, which AgentBeats accepts; a backend that answers 401/403 stops the replay, with a log line, and the events
stay in the outbox. Bodies are serialised to JSON when reported (non-JSON values become strings): later mutation
by the caller changes nothing. The backend's answers are untrusted (bounded reads, token blanked out of logs).
Call the reporting methods from the event loop's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

import httpx

from green_agent.service.outbox import (
    DEFAULT_RETENTION_S,
    Answer,
    MarkStatus,
    OutboxEntry,
    OutboxState,
    OutboxWriter,
    RetryPolicy,
    UndeliveredEvent,
    event_json,
    header_line,
    mark_line,
    post_entry,
    utc_timestamp,
)

logger = logging.getLogger(__name__)

DeliveryStatus = Literal["pending", "delivered", "rejected", "undelivered"]


class BackendReporter:
    """Queue-backed, ordered, durable, never-blocking poster of AgentBeats battle events (async context manager)."""

    def __init__(
        self,
        backend_url: str,
        battle_id: str,
        *,
        reported_by: str = "green_agent",
        token: str | None = None,
        httpx_client: httpx.AsyncClient | None = None,
        retry: RetryPolicy | None = None,
        request_timeout_s: float = 5.0,
        retention_s: float = DEFAULT_RETENTION_S,
    ) -> None:
        self._backend_url = backend_url.rstrip("/")
        self._endpoint = f"{self._backend_url}/battles/{battle_id}"
        self._battle_id = battle_id
        self._reported_by = reported_by
        self._secret = token or None
        self._headers: dict[str, str] = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
        if token:
            self._headers.update({"Authorization": f"Bearer {token}", "X-Battle-Token": token})
        self._token_used = bool(token)
        self._external_httpx = httpx_client
        self._httpx = httpx_client
        self._retry = retry or RetryPolicy()
        self._request_timeout_s = request_timeout_s
        self._retention_s = retention_s
        self._pending: deque[OutboxEntry] = deque()
        self._next_seq = 1
        self._nonce = secrets.token_hex(4)
        self._outbox: OutboxWriter | None = None
        self._header_written = False
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._worker: asyncio.Task[None] | None = None
        self._failures: list[UndeliveredEvent] = []
        self._delivered = 0
        self._result_status: DeliveryStatus | None = None
        self._outage_since: float | None = None
        self._blocked: str | None = None
        self._closing = False
        self._closed = False

    def __repr__(self) -> str:
        return f"BackendReporter(endpoint={self._endpoint!r}, token={'set' if self._secret else 'none'})"

    # ------------------------------------------------------------------------------------------------ public API

    @property
    def endpoint(self) -> str:
        """Where events are posted: ``{backend_url}/battles/{battle_id}``."""
        return self._endpoint

    @property
    def result_status(self) -> DeliveryStatus | None:
        """None before :meth:`result`; then pending, delivered, rejected (4xx) or undelivered."""
        return self._result_status

    @property
    def delivered_count(self) -> int:
        """How many events the backend accepted so far."""
        return self._delivered

    @property
    def pending_count(self) -> int:
        """Events not settled yet (being retried, or waiting behind the one that is)."""
        return len(self._pending)

    @property
    def outbox_path(self) -> Path | None:
        """The durable outbox, when there is one."""
        return self._outbox.path if self._outbox is not None else None

    def progress(
        self,
        message: str,
        *,
        detail: Mapping[str, Any] | None = None,
        markdown_content: str | None = None,
    ) -> None:
        """Queue a progress event (``is_result: false``) and return at once."""
        payload: dict[str, Any] = {
            "is_result": False,
            "message": message,
            "reported_by": self._reported_by,
            "timestamp": utc_timestamp(),
        }
        if detail is not None:
            payload["detail"] = dict(detail)
        if markdown_content is not None:
            payload["markdown_content"] = markdown_content
        self._enqueue(payload, is_result=False)

    def result(
        self,
        message: str,
        *,
        winner: str,
        detail: Mapping[str, Any],
        markdown_content: str | None = None,
    ) -> bool:
        """Queue THE result event (``is_result: true``); False (and nothing sent) if a result was already queued."""
        if self._result_status is not None:
            logger.warning("battle %s: a result was already reported; ignoring the second one", self._battle_id)
            return False
        payload: dict[str, Any] = {
            "is_result": True,
            "message": message,
            "winner": winner,
            "detail": dict(detail),
            "timestamp": utc_timestamp(),
            "reported_by": self._reported_by,
        }
        if markdown_content is not None:
            payload["markdown_content"] = markdown_content
        self._result_status = "pending"
        self._enqueue(payload, is_result=True)
        return True

    def undelivered(self) -> list[dict[str, Any]]:
        """Bodies of the events the backend did not accept (refused, expired, or still pending at close)."""
        return [failure.event for failure in self._failures]

    def failures(self) -> list[UndeliveredEvent]:
        """The undelivered events with the reason for each."""
        return list(self._failures)

    async def open_outbox(self, path: Path) -> None:
        """Keep every event durably in the outbox at ``path``; call it once, before the first event.

        An existing file (an earlier run of the same battle, now resumed) is taken over: its undelivered events go
        first and the numbering continues after its last event, so no idempotency key is ever reused. When the file
        cannot be read the reporter goes on without it (logged): the battle is never failed for it."""
        if self._outbox is not None or self._next_seq != 1 or self._pending or self._closing:
            raise RuntimeError("open_outbox is called once, before the first event")
        writer = OutboxWriter(path)
        try:
            state = await writer.load()
        except OSError as error:
            logger.warning(
                "battle %s: cannot read the outbox %s (%s); events are kept in memory", self._battle_id, path, error
            )
            return
        if state.pending:
            logger.warning(
                "battle %s: %d undelivered events of an earlier run go first", self._battle_id, len(state.pending)
            )
        self._attach(writer, state)

    @classmethod
    async def replay(
        cls,
        path: Path,
        *,
        retention_s: float = DEFAULT_RETENTION_S,
        retry: RetryPolicy | None = None,
        request_timeout_s: float = 5.0,
        httpx_client: httpx.AsyncClient | None = None,
    ) -> BackendReporter | None:
        """A reporter for what an earlier process left undelivered in the outbox at ``path`` (None: nothing to do).

        It is not started (nothing is written or sent) until :meth:`start`, so the caller can still drop it. It has
        no battle token (see the module's docstring). Raises OSError when the file cannot be read."""
        writer = OutboxWriter(path)
        state = await writer.load()
        if not state.pending:
            return None
        if not state.backend_url or not state.battle_id:
            logger.warning(
                "%s: %d undelivered events but no header naming the backend; left as they are", path, len(state.pending)
            )
            return None
        reporter = cls(
            state.backend_url,
            state.battle_id,
            retry=retry,
            request_timeout_s=request_timeout_s,
            retention_s=retention_s,
            httpx_client=httpx_client,
        )
        reporter._token_used = state.token_used
        reporter._attach(writer, state)
        expired = sum(1 for entry in state.pending if entry.enqueued_at + retention_s <= time.time())
        token = "; it had a battle token, which a restarted green agent no longer holds" if state.token_used else ""
        logger.warning(
            "battle %s: replaying %d undelivered events from %s (%d past the retention of %g s)%s",
            *(state.battle_id, len(state.pending), path, expired, retention_s, token),
        )
        return reporter

    def start(self) -> None:
        """Start delivering (needs a running event loop); reporting an event starts it too."""
        self._ensure_worker()

    async def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued event is settled (delivered, refused, expired); False if some are still pending
        when ``timeout`` passes or delivery stopped (closed, or a replay without the token that the backend wants)."""
        if self._pending and not self._closing:
            self._ensure_worker()
        worker = self._worker
        if worker is None or worker.done():
            return not self._pending
        try:
            async with asyncio.timeout(timeout):
                await self._idle.wait()
        except TimeoutError:
            return False
        return not self._pending

    async def aclose(self, timeout: float = 10.0) -> None:
        """Deliver what is queued within ``timeout`` seconds, then stop: what is left stays in the outbox (and is
        listed by :meth:`undelivered`). Releases the file and the HTTP client."""
        if self._closed:
            return
        self._closing = True
        self._wake.set()
        try:
            worker = self._worker
            if worker is not None and not worker.done():
                done, _ = await asyncio.wait({worker}, timeout=max(timeout, 0.0))
                if not done:
                    worker.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await worker
            self._record_left_over(timeout)
        finally:
            self._closed = True
            if self._outbox is not None:
                await self._outbox.aclose()
            if self._httpx is not None and self._external_httpx is None:
                await self._httpx.aclose()

    async def __aenter__(self) -> Self:
        self._ensure_worker()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # Leaving on an error or a cancellation must not wait for the backend: the outbox keeps what is left.
        await self.aclose(timeout=10.0 if exc_type is None else 0.0)

    # ------------------------------------------------------------------------------------------------ internals

    def _attach(self, writer: OutboxWriter, state: OutboxState) -> None:
        self._outbox = writer
        self._pending.extend(state.pending)
        self._next_seq = max(self._next_seq, state.next_seq)
        if self._pending:
            self._idle.clear()
        if self._worker is not None:  # opened after the start: write the header now, deliver the earlier events
            self._ensure_worker()
            self._wake.set()

    def _enqueue(self, payload: dict[str, Any], *, is_result: bool) -> None:
        seq = self._next_seq
        self._next_seq += 1
        payload["event_id"] = f"{self._battle_id}:{self._nonce}:{seq}"
        body = event_json(payload)  # ASCII JSON: a snapshot no later mutation can change
        entry = OutboxEntry(seq, time.time(), is_result, body)
        if self._closing:  # recorded, not written: the outbox is closed
            self._failures.append(
                UndeliveredEvent(event=json.loads(body), reason="reported after the reporter was closed")
            )
            self._result_status = "undelivered" if is_result else self._result_status
            logger.warning("battle %s: event %d reported after the reporter was closed", self._battle_id, seq)
            return
        self._ensure_worker()
        if self._outbox is not None:
            self._outbox.write(entry.line())
        self._pending.append(entry)
        if self._blocked is None:
            self._idle.clear()
        self._wake.set()

    def _ensure_worker(self) -> None:
        if self._outbox is not None and not self._header_written and not self._closing:
            self._header_written = True  # written once started: a replay the caller drops writes nothing
            self._outbox.write(header_line(self._battle_id, self._backend_url, token_used=self._token_used))
        if self._worker is not None or self._closing:
            return
        self._httpx_client()
        self._worker = asyncio.get_running_loop().create_task(self._drain(), name=f"backend-reporter-{self._battle_id}")

    async def _drain(self) -> None:
        try:
            while True:
                if not self._pending:
                    self._idle.set()
                    if self._closing:
                        return
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                entry = self._pending[0]
                try:
                    settled = await self._deliver(entry)
                except asyncio.CancelledError:
                    raise
                except Exception as error:  # a bug here must not stop the battle's reporting
                    logger.exception("battle %s: internal error while posting event %d", self._battle_id, entry.seq)
                    self._settle_failed(entry, f"internal error: {type(error).__name__}", None, 0, refused=True)
                    settled = True
                if not settled:
                    return
                self._pending.popleft()
        finally:
            self._idle.set()

    async def _deliver(self, entry: OutboxEntry) -> bool:
        """Post ``entry`` until it is settled (True), or until delivery must stop (False: a replay without the
        token the backend wants)."""
        deadline = entry.enqueued_at + self._retention_s
        attempt = 0
        last_reason = ""
        while True:
            remaining = deadline - time.time()
            if remaining <= 0:
                reason = f"not delivered within the retention of {self._retention_s:g} s"
                self._settle_failed(
                    entry, reason + (f" (last error: {last_reason})" if last_reason else ""), None, attempt
                )
                return True
            attempt += 1
            answer = await post_entry(
                self._httpx_client(),
                self._endpoint,
                entry,
                headers=self._headers,
                timeout_s=self._request_timeout_s,
                attempt=attempt,
                secret=self._secret,
            )
            if answer.kind == "delivered":
                self._back_online()
                self._settle(entry, "delivered", answer.status_code, "")
                return True
            if answer.kind == "refused":
                self._back_online()
                if answer.status_code in (401, 403) and self._token_used and self._secret is None:
                    self._block(answer)
                    return False
                self._settle_failed(entry, answer.reason, answer.status_code, attempt)
                return True
            last_reason = answer.reason
            delay = self._retry.delay_after(attempt)
            if answer.retry_after_s is not None:
                delay = min(max(delay, answer.retry_after_s), self._retry.max_delay_s)
            self._note_failure(answer.reason, delay)
            await asyncio.sleep(max(0.0, min(delay, deadline - time.time())))

    def _httpx_client(self) -> httpx.AsyncClient:
        if self._httpx is None:
            self._httpx = httpx.AsyncClient(timeout=httpx.Timeout(self._request_timeout_s))
        return self._httpx

    def _settle(self, entry: OutboxEntry, status: MarkStatus, code: int | None, reason: str) -> None:
        if status == "delivered":
            self._delivered += 1
            if entry.is_result:
                self._result_status = "delivered"
        if self._outbox is not None:
            self._outbox.write(mark_line(entry.seq, status, code, reason))

    def _settle_failed(
        self, entry: OutboxEntry, reason: str, code: int | None, attempts: int, *, refused: bool = False
    ) -> None:
        """Record a failure, marked rejected (a 4xx ``code``, or ``refused``) or else expired."""
        refused = refused or (code is not None and 400 <= code < 500)
        if entry.is_result:
            self._result_status = "rejected" if refused else "undelivered"
        self._failures.append(
            UndeliveredEvent(event=json.loads(entry.body), reason=reason, status_code=code, attempts=attempts)
        )
        logger.warning(
            "battle %s: %s event %d not delivered to %s: %s",
            self._battle_id,
            "result" if entry.is_result else "progress",
            entry.seq,
            self._endpoint,
            reason,
        )
        self._settle(entry, "rejected" if refused else "expired", code, reason)

    def _note_failure(self, reason: str, delay: float) -> None:
        if self._outage_since is not None:
            logger.debug("battle %s: still cannot deliver (%s); retrying in %.2f s", self._battle_id, reason, delay)
            return
        self._outage_since = time.monotonic()
        logger.warning(
            "battle %s: cannot deliver to %s (%s); retrying in the background, each event for up to %g s",
            *(self._battle_id, self._endpoint, reason, self._retention_s),
        )

    def _back_online(self) -> None:
        if self._outage_since is not None:
            down, self._outage_since = time.monotonic() - self._outage_since, None
            logger.warning("battle %s: the backend answers again after %.1f s", self._battle_id, down)

    def _block(self, answer: Answer) -> None:
        self._blocked = f"the backend wants the battle token ({answer.reason}), which a restarted green agent lacks"
        where = f"in {self._outbox.path}" if self._outbox is not None else "undelivered"
        logger.warning(
            "battle %s: cannot deliver after a restart: %s; %d events stay %s",
            *(self._battle_id, self._blocked, len(self._pending), where),
        )

    def _record_left_over(self, timeout: float) -> None:
        """List what is still pending as undelivered (it stays in the outbox, unmarked, for a later replay)."""
        if not self._pending:
            return
        if self._blocked is not None:
            reason = self._blocked
        elif self._outbox is not None and not self._outbox.failed:
            reason = f"not delivered before the reporter closed; kept in {self._outbox.path} for a replay"
        else:
            reason = f"not delivered before the close deadline of {timeout:g} s"
        for entry in self._pending:
            if entry.is_result:
                self._result_status = "undelivered"
            self._failures.append(UndeliveredEvent(event=json.loads(entry.body), reason=reason))
        logger.warning("battle %s: %d events not delivered at close: %s", self._battle_id, len(self._pending), reason)
        self._pending.clear()

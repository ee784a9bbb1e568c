"""Posting battle progress and the final result to an AgentBeats backend, without ever holding up the battle.

Why it looks like this: the reference green agent posted progress synchronously from its event loop, so a slow or
dead backend stalled every attempt. Here :meth:`BackendReporter.progress` and :meth:`BackendReporter.result` only
enqueue and return; one background task posts the events **in the order they were reported** (AgentBeats shows
``interact_history`` in arrival order), retrying each with exponential backoff (tenacity) before moving on.

Delivery rules (``POST {backend_url}/battles/{battle_id}``):

* 2xx: delivered.
* 5xx, 408, 429, connection errors and timeouts: retried with backoff (default 0.2 s doubling to at most 5 s,
  6 attempts in all; a ``Retry-After`` header is honoured up to the maximum delay), then given up. 408 and 429
  are retried although they are 4xx: both mean "try again later".
* 400 on the result: the battle is already finished (the backend's timeout made it a draw, or the result got
  through on an earlier attempt whose answer was lost); recorded, not retried. Any other 4xx: recorded, not
  retried.
* The result is sent at most once per reporter: a second :meth:`~BackendReporter.result` call is ignored.
* Nothing is ever raised to the caller because of the backend. Events that were not delivered (given up,
  refused, or still queued when :meth:`~BackendReporter.aclose`'s deadline passed) are listed by
  :meth:`~BackendReporter.undelivered` and appended by ``aclose`` to ``spool_path`` as JSON lines
  ``{"battle_id", "endpoint", "event", "reason", "status_code", "attempts"}`` (``event`` is the body we tried to
  post, so it can be replayed).

The optional per-battle token is sent only as headers, ``Authorization: Bearer <token>`` and
``X-Battle-Token: <token>``; it is never put in an event body, the spool file, a log line or ``repr``.
Event bodies are JSON-sanitised when reported (values that are not JSON become strings), so a later mutation by
the caller cannot change what is posted. Call the reporting methods from the event loop's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

import httpx
from pydantic import BaseModel, ConfigDict, Field
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt

logger = logging.getLogger(__name__)

DeliveryStatus = Literal["pending", "delivered", "rejected", "undelivered"]


class RetryPolicy(BaseModel):
    """Exponential backoff for one event: ``initial_delay_s * multiplier**(n-1)`` capped at ``max_delay_s``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    initial_delay_s: float = Field(default=0.2, ge=0)
    multiplier: float = Field(default=2.0, ge=1)
    max_delay_s: float = Field(default=5.0, ge=0)
    max_attempts: int = Field(default=6, ge=1)

    def delay_after(self, attempt: int) -> float:
        """The pause after failed attempt number ``attempt`` (1-based)."""
        return min(self.initial_delay_s * self.multiplier ** (attempt - 1), self.max_delay_s)


class UndeliveredEvent(BaseModel):
    """An event the backend did not accept, and why."""

    model_config = ConfigDict(frozen=True)

    event: dict[str, Any]
    reason: str
    status_code: int | None = None
    attempts: int = 0


def utc_timestamp() -> str:
    """ISO 8601 UTC with a ``Z`` suffix, the form AgentBeats agents use."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _json_safe(value: Any) -> Any:
    """A deep copy made of JSON types only (other values become ``str``)."""
    return json.loads(json.dumps(value, default=str))


@dataclass
class _Queued:
    payload: dict[str, Any]
    is_result: bool


_STOP = object()


class _Retryable(Exception):
    """A failed post worth another try: a transport error, or HTTP 5xx, 408 or 429."""

    def __init__(
        self, reason: str, attempt: int, *, status_code: int | None = None, retry_after_s: float | None = None
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.attempt = attempt
        self.status_code = status_code
        self.retry_after_s = retry_after_s


def _retry_after_s(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


class BackendReporter:
    """Queue-backed, ordered, retrying, never-blocking poster of AgentBeats battle events (async context manager)."""

    def __init__(
        self,
        backend_url: str,
        battle_id: str,
        *,
        reported_by: str = "green_agent",
        token: str | None = None,
        httpx_client: httpx.AsyncClient | None = None,
        spool_path: str | Path | None = None,
        retry: RetryPolicy | None = None,
        request_timeout_s: float = 5.0,
    ) -> None:
        self._endpoint = f"{backend_url.rstrip('/')}/battles/{battle_id}"
        self._battle_id = battle_id
        self._reported_by = reported_by
        self._headers: dict[str, str] = {}
        if token:
            self._headers = {"Authorization": f"Bearer {token}", "X-Battle-Token": token}
        self._external_httpx = httpx_client
        self._httpx = httpx_client
        self._spool_path = Path(spool_path) if spool_path is not None else None
        self._retry = retry or RetryPolicy()
        self._request_timeout_s = request_timeout_s
        self._queue: asyncio.Queue[_Queued | object] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None
        self._inflight: _Queued | None = None
        self._inflight_attempts = 0
        self._inflight_reason = ""
        self._failures: list[UndeliveredEvent] = []
        self._delivered = 0
        self._result_status: DeliveryStatus | None = None
        self._closing = False
        self._closed = False

    def __repr__(self) -> str:
        return f"BackendReporter(endpoint={self._endpoint!r}, token={'set' if self._headers else 'none'})"

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
            payload["detail"] = _json_safe(dict(detail))
        if markdown_content is not None:
            payload["markdown_content"] = markdown_content
        self._enqueue(_Queued(payload, is_result=False))

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
            "detail": _json_safe(dict(detail)),
            "timestamp": utc_timestamp(),
            "reported_by": self._reported_by,
        }
        if markdown_content is not None:
            payload["markdown_content"] = markdown_content
        self._result_status = "pending"
        self._enqueue(_Queued(payload, is_result=True))
        return True

    def undelivered(self) -> list[dict[str, Any]]:
        """Bodies of the events the backend did not accept (given up, refused, or cut off by ``aclose``)."""
        return [failure.event for failure in self._failures]

    def failures(self) -> list[UndeliveredEvent]:
        """The undelivered events with the reason for each."""
        return list(self._failures)

    async def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued event has been delivered or given up; False if ``timeout`` passed first."""
        if self._worker is None:
            return self._queue.empty()
        try:
            async with asyncio.timeout(timeout):
                await self._queue.join()
        except TimeoutError:
            return False
        return True

    async def aclose(self, timeout: float = 10.0) -> None:
        """Deliver what is queued within ``timeout`` seconds, record the rest, write the spool file, release HTTP."""
        if self._closed:
            return
        self._closing = True
        try:
            if self._worker is not None:
                self._queue.put_nowait(_STOP)
                done, _ = await asyncio.wait({self._worker}, timeout=timeout)
                if not done:
                    self._worker.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await self._worker
                    self._record_cut_off(f"not delivered before the close deadline of {timeout:g} s")
            else:
                self._record_cut_off("the reporter was closed before it started")
        finally:
            self._closed = True
            if self._httpx is not None and self._external_httpx is None:
                await self._httpx.aclose()
            await self._write_spool()

    async def __aenter__(self) -> Self:
        self._ensure_worker()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    # ------------------------------------------------------------------------------------------------ internals

    def _enqueue(self, item: _Queued) -> None:
        if self._closing:
            self._fail(item, "reported after the reporter was closed", None, 0)
            return
        self._ensure_worker()
        self._queue.put_nowait(item)

    def _ensure_worker(self) -> None:
        if self._worker is not None:
            return
        if self._httpx is None:
            self._httpx = httpx.AsyncClient(timeout=httpx.Timeout(self._request_timeout_s))
        self._worker = asyncio.get_running_loop().create_task(self._drain(), name=f"backend-reporter-{self._battle_id}")

    async def _drain(self) -> None:
        while True:
            item = await self._queue.get()
            try:
                if item is _STOP:
                    return
                assert isinstance(item, _Queued)
                self._inflight, self._inflight_attempts, self._inflight_reason = item, 0, ""
                try:
                    await self._deliver(item)
                except asyncio.CancelledError:
                    raise
                except Exception as error:
                    self._fail(item, f"internal error: {type(error).__name__}: {error}", None, self._inflight_attempts)
                self._inflight = None
            finally:
                self._queue.task_done()

    async def _deliver(self, item: _Queued) -> None:
        """Post ``item`` until it is delivered, refused, or the attempts run out (then it is recorded as failed)."""
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(_Retryable),
            stop=stop_after_attempt(self._retry.max_attempts),
            wait=self._delay_s,
            before_sleep=self._log_retry,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    await self._post(item, attempt.retry_state.attempt_number)
        except _Retryable as last:
            self._fail(item, f"gave up after {last.attempt} attempts: {last.reason}", last.status_code, last.attempt)

    async def _post(self, item: _Queued, attempt: int) -> None:
        """One POST: returns when delivered or refused for good; raises :class:`_Retryable` when worth another try."""
        assert self._httpx is not None
        self._inflight_attempts = attempt
        try:
            response = await self._httpx.post(
                self._endpoint, json=item.payload, headers=self._headers, timeout=self._request_timeout_s
            )
        except httpx.HTTPError as error:
            reason = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
            self._inflight_reason = reason
            raise _Retryable(reason, attempt) from error
        status = response.status_code
        if 200 <= status < 300:
            self._delivered += 1
            if item.is_result:
                self._result_status = "delivered"
            return
        body = response.text[:200]
        if status == 400 and item.is_result:
            earlier = " (an earlier attempt may have got through)" if attempt > 1 else ""
            self._fail(item, f"battle already finished: HTTP 400{earlier}: {body}", status, attempt)
            return
        reason = f"HTTP {status}: {body}"
        if not (status >= 500 or status in (408, 429)):
            self._fail(item, reason, status, attempt)
            return
        self._inflight_reason = reason
        raise _Retryable(reason, attempt, status_code=status, retry_after_s=_retry_after_s(response))

    def _delay_s(self, state: RetryCallState) -> float:
        """The policy's pause after the failed attempt; a Retry-After hint lengthens it, up to the policy's cap."""
        delay = self._retry.delay_after(state.attempt_number)
        failure = state.outcome.exception() if state.outcome is not None else None
        hint = failure.retry_after_s if isinstance(failure, _Retryable) else None
        if hint is not None:
            delay = min(max(delay, hint), self._retry.max_delay_s)
        return delay

    def _log_retry(self, state: RetryCallState) -> None:
        failure = state.outcome.exception() if state.outcome is not None else None
        logger.debug(
            "battle %s: post attempt %d failed (%s); retrying in %.2fs",
            self._battle_id,
            state.attempt_number,
            failure.reason if isinstance(failure, _Retryable) else failure,
            state.upcoming_sleep,
        )

    def _fail(self, item: _Queued, reason: str, status_code: int | None, attempts: int) -> None:
        rejected = status_code is not None and 400 <= status_code < 500 and status_code not in (408, 429)
        if item.is_result:
            self._result_status = "rejected" if rejected else "undelivered"
        self._failures.append(
            UndeliveredEvent(event=item.payload, reason=reason, status_code=status_code, attempts=attempts)
        )
        logger.warning(
            "battle %s: %s event not delivered to %s: %s",
            self._battle_id,
            "result" if item.is_result else "progress",
            self._endpoint,
            reason,
        )

    def _record_cut_off(self, reason: str) -> None:
        """Move the in-flight and queued events to the failures (the worker is gone)."""
        if self._inflight is not None:
            last = f" (last error: {self._inflight_reason})" if self._inflight_reason else ""
            self._fail(self._inflight, reason + last, None, self._inflight_attempts)
            self._inflight = None
        while not self._queue.empty():
            item = self._queue.get_nowait()
            self._queue.task_done()
            if isinstance(item, _Queued):
                self._fail(item, reason, None, 0)

    async def _write_spool(self) -> None:
        if self._spool_path is None or not self._failures:
            return
        lines = [
            json.dumps(
                {
                    "battle_id": self._battle_id,
                    "endpoint": self._endpoint,
                    "event": failure.event,
                    "reason": failure.reason,
                    "status_code": failure.status_code,
                    "attempts": failure.attempts,
                },
                ensure_ascii=False,
            )
            for failure in self._failures
        ]
        path = self._spool_path

        def write() -> None:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as handle:
                handle.write("\n".join(lines) + "\n")

        try:
            await asyncio.to_thread(write)
        except OSError as error:
            logger.warning("battle %s: cannot write the undelivered events to %s: %s", self._battle_id, path, error)

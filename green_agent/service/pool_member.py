"""A member of a pool of green agents working battles' attempts leased through the backend (issue 29).

:class:`PoolMember` leases attempts for its free capacity (never more: backpressure is the number of attempts it
holds), keeps each lease alive with heartbeats (every third of the TTL) while the injected ``run_attempt(lease) ->
result`` runs it, and then records the result once, or reports an infrastructure error when ``run_attempt`` raised
(the harness failed, not the agent: the backend requeues the attempt up to the queue's ``max_requeues``).

A lease the backend no longer honours (a refused heartbeat: fenced, expired, ...) stops the attempt at once and its
result is dropped with a log line: a worker that lost its lease never records. A refused record is logged and
dropped the same way. Cancelling :meth:`PoolMember.run` stops everything it started (no orphan tasks) and releases
nothing: the leases run out after their TTL and other members lease those attempts again, exactly as when the
process dies.

What is not here yet (docs/design/attempt-leases.md, "The green agent's side"): the ``run_attempt`` that runs an
attempt on the worker pool of docs/design/workers.md, and the owner's publishing and collecting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from pydantic_core import PydanticSerializationError

from green_agent.service.attempt_lease_client import (
    AttemptLeaseClient,
    AttemptLeaseError,
    LeaseBackendDown,
    LeaseLost,
    LeaseRequestRefused,
)
from green_agent.wire.attempt_leases import (
    MAX_LEASES_PER_CALL,
    MAX_TTL_S,
    MAX_WAIT_S,
    MIN_TTL_S,
    LeaseOut,
    LeaseRequest,
)

logger = logging.getLogger(__name__)

RunAttempt = Callable[[LeaseOut], Coroutine[Any, Any, dict[str, Any]]]
"""Runs one leased attempt and returns its result (a JSON object); raising means the harness failed it."""

MAX_CAPACITY = 4096


@dataclass
class MemberCounts:
    """What a member did so far (for logs and tests)."""

    leased: int = 0
    recorded: int = 0
    duplicates: int = 0
    dropped: int = 0
    """Results not recorded because the lease was lost (refused heartbeat or record) or the record failed."""
    infra_errors: int = 0


class PoolMember:
    """Leases and runs attempts of its pool until cancelled (:meth:`run`)."""

    def __init__(
        self,
        client: AttemptLeaseClient,
        worker_id: str,
        run_attempt: RunAttempt,
        *,
        capacity: int,
        ttl_s: float = 30.0,
        wait_s: float = 10.0,
        heartbeat_every_s: float | None = None,
        retry_pause_s: float = 1.0,
    ) -> None:
        if not 1 <= capacity <= MAX_CAPACITY:
            raise ValueError(f"capacity must be 1 to {MAX_CAPACITY}, not {capacity}")
        if not MIN_TTL_S <= ttl_s <= MAX_TTL_S:
            raise ValueError(f"ttl_s must be {MIN_TTL_S} to {MAX_TTL_S} seconds, not {ttl_s}")
        if not 0 <= wait_s <= MAX_WAIT_S:
            raise ValueError(f"wait_s must be 0 to {MAX_WAIT_S} seconds, not {wait_s}")
        LeaseRequest(worker_id=worker_id)  # the backend's rules for a worker id, checked now (names the field)
        every = ttl_s / 3 if heartbeat_every_s is None else heartbeat_every_s
        if not 0 < every < ttl_s:
            raise ValueError(f"heartbeat_every_s must be above 0 and below ttl_s ({ttl_s}), not {every}")
        self._client = client
        self.worker_id = worker_id
        self._run_attempt = run_attempt
        self.capacity = capacity
        self.ttl_s = ttl_s
        self.wait_s = wait_s
        self.heartbeat_every_s = every
        self._retry_pause_s = retry_pause_s
        self.counts = MemberCounts()
        self._holding = 0
        self.most_held = 0
        """The most attempts held at once (never above ``capacity``)."""
        self._room = asyncio.Event()
        self._room.set()

    @property
    def holding(self) -> int:
        """Attempts leased and not finished."""
        return self._holding

    async def run(self) -> None:
        """Lease and run attempts until cancelled. Raises :class:`AttemptLeaseError` when the backend refuses the
        member itself (the pool key, the pool, a malformed request): nothing would change by asking again; the
        attempts it holds are stopped first."""
        try:
            async with asyncio.TaskGroup() as group:
                await self._lease_loop(group)
        except BaseExceptionGroup as errors:  # only the loop's own error: the attempts' tasks never raise
            first = errors.exceptions[0]
            if len(errors.exceptions) == 1 and isinstance(first, Exception):
                raise first from None
            raise

    async def _lease_loop(self, group: asyncio.TaskGroup) -> None:
        while True:
            await self._room.wait()
            free = self.capacity - self._holding
            try:
                leases = await self._client.lease(
                    self.worker_id, limit=min(free, MAX_LEASES_PER_CALL), ttl_s=self.ttl_s, wait_s=self.wait_s
                )
            except LeaseBackendDown as error:
                logger.warning("pool member %s: cannot lease (%s); trying again", self.worker_id, error)
                await asyncio.sleep(self._retry_pause_s)
                continue
            for lease in leases[:free]:
                self._take(group, lease)

    def _take(self, group: asyncio.TaskGroup, lease: LeaseOut) -> None:
        self._holding += 1
        self.most_held = max(self.most_held, self._holding)
        self.counts.leased += 1
        if self._holding >= self.capacity:
            self._room.clear()
        group.create_task(self._work(lease), name=f"pool-attempt-{lease.label}")

    def _release(self) -> None:
        self._holding -= 1
        self._room.set()

    async def _work(self, lease: LeaseOut) -> None:
        """Run one attempt under heartbeats; record it, report its infrastructure error, or drop it."""
        attempt = asyncio.create_task(self._run_attempt(lease), name=f"run-{lease.label}")
        beats = asyncio.create_task(self._keep_alive(lease), name=f"heartbeat-{lease.label}")
        try:
            await asyncio.wait({attempt, beats}, return_when=asyncio.FIRST_COMPLETED)
            if beats.done():  # only ends when the lease is lost
                lost = beats.result()
                logger.warning(
                    "pool member %s: lease %s lost (%s); the attempt is stopped and its result dropped",
                    *(self.worker_id, lease.label, lost.reason),
                )
                self.counts.dropped += 1
                return
            beats.cancel()
            await _settled(beats)
            try:
                result = attempt.result()
            except Exception as error:  # any failure of run_attempt is the harness's
                await self._report(lease, f"{type(error).__name__}: {error}")
                return
            await self._record(lease, result)
        except Exception:  # a bug here must not stop the member's other attempts
            logger.exception("pool member %s: internal error on %s", self.worker_id, lease.label)
        finally:
            for task in (attempt, beats):
                task.cancel()
            await _settled(attempt)
            await _settled(beats)
            self._release()

    async def _keep_alive(self, lease: LeaseOut) -> LeaseLost:
        """Heartbeat until the lease is lost (returns why); retries through outages until the lease would expire."""
        expires = time.monotonic() + lease.ttl_s
        while True:
            await asyncio.sleep(self.heartbeat_every_s)
            sent = time.monotonic()
            try:
                await self._client.heartbeat(lease, self.ttl_s, deadline=expires)
            except LeaseLost as lost:
                return lost
            except AttemptLeaseError as error:
                logger.warning("pool member %s: heartbeat of %s failed: %s", self.worker_id, lease.label, error)
                continue  # an outage: keep going; the record will tell whether the lease held
            expires = sent + self.ttl_s

    async def _record(self, lease: LeaseOut, result: dict[str, Any]) -> None:
        try:
            answer = await self._client.record(lease, result)
        except LeaseLost as lost:
            self.counts.dropped += 1
            logger.warning(
                "pool member %s: record of %s refused (%s): the lease was lost; result dropped",
                *(self.worker_id, lease.label, lost.reason),
            )
            return
        except (LeaseRequestRefused, PydanticSerializationError, TypeError, ValueError) as error:
            # The result itself is unusable (not JSON, too large): the harness's fault, reported as such.
            await self._report(lease, f"the result could not be recorded: {error}")
            return
        except AttemptLeaseError as error:
            self.counts.dropped += 1
            logger.error("pool member %s: result of %s not recorded: %s", self.worker_id, lease.label, error)
            return
        if answer.status == "duplicate":
            self.counts.duplicates += 1
        else:
            self.counts.recorded += 1

    async def _report(self, lease: LeaseOut, error: str) -> None:
        self.counts.infra_errors += 1
        try:
            answer = await self._client.report_error(lease, error)
        except AttemptLeaseError as refused:
            logger.warning(
                "pool member %s: infrastructure error of %s not reported (%s); the lease runs out instead",
                *(self.worker_id, lease.label, refused),
            )
            return
        logger.warning(
            "pool member %s: %s failed in the harness (%s): %s", self.worker_id, lease.label, answer.status, error[:300]
        )


async def _settled(task: asyncio.Task[Any]) -> None:
    """Wait for a task that was cancelled or finished, swallowing its cancellation and its error."""
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task

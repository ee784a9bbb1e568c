"""A pool member's share of the per-provider caps (issues 27 and 29): the operator's ``--provider-max-concurrency``
divided by the pool's live members, refreshed from the backend's store (docs/design/providers.md, "Across a pool").

Every lease and heartbeat call of a member records it in the backend's store; :class:`PoolPresence` asks
``GET /pools/{pool}/members`` every ``every_s`` (5 s) how many were seen within ``window_s`` (90 s: three times the
lease wait cap) and sets this green agent's part of the cap to ``max(1, cap // members)`` through
:meth:`~green_agent.provider_limits.ProviderLimits.set_divisor` (counting itself when it has not called yet). Its
battles' worker processes and the serving process share that part as before. Calls waiting for a slot are never
stranded: a larger share serves them at once, a smaller one after the calls in flight.

When the backend cannot be reached the last count stays (logged once, and once again on recovery): the pool has
not shrunk because we cannot see it. A refused pool key is logged as an error and retried at the same pace (the
member's own calls are refused the same way and say so). Leaving (the ``async with`` ends, or the task is
cancelled) gives this green agent the whole cap back.

Start it beside the pool member with one line, e.g. in the service's lifespan::

    async with PoolPresence(client, context.registry.providers, worker_id=settings.worker_id):
        ...
"""

from __future__ import annotations

import asyncio
import logging
import time
from types import TracebackType
from typing import Self

from green_agent.provider_limits import ProviderLimits
from green_agent.service.attempt_lease_client import AttemptLeaseClient, AttemptLeaseError, LeaseBackendDown
from green_agent.wire.attempt_leases import DEFAULT_MEMBERS_WINDOW_S, MAX_MEMBERS_WINDOW_S, MIN_MEMBERS_WINDOW_S

logger = logging.getLogger(__name__)

DEFAULT_EVERY_S = 5.0


class PoolPresence:
    """Keeps ``limits``' divisor at the pool's live member count (see the module docstring)."""

    def __init__(
        self,
        client: AttemptLeaseClient,
        limits: ProviderLimits,
        *,
        worker_id: str | None = None,
        every_s: float = DEFAULT_EVERY_S,
        window_s: float = DEFAULT_MEMBERS_WINDOW_S,
    ) -> None:
        if not every_s > 0:
            raise ValueError(f"every_s: above 0 (got {every_s})")
        if not MIN_MEMBERS_WINDOW_S <= window_s <= MAX_MEMBERS_WINDOW_S:
            raise ValueError(f"window_s: {MIN_MEMBERS_WINDOW_S} to {MAX_MEMBERS_WINDOW_S} seconds (got {window_s})")
        self._client = client
        self._limits = limits
        self.worker_id = worker_id
        self.every_s = every_s
        self.window_s = window_s
        self.members: int | None = None
        """The last member count read (None before the first answer)."""
        self._task: asyncio.Task[None] | None = None
        self._trouble: str | None = None

    async def refresh(self) -> int:
        """Ask the backend once and set the divisor; returns the member count used. Raises
        :class:`~green_agent.service.attempt_lease_client.AttemptLeaseError` when the backend refused or was down."""
        found = await self._client.members(window_s=self.window_s, deadline=time.monotonic() + 2 * self.every_s)
        count = max(0, found.count)
        if self.worker_id is not None and self.worker_id not in found.worker_ids and len(found.worker_ids) >= count:
            count += 1  # not seen yet (no lease call so far): we are a member all the same
        count = max(1, count)
        if count != self.members:
            logger.info(
                "pool %s: %d live member(s); this green agent's provider cap is now %d of %d",
                self._client.pool, count, max(1, self._limits.max_concurrency // count), self._limits.max_concurrency,
            )  # fmt: skip
        self.members = count
        self._limits.set_divisor(count)
        return count

    async def run(self) -> None:
        """Refresh every ``every_s`` until cancelled; the divisor goes back to 1 when it stops."""
        try:
            while True:
                try:
                    await self.refresh()
                    if self._trouble is not None:
                        logger.warning("pool %s: member count read again", self._client.pool)
                        self._trouble = None
                except AttemptLeaseError as error:
                    self._report(error)
                await asyncio.sleep(self.every_s)
        finally:
            self._limits.set_divisor(1)

    def _report(self, error: AttemptLeaseError) -> None:
        kind = "down" if isinstance(error, LeaseBackendDown) else "refused"
        if kind == self._trouble:
            return
        self._trouble = kind
        if kind == "down":
            logger.warning("pool %s: cannot read the member count (%s); keeping %s", self._client.pool, error,
                           self.members or 1)  # fmt: skip
        else:
            logger.error("pool %s: the backend refused the member count: %s", self._client.pool, error)

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self.run(), name=f"pool-presence-{self._client.pool}")
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop refreshing (the divisor goes back to 1)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task])  # our own cancellation still reaches us
            if not task.cancelled() and task.exception() is not None:
                logger.error("pool %s: the member count stopped: %r", self._client.pool, task.exception())

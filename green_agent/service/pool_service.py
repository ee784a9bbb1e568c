"""``arena-green --pool ...``: this green agent is a member of a pool (issue 29) and leases attempts beside its A2A
server.

:class:`PoolComponent` is a :class:`~green_agent.service.a2a_server.Component` without routes: its lifespan opens an
:class:`~green_agent.service.attempt_lease_client.AttemptLeaseClient` on the pool's backend with the pool key, a
:class:`~green_agent.service.pool_runner.PoolRunner` on the application's scoring processes, sandbox factory and
provider caps, and runs a :class:`~green_agent.service.pool_member.PoolMember` as a task until the application
stops: then the member is cancelled (its attempts stop; their leases run out and other members take them again),
awaited, and the runner and client are closed. Beside it runs the takeover watch
(:class:`~green_agent.service.pool_takeover.PoolTakeover`), told of every battle the runner leases an attempt of: a
battle whose owner went silent is claimed and finished on this green agent. No task outlives the lifespan.

A member the backend refuses (the pool key, the pool: nothing changes by asking again at once) logs an error and
tries again every :data:`REFUSED_PAUSE_S` seconds: it never takes the A2A server down with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Final

from starlette.routing import BaseRoute

from green_agent.service.attempt_lease_client import AttemptLeaseClient, AttemptLeaseError
from green_agent.service.pool_member import PoolMember
from green_agent.service.pool_presence import PoolPresence
from green_agent.service.pool_runner import PoolRunner
from green_agent.service.pool_settings import PoolSettings
from green_agent.service.pool_takeover import PoolTakeover
from green_agent.service.running_battles import BattleRegistry

log = logging.getLogger(__name__)

REFUSED_PAUSE_S: Final = 30.0
LEASE_TTL_S: Final = 30.0
LEASE_WAIT_S: Final = 10.0


class PoolComponent:
    """Membership of ``settings``' pool for as long as the application runs."""

    def __init__(
        self,
        settings: PoolSettings,
        *,
        ttl_s: float = LEASE_TTL_S,
        wait_s: float = LEASE_WAIT_S,
        refused_pause_s: float = REFUSED_PAUSE_S,
    ) -> None:
        self.settings = settings
        self._ttl_s = ttl_s
        self._wait_s = wait_s
        self._refused_pause_s = refused_pause_s
        self.member: PoolMember | None = None
        """The running member (None before the lifespan and after it)."""
        self.takeover: PoolTakeover | None = None
        """The running takeover watch (None before the lifespan and after it)."""

    def routes(self, registry: Callable[[], BattleRegistry]) -> list[BaseRoute]:
        return []

    @contextlib.asynccontextmanager
    async def lifespan(self, registry: BattleRegistry) -> AsyncIterator[None]:
        settings = self.settings
        async with contextlib.AsyncExitStack() as stack:
            client = await stack.enter_async_context(
                AttemptLeaseClient(settings.backend_url, settings.name, settings.key)
            )
            # This agent's share of the provider caps: cap // the pool's live members (pool_presence.py).
            await stack.enter_async_context(PoolPresence(client, registry.providers, worker_id=settings.worker_id))
            # Battles whose owner goes silent are taken over and finished here (pool_takeover.py).
            takeover = PoolTakeover(registry, settings, client)
            runner = await stack.enter_async_context(
                PoolRunner(
                    settings.worker_id,
                    scoring=registry.scoring,
                    providers=registry.providers,
                    operator_config=registry.default_config,
                    sandboxes=registry.sandboxes,
                    capacity=settings.capacity,
                    backend_url=settings.backend_url,
                    on_battle_seen=takeover.battle_seen,
                )
            )
            member = PoolMember(
                client, settings.worker_id, runner.run_attempt, capacity=settings.capacity, ttl_s=self._ttl_s,
                wait_s=self._wait_s,
            )  # fmt: skip
            tasks = [
                asyncio.create_task(self._serve(member), name=f"pool-member-{settings.worker_id}"),
                asyncio.create_task(self._watch(takeover), name=f"pool-takeover-{settings.worker_id}"),
            ]
            self.member, self.takeover = member, takeover
            log.info(
                "pool member %s: leasing attempts of pool %s from %s (capacity %d)",
                *(settings.worker_id, settings.name, settings.backend_url, settings.capacity),
            )
            try:
                yield
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                self.member = self.takeover = None

    async def _serve(self, member: PoolMember) -> None:
        while True:
            try:
                await member.run()
            except AttemptLeaseError as error:
                log.error(
                    "pool member %s: the backend refused the member (%s); trying again in %g s",
                    *(member.worker_id, error, self._refused_pause_s),
                )
            except Exception:  # a bug: logged, and the member leases again (the A2A server keeps serving)
                log.exception("pool member %s stopped", member.worker_id)
            await asyncio.sleep(self._refused_pause_s)

    async def _watch(self, takeover: PoolTakeover) -> None:
        while True:
            try:
                await takeover.run()
                return
            except Exception:  # a bug: logged, and the watch starts again (the member keeps leasing)
                log.exception("pool member %s: the takeover watch stopped", self.settings.worker_id)
            await asyncio.sleep(self._refused_pause_s)

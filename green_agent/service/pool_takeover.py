"""A pool member finishing the battles whose owner went silent (issue 29; docs/design/attempt-leases.md).

Started with the member when ``arena-green --pool`` is set (green_agent/service/pool_service.py): the member's
runner tells :meth:`PoolTakeover.battle_seen` about every battle whose attempts it leases (its ``PooledBattle``, as
the owner published it). Every ``check_every_s`` the takeover asks the backend to make this member the owner of each
such battle (``take_over``); while the owner heartbeats the answer is ``OwnerStillAlive`` (the normal case). When the
owner has been silent for the queue's ``owner_ttl_s`` the claim wins and carries the battle's token: the battle is
started here through the service's :class:`~green_agent.service.running_battles.BattleRegistry` (run directory
``runs/<battle id>/``, resumed when that holds an unfinished run of it), reporting to the pool's backend with the
token, and under the white agent's name the owner's payload carried (``PooledBattle.white_name``). The registry makes
it a pooled owner (green_agent/service/pool_owner.py): what it publishes the store answers ``already`` (the attempts
the owner published), its collector takes the finished ones from the store at once, the pool's members finish the
rest (attempts the dead owner published and still open are leased as before), the new owner publishes what the dead
one never did, and the result it posts is computed from all stored attempts.

A battle running here already (this green agent is its owner, or took it over before) is never claimed nor started
twice; a battle the backend no longer runs, or refuses us, is forgotten. What the store or the payload says is
hostile: only battle ids the backend accepts are tracked, at most :data:`MAX_TRACKED` at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict

from green_agent.engine.config import ConfigError
from green_agent.service.attempt_lease_client import (
    AttemptLeaseClient,
    AttemptLeaseError,
    LeaseBackendDown,
    OwnerStillAlive,
)
from green_agent.service.backend_target import BackendTarget
from green_agent.service.pool_settings import PoolSettings
from green_agent.service.running_battles import BattleRegistry
from green_agent.wire.agentbeats import CapacityError
from green_agent.wire.pool_attempts import PooledBattle

log = logging.getLogger(__name__)

DEFAULT_CHECK_EVERY_S = 30.0
"""How often a seen battle's owner is checked (the backend's default ``owner_ttl_s`` is 60 s)."""
MAX_TRACKED = 1000


class PoolTakeover:
    """Claims and finishes the seen battles whose owner stopped heartbeating (:meth:`run`, until cancelled)."""

    def __init__(
        self,
        registry: BattleRegistry,
        settings: PoolSettings,
        client: AttemptLeaseClient,
        *,
        check_every_s: float = DEFAULT_CHECK_EVERY_S,
    ) -> None:
        if check_every_s <= 0:
            raise ValueError(f"check_every_s must be above 0, not {check_every_s}")
        self._registry = registry
        self._settings = settings
        self._client = client
        self.check_every_s = check_every_s
        self._seen: OrderedDict[str, PooledBattle] = OrderedDict()
        self._wake = asyncio.Event()
        self.taken: list[str] = []
        """Battles this member took over and started (for logs and tests)."""
        self.owner_alive = 0
        """Claims answered ``OwnerStillAlive`` so far (for logs and tests)."""

    def battle_seen(self, battle: PooledBattle, backend_url: str) -> None:
        """A battle whose attempts this member leased from ``backend_url`` (cheap, idempotent; on the event loop)."""
        if not self._settings.serves(backend_url) or battle.battle_id in self._seen:
            return
        if len(self._seen) >= MAX_TRACKED:
            self._seen.popitem(last=False)
        self._seen[battle.battle_id] = battle
        self._wake.set()

    @property
    def watching(self) -> list[str]:
        """The battle ids whose owner is checked."""
        return list(self._seen)

    async def run(self) -> None:
        """Check the seen battles' owners every ``check_every_s`` until cancelled."""
        while True:
            if not self._seen:
                self._wake.clear()
                await self._wake.wait()
            await asyncio.sleep(self.check_every_s)
            for battle in list(self._seen.values()):
                await self._check(battle)

    async def _check(self, battle: PooledBattle) -> None:
        battle_id = battle.battle_id
        record = self._registry.get(battle_id)
        if record is not None:
            if not record.running:  # it ran here and ended: nothing left to finish from this member
                self._seen.pop(battle_id, None)
            return
        try:
            answer = await self._client.take_over(battle_id, self._settings.worker_id)
        except OwnerStillAlive:
            self.owner_alive += 1
            return
        except LeaseBackendDown as error:
            log.warning("pool takeover: cannot reach the backend about battle %s (%s)", battle_id, error)
            return
        except AttemptLeaseError as error:  # no queue, not running any more, or not ours to claim
            log.info("pool takeover: battle %s is not taken over (%s); forgotten", battle_id, error)
            self._seen.pop(battle_id, None)
            return
        if not answer.battle_token:
            log.warning("pool takeover: the backend named us owner of %s without its token", battle_id)
            return
        # The winner is posted under the white agent's name the owner published (battle_start's, on its disk only).
        target = BackendTarget(self._settings.backend_url, answer.battle_token, battle.white_name or "white_agent")
        try:
            self._registry.start(battle_id, battle.white_agent_url, battle.config, backend=target, resume=None)
        except CapacityError as error:  # busy: we are its owner now, the next check starts it
            log.warning("pool takeover: battle %s waits (%s)", battle_id, error)
            return
        except ConfigError as error:
            log.error("pool takeover: battle %s cannot be started here: %s", battle_id, error)
            self._seen.pop(battle_id, None)
            return
        self.taken.append(battle_id)
        log.warning("pool takeover: battle %s's owner went silent; %s finishes it", battle_id, answer.owner_worker)

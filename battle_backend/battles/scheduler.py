"""The battle queue: starts queued battles while fewer than ``max_concurrent_battles`` run, owns every task a
battle needs (setup flow, timeout, green-agent stream), frees the slot when the battle ends, and picks battles back
up after a restart.

A queued battle whose agents are held by another battle waits its turn; the next queued battle with free agents
may start before it (so one busy agent does not block unrelated battles). A battle queued for a green-agent pool
starts on whichever member is free (the store picks it), so several members run the pool's battles in parallel.

Several replicas (a shared PostgreSQL store): every replica runs this loop over the one queue in the database; the
store's start is atomic, so a battle starts on exactly one replica, which owns it (runs its setup, its timeout and
its green-agent stream). ``max_concurrent_battles`` bounds each replica. Every third of ``replica_lease_s`` a
replica renews its lease, takes over the running battles of replicas whose lease ran out (re-arming their timeouts
from the stored deadline; a battle caught in setup fails with a reason), and looks at the queue again, in case a
notice was missed. Changes made on other replicas wake the loop through the store's notices (see ``app``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from dataclasses import dataclass, field

import httpx

from battle_backend.battles.flow import BattleFlow
from battle_backend.battles.service import BattleService
from battle_backend.live.hub import BattleChange
from battle_backend.settings import BackendSettings
from battle_backend.store.protocol import StartOutcome, StoreUnavailable, WriteFailed
from battle_backend.store.records import BattleState

logger = logging.getLogger(__name__)


@dataclass
class _ActiveBattle:
    """The tasks of one running battle."""

    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class BattleScheduler:
    """Queue, concurrency bound, timeouts and restart recovery."""

    def __init__(self, service: BattleService, settings: BackendSettings, http: httpx.AsyncClient) -> None:
        self._service = service
        self._settings = settings
        self._active: dict[str, _ActiveBattle] = {}
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._lease_tasks: list[asyncio.Task[None]] = []
        self._starting: set[str] = set()
        """Battles whose start this scheduler has asked the store for and not yet recorded as active."""
        self.flow = BattleFlow(service, settings, http, arm_timeout=self.arm_timeout, adopt_task=self.adopt_task)

    @property
    def running_count(self) -> int:
        """Battles holding a slot."""
        return len(self._active)

    async def start(self) -> None:
        """Take over the battles left running by a previous process (or a replica whose lease ran out), then start
        serving the queue (and, with a shared store, renewing this replica's lease)."""
        await self._recover()
        self._service.hub.add_listener(self._on_change)
        self._loop_task = asyncio.create_task(self._loop(), name="battle-scheduler")
        if self._service.store.shared:
            self._lease_tasks = [
                asyncio.create_task(self._heartbeat_loop(), name="battle-scheduler-heartbeat"),
                asyncio.create_task(self._takeover_loop(), name="battle-scheduler-takeover"),
            ]
        self._wake.set()

    async def stop(self) -> None:
        """Cancel everything this scheduler started and wait for it (battles stay in the store as they are)."""
        self._service.hub.remove_listener(self._on_change)
        tasks = [task for active in self._active.values() for task in active.tasks]
        for own in (self._loop_task, *self._lease_tasks):
            if own is not None:
                tasks.append(own)
        self._active.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # --- slots --------------------------------------------------------------------------------------------
    def _on_change(self, change: BattleChange) -> None:
        if change.state is not None and change.state.is_terminal:
            self._release(change.battle_id)
            self._wake.set()
        elif change.state is BattleState.QUEUED:
            self._wake.set()

    def _release(self, battle_id: str) -> None:
        active = self._active.pop(battle_id, None)
        if active is None:
            return
        current = asyncio.current_task()
        for task in active.tasks:
            if task is not current:
                task.cancel()

    def adopt_task(self, battle_id: str, task: asyncio.Task[None]) -> None:
        """Take ownership of a battle's task (cancelled when the battle ends); cancels it at once if it already did."""
        active = self._active.get(battle_id)
        if active is None:
            task.cancel()
            return
        active.tasks.append(task)

    def arm_timeout(self, battle_id: str, deadline_at: float, battle_timeout: float) -> None:
        """Finish the battle as a draw at ``deadline_at`` (epoch seconds) unless it ends before."""
        self.adopt_task(
            battle_id,
            asyncio.create_task(
                self._timeout(battle_id, deadline_at, battle_timeout), name=f"battle-timeout-{battle_id}"
            ),
        )

    async def _timeout(self, battle_id: str, deadline_at: float, battle_timeout: float) -> None:
        await asyncio.sleep(max(0.0, deadline_at - time.time()))
        await self._service.time_out(battle_id, battle_timeout)

    # --- queue --------------------------------------------------------------------------------------------
    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._fill_slots()
            except (StoreUnavailable, WriteFailed) as exc:  # a database outage: one line, no traceback
                logger.warning("battle scheduler: could not start queued battles: %s", exc)
            except Exception:
                logger.exception("battle scheduler: could not start queued battles")

    async def _fill_slots(self) -> None:
        if len(self._active) >= self._settings.max_concurrent_battles:
            return
        for battle_id in await self._service.store.battle_ids_in_state(BattleState.QUEUED):
            if len(self._active) >= self._settings.max_concurrent_battles:
                return
            self._starting.add(battle_id)
            try:
                outcome = await self._service.start(battle_id, secrets.token_urlsafe(24))
                if outcome is StartOutcome.STARTED:
                    self._active[battle_id] = _ActiveBattle()
            finally:
                self._starting.discard(battle_id)
            if outcome is StartOutcome.STARTED:
                self.adopt_task(
                    battle_id, asyncio.create_task(self._run_flow(battle_id), name=f"battle-flow-{battle_id}")
                )
            elif outcome is StartOutcome.MISSING_AGENT:
                await self._service.fail(battle_id, "A participant agent was deleted before the battle could start")

    async def _run_flow(self, battle_id: str) -> None:
        await self.flow.run(battle_id)
        # The battle may have ended while the slot was being taken (e.g. a result posted meanwhile): free it.
        battle = await self._service.store.get_battle(battle_id, include_events=False)
        if battle is None or battle.state.is_terminal:
            self._release(battle_id)
            self._wake.set()

    async def _heartbeat_loop(self) -> None:
        """Renew this replica's lease every third of it (on the store's own connection for it)."""
        interval = self._settings.replica_lease_s / 3
        while True:
            await asyncio.sleep(interval)
            try:
                await self._service.store.heartbeat()
            except (StoreUnavailable, WriteFailed, OSError) as exc:
                logger.warning("battle scheduler: renewing the lease failed (retried in %.1f s): %s", interval, exc)
            except Exception:
                logger.exception("battle scheduler: renewing the lease failed (retried in %.1f s)", interval)

    async def _takeover_loop(self) -> None:
        """Take over orphaned battles and re-check the queue, every third of the lease."""
        interval = self._settings.replica_lease_s / 3
        while True:
            await asyncio.sleep(interval)
            try:
                await self._recover()
            except (StoreUnavailable, WriteFailed) as exc:
                logger.warning("battle scheduler: taking over battles failed (retried in %.1f s): %s", interval, exc)
            except Exception:
                logger.exception("battle scheduler: taking over battles failed (retried in %.1f s)", interval)
            self._wake.set()

    async def _recover(self) -> None:
        """Make this replica run exactly the running battles it owns. Battles it just took over (left by a previous
        process, or by a replica whose lease ran out) and battles it owns but does not run (a takeover that failed
        half-way) are picked up; battles another replica took over (this one's lease ran out while it was alive) are
        stopped here. Queued ones are simply served by the loop."""
        store = self._service.store
        claimed = set(await store.claim_orphaned_battles())
        running_here = set(self._active) - self._starting  # before reading the owners: a start after it is ours
        owned = await store.owned_running_battles()
        for battle_id in running_here - set(owned):
            if battle_id in self._active:
                logger.warning("battle %s is no longer this replica's (its lease ran out): stopped here", battle_id)
                self._release(battle_id)
        for battle_id in owned:
            if battle_id in self._active or battle_id in self._starting:
                continue
            try:
                await self._pick_up(battle_id, taken_over=battle_id in claimed)
            except Exception:  # still owned and not running here: the next pass tries again
                logger.exception("battle scheduler: could not pick up battle %s", battle_id)

    async def _pick_up(self, battle_id: str, *, taken_over: bool) -> None:
        """Re-arm the timeout of a battle whose battle_start was already sent; fail one caught in its setup (a setup
        cannot be resumed)."""
        store = self._service.store
        battle = await store.get_battle(battle_id, include_events=False)
        if battle is None or battle.state is not BattleState.RUNNING:
            return
        if battle.deadline_at is None or battle.battle_timeout is None:
            reason = (
                "The backend replica that was setting up this battle stopped"
                if store.shared
                else "The backend restarted while this battle was being set up"
            )
            await self._service.fail(battle_id, reason)
            return
        self._active[battle_id] = _ActiveBattle()
        self.arm_timeout(battle_id, battle.deadline_at, battle.battle_timeout)
        if taken_over:
            message = (
                "Another backend replica took this battle over: it goes on, its timeout is re-armed"
                if store.shared
                else "Backend restarted: the battle goes on, its timeout is re-armed"
            )
            with contextlib.suppress(Exception):
                await self._service.log(battle_id, message)

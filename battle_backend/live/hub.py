"""In-process change notifications for the live views (WebSocket, SSE) and the scheduler.

A notification only says "battle X changed"; subscribers then read what they need from the store. So a slow
subscriber never holds data in memory, coalesces bursts into one read, and can never miss an event: the store
(by sequence number) is the single source of truth. Everything here runs on the event loop thread.

Off the write path: :meth:`LiveHub.publish` (called by every write once it committed) only records the battle id in
the pending set and wakes the dispatcher task; the dispatcher, not the request, marks the subscriptions. The pending
set is the bounded queue between the two: one entry per changed battle, however many events arrive, so a burst of
posts costs the dispatcher one pass, and the cost of a post does not grow with the number of open pages. Listeners
(the scheduler freeing a slot) stay synchronous: they are part of the control flow, not of the fan-out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

from battle_backend.store.records import BattleState


@dataclass(frozen=True)
class BattleChange:
    """Battle ``battle_id`` changed; ``state`` is its state after the change when the publisher knows it."""

    battle_id: str
    state: BattleState | None = None


@dataclass(eq=False)
class Subscription:
    """A subscriber's pending set of changed battles and the flag that wakes it."""

    battle_id: str | None
    """None: every battle."""
    dirty: set[str] = field(default_factory=set)
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    async def wait(self) -> set[str]:
        """Block until something changed, then return (and clear) the battles that did."""
        await self.wake.wait()
        self.wake.clear()
        changed, self.dirty = self.dirty, set()
        return changed


class LiveHub:
    """Publish/subscribe of battle changes plus the agent-ready wake-ups of the battle flow."""

    def __init__(self) -> None:
        self._subscriptions: set[Subscription] = set()
        self._listeners: list[Callable[[BattleChange], None]] = []
        self._ready_waiters: dict[str, set[asyncio.Event]] = {}
        self._pending: dict[str, None] = {}
        """Battles changed since the dispatcher's last pass, in order (coalesced: at most one entry per battle)."""
        self._pending_wake = asyncio.Event()
        self._dispatcher: asyncio.Task[None] | None = None

    def publish(self, change: BattleChange) -> None:
        """Tell the listeners now and the subscribers soon (the dispatcher task marks them); never blocks."""
        for listener in list(self._listeners):
            listener(change)
        if self._subscriptions:
            self._pending[change.battle_id] = None
            self._pending_wake.set()

    async def _dispatch(self) -> None:
        """The fan-out task: each pass hands every subscription the battles it follows that changed."""
        while True:
            await self._pending_wake.wait()
            self._pending_wake.clear()
            changed, self._pending = self._pending, {}
            for sub in list(self._subscriptions):
                if sub.battle_id is None:
                    sub.dirty.update(changed)
                    sub.wake.set()
                elif sub.battle_id in changed:
                    sub.dirty.add(sub.battle_id)
                    sub.wake.set()

    @contextmanager
    def subscribe(self, battle_id: str | None = None) -> Iterator[Subscription]:
        """Subscribe for the duration of a ``with`` block (one battle, or all with None). Call it on the event
        loop: the dispatcher task is started with the first subscription."""
        if self._dispatcher is None or self._dispatcher.done():
            self._dispatcher = asyncio.get_running_loop().create_task(self._dispatch(), name="live-hub-dispatcher")
        sub = Subscription(battle_id=battle_id)
        self._subscriptions.add(sub)
        try:
            yield sub
        finally:
            self._subscriptions.discard(sub)

    async def aclose(self) -> None:
        """Stop the dispatcher (the app's shutdown)."""
        if self._dispatcher is not None:
            self._dispatcher.cancel()
            with suppress(asyncio.CancelledError):
                await self._dispatcher
            self._dispatcher = None

    @property
    def subscriber_count(self) -> int:
        """Open live views (for /health)."""
        return len(self._subscriptions)

    def add_listener(self, listener: Callable[[BattleChange], None]) -> None:
        """Synchronous callback on every change (the scheduler uses it to free slots)."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[BattleChange], None]) -> None:
        """Undo add_listener."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    @contextmanager
    def ready_waiter(self, agent_ids: list[str]) -> Iterator[asyncio.Event]:
        """An event set whenever one of these agents reports ready (register it before checking the store)."""
        event = asyncio.Event()
        for agent_id in agent_ids:
            self._ready_waiters.setdefault(agent_id, set()).add(event)
        try:
            yield event
        finally:
            for agent_id in agent_ids:
                waiters = self._ready_waiters.get(agent_id)
                if waiters is not None:
                    waiters.discard(event)
                    if not waiters:
                        del self._ready_waiters[agent_id]

    def agent_ready(self, agent_id: str) -> None:
        """Wake every battle flow waiting for this agent."""
        for event in self._ready_waiters.get(agent_id, ()):
            event.set()

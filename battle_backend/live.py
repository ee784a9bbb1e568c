"""In-process change notifications for the live views (WebSocket, SSE) and the scheduler.

A notification only says "battle X changed"; subscribers then read what they need from the store. So a slow
subscriber never holds data in memory, coalesces bursts into one read, and can never miss an event: the store
(by sequence number) is the single source of truth. Everything here runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from battle_backend.records import BattleState


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

    def publish(self, change: BattleChange) -> None:
        """Mark the battle dirty for every interested subscriber and tell the listeners."""
        for sub in self._subscriptions:
            if sub.battle_id is None or sub.battle_id == change.battle_id:
                sub.dirty.add(change.battle_id)
                sub.wake.set()
        for listener in list(self._listeners):
            listener(change)

    @contextmanager
    def subscribe(self, battle_id: str | None = None) -> Iterator[Subscription]:
        """Subscribe for the duration of a ``with`` block (one battle, or all with None)."""
        sub = Subscription(battle_id=battle_id)
        self._subscriptions.add(sub)
        try:
            yield sub
        finally:
            self._subscriptions.discard(sub)

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

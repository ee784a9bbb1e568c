"""How many battles, and attempts, one green agent runs at once: the bound on work anyone may ask for.

Why: an AgentBeats ``battle_start`` needs no credential (that is the protocol). Each battle ran at once with up to
``concurrency`` attempts in flight, and every attempt holds a tool-sandbox process, so 24 messages against a silent
white agent held 389 processes and 2.3 GB. Now a battle runs only when both bounds allow it:

* ``max_running_battles`` battles at once (``arena-green --max-running-battles``, default 4);
* ``max_attempts_in_flight`` attempts at once across all battles (``--max-attempts-in-flight``, default 32): a
  battle reserves its ``concurrency`` when it starts (its own semaphore keeps it within that), so the sandboxes of
  all battles never exceed the bound. A battle whose concurrency alone exceeds it is refused (``concurrency``).

Beyond them a battle waits in a first-come, first-served queue of at most ``max_queued_battles``
(``--max-queued-battles``, default 16; 0 refuses at once) and is told its position; a battle that finds the queue
full is refused with :class:`CapacityError` (reason ``busy`` in the result posted to a backend). A queued battle
holds no process, only its place. Strict order: a large battle at the head is not overtaken by smaller ones (no
starvation).

One :class:`Admission` per application (owned by its ``BattleRegistry``): nothing here is process-wide. Everything
runs on the event loop's thread; nothing blocks.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from green_agent.engine.config import ConfigError
from green_agent.wire.agentbeats import CapacityError as CapacityError

DEFAULT_MAX_RUNNING_BATTLES = 4
DEFAULT_MAX_ATTEMPTS_IN_FLIGHT = 32
DEFAULT_MAX_QUEUED_BATTLES = 16


@dataclass(eq=False)
class Ticket:
    """One battle's place: granted (running) or waiting in the queue."""

    battle_id: str
    slots: int
    granted: asyncio.Event = field(default_factory=asyncio.Event)
    released: bool = False


@dataclass
class Admission:
    """The bounds on battles running at once and attempts in flight across them, with a bounded FIFO queue."""

    max_running_battles: int = DEFAULT_MAX_RUNNING_BATTLES
    max_attempts_in_flight: int = DEFAULT_MAX_ATTEMPTS_IN_FLIGHT
    max_queued_battles: int = DEFAULT_MAX_QUEUED_BATTLES
    _running: list[Ticket] = field(default_factory=list)
    _queue: deque[Ticket] = field(default_factory=deque)

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def attempts_reserved(self) -> int:
        return sum(ticket.slots for ticket in self._running)

    def check(self, concurrency: int) -> None:
        """Raise (ConfigError naming ``concurrency``, or :class:`CapacityError`) when a battle of ``concurrency``
        cannot be admitted now or queued; nothing is reserved."""
        if concurrency > self.max_attempts_in_flight:
            raise ConfigError(
                f"concurrency: {concurrency} exceeds this green agent's limit of {self.max_attempts_in_flight} "
                "attempts in flight across all battles (--max-attempts-in-flight)"
            )
        if not self._fits(concurrency) and len(self._queue) >= self.max_queued_battles:
            raise CapacityError(
                f"busy: this green agent runs at most {self.max_running_battles} battles and "
                f"{self.max_attempts_in_flight} attempts at once ({self.running} running, {self.attempts_reserved} "
                f"attempts reserved) and its queue of {self.max_queued_battles} is full; try again later"
            )

    def enter(self, battle_id: str, concurrency: int) -> Ticket:
        """Reserve a place (after :meth:`check`): granted at once when the bounds allow and nobody waits, else
        queued at the end."""
        self.check(concurrency)
        ticket = Ticket(battle_id, concurrency)
        if not self._queue and self._fits(concurrency):
            self._grant(ticket)
        else:
            self._queue.append(ticket)
        return ticket

    def position(self, ticket: Ticket) -> int:
        """1 for the head of the queue; 0 once granted (or gone)."""
        for index, waiting in enumerate(self._queue):
            if waiting is ticket:
                return index + 1
        return 0

    def release(self, ticket: Ticket) -> None:
        """The battle ended (or was cancelled while queued): free its place and admit who fits next."""
        if ticket.released:
            return
        ticket.released = True
        if ticket in self._running:
            self._running.remove(ticket)
        elif ticket in self._queue:
            self._queue.remove(ticket)
        while self._queue and self._fits(self._queue[0].slots):
            self._grant(self._queue.popleft())

    def describe_wait(self, ticket: Ticket) -> str:
        """Why a battle waits, in words (for the backend's history and the A2A stream)."""
        return (
            f"queued (position {self.position(ticket)}): this green agent runs at most {self.max_running_battles} "
            f"battles and {self.max_attempts_in_flight} attempts at once ({self.running} running, "
            f"{self.attempts_reserved} attempts reserved); the battle starts when a place is free"
        )

    def _fits(self, slots: int) -> bool:
        return len(self._running) < self.max_running_battles and self.attempts_reserved + slots <= (
            self.max_attempts_in_flight
        )

    def _grant(self, ticket: Ticket) -> None:
        self._running.append(ticket)
        ticket.granted.set()

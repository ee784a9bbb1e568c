"""Progress events of a battle and the sinks they go to.

A battle emits :class:`BattleEvent` values; where they go (an A2A task's status stream, an AgentBeats backend, a
log file, a test) is the caller's choice. ``text`` keeps the seed's human wording ("🔄 Starting attempt 1/4...");
``data`` is the machine-readable form clients use for progress bars.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

log = logging.getLogger(__name__)

EventType = Literal[
    "battle_started",
    "task_started",
    "attempt_started",
    "attempt_finished",
    "battle_cancelled",
    "battle_interrupted",
    "battle_finished",
    "log",
]


def utc_now() -> str:
    """ISO 8601 UTC timestamp with a Z suffix."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class BattleEvent(BaseModel):
    """One progress event: a human line plus structured data."""

    type: EventType
    text: str
    data: dict[str, Any] = Field(default_factory=dict)
    timestamp: str = Field(default_factory=utc_now)

    def wire(self) -> dict[str, Any]:
        """The ``arena_event`` data part: the type plus the structured fields."""
        return {"type": self.type, **self.data, "timestamp": self.timestamp}


EventSink = Callable[[BattleEvent], Awaitable[None]]
"""Receives events in order. A sink must not raise for delivery problems; it must not block for long."""


async def fan_out(sinks: Sequence[EventSink], event: BattleEvent) -> None:
    """Deliver one event to every sink; one failing sink never stops the battle or the other sinks."""
    for sink in sinks:
        try:
            await sink(event)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("progress sink %r failed for a %s event", sink, event.type, exc_info=True)

"""The white agent's card, fetched once per battle and shared by the battle's attempts.

Why: every attempt opens its own A2A client (a fresh conversation context each time), and fetching the card for
each of them cost a round trip per attempt to both sides (the green agent's card parsing and the white agent's card
serving were ~10% of a calibration battle's CPU). The card describes the agent, not a conversation: one fetch per
battle is what clients of A2A agents commonly do.

What is cached: only a card that was fetched and parsed successfully. A failed fetch is not remembered, so every
attempt that needs the card tries again and, if it fails, fails the same way it did before this cache existed. A
card the agent changes in the middle of a battle is not seen until the next battle.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from a2a.types import AgentCard


class CardCache:
    """Cards by agent URL for one battle (never shared between battles: no process-wide state)."""

    def __init__(self, on_new_card: Callable[[AgentCard], None] | None = None) -> None:
        self._cards: dict[str, AgentCard] = {}
        self._lock = asyncio.Lock()
        self._on_new_card = on_new_card  # e.g. the warning when the battle's concurrency nears the agent's bound

    async def get(self, url: str, fetch: Callable[[], Awaitable[AgentCard]]) -> AgentCard:
        """The card of ``url``: the cached one, or ``fetch()``'s (one fetch at a time; its errors propagate)."""
        card = self._cards.get(url)
        if card is not None:
            return card
        async with self._lock:
            card = self._cards.get(url)
            if card is None:
                card = await fetch()
                self._cards[url] = card
                if self._on_new_card is not None:
                    self._on_new_card(card)
            return card

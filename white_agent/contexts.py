"""Per-conversation state, bounded: a map from A2A context id to an agent's state object that never forgets a live
conversation.

Why bounded: a white agent serves many attempts (one fresh context id each) and never learns when a conversation is
over, so without a bound its memory grows with every attempt. Why per context: attempts must never see each
other's state, also when they run concurrently.

How it is bounded without breaking a live conversation: a conversation is *live* while it was used within the last
``idle_s`` seconds; only idle ones are forgotten (the least recently used first, when a new one needs room). At
most ``max_contexts`` are held: when that many are live, a new conversation is refused with
:class:`~white_agent.errors.ContextsFull` (the A2A side answers it with a JSON-RPC error, which the green agent
blames on this agent: it is the agent under test), instead of silently evicting one that is still being played
(an LRU of 100 did that at 96 attempts in flight: calibration scored 176/192). The bound is announced on the agent
card (:data:`CONVERSATIONS_EXTENSION_URI`), so a green agent can warn when a battle's concurrency comes near it.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from white_agent.errors import ContextsFull, WhiteAgentConfigError

T = TypeVar("T")

DEFAULT_MAX_CONTEXTS = 4096
"""Conversations held at most (about 10 KB each for the replay agent; the LLM agent's histories are bounded per
conversation by its own limits)."""
DEFAULT_IDLE_S = 900.0
"""A conversation unused this long is idle and may be forgotten (longer than any attempt's turn time limit)."""
CONVERSATIONS_EXTENSION_URI = "https://arena.local/extensions/conversations/v1"
"""Agent-card extension announcing the bound: params ``max_live_conversations`` and ``idle_s``."""


class BoundedContexts(Generic[T]):
    """A map ``context_id -> state`` holding at most ``max_contexts``; idle ones (unused for ``idle_s``) are dropped
    least recently used first, live ones never (a new context is refused instead: :class:`ContextsFull`).

    Not thread-safe by design: it lives on the agent's event loop, and every method is synchronous (no await between
    lookup and update), so concurrent coroutines cannot interleave inside one call. ``clock`` is injectable for tests.
    """

    def __init__(
        self,
        max_contexts: int = DEFAULT_MAX_CONTEXTS,
        *,
        idle_s: float = DEFAULT_IDLE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_contexts < 1:
            raise WhiteAgentConfigError(f"max_contexts must be >= 1 (got {max_contexts})")
        if not idle_s >= 0:  # also refuses nan
            raise WhiteAgentConfigError(f"idle_s must be >= 0 seconds (got {idle_s})")
        self._max = max_contexts
        self._idle_s = idle_s
        self._clock = clock
        self._items: OrderedDict[str, tuple[T, float]] = OrderedDict()

    @property
    def max_contexts(self) -> int:
        """The bound."""
        return self._max

    @property
    def idle_s(self) -> float:
        """Seconds without a turn after which a conversation may be forgotten."""
        return self._idle_s

    def get_or_create(self, context_id: str, factory: Callable[[], T]) -> T:
        """The state of ``context_id`` (created by ``factory`` when new), marked most recently used.

        A new context first makes room by forgetting idle ones; :class:`ContextsFull` when ``max_contexts`` live
        conversations remain."""
        now = self._clock()
        held = self._items.get(context_id)
        if held is not None:
            self._items[context_id] = (held[0], now)
            self._items.move_to_end(context_id)
            return held[0]
        self._forget_idle(now, keep=self._max - 1)
        if len(self._items) >= self._max:
            raise ContextsFull(
                f"this agent holds {len(self._items)} live conversations, its bound (max_contexts {self._max}; a "
                f"conversation is live until unused for {self._idle_s:g} s); refused the new conversation "
                f"{context_id[:80]!r}"
            )
        state = factory()
        self._items[context_id] = (state, now)
        return state

    def _forget_idle(self, now: float, *, keep: int) -> None:
        """Drop idle conversations, least recently used first, until at most ``keep`` remain; never a live one (the
        order is by last use, so the first live one ends the scan)."""
        while len(self._items) > keep:
            _, (_, last_used) = next(iter(self._items.items()))
            if now - last_used < self._idle_s:
                return
            self._items.popitem(last=False)

    def get(self, context_id: str) -> T | None:
        """The state of ``context_id`` if still held (marks it most recently used)."""
        held = self._items.get(context_id)
        if held is None:
            return None
        self._items[context_id] = (held[0], self._clock())
        self._items.move_to_end(context_id)
        return held[0]

    def discard(self, context_id: str) -> None:
        """Forget ``context_id`` (no error when unknown)."""
        self._items.pop(context_id, None)

    def __contains__(self, context_id: object) -> bool:
        return context_id in self._items

    def __len__(self) -> int:
        return len(self._items)

    def context_ids(self) -> list[str]:
        """Held context ids, least recently used first (for tests and diagnostics)."""
        return list(self._items)

"""Per-conversation state, bounded: a small LRU map from A2A context id to an agent's state object.

Why bounded: a white agent serves many attempts (one fresh context id each) and never learns when a conversation is
over, so without a bound its memory grows with every attempt. Why per context: attempts must never see each
other's state, also when they run concurrently.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from white_agent.errors import WhiteAgentConfigError

T = TypeVar("T")

DEFAULT_MAX_CONTEXTS = 100


class BoundedContexts(Generic[T]):
    """An LRU map ``context_id -> state``; the least recently used context is dropped beyond ``max_contexts``.

    Not thread-safe by design: it lives on the agent's event loop, and every method is synchronous (no await between
    lookup and update), so concurrent coroutines cannot interleave inside one call.
    """

    def __init__(self, max_contexts: int = DEFAULT_MAX_CONTEXTS) -> None:
        if max_contexts < 1:
            raise WhiteAgentConfigError(f"max_contexts must be >= 1 (got {max_contexts})")
        self._max = max_contexts
        self._items: OrderedDict[str, T] = OrderedDict()

    @property
    def max_contexts(self) -> int:
        """The bound."""
        return self._max

    def get_or_create(self, context_id: str, factory: Callable[[], T]) -> T:
        """The state of ``context_id`` (created by ``factory`` when new), marked most recently used."""
        state = self._items.get(context_id)
        if state is None:
            state = factory()
            self._items[context_id] = state
            while len(self._items) > self._max:
                self._items.popitem(last=False)
        else:
            self._items.move_to_end(context_id)
        return state

    def get(self, context_id: str) -> T | None:
        """The state of ``context_id`` if still held (marks it most recently used)."""
        state = self._items.get(context_id)
        if state is not None:
            self._items.move_to_end(context_id)
        return state

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

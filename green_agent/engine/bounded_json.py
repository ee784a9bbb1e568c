"""Bounded views of hostile JSON-like values: a JSON excerpt of at most N characters, a copy of at most N characters.

Why not ``json.dumps`` and a slice: a value from the agent under test (a tool argument, a field it wrote into the
database) can be a 50 MB string, a list of a million items or nested 100 000 levels deep. ``json.dumps`` would
render all of it first (or raise ``RecursionError``); an integer of 5 000 digits makes ``str()`` raise
``ValueError``. Both functions here do work proportional to the bound, not to the value, and never raise on any
value ``model_dump()`` or ``json.loads`` can produce.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, Final

from green_agent.text_safety import clean_text

ELLIPSIS: Final = "…"
MAX_DEPTH: Final = 32
"""Deeper levels are shown as "…" (a bound on the renderer's own nesting, far below the recursion limit)."""
_BIG_INT_BITS: Final = 200
"""Integers wider than this (about 60 digits) are described, not printed (``str`` refuses beyond 4 300 digits)."""


def _scalar(value: Any, limit: int) -> str:
    """JSON text of a non-container value, reading at most ``limit`` characters of a string."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int):
        if value.bit_length() > _BIG_INT_BITS:
            return json.dumps(f"(an integer of {value.bit_length()} bits)")
        return str(value)
    if isinstance(value, float):
        return json.dumps(value)
    text = value if isinstance(value, str) else str(value)[: limit + 1]
    return json.dumps(clean_text(text[: limit + 1]), ensure_ascii=False)


def _pieces(value: Any, limit: int, depth: int = 0) -> Iterator[str]:
    """JSON text of ``value`` in pieces; the caller stops reading once it has ``limit`` characters."""
    if isinstance(value, Mapping):
        if depth >= MAX_DEPTH:
            yield json.dumps(ELLIPSIS, ensure_ascii=False)
            return
        yield "{"
        for index, (key, item) in enumerate(value.items()):
            yield (", " if index else "") + _scalar(key if isinstance(key, str) else str(key), limit) + ": "
            yield from _pieces(item, limit, depth + 1)
        yield "}"
    elif isinstance(value, (list, tuple, set, frozenset)):
        if depth >= MAX_DEPTH:
            yield json.dumps(ELLIPSIS, ensure_ascii=False)
            return
        yield "["
        for index, item in enumerate(value):
            if index:
                yield ", "
            yield from _pieces(item, limit, depth + 1)
        yield "]"
    else:
        yield _scalar(value, limit)


def safe_equal(left: Any, right: Any) -> bool:
    """``left == right``, False when the values are too deep for Python to compare (``RecursionError``)."""
    try:
        return bool(left == right)
    except RecursionError:
        return False


def json_excerpt(value: Any, limit: int) -> str:
    """``value`` as JSON text of at most ``limit`` characters, cut with "…" when longer (keys in their order)."""
    taken: list[str] = []
    size = 0
    for piece in _pieces(value, limit):
        taken.append(piece)
        size += len(piece)
        if size > limit:
            return "".join(taken)[: max(0, limit - 1)] + ELLIPSIS
    return "".join(taken)


class _Budget:
    """Characters left for :func:`bounded_copy` (shared by every level of one copy)."""

    def __init__(self, chars: int) -> None:
        self.chars = chars

    def take(self, text: str, limit: int) -> str:
        allowed = max(0, min(limit, self.chars))
        taken = text if len(text) <= allowed else text[: max(0, allowed - 1)] + ELLIPSIS
        self.chars -= len(taken)
        return clean_text(taken)


def _copy(value: Any, budget: _Budget, depth: int, max_items: int, max_string: int) -> Any:
    if budget.chars <= 0:
        return ELLIPSIS
    if isinstance(value, Mapping):
        if depth >= MAX_DEPTH // 4:
            return ELLIPSIS
        copied: dict[str, Any] = {}
        for index, (key, item) in enumerate(value.items()):
            if index >= max_items or budget.chars <= 0:
                copied[ELLIPSIS] = f"{len(value) - index} more"
                break
            name = budget.take(key if isinstance(key, str) else str(key), max_string)
            copied[name] = _copy(item, budget, depth + 1, max_items, max_string)
        return copied
    if isinstance(value, (list, tuple, set, frozenset)):
        if depth >= MAX_DEPTH // 4:
            return ELLIPSIS
        items: list[Any] = []
        for index, item in enumerate(value):
            if index >= max_items or budget.chars <= 0:
                items.append(f"{ELLIPSIS} {len(value) - index} more")
                break
            items.append(_copy(item, budget, depth + 1, max_items, max_string))
        return items
    if value is None or isinstance(value, (bool, float)):
        budget.chars -= 4
        return value
    if isinstance(value, int):
        budget.chars -= 8
        return value if value.bit_length() <= _BIG_INT_BITS else f"(an integer of {value.bit_length()} bits)"
    text = value if isinstance(value, str) else str(value)[: max_string + 1]
    return budget.take(text, max_string)


def bounded_copy(value: Any, *, chars: int = 2000, max_items: int = 20, max_string: int = 500) -> Any:
    """A JSON-ready copy of ``value`` holding at most about ``chars`` characters of text: strings cut at
    ``max_string``, containers at ``max_items`` entries (the rest counted as ``"… N more"``), nesting below 8
    levels replaced by "…"."""
    return _copy(value, _Budget(chars), 0, max_items, max_string)


__all__ = ["ELLIPSIS", "MAX_DEPTH", "bounded_copy", "json_excerpt", "safe_equal"]

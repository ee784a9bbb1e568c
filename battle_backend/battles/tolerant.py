"""Reading agent-posted JSON tolerantly, for the pages: every value is hostile and may be missing, of another type,
huge or absurd. These helpers turn such values into bounded plain text and plain numbers (or None), so a view never
fails and never carries more than it can show; the templates then escape the text (autoescape).

Why a module of its own: the attempt viewer, the failure explanation and the live progress read the same kinds of
values (a progress event's ``detail``, a trajectory, a BattleResult entry) and must bound them the same way.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

MAX_TEXT_CHARS = 20_000
"""A string longer than this is cut at render (the sender already cut at 4000; a foreign sender may not have)."""
MAX_NAME_CHARS = 500
"""Short fields (names, keys, categories) are cut to this."""
ELLIPSIS = "…"
DASH = "\u2013"
"""What a page shows for a value not known (yet): an en dash, as the result tables do."""


def clip(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` cut to ``limit`` characters, the cut marked with an ellipsis."""
    return text if len(text) <= limit else text[: max(0, limit - 1)] + ELLIPSIS


def json_text(value: Any, limit: int = MAX_TEXT_CHARS, *, indent: int | None = 2) -> str:
    """Indented JSON text of ``value``, cut to ``limit`` (never raises: unknown objects become ``str``)."""
    try:
        text = json.dumps(value, indent=indent, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return clip(text, limit)


def text_of(value: Any, limit: int = MAX_TEXT_CHARS) -> str | None:
    """A string as itself (cut), None as None, anything else as its JSON text (cut)."""
    if value is None:
        return None
    if isinstance(value, str):
        return clip(value, limit)
    return json_text(value, limit)


def name_of(value: Any, limit: int = MAX_NAME_CHARS) -> str:
    """A short label: a string cut to ``limit``, a number or bool as text, anything else (or None) as ``""``."""
    if isinstance(value, str):
        return clip(value, limit)
    if isinstance(value, bool | int | float) and not (isinstance(value, float) and not math.isfinite(value)):
        return str(value)
    return ""


def int_of(value: Any, *, low: int = -(10**15), high: int = 10**15) -> int | None:
    """An integer (not a bool) within [low, high], else None."""
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return value
    return None


def float_of(value: Any) -> float | None:
    """A finite number (not a bool) as float, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def dict_of(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def list_of(value: Any, limit: int) -> list[Any]:
    """The first ``limit`` items of ``value`` when it is a JSON array, else an empty list."""
    return value[:limit] if isinstance(value, list) else []


def str_list(value: Any, limit: int, chars: int = MAX_TEXT_CHARS) -> list[str]:
    """The strings (cut) among the first ``limit`` items of an array; other items become their JSON text."""
    return [text for text in (text_of(item, chars) for item in list_of(value, limit)) if text is not None]

"""Text from hostile parties made safe to store: valid UTF-8, bounded size.

Why: JSON may escape a lone UTF-16 surrogate (``"\\ud800"``); Python decodes it into a ``str`` that cannot be
encoded as UTF-8, so the first file write, HTTP post or database insert that sees it raises. One such reply used to
abort a whole battle. Strings from the agent under test are cleaned where they enter (the white client) and again
where they leave (trajectory lines, result files), so neither side depends on the other being right.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (a no-op, and cheap, for ordinary text)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub(REPLACEMENT, text)
    return text


_ESCAPE = re.compile(
    rb"\\(?:u[dD][89abAB][0-9a-fA-F]{2}(?:\\u[dD][c-fC-F][0-9a-fA-F]{2})?|u[dD][c-fC-F][0-9a-fA-F]{2}|.)", re.DOTALL
)
_LONE_ESCAPE_HINT = re.compile(rb"\\u[dD][89a-fA-F]")


def _escape_replacement(match: re.Match[bytes]) -> bytes:
    escape = match.group(0)
    if len(escape) == 6:  # a lone high or low surrogate escape (a pair is 12 bytes, other escapes 2)
        return b"\\ufffd"
    return escape


def clean_json_escapes(body: bytes) -> bytes:
    """JSON text with every escaped *lone* surrogate (``\\ud800`` without its pair) turned into ``\\ufffd``.

    Escapes are read left to right (``\\\\`` is one escape), so an escaped backslash followed by ``ud800`` is left
    alone, and proper pairs are kept. Linear; bodies without a surrogate escape are returned as they are.
    """
    if not _LONE_ESCAPE_HINT.search(body):
        return body
    return _ESCAPE.sub(_escape_replacement, body)


def clean_json(value: Any, *, null_non_finite: bool = False) -> Any:
    """A copy of a JSON-like value with every string (keys included) passed through :func:`clean_text`, tuples as
    lists, and with ``null_non_finite`` NaN/Infinity as None (what ``JSON.stringify`` does; browsers' ``JSON.parse``
    refuses them). Iterative, so hostile nesting cannot exhaust the recursion limit.
    """
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while stack:
        item, parent, key = stack.pop()
        if isinstance(item, str):
            parent[key] = clean_text(item)
        elif null_non_finite and isinstance(item, float) and not math.isfinite(item):
            parent[key] = None
        elif isinstance(item, dict):
            copy: dict[Any, Any] = {}
            parent[key] = copy
            for k, v in item.items():
                new_key = clean_text(k) if isinstance(k, str) else k
                copy[new_key] = None
                stack.append((v, copy, new_key))
        elif isinstance(item, list | tuple):
            items: list[Any] = [None] * len(item)
            parent[key] = items
            stack.extend((v, items, i) for i, v in enumerate(item))
        else:
            parent[key] = item
    return root[0]


def _cut_strings(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return value if len(value) <= limit else f"{value[:limit]}... [cut: {len(value) - limit} more characters]"
    if isinstance(value, dict):
        return {k: _cut_strings(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut_strings(v, limit) for v in value]
    return value


def json_line(record: Any, *, max_chars: int) -> str:
    """``record`` as one JSON line of valid UTF-8, at most about ``max_chars`` long (long strings are cut)."""
    cleaned = clean_json(record)
    line = json.dumps(cleaned, ensure_ascii=False, default=str)
    if len(line) <= max_chars:
        return line
    line = json.dumps(_cut_strings(cleaned, max(64, max_chars // 8)), ensure_ascii=False, default=str)
    if len(line) <= max_chars:
        return line
    return json.dumps({"cut": True, "preview": line[:max_chars]}, ensure_ascii=False)

"""How every store writes a JSON value into a column: one encoding, so both databases hold the same text.

Why a module of its own: the SQLite and PostgreSQL stores must agree byte for byte on what they keep (an event is
served back exactly as it was stored), and this is the last line of defence for values that could never be sent out
again.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

logger = logging.getLogger(__name__)


def safe_text(value: str) -> str:
    """``value`` with lone surrogates written as ``\\udXXX`` escapes: always encodable, for messages and locations."""
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


def has_lone_surrogate(value: str) -> bool:
    """Whether ``value`` cannot be encoded as UTF-8 (only lone surrogates make a Python str unencodable)."""
    if value.isascii():
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


_SURROGATE = re.compile("[\ud800-\udfff]")
"""A lone surrogate (a well-formed pair is a single code point in a Python str)."""


def scrub_text(value: str) -> str:
    """Each lone surrogate replaced by U+FFFD: for text the backend writes itself from what a remote party sent."""
    if not has_lone_surrogate(value):
        return value
    return _SURROGATE.sub("\ufffd", value)


def scrub_value(value: Any) -> Any:
    """``value`` with :func:`scrub_text` applied to every string and key (for small backend-built details)."""
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, dict):
        return {scrub_text(k) if isinstance(k, str) else k: scrub_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_value(v) for v in value]
    return value


def dumps(value: Any) -> str:
    """Compact JSON; the stored text is what every reader parses, so it must be sendable as it is.

    The API and the service bound every value before it gets here; this is the last line: NaN/Infinity raise (they
    could never be sent out again) and a lone surrogate, which SQLite cannot encode, is replaced by U+FFFD with a
    warning instead of failing the transaction.
    """
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    if has_lone_surrogate(text):
        logger.warning("a lone surrogate reached the store; replaced by U+FFFD")
        text = scrub_text(text)
    return text

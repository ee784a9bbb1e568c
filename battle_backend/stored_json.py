"""How every store writes a JSON value into a column: one encoding, so both databases hold the same text.

Why a module of its own: the SQLite and PostgreSQL stores must agree byte for byte on what they keep (an event is
served back exactly as it was stored), and this is the last line of defence for values that could never be sent out
again.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from battle_backend.body_limits import has_lone_surrogate, scrub_text

logger = logging.getLogger(__name__)


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

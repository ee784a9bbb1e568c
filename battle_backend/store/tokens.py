"""Comparing battle tokens: the one check the store's transition rules and the service share.

Why here, in the store layer: a result is accepted only from the battle's own green agent, and that rule is decided
where the transition is decided (:mod:`battle_backend.store.transition_rules`); the HTTP layer only reads the header.
"""

from __future__ import annotations

import hmac


def tokens_match(expected: str | None, presented: str | None) -> bool:
    """Constant-time comparison of a presented battle token with the battle's (False when either is missing).

    Compared as UTF-8 bytes: ``hmac.compare_digest`` refuses str with non-ASCII characters (a TypeError, i.e. a
    500, for a header such as ``X-Battle-Token: é``), and a token from an MCP argument may even hold lone
    surrogates, hence ``surrogatepass``.
    """
    if not expected or not presented:
        return False
    return hmac.compare_digest(expected.encode("utf-8", "surrogatepass"), presented.encode("utf-8", "surrogatepass"))

"""What an agent under test says about its own capacity, checked against the battle's concurrency.

The reference agents announce on their card how many live conversations they hold at most (extension
:data:`CONVERSATIONS_EXTENSION_URI`, params ``max_live_conversations`` and ``idle_s``; white_agent/contexts.py); a new
conversation beyond that is refused with a JSON-RPC error, which is the agent's failure (it is the agent under
test). Any agent may announce the same. When a battle's concurrency comes near the bound, the green agent logs a
warning the first time it reads the card, before the refusals start; agents that announce nothing are not checked.
"""

from __future__ import annotations

import logging

from a2a.types import AgentCard

log = logging.getLogger(__name__)

CONVERSATIONS_EXTENSION_URI = "https://arena.local/extensions/conversations/v1"
NEAR = 0.8
"""A concurrency above this share of the bound is "near" it (conversations also stay live a while after an attempt)."""


def conversations_bound(card: AgentCard) -> int | None:
    """The live conversations the card says the agent holds at most (None when it does not say, or says nonsense)."""
    for extension in card.capabilities.extensions:
        if extension.uri != CONVERSATIONS_EXTENSION_URI:
            continue
        # One field of the agent's struct, read as it is (no conversion of the rest); JSON true is not a number.
        value = extension.params.fields.get("max_live_conversations")
        if value is not None and value.WhichOneof("kind") == "number_value" and 1 <= value.number_value < 2**31:
            return int(value.number_value)
    return None


def concurrency_warning(card: AgentCard, concurrency: int) -> str | None:
    """Why ``concurrency`` attempts in flight are near (or past) the agent's announced bound; None otherwise."""
    bound = conversations_bound(card)
    if bound is None or concurrency <= NEAR * bound:
        return None
    past = "more than" if concurrency > bound else "near"
    return (
        f"concurrency {concurrency} is {past} the {bound} live conversations the agent under test says it holds "
        "(its card); conversations it refuses beyond that are its failures: lower the concurrency or raise its bound"
    )


def warn_near_bound(card: AgentCard, *, concurrency: int | None) -> None:
    """Log :func:`concurrency_warning` (called once per battle, when the card is first read)."""
    if concurrency is not None and (warning := concurrency_warning(card, concurrency)) is not None:
        log.warning("%s", warning)

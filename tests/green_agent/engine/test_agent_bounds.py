"""The green agent reads the live-conversation bound an agent announces and warns when a battle comes near it."""

from __future__ import annotations

import logging

import pytest
from a2a.types import AgentCard

from green_agent.engine.agent_bounds import (
    CONVERSATIONS_EXTENSION_URI,
    concurrency_warning,
    conversations_bound,
    warn_near_bound,
)
from green_agent.engine.card_cache import CardCache
from white_agent.contexts import CONVERSATIONS_EXTENSION_URI as WHITE_URI
from white_agent.contexts import BoundedContexts
from white_agent.server import build_agent_card, conversations_extension


def card(max_contexts: int | None) -> AgentCard:
    extensions = [conversations_extension(BoundedContexts(max_contexts))] if max_contexts else []
    return build_agent_card("http://127.0.0.1:9/", name="n", description="d", extensions=extensions)


def test_the_reference_agents_bound_is_read_from_their_card() -> None:
    assert CONVERSATIONS_EXTENSION_URI == WHITE_URI  # the two packages share no code: the URI is the contract
    assert conversations_bound(card(100)) == 100
    assert conversations_bound(card(None)) is None
    odd = card(100)
    odd.capabilities.extensions[0].params.update({"max_live_conversations": "lots"})
    assert conversations_bound(odd) is None
    odd.capabilities.extensions[0].params.update({"max_live_conversations": True})
    assert conversations_bound(odd) is None  # JSON true is not a bound of 1
    odd.capabilities.extensions[0].params.update({"max_live_conversations": 0.5})
    assert conversations_bound(odd) is None


def test_a_battle_near_or_past_the_bound_is_warned_about() -> None:
    assert concurrency_warning(card(100), 80) is None
    near = concurrency_warning(card(100), 96)
    assert near is not None and "near the 100 live conversations" in near
    past = concurrency_warning(card(100), 256)
    assert past is not None and "more than the 100" in past
    assert concurrency_warning(card(None), 5000) is None  # an agent that announces nothing is not checked


async def test_the_warning_is_logged_once_per_battle_when_the_card_is_first_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[AgentCard] = []

    def on_new_card(new: AgentCard) -> None:
        seen.append(new)
        warn_near_bound(new, concurrency=256)

    cards = CardCache(on_new_card)

    async def fetch() -> AgentCard:
        return card(100)

    with caplog.at_level(logging.WARNING, logger="green_agent.engine.agent_bounds"):
        for _ in range(3):
            await cards.get("http://x/", fetch)
    assert len(seen) == 1
    assert [r.getMessage() for r in caplog.records if "live conversations" in r.getMessage()] == [
        concurrency_warning(card(100), 256)
    ]

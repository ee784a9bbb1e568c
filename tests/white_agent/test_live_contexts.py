"""Reference agents never forget a live conversation: idle ones make room, a new one beyond the bound is refused."""

from __future__ import annotations

import httpx
import pytest

from tests.white_agent.conftest import gold_calls, serving, tau2_task
from tests.white_agent.helpers import arena_block, first_message, talk
from white_agent.contexts import CONVERSATIONS_EXTENSION_URI, BoundedContexts
from white_agent.errors import ContextsFull, WhiteAgentConfigError
from white_agent.replay import ReplayAgent


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_live_contexts_are_never_evicted_and_a_new_one_is_refused() -> None:
    clock = Clock()
    contexts: BoundedContexts[list[int]] = BoundedContexts(2, idle_s=10.0, clock=clock)
    contexts.get_or_create("A", list).append(1)
    clock.now += 6
    contexts.get_or_create("B", list).append(2)
    with pytest.raises(ContextsFull, match=r"2 live conversations.*max_contexts 2"):
        contexts.get_or_create("C", list)
    assert contexts.context_ids() == ["A", "B"]
    clock.now += 5  # A idle (11 s), B live (5 s)
    contexts.get_or_create("C", list)
    assert contexts.context_ids() == ["B", "C"]
    assert contexts.get_or_create("B", list) == [2]  # B kept its state


def test_a_turn_keeps_a_conversation_live() -> None:
    clock = Clock()
    contexts: BoundedContexts[list[int]] = BoundedContexts(1, idle_s=10.0, clock=clock)
    contexts.get_or_create("A", list)
    for _ in range(5):
        clock.now += 9
        assert contexts.get("A") == []  # used every 9 s: never idle
        with pytest.raises(ContextsFull):
            contexts.get_or_create("B", list)


def test_a_negative_idle_time_is_refused() -> None:
    with pytest.raises(WhiteAgentConfigError, match="idle_s"):
        BoundedContexts(3, idle_s=-1.0)


async def test_a_full_agent_refuses_the_new_conversation_and_keeps_the_live_ones() -> None:
    agent = ReplayAgent(max_contexts=2)
    async with serving(agent) as url, talk(url) as talker:
        text, data, metadata = first_message("hi", arena=arena_block("5"))
        for ctx in ("A", "B"):
            await talker.send(ctx, text, data=data, metadata=metadata)
        refused = await talker.send("C", text, data=data, metadata=metadata)
        kept = await talker.send("A", "Tool call result:\nx")
    assert refused.kind == "error"
    assert "live conversations" in refused.error_message and "max_contexts 2" in refused.error_message
    assert kept.action() == gold_calls(tau2_task("retail", "test", "5"))[1]
    assert agent.contexts.context_ids() == ["B", "A"]


async def test_the_card_announces_the_bound() -> None:
    agent = ReplayAgent(max_contexts=321, idle_s=42.0)
    async with serving(agent) as url, httpx.AsyncClient() as http:
        card = (await http.get(f"{url}/.well-known/agent-card.json")).json()
    extensions = card["capabilities"]["extensions"]
    assert extensions == [
        {
            "uri": CONVERSATIONS_EXTENSION_URI,
            "description": extensions[0]["description"],
            "params": {"max_live_conversations": 321, "idle_s": 42},
            "required": False,
        }
    ]

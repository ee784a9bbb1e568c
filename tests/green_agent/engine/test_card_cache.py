"""The battle's card cache: one fetch for many attempts, failures never remembered."""

from __future__ import annotations

import asyncio

import pytest
from a2a.types import AgentCard

from green_agent.engine.card_cache import CardCache

pytestmark = pytest.mark.asyncio


async def test_concurrent_attempts_share_one_fetch() -> None:
    cache = CardCache()
    fetches: list[str] = []
    gate = asyncio.Event()

    async def fetch() -> AgentCard:
        fetches.append("fetch")
        await gate.wait()  # every attempt asks while the first fetch is still in flight
        return AgentCard(name="white")

    waiting = [asyncio.create_task(cache.get("http://white", fetch)) for _ in range(16)]
    await asyncio.sleep(0.01)
    gate.set()
    cards = await asyncio.gather(*waiting)
    assert fetches == ["fetch"]
    assert {card.name for card in cards} == {"white"}
    assert (await cache.get("http://white", fetch)).name == "white"
    assert fetches == ["fetch"]


async def test_a_failed_fetch_is_not_remembered() -> None:
    cache = CardCache()
    answers: list[BaseException | AgentCard] = [ConnectionError("refused"), AgentCard(name="back")]

    async def fetch() -> AgentCard:
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    with pytest.raises(ConnectionError):
        await cache.get("http://white", fetch)
    assert (await cache.get("http://white", fetch)).name == "back"  # the next attempt fetched again


async def test_cards_are_kept_per_agent_url() -> None:
    cache = CardCache()

    def fetcher(name: str):  # type: ignore[no-untyped-def]
        async def fetch() -> AgentCard:
            return AgentCard(name=name)

        return fetch

    assert (await cache.get("http://a", fetcher("a"))).name == "a"
    assert (await cache.get("http://b", fetcher("b"))).name == "b"
    assert (await cache.get("http://a", fetcher("other"))).name == "a"

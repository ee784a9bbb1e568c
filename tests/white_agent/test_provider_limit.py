"""The llm agent's provider cap (white_agent/provider_limit.py, issue 27): its conversations share one adaptive cap,
so a provider that allows 2 completions in flight sees no more than that, and a 429 storm slows the agent down
without failing a turn. Counts only, never durations."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.support.fake_openai import ProviderLimitsSpec, fake_state, make_fake_openai, text_reply
from tests.support.servers import serve_app
from tests.white_agent.conftest import serving
from tests.white_agent.helpers import first_message, talk
from white_agent.llm import LlmAgent, LlmAgentSettings

KEY = "sk-test-provider-limit"
SLOW_PAIR = ProviderLimitsSpec(max_concurrency=2, latency_s=0.05, concurrency_retry_after_s=0.01)


def _agent(base_url: str, **overrides: Any) -> LlmAgent:
    settings = LlmAgentSettings(
        model="fake-model",
        base_url=f"{base_url}/v1",
        api_key_env="ARENA_TEST_LLM_KEY",
        retry_base_delay_s=0.0,
        retry_max_delay_s=0.0,
        max_retries=10,
        **overrides,
    )
    return LlmAgent(settings, api_key=KEY)


async def _eight_conversations(agent: LlmAgent, fake: Any) -> list[Any]:
    async with serving(agent) as url, talk(url) as talker:

        async def one(n: int) -> Any:
            text, data, metadata = first_message(f"Hi, customer {n} here.", policy="Be kind.", tools=[])
            return await talker.send(f"ctx-{n}", text, data=data, metadata=metadata)

        return await asyncio.gather(*(one(n) for n in range(8)))


async def test_conversations_share_the_cap_and_the_provider_refuses_nothing() -> None:
    fake = make_fake_openai(lambda _body: text_reply("Hello!"), limits=SLOW_PAIR)
    async with serve_app(fake) as llm_url:
        agent = _agent(llm_url, provider_max_concurrency=2)
        answers = await _eight_conversations(agent, fake)
    assert [a.kind for a in answers] == ["message"] * 8
    state = fake_state(fake)
    assert (state.answered, state.rate_limited_total, state.peak_in_flight) == (8, 0, 2)


async def test_a_429_storm_lowers_the_cap_and_fails_no_turn() -> None:
    fake = make_fake_openai(lambda _body: text_reply("Hello!"), limits=SLOW_PAIR)
    async with serve_app(fake) as llm_url:
        agent = _agent(llm_url, provider_max_concurrency=16)
        answers = await _eight_conversations(agent, fake)
        limiter = agent._provider
    assert [a.kind for a in answers] == ["message"] * 8
    state = fake_state(fake)
    assert state.answered == 8 and state.rate_limited_total > 0
    assert limiter.rate_limited == state.rate_limited_total and limiter.decreases >= 1

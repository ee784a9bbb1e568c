"""The LLM judge shares its provider's adaptive cap (issue 27): two judges of one endpoint and model go through one
limiter of the green agent's ProviderLimits, a 429 slows both, and the judge's retry budget absorbs it (the item is
scored, not left unscored)."""

from __future__ import annotations

from typing import Any

import httpx
from pydantic import SecretStr

from green_agent.evaluations import LlmJudge, RetryPolicy
from green_agent.evaluations.connectors import ResolvedConnector
from green_agent.evaluations.prompts import ANSWER_CORRECTNESS
from green_agent.provider_limits import ProviderLimits
from tests.support.fake_openai import error_reply, make_fake_openai, text_reply

INPUTS = {"query": "What is 5 + 3?", "answer": "8", "ground_truth": "5 + 3 equals 8"}
GOOD = '{"correctness_score": 0.9, "reasoning": "same number"}'
RETRY = RetryPolicy(max_retries=2, backoff_base_s=0.0, backoff_max_s=0.01, timeout_s=5.0)


def connector() -> ResolvedConnector:
    return ResolvedConnector(
        provider="openai",
        class_path="langchain_openai.chat_models.ChatOpenAI",
        model="judge-model",
        base_url="http://fake/v1",
        api_key=SecretStr("sk-test-judge"),
        requested_temperature=None,
    )


async def test_judges_of_one_provider_share_its_limiter_and_ride_out_a_429() -> None:
    app = make_fake_openai([error_reply(429, retry_after=0.01), text_reply(GOOD), text_reply(GOOD)])
    providers = ProviderLimits(max_concurrency=8)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://fake") as client:
        judges: list[Any] = [
            LlmJudge(connector(), http_client=client, retry=RETRY, providers=providers) for _ in range(2)
        ]
        [first] = await judges[0].evaluate_many(ANSWER_CORRECTNESS, [INPUTS])
        [second] = await judges[1].evaluate_many(ANSWER_CORRECTNESS, [{**INPUTS, "answer": "eight"}])
    assert (first.status, second.status) == ("scored", "scored") and first.attempts == 2
    limiter = providers.limiter("http://fake/v1", "judge-model")
    assert (limiter.calls, limiter.rate_limited, limiter.decreases) == (3, 1, 1)  # both judges' calls, one 429

"""The LLM judge against a scripted OpenAI-compatible server (real openai client, in-process transport): structured
answers, the prompted fallback, malformed answers, 429 then success, 500 forever -> unscored, and the cache."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from green_agent.evaluations import JudgeCache, LexicalJudge, LlmJudge, RetryPolicy
from green_agent.evaluations.connectors import ResolvedConnector
from green_agent.evaluations.prompts import ANSWER_CORRECTNESS, RESPONSE_FAITHFULNESS
from green_agent.provider_limits import ProviderLimits
from tests.support.fake_openai import error_reply, fake_state, make_fake_openai, text_reply

INPUTS = {"query": "What is 5 + 3?", "answer": "8", "ground_truth": "5 + 3 equals 8"}
GOOD = '{"correctness_score": 0.9, "reasoning": "same number"}'
RETRY = RetryPolicy(max_retries=2, backoff_base_s=0.0, backoff_max_s=0.01, timeout_s=5.0)


def _connector() -> ResolvedConnector:
    return ResolvedConnector(
        provider="openai",
        class_path="langchain_openai.chat_models.ChatOpenAI",
        model="judge-model",
        base_url="http://fake/v1",
        api_key=SecretStr("sk-test-judge"),
        requested_temperature=None,
    )


class _Judges:
    """Builds judges on in-process transports and closes every HTTP client at the end of the test."""

    def __init__(self) -> None:
        self.clients: list[httpx.AsyncClient] = []

    def __call__(self, app: Any, **kwargs: Any) -> LlmJudge:
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://fake")
        self.clients.append(client)
        return LlmJudge(_connector(), http_client=client, retry=kwargs.pop("retry", RETRY), **kwargs)


@pytest.fixture
async def make_judge() -> AsyncIterator[_Judges]:
    judges = _Judges()
    yield judges
    for client in judges.clients:
        await client.aclose()


async def test_structured_answer_is_validated_and_recorded(make_judge: _Judges) -> None:
    app = make_fake_openai([text_reply(GOOD)])
    judge = make_judge(app)
    [outcome] = await judge.evaluate_many(ANSWER_CORRECTNESS, [INPUTS])
    await judge.aclose()
    assert outcome.status == "scored"
    assert outcome.answer == {"correctness_score": 0.9, "reasoning": "same number"}
    assert outcome.judge.kind == "llm" and outcome.judge.model == "judge-model"
    assert outcome.judge.prompt_hash == ANSWER_CORRECTNESS.hash and outcome.judge.structured_output is True
    [request] = fake_state(app).completion_requests
    assert request["temperature"] == 0
    assert request["response_format"]["type"] == "json_schema"
    schema = request["response_format"]["json_schema"]["schema"]
    assert schema["required"] == ["correctness_score", "reasoning"] and schema["additionalProperties"] is False
    assert json.loads(request["messages"][1]["content"].split("\n", 1)[1]) == INPUTS


async def test_prompted_fallback_parses_a_fenced_json_answer(make_judge: _Judges) -> None:
    app = make_fake_openai([text_reply("Here you go:\n```json\n" + GOOD + "\n```")])
    judge = make_judge(app, use_structured_output=False)
    [outcome] = await judge.evaluate_many(ANSWER_CORRECTNESS, [INPUTS])
    await judge.aclose()
    assert outcome.status == "scored" and outcome.answer is not None and outcome.answer["correctness_score"] == 0.9
    assert outcome.judge.structured_output is False
    [request] = fake_state(app).completion_requests
    assert "response_format" not in request
    assert "JSON schema" in request["messages"][1]["content"]


async def test_endpoint_rejecting_structured_output_falls_back_to_prompted(make_judge: _Judges) -> None:
    app = make_fake_openai([error_reply(400, "response_format json_schema is not supported"), text_reply(GOOD)])
    judge = make_judge(app)
    [outcome] = await judge.evaluate_many(ANSWER_CORRECTNESS, [INPUTS])
    await judge.aclose()
    assert outcome.status == "scored" and outcome.judge.structured_output is False
    first, second = fake_state(app).completion_requests
    assert "response_format" in first and "response_format" not in second


async def test_malformed_answer_is_asked_again_then_scored(make_judge: _Judges) -> None:
    app = make_fake_openai([text_reply('{"correctness_score": 1.7, "reasoning": "too high"}'), text_reply(GOOD)])
    judge = make_judge(app)
    [outcome] = await judge.evaluate_many(ANSWER_CORRECTNESS, [INPUTS])
    await judge.aclose()
    assert outcome.status == "scored" and outcome.attempts == 2
    second = fake_state(app).completion_requests[1]
    assert "previous answer was not valid" in second["messages"][-1]["content"]
    assert "correctness_score" in second["messages"][-1]["content"]


async def test_malformed_answers_forever_leave_the_item_unscored(make_judge: _Judges) -> None:
    app = make_fake_openai(lambda body: text_reply("I think it is right, probably."))
    judge = make_judge(app)
    [outcome] = await judge.evaluate_many(ANSWER_CORRECTNESS, [INPUTS])
    await judge.aclose()
    assert outcome.status == "unscored" and outcome.answer is None
    assert "did not match the schema after 2 tries" in (outcome.reason or "")
    assert outcome.judge.prompt_hash == ANSWER_CORRECTNESS.hash


async def test_429_then_success_is_retried(make_judge: _Judges) -> None:
    app = make_fake_openai([error_reply(429, "slow down", retry_after=0.001), text_reply(GOOD)])
    judge = make_judge(app)
    [outcome] = await judge.evaluate_many(ANSWER_CORRECTNESS, [INPUTS])
    await judge.aclose()
    assert outcome.status == "scored" and outcome.attempts == 2
    assert len(fake_state(app).completion_requests) == 2


async def test_500_forever_leaves_the_item_unscored_with_the_reason(make_judge: _Judges) -> None:
    app = make_fake_openai(lambda body: error_reply(500, "internal"))
    judge = make_judge(app)
    outcomes = await judge.evaluate_many(ANSWER_CORRECTNESS, [INPUTS, {**INPUTS, "answer": "9"}])
    await judge.aclose()
    assert [o.status for o in outcomes] == ["unscored", "unscored"]
    for outcome in outcomes:
        assert outcome.attempts == 3  # 1 + max_retries
        assert outcome.reason == "judge unavailable after 3 attempt(s): HTTP 500: internal"
    assert len(fake_state(app).completion_requests) == 6


async def test_401_is_not_retried(make_judge: _Judges) -> None:
    app = make_fake_openai(lambda body: error_reply(401, "bad key"))
    judge = make_judge(app)
    [outcome] = await judge.evaluate_many(ANSWER_CORRECTNESS, [INPUTS])
    await judge.aclose()
    assert outcome.status == "unscored" and outcome.attempts == 1
    assert "rejected the request" in (outcome.reason or "")


async def test_cache_hit_skips_the_endpoint(tmp_path: Path, make_judge: _Judges) -> None:
    app = make_fake_openai(lambda body: text_reply(GOOD))
    async with JudgeCache(tmp_path / "cache.sqlite") as cache:
        judge = make_judge(app, cache=cache)
        [first] = await judge.evaluate_many(ANSWER_CORRECTNESS, [INPUTS])
        [second] = await judge.evaluate_many(ANSWER_CORRECTNESS, [INPUTS])
        [other] = await judge.evaluate_many(ANSWER_CORRECTNESS, [{**INPUTS, "answer": "nine"}])
        await judge.aclose()
        assert (first.cached, second.cached, other.cached) == (False, True, False)
        assert second.answer == first.answer and second.judge == first.judge
        assert len(fake_state(app).completion_requests) == 2
        assert (cache.hits, cache.writes) == (1, 2)
    # persistent: a new cache object on the same file still hits
    async with JudgeCache(tmp_path / "cache.sqlite") as cache:
        judge = make_judge(app, cache=cache)
        [again] = await judge.evaluate_many(ANSWER_CORRECTNESS, [INPUTS])
        await judge.aclose()
        assert again.cached is True
        assert len(fake_state(app).completion_requests) == 2


async def test_unscored_verdicts_are_not_cached(tmp_path: Path, make_judge: _Judges) -> None:
    replies = iter([error_reply(500), error_reply(500), error_reply(500), text_reply(GOOD)])
    app = make_fake_openai(lambda body: next(replies))
    async with JudgeCache(tmp_path / "cache.sqlite") as cache:
        judge = make_judge(app, cache=cache)
        [failed] = await judge.evaluate_many(ANSWER_CORRECTNESS, [INPUTS])
        [retried] = await judge.evaluate_many(ANSWER_CORRECTNESS, [INPUTS])
        await judge.aclose()
    assert failed.status == "unscored" and retried.status == "scored" and retried.cached is False


async def test_cache_key_depends_on_the_prompt_hash(tmp_path: Path, make_judge: _Judges) -> None:
    faithful = '{"score": 1.0, "explanation": "ok"}'
    app = make_fake_openai(lambda body: text_reply(GOOD if "correctness" in json.dumps(body) else faithful))
    async with JudgeCache(tmp_path / "cache.sqlite") as cache:
        judge = make_judge(app, cache=cache)
        await judge.evaluate_many(ANSWER_CORRECTNESS, [INPUTS])
        [other] = await judge.evaluate_many(RESPONSE_FAITHFULNESS, [INPUTS])
        await judge.aclose()
    assert other.cached is False and other.answer == {"score": 1.0, "explanation": "ok"}


@pytest.mark.parametrize("answer, expected", [("The result is 8.", 1.0), ("It is 9.", 0.0)])
async def test_lexical_judge_says_it_is_lexical(answer: str, expected: float) -> None:
    [outcome] = await LexicalJudge().evaluate_many(ANSWER_CORRECTNESS, [{**INPUTS, "answer": answer}])
    assert outcome.status == "scored" and outcome.answer is not None
    assert outcome.answer["correctness_score"] == expected
    assert outcome.judge.kind == "lexical" and outcome.judge.name == "lexical"


# The judge shares its provider's adaptive cap (issue 27): two judges of one endpoint and model go through one
# limiter of the green agent's ProviderLimits, a 429 slows both, and the retry budget absorbs it (scored, not unscored).
async def test_judges_of_one_provider_share_its_limiter_and_ride_out_a_429() -> None:
    app = make_fake_openai([error_reply(429, retry_after=0.01), text_reply(GOOD), text_reply(GOOD)])
    providers = ProviderLimits(max_concurrency=8)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://fake") as client:
        judges: list[Any] = [
            LlmJudge(_connector(), http_client=client, retry=RETRY, providers=providers) for _ in range(2)
        ]
        [first] = await judges[0].evaluate_many(ANSWER_CORRECTNESS, [INPUTS])
        [second] = await judges[1].evaluate_many(ANSWER_CORRECTNESS, [{**INPUTS, "answer": "eight"}])
    assert (first.status, second.status) == ("scored", "scored") and first.attempts == 2
    limiter = providers.limiter("http://fake/v1", "judge-model")
    assert (limiter.calls, limiter.rate_limited, limiter.decreases) == (3, 1, 1)  # both judges' calls, one 429

"""Per-provider caps (green_agent/provider_limits.py, issue 27): the cap holds across callers, a 429 lowers the
allowed concurrency once per generation and pauses every caller until its Retry-After, answers raise it back
gradually, cancelled waiters never leak a slot, and the retry loop counts the 429s. Orders and counts only, never
durations."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import httpx
import openai
import pytest

from green_agent.engine.config import BattleConfig, ConfigError, UserSimulatorConfig
from green_agent.llm_retry import RetryBudget, retry_after_s
from green_agent.provider_limits import ProviderLimiter, ProviderLimits
from tests.green_agent.provider_support import Probe, settle


def rate_limited(retry_after_s: float | None = None) -> openai.RateLimitError:
    headers = {} if retry_after_s is None else {"retry-after-ms": str(int(retry_after_s * 1000))}
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx.Response(429, headers=headers, request=request)
    return openai.RateLimitError("rate limited", response=cast(Any, response), body=None)


@pytest.mark.asyncio(loop_scope="session")
async def test_the_cap_holds_across_every_caller_of_a_provider() -> None:
    limits = ProviderLimits(max_concurrency=3)
    limiter = limits.limiter("http://127.0.0.1:1/v1/", "m")
    assert limits.limiter("HTTP://127.0.0.1:1/v1", "m") is limiter  # one limiter per (base URL, model)
    assert limits.limiter("http://127.0.0.1:1/v1", "other") is not limiter
    probe = Probe()
    tasks = [asyncio.create_task(limiter.run(probe.call)) for _ in range(10)]
    await settle()
    assert (probe.running, limiter.in_flight, len(limiter._waiters)) == (3, 3, 7)
    probe.release.set()
    assert await asyncio.gather(*tasks) == ["ok"] * 10
    assert (probe.peak, limiter.in_flight, limiter.calls) == (3, 0, 10)


@pytest.mark.asyncio(loop_scope="session")
async def test_a_429_lowers_the_limit_once_per_generation_and_answers_raise_it_again() -> None:
    limiter = ProviderLimiter("p", max_concurrency=8)
    gate = asyncio.Event()

    async def refused() -> None:
        await gate.wait()
        raise rate_limited()

    tasks = [asyncio.create_task(limiter.run(refused)) for _ in range(8)]
    await settle()
    gate.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, openai.RateLimitError) for r in results)
    # eight 429s of calls started in the same generation: one decrease, not eight
    assert (limiter.rate_limited, limiter.decreases, limiter.allowed) == (8, 1, 5)  # 8 x 0.7 = 5.6

    async def fine() -> str:
        return "ok"

    for _ in range(2):  # each answer adds 1 / limit: a round of about `allowed` answers adds one slot
        await limiter.run(fine)
    assert limiter.allowed == 5
    await limiter.run(fine)
    assert limiter.allowed == 6
    for _ in range(200):
        await limiter.run(fine)
    assert limiter.allowed == limiter.cap == 8  # recovered, never above the cap


@pytest.mark.asyncio(loop_scope="session")
async def test_retry_after_pauses_every_caller_of_the_provider() -> None:
    limiter = ProviderLimiter("p", max_concurrency=4)
    order: list[str] = []

    async def refused() -> None:
        order.append("429")
        raise rate_limited(retry_after_s=0.2)

    with pytest.raises(openai.RateLimitError):
        await limiter.run(refused)
    paused_until = limiter.paused_until
    loop = asyncio.get_running_loop()

    async def later() -> float:
        order.append("call")
        return loop.time()

    started = await limiter.run(later)
    assert order == ["429", "call"]
    assert started >= paused_until  # the same clock (monotonic): nothing started during the pause


@pytest.mark.asyncio(loop_scope="session")
async def test_a_hostile_retry_after_is_bounded() -> None:
    limiter = ProviderLimiter("p", max_concurrency=2, max_pause_s=0.05)

    async def refused() -> None:
        raise rate_limited(retry_after_s=10**9)

    with pytest.raises(openai.RateLimitError):
        await limiter.run(refused)
    assert limiter.paused_until - asyncio.get_running_loop().time() <= 0.05 + 1e-6
    assert retry_after_s(rate_limited(retry_after_s=1.5)) == 1.5


@pytest.mark.asyncio(loop_scope="session")
async def test_cancelled_waiters_never_leak_a_slot() -> None:
    limiter = ProviderLimiter("p", max_concurrency=1)
    probe = Probe()
    holder = asyncio.create_task(limiter.run(probe.call))
    await settle()
    waiters = [asyncio.create_task(limiter.run(probe.call)) for _ in range(3)]
    await settle()
    waiters[0].cancel()
    probe.release.set()
    await settle()
    waiters[1].cancel()  # possibly just handed the slot: it must pass it on
    results = await asyncio.gather(holder, *waiters, return_exceptions=True)
    assert results[0] == "ok" and results[3] == "ok"
    assert (limiter.in_flight, len(limiter._waiters)) == (0, 0)


@pytest.mark.asyncio(loop_scope="session")
async def test_the_retry_loop_counts_429s_and_runs_each_try_under_the_limiter() -> None:
    limiter = ProviderLimiter("p", max_concurrency=2)
    answers: list[Any] = [rate_limited(0.0), rate_limited(0.0), "done"]

    async def call() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return str(answer)

    budget = RetryBudget(max_retries=3, backoff_base_s=0.0, backoff_max_s=0.0, limiter=limiter)
    assert await budget.call(call) == "done"
    assert (budget.calls, budget.retries, budget.rate_limited) == (3, 2, 2)
    assert (limiter.calls, limiter.rate_limited) == (3, 2)


def test_a_battle_may_lower_the_operators_cap_never_raise_it() -> None:
    limits = ProviderLimits(max_concurrency=8)
    llm = UserSimulatorConfig(kind="llm", base_url="http://127.0.0.1:9/v1", model="m")
    assert limits.for_user(BattleConfig()) is None  # the scripted user calls no model
    assert limits.for_user(BattleConfig(user_simulator=llm, provider_max_concurrency=4)) is not None
    with pytest.raises(ConfigError, match=r"provider_max_concurrency: at most 8 on this green agent"):
        limits.for_user(BattleConfig(user_simulator=llm, provider_max_concurrency=9))


def test_worker_processes_split_the_cap() -> None:
    # the documented rule (docs/design/providers.md): each of N processes gets cap // N slots per provider
    assert ProviderLimits(max_concurrency=32, workers=4).limiter(None, "m").cap == 8
    assert ProviderLimits(max_concurrency=3, workers=8).limiter(None, "m").cap == 1
    with pytest.raises(ValueError, match="max_concurrency"):
        ProviderLimits(max_concurrency=0)

"""A 429 storm is nobody's failure (issue 27): a battle with the LLM user at concurrency 64 against a provider that
allows 4 completions in flight and a tokens-per-window limit, both enforced with 429s and Retry-After. The user's
calls share the provider's adaptive cap (green_agent/provider_limits.py): every attempt finishes, none is blamed on
the agent, and the summary counts exactly the 429s the provider sent. Throughput against the provider's limit is a
speed figure: benchmarks/bench_provider_limits.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from green_agent.engine.battle import Battle
from green_agent.engine.config import BattleConfig, UserSimulatorConfig
from green_agent.engine.results import BattleResult, FaultAuthor
from green_agent.engine.tau.sandbox import SandboxFactory
from green_agent.engine.tau.scoring import ScoringPool
from green_agent.provider_limits import ProviderLimits
from tests.green_agent.service.conftest import white_agent
from tests.support.fake_openai import ProviderLimitsSpec, fake_state, make_fake_openai, text_reply
from tests.support.servers import serve_app

USAGE = {"prompt_tokens": 90, "completion_tokens": 10}
LIMITS = ProviderLimitsSpec(max_concurrency=2, tokens_per_window=600, window_s=1.0, latency_s=0.05)
"""At most 2 in flight, 6 completions of 100 tokens per second: 128 calls need over 20 s, so however loaded the
machine, the provider refuses some."""
TASKS = [0, 1, 2, 3, 4, 5, 6, 8]
"""The mock tasks whose gold solution passes (task 7 is a gold gap: green_agent/engine/tau/gold_gaps.py); x k = 8:
64 attempts, all in flight at once."""


def customer(request: dict[str, Any]) -> Any:
    """The customer: asks for help, then stops once the agent has answered (the replay agent's final statement)."""
    heard = sum(1 for m in request.get("messages", []) if m.get("role") == "user")
    if heard >= 2:
        return text_reply("Thank you, that is all. ###STOP###", usage=USAGE)
    return text_reply("Hi, I need help with my request.", usage=USAGE)


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="session")
async def test_a_429_storm_at_concurrency_64_is_counted_and_blamed_on_nobody(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARENA_TEST_USER_KEY", "sk-user-test")
    app = make_fake_openai(customer, limits=LIMITS)
    async with (
        serve_app(app) as llm,
        white_agent("replay") as white,
        ScoringPool(max_workers=1) as scoring,
        SandboxFactory() as sandboxes,
    ):
        user = UserSimulatorConfig(
            kind="llm",
            model="user-model",
            base_url=f"{llm}/v1",
            api_key_env="ARENA_TEST_USER_KEY",
            max_retries=20,
        )
        config = BattleConfig(
            domain="mock", split="base", task_index=TASKS, k=8, concurrency=64, calibration=True, user_simulator=user
        )
        providers = ProviderLimits(max_concurrency=32)  # the operator's cap, well above what the provider allows
        battle = Battle(
            "storm-1", white, config, scoring=scoring, runs_dir=tmp_path, providers=providers, sandboxes=sandboxes
        )
        result = await battle.run()
    state = fake_state(app)
    assert len(result.attempts) == 64
    blamed = [a for a in result.attempts if a.failure is not None and a.failure.fault_author == FaultAuthor.WHITE_AGENT]
    assert blamed == []
    # ... nor on the user simulator: no retry budget ran out (a sandbox that a loaded machine could not build in time
    # would be the harness's, and is not what this test is about)
    assert not [a for a in result.attempts if a.failure and a.failure.fault_author == FaultAuthor.USER_SIMULATOR]
    assert state.rate_limited_total > 0, "the provider never refused: the test exercises nothing"
    assert LIMITS.max_concurrency is not None and state.peak_in_flight <= LIMITS.max_concurrency
    usage = result.usage
    assert usage is not None and usage.user is not None
    assert usage.user.rate_limited == state.rate_limited_total  # every 429 the provider sent, counted
    assert usage.user.calls == state.answered and usage.user.retries >= usage.user.rate_limited
    written = json.loads((tmp_path / "storm-1" / "summary.json").read_text(encoding="utf-8"))
    assert written["usage"]["user"]["rate_limited"] == state.rate_limited_total
    assert BattleResult.model_validate(written).usage == usage
    markdown = (tmp_path / "storm-1" / "summary.md").read_text(encoding="utf-8")
    assert f"answered HTTP 429 (rate limited) {state.rate_limited_total} time(s)" in markdown

"""The operator's provider cap holds across battles that run over worker processes (issue 27, "shared by all
attempts and battles of a green agent"): two such battles at once on one green agent, with the LLM user against a
scripted OpenAI-compatible server on loopback that counts the calls in flight, never have more than the cap in
flight together. Before the service handed out shares, each battle divided the whole cap between its own workers, so
two battles put up to twice the cap in flight."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from green_agent.engine.battle import Battle
from green_agent.engine.config import BattleConfig, UserSimulatorConfig
from green_agent.engine.results import FaultAuthor
from green_agent.engine.tau.scoring import ScoringPool
from green_agent.provider_limits import ProviderLimits
from tests.green_agent.service.conftest import white_agent
from tests.support.fake_openai import ProviderLimitsSpec, fake_state, make_fake_openai, text_reply
from tests.support.servers import serve_app

CAP = 4
TASKS = [0, 1, 2, 3, 4, 5, 6, 8]
"""The mock tasks whose gold solution passes (task 7 is a gold gap); x k = 4: 32 attempts per battle."""
SLOW = ProviderLimitsSpec(latency_s=0.3)
"""No limit of its own: every completion takes 0.3 s, so each battle's calls stay in flight while the other's run."""


def customer(request: dict[str, Any]) -> Any:
    heard = sum(1 for m in request.get("messages", []) if m.get("role") == "user")
    if heard >= 2:
        return text_reply("Thank you, that is all. ###STOP###")
    return text_reply("Hi, I need help with my request.")


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="session")
async def test_two_battles_over_workers_stay_within_the_operators_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARENA_TEST_USER_KEY", "sk-user-test")  # the workers inherit it
    app = make_fake_openai(customer, limits=SLOW)
    providers = ProviderLimits(max_concurrency=CAP)  # one per green agent: the service's (BattleRegistry.providers)
    async with serve_app(app) as llm, white_agent("replay") as white, ScoringPool(max_workers=1) as scoring:
        user = UserSimulatorConfig(
            kind="llm", model="user-model", base_url=f"{llm}/v1", api_key_env="ARENA_TEST_USER_KEY", max_retries=5
        )
        config = BattleConfig(
            domain="mock", split="base", task_index=TASKS, k=4, concurrency=32, calibration=True, user_simulator=user
        )
        battles = [
            Battle(f"shares-{n}", white, config, scoring=scoring, runs_dir=tmp_path, providers=providers, workers=2)
            for n in (1, 2)
        ]
        results = await asyncio.gather(*(b.run() for b in battles))
    state = fake_state(app)
    assert all(len(b.worker_pids) == 2 for b in battles)  # both really ran over two workers
    for result in results:
        assert len(result.attempts) == 32
        assert not [a for a in result.attempts if a.failure and a.failure.fault_author != FaultAuthor.WHITE_AGENT]
        assert not [a for a in result.attempts if a.failure and a.failure.fault_author == FaultAuthor.WHITE_AGENT]
    assert state.answered >= 2 * 32
    assert state.peak_in_flight <= CAP, f"{state.peak_in_flight} calls in flight, the operator's cap is {CAP}"
    assert providers.per_process == CAP  # the battles' shares were given back

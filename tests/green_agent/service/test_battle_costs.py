"""Cost and latency end to end, through the public A2A interface: the LLM user and the llm white agent against a
scripted OpenAI-compatible server that returns chosen ``usage`` numbers, and a white agent that reports its usage
in its reply metadata, partly malformed. Exact token and cost figures; latencies only by structure, never speed."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from green_agent.engine.config import BattleConfig, UserSimulatorConfig
from green_agent.engine.costs import AGENT_USAGE_KEY
from green_agent.engine.results import BattleResult
from green_agent.engine.tau.tasks import resolve_task
from green_agent.service.a2a_server import create_app
from green_agent.service.operator_auth import OperatorToken
from tests.green_agent.service.conftest import assess, white_agent
from tests.support import TEST_OPERATOR_TOKEN
from tests.support.fake_openai import error_reply, make_fake_openai, text_reply, tool_call_reply
from tests.support.servers import serve_app, serve_app_factory
from white_agent.app import make_agent
from white_agent.llm import LlmAgentSettings
from white_agent.protocol import GreenTurn
from white_agent.server import AgentReply
from white_agent.server import create_app as create_white_app

pytestmark = pytest.mark.asyncio(loop_scope="session")

TASK = resolve_task("retail", "test", 9)
USER_PRICE = {"input_usd_per_million_tokens": 0.4, "output_usd_per_million_tokens": 1.6}


def scripted_usage() -> tuple[Any, dict[str, list[dict[str, Any]]]]:
    """The battle of tests/green_agent/service/test_llm_battle.py, every answered completion with its own usage
    (recorded)."""
    gold = TASK.task.evaluation_criteria.actions[0]
    sent: dict[str, list[dict[str, Any]]] = {"user": [], "agent": []}
    refused = {"done": False}

    def script(request: dict[str, Any]) -> Any:
        if request["model"] == "user-model":
            if not refused["done"]:
                refused["done"] = True
                return error_reply(429, retry_after=0.01)  # no usage: a refused call costs nothing
            n = len(sent["user"])
            usage: dict[str, Any] = {"prompt_tokens": 700 + 13 * n, "completion_tokens": 20 + n}
            sent["user"].append(usage)
            if any("All done" in str(m.get("content")) for m in request["messages"]):
                return text_reply("Great, thanks. ###STOP###", usage=usage)
            return text_reply("Hi, I'm Daiki Sanchez from 46236 and I want to change items in my order.", usage=usage)
        n = len(sent["agent"])
        usage = {
            "prompt_tokens": 2000 + 101 * n,
            "completion_tokens": 40 + 3 * n,
            "cost": 0.00125 * (n + 1),
        }
        sent["agent"].append(usage)
        if request["messages"][-1]["role"] == "tool":
            return text_reply(
                "All done: your camera and the other items were exchanged; the difference is 481.5.", usage=usage
            )
        return tool_call_reply(gold.name, dict(gold.arguments), usage=usage)

    return script, sent


@contextlib.asynccontextmanager
async def green_with_user(user: UserSimulatorConfig, runs_dir: Path) -> AsyncIterator[str]:
    """A green agent whose operator configured the LLM user (endpoint, model and key variable are operator-only)."""
    default = BattleConfig(user_simulator=user)
    async with serve_app_factory(
        lambda url: create_app(
            url,
            runs_dir=runs_dir,
            default_config=default,
            operator_token=OperatorToken(TEST_OPERATOR_TOKEN),
            scoring_workers=1,
        ),
        startup_timeout_s=60,
    ) as url:
        yield url


def total(usages: list[dict[str, Any]], key: str) -> Any:
    return sum(u[key] for u in usages)


async def test_user_and_agent_tokens_and_costs_are_the_scripted_usage(
    runs_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARENA_TEST_USER_KEY", "sk-user-test")
    monkeypatch.setenv("ARENA_TEST_AGENT_KEY", "sk-agent-test")
    script, sent = scripted_usage()
    async with serve_app(make_fake_openai(script)) as llm:
        settings = LlmAgentSettings(
            model="agent-model", base_url=f"{llm}/v1", api_key_env="ARENA_TEST_AGENT_KEY", retry_base_delay_s=0.01
        )
        user = UserSimulatorConfig(
            kind="llm", model="user-model", base_url=f"{llm}/v1", api_key_env="ARENA_TEST_USER_KEY", max_retries=3
        )
        # The price table comes with the remote request: it only changes what the report says a token costs.
        config = {"domain": "retail", "task_id": 9, "k": 2, "concurrency": 2, "prices": {"user-model": USER_PRICE}}
        async with green_with_user(user, runs_dir) as green_url, white_agent("llm", llm=settings) as white:
            outcome = await assess(green_url, white, config)

    assert outcome.state == "completed", outcome.error
    result = BattleResult.model_validate(outcome.result)
    assert [a.outcome for a in result.attempts] == ["success", "success"]
    usage = result.usage
    assert usage is not None and usage.attempts == 2
    # The user simulator: every answered completion's usage, priced by the table (the 429 added nothing).
    assert usage.user is not None
    prompt, completion = total(sent["user"], "prompt_tokens"), total(sent["user"], "completion_tokens")
    assert (usage.user.calls, usage.user.reported) == (len(sent["user"]), len(sent["user"]))
    assert (usage.user.prompt_tokens, usage.user.completion_tokens) == (prompt, completion)
    assert usage.user.cost_usd == pytest.approx((prompt * 0.4 + completion * 1.6) / 1e6)
    assert usage.user.cost_source == "price_table"
    # The agent: what the llm agent reported in its reply metadata, the provider's cost included.
    agent_cost = total(sent["agent"], "cost")
    assert (usage.agent.prompt_tokens, usage.agent.completion_tokens) == (
        total(sent["agent"], "prompt_tokens"),
        total(sent["agent"], "completion_tokens"),
    )
    assert usage.agent.calls == usage.agent.reported == len(sent["agent"]) == sum(a.steps for a in result.attempts)
    assert usage.agent.cost_usd == pytest.approx(agent_cost) and usage.agent.cost_source == "reported"
    assert usage.total_cost_usd == pytest.approx(agent_cost + (prompt * 0.4 + completion * 1.6) / 1e6)
    # Per attempt, the parts add up to the battle's; latencies are ordered, one per reply.
    for attempt in result.attempts:
        assert attempt.usage is not None and attempt.usage.user is not None
        latency = attempt.usage.agent_latency
        assert latency.count == len(attempt.usage.agent_turn_latencies_s) == attempt.steps
        assert latency.p50_s is not None and latency.p95_s is not None and latency.max_s is not None
        assert latency.p50_s <= latency.p95_s <= latency.max_s
        parts = attempt.usage.agent_s + attempt.usage.user_s + attempt.usage.harness_s
        assert parts == pytest.approx(attempt.duration_s, abs=0.002)
    assert sum(a.usage.user.prompt_tokens or 0 for a in result.attempts if a.usage and a.usage.user) == prompt
    assert usage.agent_latency.count == sum(a.steps for a in result.attempts)
    # The same numbers in summary.json and the markdown.
    written = json.loads((runs_dir / result.battle_id / "summary.json").read_text(encoding="utf-8"))
    assert outcome.result is not None and written["usage"] == outcome.result["usage"]
    assert "## Cost and latency" in (outcome.markdown or "")
    assert f"| user simulator tokens | {prompt:,} prompt + {completion:,} completion" in (outcome.markdown or "")


VALID = {"prompt_tokens": 40, "completion_tokens": 6, "cost_usd": 0.125}
REPORTS: list[Any] = [VALID, {"prompt_tokens": -40, "completion_tokens": 6}, "forty tokens", None]
"""What the reporting agent puts under arena/usage on its turns 1, 2, 3, 4, 5, ... (None: no metadata)."""


class ReportingReplay:
    """The replay agent, also reporting usage in its reply metadata: :data:`REPORTS` in turn, per context."""

    card_name = "replay reporting usage"
    card_description = "Replay agent with arena/usage metadata, some of it malformed."

    def __init__(self) -> None:
        self.inner = make_agent("replay")
        self.turns: Counter[str] = Counter()

    async def reply(self, context_id: str, turn: GreenTurn) -> AgentReply:
        answer = await self.inner.reply(context_id, turn)
        report = REPORTS[self.turns[context_id] % len(REPORTS)]
        self.turns[context_id] += 1
        return answer if report is None else dataclasses.replace(answer, metadata={AGENT_USAGE_KEY: report})

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_malformed_agent_usage_is_ignored_and_never_changes_the_verdict(green_url: str) -> None:
    agent = ReportingReplay()
    app = lambda url: create_white_app(agent, card_url=url, name=agent.card_name, description=agent.card_description)  # noqa: E731
    config = {"domain": "mock", "split": "base", "task_id": 0, "k": 2, "calibration": True}
    async with serve_app_factory(app) as white:
        outcome = await assess(green_url, white, config)
    assert outcome.state == "completed", outcome.error
    result = BattleResult.model_validate(outcome.result)
    assert [(a.outcome, a.reward) for a in result.attempts] == [("success", 1.0), ("success", 1.0)]
    for attempt in result.attempts:
        assert attempt.usage is not None and attempt.steps >= 2  # at least one malformed report was sent
        turns = [REPORTS[i % len(REPORTS)] for i in range(attempt.steps)]
        valid = sum(1 for report in turns if report is VALID)
        malformed = sum(1 for report in turns if report is not None and report is not VALID)
        reported = attempt.usage.agent
        assert (reported.calls, reported.reported, reported.malformed) == (attempt.steps, valid, malformed)
        assert (reported.prompt_tokens, reported.completion_tokens) == (40 * valid, 6 * valid)
        assert reported.cost_usd is None  # known only when every reply reported
    assert result.usage is not None and result.usage.agent.reported == sum(
        1 for a in result.attempts for i in range(a.steps) if i % len(REPORTS) == 0
    )

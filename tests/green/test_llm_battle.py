"""A battle with the LLM user simulator and the llm white agent, both against a scripted OpenAI-compatible server on
loopback: the real openai client code paths end to end, and the API keys never leak anywhere."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from green_agent.engine.config import BattleConfig, UserSimulatorConfig
from green_agent.engine.tau.tasks import resolve_task
from green_agent.service.a2a_server import create_app
from green_agent.service.operator_auth import OperatorToken
from tests.green.conftest import assess, white_agent
from tests.green.recording_backend import Recorded, make_recording_backend
from tests.support import TEST_OPERATOR_TOKEN
from tests.support.fake_openai import error_reply, fake_state, make_fake_openai, text_reply, tool_call_reply
from tests.support.servers import serve_app, serve_app_factory
from white_agent.llm import LlmAgentSettings

pytestmark = pytest.mark.asyncio(loop_scope="session")

USER_KEY = "sk-arena-user-SECRET-7731"
AGENT_KEY = "sk-arena-agent-SECRET-9917"
TASK = resolve_task("retail", "test", 9)  # one write action, communicate_info ["camera", "481.5"]


def scripted_models() -> tuple[Any, dict[str, int]]:
    """One fake endpoint for both models: the user model opens, then stops; the agent model acts, then reports."""
    gold = TASK.task.evaluation_criteria.actions[0]
    calls = {"user": 0, "agent": 0}

    def script(request: dict[str, Any]) -> Any:
        if request["model"] == "user-model":
            calls["user"] += 1
            if calls["user"] == 1:
                return error_reply(429, retry_after=0.01)  # the user simulator retries with backoff
            if any("All done" in str(m.get("content")) for m in request["messages"]):
                return text_reply("Great, thanks. ###STOP###")
            return text_reply("Hi, I'm Daiki Sanchez from 46236 and I want to change items in my order.")
        calls["agent"] += 1
        if request["messages"][-1]["role"] == "tool":
            return text_reply("All done: your camera and the other items were exchanged; the difference is 481.5.")
        return tool_call_reply(gold.name, dict(gold.arguments))

    return script, calls


@contextlib.asynccontextmanager
async def green_with_user(user: UserSimulatorConfig, runs_dir: Path) -> AsyncIterator[str]:
    """A green agent whose operator configured the LLM user (endpoint, model, key variable: operator-only fields)."""
    token = OperatorToken(TEST_OPERATOR_TOKEN)
    default = BattleConfig(user_simulator=user)
    async with serve_app_factory(
        lambda url: create_app(url, runs_dir=runs_dir, default_config=default, operator_token=token, scoring_workers=1),
        startup_timeout_s=60,
    ) as url:
        yield url


async def test_llm_user_and_llm_agent_battle_scores_and_never_leaks_keys(
    runs_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("ARENA_TEST_USER_KEY", USER_KEY)
    monkeypatch.setenv("ARENA_TEST_AGENT_KEY", AGENT_KEY)
    caplog.set_level(logging.DEBUG)
    script, calls = scripted_models()
    fake = make_fake_openai(script)
    record = Recorded()
    async with serve_app(fake) as llm, serve_app(make_recording_backend(record)) as backend:
        settings = LlmAgentSettings(
            model="agent-model", base_url=f"{llm}/v1", api_key_env="ARENA_TEST_AGENT_KEY", retry_base_delay_s=0.01
        )
        user = UserSimulatorConfig(
            kind="llm", model="user-model", base_url=f"{llm}/v1", api_key_env="ARENA_TEST_USER_KEY", max_retries=3
        )
        config = {"domain": "retail", "task_id": 9, "k": 2, "concurrency": 2}
        async with green_with_user(user, runs_dir) as green_url, white_agent("llm", llm=settings) as white:
            outcome = await assess(green_url, white, config, extra_request_fields={"backend_url": backend})
        await asyncio.wait_for(record.result_seen.wait(), timeout=30)

    assert outcome.state == "completed", outcome.error
    attempts = outcome.result["attempts"]
    assert [a["outcome"] for a in attempts] == ["success", "success"], attempts
    assert calls["agent"] >= 4 and calls["user"] >= 4
    # The keys were really used ...
    auth = {r.headers.get("authorization") for r in fake_state(fake).requests}
    assert f"Bearer {USER_KEY}" in auth and f"Bearer {AGENT_KEY}" in auth
    # ... and appear nowhere else: result, events, run directory, backend posts, logs.
    run_dir = runs_dir / outcome.result["battle_id"]
    written = "".join(p.read_text(encoding="utf-8") for p in run_dir.rglob("*") if p.is_file())
    haystacks = {
        "result": json.dumps(outcome.result),
        "markdown": outcome.markdown or "",
        "events": json.dumps(outcome.events, default=str),
        "run_dir": written,
        "backend": json.dumps(record.events) + json.dumps(record.headers),
        "logs": caplog.text,
    }
    for name, text in haystacks.items():
        assert USER_KEY not in text and AGENT_KEY not in text, f"an API key leaked into {name}"
    assert "ARENA_TEST_USER_KEY" in written  # the variable's name is recorded, which is fine and useful


async def test_llm_user_without_key_is_refused_before_start(runs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ARENA_TEST_USER_KEY", raising=False)
    config = {"domain": "retail", "task_id": 9, "k": 2, "user_simulator": {"kind": "llm"}}
    user = UserSimulatorConfig(kind="scripted", api_key_env="ARENA_TEST_USER_KEY")
    async with green_with_user(user, runs_dir) as green_url:
        outcome = await assess(green_url, "http://127.0.0.1:9", config)
    assert outcome.state == "failed"
    assert "ARENA_TEST_USER_KEY" in (outcome.error or "")
    assert outcome.result is None

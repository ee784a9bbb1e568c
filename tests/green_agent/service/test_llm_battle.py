"""A battle with the LLM user simulator and the llm white agent, both against a scripted OpenAI-compatible server on
loopback: the real openai client code paths end to end, and the API keys never leak anywhere."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from green_agent.engine.config import BattleConfig, UserSimulatorConfig
from green_agent.engine.tau.tasks import resolve_task
from green_agent.service.a2a_server import create_app
from green_agent.service.operator_auth import OperatorToken
from tests.green_agent.service.conftest import assess, white_agent
from tests.green_agent.service.recording_backend import Recorded, make_recording_backend
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

    assert outcome.state == "completed" and outcome.result is not None, outcome.error
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
    user = UserSimulatorConfig(kind="llm", api_key_env="ARENA_TEST_USER_KEY")  # the operator chose the LLM user
    async with green_with_user(user, runs_dir) as green_url:
        outcome = await assess(green_url, "http://127.0.0.1:9", config)
    assert outcome.state == "failed"
    assert "ARENA_TEST_USER_KEY" in (outcome.error or "")
    assert outcome.result is None


ASK = re.compile(r"Please do this on your phone: ([a-z_]+)(?: with (\{.*\}))?\. Let me know")


def tool_calling_user(calls: list[tuple[str, dict[str, Any]]]) -> Any:
    """A scripted telecom customer: does on the phone what the agent asks (a tool call), then says it is done."""

    def script(request: dict[str, Any]) -> Any:
        last = request["messages"][-1]
        if last["role"] == "tool":  # tau2's rule: the user's tool output comes back to the user, who then answers
            return text_reply(f"Done. The phone says: {last['content'].splitlines()[0]}")
        said = str(last.get("content") or "")
        asked = ASK.search(said)
        if asked:
            arguments = json.loads(asked.group(2)) if asked.group(2) else {}
            calls.append((asked.group(1), arguments))
            return tool_call_reply(asked.group(1), arguments, call_id=f"call_user_{len(calls)}")
        if "request has been completed" in said:
            return text_reply("Thank you, that fixed it. ###STOP###")
        return text_reply("Hi, my phone has no service and I need it fixed.")

    return script


async def test_llm_user_runs_its_device_tools_in_telecom(runs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARENA_TEST_USER_KEY", USER_KEY)
    calls: list[tuple[str, dict[str, Any]]] = []
    fake = make_fake_openai(tool_calling_user(calls))
    async with serve_app(fake) as llm:
        user = UserSimulatorConfig(
            kind="llm", model="user-model", base_url=f"{llm}/v1", api_key_env="ARENA_TEST_USER_KEY", max_retries=1
        )
        config = {"domain": "telecom", "split": "test", "task_id": 10, "k": 2, "calibration": True}
        async with green_with_user(user, runs_dir) as green_url, white_agent("replay") as white:
            outcome = await assess(green_url, white, config)
    assert outcome.state == "completed" and outcome.result is not None, outcome.error
    attempts = outcome.result["attempts"]
    assert [a["reward"] for a in attempts] == [1.0, 1.0], attempts
    assert sorted(name for name, _ in calls) == sorted(["toggle_airplane_mode", "make_payment", "reboot_device"] * 2)
    # Each device call was recorded as the user's, with the model's call id, and its output went back to the model.
    records = [
        json.loads(line)
        for line in (runs_dir / attempts[0]["battle_id"] / attempts[0]["trajectory_file"]).read_text().splitlines()
        if line.strip()
    ]
    user_calls = [c for r in records for c in r.get("tool_calls") or [] if c["requestor"] == "user"]
    assert [c["name"] for c in user_calls] == ["toggle_airplane_mode", "make_payment", "reboot_device"]
    assert all(c["id"].startswith("call_user_") for c in user_calls)  # the model's own call ids
    tool_messages = [m for r in fake_state(fake).completion_requests for m in r["messages"][-1:] if m["role"] == "tool"]
    assert len(tool_messages) == 6
    assert tool_messages[0]["content"].startswith("Airplane Mode is now")

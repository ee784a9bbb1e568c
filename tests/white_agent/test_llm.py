"""The llm agent against the scripted OpenAI-compatible server: translation both ways, retries, memory, secrecy."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.support.fake_openai import (
    ToolCallSpec,
    error_reply,
    fake_state,
    make_fake_openai,
    text_reply,
    tool_call_reply,
    tool_calls_reply,
)
from tests.support.servers import serve_app
from tests.white_agent.conftest import serving
from tests.white_agent.helpers import failed_state, first_message, talk
from white_agent.errors import WhiteAgentConfigError
from white_agent.llm import LlmAgent, LlmAgentSettings

KEY = "sk-test-SECRET-4242-do-not-log"
POLICY = "You are a retail agent. Verify identity first."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_user_details",
            "description": "Look up a user.",
            "parameters": {"type": "object", "properties": {"user_id": {"type": "string"}}, "required": ["user_id"]},
        },
    }
]


def _agent(base_url: str, **overrides: Any) -> LlmAgent:
    settings = LlmAgentSettings(
        model="fake-model",
        base_url=f"{base_url}/v1",
        api_key_env="ARENA_TEST_LLM_KEY",
        retry_base_delay_s=0.0,
        retry_max_delay_s=0.0,
        **overrides,
    )
    return LlmAgent(settings, api_key=KEY)


async def _first(talker: Any, context_id: str, user_text: str = "Hi, I want to return an item.") -> Any:
    text, data, metadata = first_message(user_text, policy=POLICY, tools=TOOLS)
    return await talker.send(context_id, text, data=data, metadata=metadata)


async def test_text_becomes_a_respond_action(wire: str) -> None:
    fake = make_fake_openai([text_reply("Sure, what is your user id?")])
    async with serve_app(fake) as llm_url, serving(_agent(llm_url)) as url, talk(url, wire) as talker:  # type: ignore[arg-type]
        answer = await _first(talker, "ctx")
    assert answer.kind == "message"
    assert answer.action() == {
        "name": "respond",
        "arguments": {"content": "Sure, what is your user id?"},
        "kwargs": {"content": "Sure, what is your user id?"},
    }
    body = fake_state(fake).completion_requests[0]
    assert body["model"] == "fake-model"
    assert body["messages"][0]["role"] == "system" and POLICY in body["messages"][0]["content"]
    assert body["messages"][1] == {"role": "user", "content": "Hi, I want to return an item."}
    assert [t["function"]["name"] for t in body["tools"]] == ["get_user_details"]


async def test_tool_call_round_trip_keeps_only_the_first_call() -> None:
    fake = make_fake_openai(
        [
            tool_calls_reply(
                [
                    ToolCallSpec("get_user_details", {"user_id": "u1"}, "call_A"),
                    ToolCallSpec("get_user_details", {"user_id": "u2"}, "call_B"),
                ]
            ),
            text_reply("Your account is found."),
        ]
    )
    async with serve_app(fake) as llm_url, serving(_agent(llm_url)) as url, talk(url) as talker:
        first = await _first(talker, "ctx")
        second = await talker.send("ctx", 'Tool call result:\n{"name": "Ann"}')
    assert first.action() == {"name": "get_user_details", "arguments": {"user_id": "u1"}, "kwargs": {"user_id": "u1"}}
    assert second.action() == {
        "name": "respond",
        "arguments": {"content": "Your account is found."},
        "kwargs": {"content": "Your account is found."},
    }
    messages = fake_state(fake).completion_requests[1]["messages"]
    assistant, tool = messages[-2], messages[-1]
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_A"]
    assert tool == {"role": "tool", "tool_call_id": "call_A", "content": '{"name": "Ann"}'}


async def test_user_turns_become_user_messages_and_close_a_pending_call() -> None:
    fake = make_fake_openai([tool_call_reply("get_user_details", {"user_id": "u1"}, call_id="c1"), text_reply("ok")])
    async with serve_app(fake) as llm_url, serving(_agent(llm_url)) as url, talk(url) as talker:
        await _first(talker, "ctx")
        await talker.send("ctx", "User message:\nActually, never mind.")
    messages = fake_state(fake).completion_requests[1]["messages"]
    assert messages[-2]["role"] == "tool" and messages[-2]["tool_call_id"] == "c1"
    assert messages[-1] == {"role": "user", "content": "Actually, never mind."}


async def test_rate_limit_then_success() -> None:
    fake = make_fake_openai([error_reply(429), error_reply(503), text_reply("Hello!")])
    async with serve_app(fake) as llm_url, serving(_agent(llm_url)) as url, talk(url) as talker:
        answer = await _first(talker, "ctx")
    assert answer.action() == {"name": "respond", "arguments": {"content": "Hello!"}, "kwargs": {"content": "Hello!"}}
    assert len(fake_state(fake).completion_requests) == 3


async def test_exhausted_retries_report_failure_and_undo_the_turn(wire: str) -> None:
    fake = make_fake_openai([error_reply(500)] * 3 + [text_reply("back")])
    async with serve_app(fake) as llm_url:
        agent = _agent(llm_url, max_retries=2)
        async with serving(agent) as url, talk(url, wire) as talker:  # type: ignore[arg-type]
            failed = await _first(talker, "ctx")
            retried = await _first(talker, "ctx")
    assert failed_state(failed) and "HTTP 500" in failed.text
    assert retried.action() == {"name": "respond", "arguments": {"content": "back"}, "kwargs": {"content": "back"}}
    assert len(fake_state(fake).completion_requests) == 4
    assert len(fake_state(fake).completion_requests[3]["messages"]) == 2  # system + user: the failed turn was undone


async def test_bad_request_is_not_retried() -> None:
    fake = make_fake_openai([error_reply(400, "bad"), text_reply("never")])
    async with serve_app(fake) as llm_url, serving(_agent(llm_url)) as url, talk(url) as talker:
        answer = await _first(talker, "ctx")
    assert failed_state(answer)
    assert len(fake_state(fake).completion_requests) == 1


async def test_contexts_are_isolated_and_bounded() -> None:
    def echo(body: dict[str, Any]) -> Any:
        return text_reply(f"seen {len(body['messages'])}")

    fake = make_fake_openai(echo)
    async with serve_app(fake) as llm_url:
        agent = _agent(llm_url, max_contexts=2, context_idle_s=0)
        async with serving(agent) as url, talk(url) as talker:
            await _first(talker, "A", "I am A")
            await _first(talker, "B", "I am B")
            await talker.send("A", "User message:\nA again")
            await talker.send("B", "User message:\nB again")
            await _first(talker, "C", "I am C")  # evicts A (least recently used)
            forgotten = await talker.send("A", "User message:\nA third time")
    bodies = fake_state(fake).completion_requests
    for body in bodies:
        texts = " ".join(str(m.get("content")) for m in body["messages"])
        owners = {c for c in "ABC" if f"I am {c}" in texts or f"{c} again" in texts or f"{c} third" in texts}
        assert len(owners) <= 1
    assert [m["role"] for m in bodies[2]["messages"]] == ["system", "user", "assistant", "user"]
    assert [m["content"] for m in bodies[-1]["messages"][1:]] == ["A third time"]  # a fresh history
    assert forgotten.action() == {
        "name": "respond",
        "arguments": {"content": "seen 2"},
        "kwargs": {"content": "seen 2"},
    }
    assert sorted(agent.contexts.context_ids()) == ["A", "C"]


async def test_key_is_sent_but_never_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    fake = make_fake_openai(
        [
            error_reply(429),
            tool_call_reply("get_user_details", {"user_id": "u"}),
            error_reply(500),
            error_reply(500),
            error_reply(500),
        ]
    )
    async with serve_app(fake) as llm_url, serving(_agent(llm_url, max_retries=2)) as url, talk(url) as talker:
        await _first(talker, "ctx")
        failed = await talker.send("ctx", "Tool call result:\nx")
    assert failed_state(failed) and KEY not in failed.text
    assert all(r.headers.get("authorization") == f"Bearer {KEY}" for r in fake_state(fake).requests)
    assert caplog.records, "debug logging should have produced records"
    assert not any(KEY in r.getMessage() or KEY in str(r.args) for r in caplog.records)
    assert KEY not in caplog.text


def test_missing_key_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ARENA_TEST_NO_KEY", raising=False)
    with pytest.raises(WhiteAgentConfigError, match="ARENA_TEST_NO_KEY"):
        LlmAgent(LlmAgentSettings(api_key_env="ARENA_TEST_NO_KEY"))


async def test_key_from_the_named_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARENA_TEST_KEY_VAR", KEY)
    fake = make_fake_openai([text_reply("hi")])
    async with serve_app(fake) as llm_url:
        agent = LlmAgent(LlmAgentSettings(api_key_env="ARENA_TEST_KEY_VAR", base_url=f"{llm_url}/v1"))
        async with serving(agent) as url, talk(url) as talker:
            await _first(talker, "ctx")
    assert fake_state(fake).requests[0].headers["authorization"] == f"Bearer {KEY}"

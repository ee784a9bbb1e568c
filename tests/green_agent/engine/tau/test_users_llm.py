"""The LLM user against a scripted OpenAI-compatible server on loopback: prompt, roles, stop tokens, retries, keys."""

from __future__ import annotations

import logging

import pytest

from green_agent.engine.config import ConfigError, UserSimulatorConfig
from green_agent.engine.tau.environment import AttemptEnvironment
from green_agent.engine.tau.tasks import resolve_task
from green_agent.engine.tau.users import (
    LLMUser,
    UserSimulatorError,
    check_user_config,
    make_user,
    user_api_key,
    user_system_prompt,
)
from tests.support.fake_openai import (
    error_reply,
    fake_state,
    make_fake_openai,
    text_reply,
    tool_call_reply,
)
from tests.support.servers import serve_app

KEY = "sk-test-0123456789abcdef-SECRET"
GREETING = "Hi! How can I help you today?"


def _config(base_url: str, **overrides: object) -> UserSimulatorConfig:
    return UserSimulatorConfig(kind="llm", model="fake-model", base_url=f"{base_url}/v1", seed=7, **overrides)


def _user(base_url: str, domain: str = "retail", env: AttemptEnvironment | None = None, **overrides: object) -> LLMUser:
    ref = resolve_task(domain, "test", 0)
    return LLMUser(ref, _config(base_url, **overrides), api_key=KEY, environment=env, backoff_base_s=0.01)


def test_system_prompt_matches_tau2_user_simulator() -> None:
    from tau2.user.user_simulator import (
        UserSimulator,  # imports litellm: only here, never on the serving path
    )

    for domain, tools in (("retail", None), ("telecom", [])):
        task = resolve_task(domain, "test", 0).task
        ours = user_system_prompt(task, use_tools=tools is not None)
        theirs = UserSimulator(tools=tools, instructions=str(task.user_scenario), llm="x").system_prompt
        assert ours == theirs


async def test_turns_flip_roles_and_carry_the_settings() -> None:
    app = make_fake_openai([text_reply("I want to exchange a lamp."), text_reply("My zip is 28236.")])
    async with serve_app(app) as url:
        user = _user(url)
        try:
            opening = await user.opening()
            second = await user.reply("What is your zip code?")
        finally:
            await user.aclose()
    assert (opening.text, opening.stop) == ("I want to exchange a lamp.", False)
    assert second.text == "My zip is 28236."
    first_request, second_request = fake_state(app).completion_requests
    assert first_request["messages"][0] == {"role": "system", "content": user.system_prompt}
    assert first_request["messages"][1:] == [{"role": "user", "content": GREETING}]
    assert second_request["messages"][1:] == [
        {"role": "user", "content": GREETING},
        {"role": "assistant", "content": "I want to exchange a lamp."},
        {"role": "user", "content": "What is your zip code?"},
    ]
    assert first_request["model"] == "fake-model"
    assert first_request["seed"] == 7 and first_request["temperature"] == 0.0
    assert "tools" not in first_request
    assert fake_state(app).requests[0].headers["authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize("token", ["###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###"])
async def test_stop_tokens_end_the_conversation(token: str) -> None:
    app = make_fake_openai([text_reply(f"Thanks, bye! {token}")])
    async with serve_app(app) as url:
        user = _user(url)
        try:
            turn = await user.reply("Your order is cancelled.")
        finally:
            await user.aclose()
    assert turn.stop and turn.stop_token == token
    assert turn.text == f"Thanks, bye! {token}"


async def test_rate_limit_is_retried() -> None:
    app = make_fake_openai([error_reply(429), error_reply(503), text_reply("Hello.")])
    async with serve_app(app) as url:
        user = _user(url)
        try:
            turn = await user.opening()
        finally:
            await user.aclose()
    assert turn.text == "Hello."
    assert len(fake_state(app).completion_requests) == 3


async def test_server_errors_forever_raise_after_max_retries() -> None:
    app = make_fake_openai(lambda request: error_reply(500))
    async with serve_app(app) as url:
        user = _user(url, max_retries=2)
        try:
            with pytest.raises(UserSimulatorError, match=r"failed after 3 tries: HTTP 500"):
                await user.opening()
        finally:
            await user.aclose()
    assert len(fake_state(app).completion_requests) == 3


async def test_client_errors_are_not_retried() -> None:
    app = make_fake_openai(lambda request: error_reply(400, "model not found"))
    async with serve_app(app) as url:
        user = _user(url)
        try:
            with pytest.raises(UserSimulatorError, match="HTTP 400: model not found"):
                await user.opening()
        finally:
            await user.aclose()
    assert len(fake_state(app).completion_requests) == 1


async def test_key_never_appears_in_logs_or_errors(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    echoed = f"Incorrect API key provided: {KEY}"
    app = make_fake_openai([error_reply(429, echoed), error_reply(401, echoed)])
    async with serve_app(app) as url:
        user = _user(url)
        try:
            with pytest.raises(UserSimulatorError) as caught:
                await user.opening()
        finally:
            await user.aclose()
    assert "HTTP 401" in str(caught.value)
    assert KEY not in str(caught.value) and "sk-" not in str(caught.value)
    assert any("retry 1/" in record.getMessage() for record in caplog.records)  # the retry was logged ...
    assert KEY not in caplog.text  # ... without the key the server echoed
    assert "[redacted]" in caplog.text


async def test_telecom_user_runs_its_tools_on_the_environment() -> None:
    ref = resolve_task("telecom", "test", 0)
    env = await AttemptEnvironment.create(ref)
    app = make_fake_openai(
        [tool_call_reply("toggle_data_saver_mode", {}, call_id="call_u1"), text_reply("Done, data saver is off.")]
    )
    async with serve_app(app) as url:
        user = LLMUser(ref, _config(url), api_key=KEY, environment=env, backoff_base_s=0.01)
        try:
            turn = await user.reply("Please turn off data saver mode.")
        finally:
            await user.aclose()
    assert turn.text == "Done, data saver is off."
    first, second = fake_state(app).completion_requests
    assert {t["function"]["name"] for t in first["tools"]} == {t["function"]["name"] for t in env.user_tools}
    assert "You have some tools" in user.system_prompt  # tau2's _tools guidelines
    tool_message = second["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == "call_u1"
    assert tool_message["content"].startswith("Data Saver Mode is now OFF.")
    call, result = env.trajectory_records()[1:]
    assert call["role"] == "user" and call["tool_calls"][0] == {
        "id": "call_u1",
        "name": "toggle_data_saver_mode",
        "arguments": {},
        "requestor": "user",
    }
    assert result["content"] == tool_message["content"]


def test_user_key_and_config_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ARENA_TEST_USER_KEY", raising=False)
    config = UserSimulatorConfig(kind="llm", api_key_env="ARENA_TEST_USER_KEY")
    assert user_api_key(config) is None
    with pytest.raises(ConfigError) as caught:
        check_user_config(config)
    assert str(caught.value) == (
        "user_simulator.api_key_env: environment variable ARENA_TEST_USER_KEY is not set "
        "(needed by the llm user simulator)"
    )
    with pytest.raises(ConfigError):
        make_user(resolve_task("retail", "test", 0), config, None)
    check_user_config(UserSimulatorConfig(kind="scripted", api_key_env="ARENA_TEST_USER_KEY"))
    assert user_api_key(UserSimulatorConfig(kind="scripted")) is None
    monkeypatch.setenv("ARENA_TEST_USER_KEY", KEY)
    assert user_api_key(config) == KEY
    check_user_config(config)


async def test_make_user_builds_the_llm_user(monkeypatch: pytest.MonkeyPatch) -> None:
    user = make_user(resolve_task("retail", "test", 0), UserSimulatorConfig(kind="llm"), None, api_key=KEY)
    assert isinstance(user, LLMUser)
    await user.aclose()

"""The reference white agents in tool mode "mcp", driven turn by turn over A2A against a real attempt endpoint: the
``mcp`` block is read from the first message, tools are called over MCP, and failures of the endpoint or a runaway
model end the turn with the agent's own failure report."""

from __future__ import annotations

from typing import Any

import pytest
from a2a.helpers import new_data_part, new_text_part
from a2a.types.a2a_pb2 import Message, Role

from green_agent.engine.attempt import ToolEndpoint
from green_agent.engine.tau.environment import AttemptEnvironment
from green_agent.engine.tau.tasks import resolve_task
from green_agent.engine.turn_protocol import build_first_data, build_first_message
from tests.green_agent.service.mcp.conftest import GreenServer
from tests.support.fake_openai import (
    ToolCallSpec,
    fake_state,
    make_fake_openai,
    text_reply,
    tool_call_reply,
    tool_calls_reply,
)
from tests.support.servers import serve_app
from tests.white_agent.conftest import serving
from tests.white_agent.helpers import arena_block, failed_state, talk
from white_agent.gold import load_gold_task
from white_agent.llm import LlmAgent, LlmAgentSettings
from white_agent.protocol import McpEndpointInfo, parse_green_message
from white_agent.replay import ReplayAgent, final_statement

pytestmark = pytest.mark.asyncio(loop_scope="session")

RETAIL_USERS = ("noah_brown_6181", "ivan_santos_6635")
"""The first two users of tau2's retail database."""


def _first(
    env: AttemptEnvironment,
    endpoint: ToolEndpoint,
    *,
    arena: dict[str, Any] | None = None,
    user_text: str = "Hi, I need help.",
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The first message the green agent sends in tool mode "mcp" (text, data part, metadata)."""
    described = endpoint.describe()
    data = build_first_data(env.policy, env.tools, mcp=described)
    metadata: dict[str, Any] = {"mcp": described}
    if arena is not None:
        data, metadata = {**data, "arena": arena}, {**metadata, "arena": arena}
    return build_first_message(env.policy, env.tools, user_text, mcp=described), data, metadata


async def test_the_mcp_block_is_read_from_metadata_or_data_part() -> None:
    block = {"url": "http://127.0.0.1:1/mcp-attempts/x/", "token": "t0k", "transport": "streamable-http"}
    for metadata, data in [({"mcp": block}, {}), ({}, {"mcp": block}), ({"mcp": {"url": 3}}, {"mcp": block})]:
        message = Message(
            role=Role.ROLE_USER,
            message_id="m",
            parts=[new_text_part("User message: hi"), new_data_part({"tools": [], **data})],
        )
        message.metadata.update(metadata)
        turn = parse_green_message(message)
        assert turn.kind == "first" and turn.mcp == McpEndpointInfo(url=block["url"], token="t0k")
    plain = parse_green_message(Message(role=Role.ROLE_USER, message_id="m", parts=[new_text_part("User message: hi")]))
    assert plain.mcp is None
    assert "t0k" not in repr(McpEndpointInfo(url="u", token="t0k"))


async def test_replay_performs_the_gold_actions_over_mcp(green: GreenServer) -> None:
    ref = resolve_task("retail", "test", 10)
    gold = load_gold_task("retail", "test", ref.task_id)
    env = await AttemptEnvironment.create(ref)
    assert green.component.gateway is not None
    async with (
        green.component.gateway.open(env, "direct/replay/1") as endpoint,
        serving(ReplayAgent()) as white,
        talk(white) as talker,
    ):
        text, data, metadata = _first(env, endpoint, arena=arena_block(ref.task_id, index=10))
        answer = await talker.send("ctx-replay", text, data=data, metadata=metadata)
    content = {"content": final_statement(gold.communicate_info)}
    assert answer.action() == {"name": "respond", "arguments": content, "kwargs": content}
    calls = [r["tool_calls"][0] for r in env.trajectory_records() if r.get("tool_calls")]
    assert [(c["name"], c["arguments"]) for c in calls] == [(a.name, a.arguments()) for a in gold.actions]


async def test_replay_reports_an_unusable_endpoint_as_its_failure(green: GreenServer) -> None:
    ref = resolve_task("retail", "test", 10)
    env = await AttemptEnvironment.create(ref)
    assert green.component.gateway is not None
    async with green.component.gateway.open(env, "direct/replay-bad/1") as endpoint:
        wrong = ToolEndpoint(url=endpoint.url, token="not-the-token")
        async with serving(ReplayAgent()) as white, talk(white) as talker:
            text, data, metadata = _first(env, wrong, arena=arena_block(ref.task_id, index=10))
            answer = await talker.send("ctx-bad", text, data=data, metadata=metadata)
    assert failed_state(answer) and "MCP tool endpoint failed" in answer.text
    assert not any(r.get("tool_calls") for r in env.trajectory_records())


def _llm(base_url: str, **overrides: Any) -> LlmAgent:
    settings = LlmAgentSettings(
        model="fake-model", base_url=f"{base_url}/v1", retry_base_delay_s=0.0, retry_max_delay_s=0.0, **overrides
    )
    return LlmAgent(settings, api_key="sk-test")


async def test_llm_runs_parallel_tool_calls_over_mcp_then_responds(green: GreenServer) -> None:
    env = await AttemptEnvironment.create(resolve_task("retail", "test", 0))
    user_ids = RETAIL_USERS  # the environment lives in its tool sandbox: ids of the retail database
    fake = make_fake_openai(
        [
            tool_calls_reply(
                [
                    ToolCallSpec("get_user_details", {"user_id": user_ids[0]}, "call_A"),
                    ToolCallSpec("get_user_details", {"user_id": user_ids[1]}, "call_B"),
                ]
            ),
            tool_call_reply("calculate", {"expression": "2 + 2"}, call_id="call_C"),
            text_reply("Both accounts are fine."),
            text_reply("Goodbye."),
        ]
    )
    assert green.component.gateway is not None
    async with (
        serve_app(fake) as llm_url,
        green.component.gateway.open(env, "direct/llm/1") as endpoint,
        serving(_llm(llm_url)) as white,
        talk(white) as talker,
    ):
        text, data, metadata = _first(env, endpoint)
        first = await talker.send("ctx-llm", text, data=data, metadata=metadata)
        second = await talker.send("ctx-llm", "User message:\nThanks, bye.")
    fine, bye = {"content": "Both accounts are fine."}, {"content": "Goodbye."}
    assert first.action() == {"name": "respond", "arguments": fine, "kwargs": fine}
    assert second.action() == {"name": "respond", "arguments": bye, "kwargs": bye}
    requests = fake_state(fake).completion_requests
    assert {t["function"]["name"] for t in requests[0]["tools"]} == {t["function"]["name"] for t in env.tools}
    tool_messages = [m for m in requests[2]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_A", "call_B", "call_C"]
    assert tool_messages[2]["content"] == "4.0"
    recorded = [r["tool_calls"][0]["name"] for r in env.trajectory_records() if r.get("tool_calls")]
    assert recorded == ["get_user_details", "get_user_details", "calculate"]
    assert requests[3]["messages"][-1] == {"role": "user", "content": "Thanks, bye."}


async def test_llm_gives_up_on_a_runaway_model(green: GreenServer) -> None:
    env = await AttemptEnvironment.create(resolve_task("retail", "test", 0))
    fake = make_fake_openai(lambda _request: tool_call_reply("calculate", {"expression": "1 + 1"}))
    assert green.component.gateway is not None
    async with (
        serve_app(fake) as llm_url,
        green.component.gateway.open(env, "direct/runaway/1") as endpoint,
        serving(_llm(llm_url, max_tool_calls_per_turn=3)) as white,
        talk(white) as talker,
    ):
        text, data, metadata = _first(env, endpoint)
        answer = await talker.send("ctx-runaway", text, data=data, metadata=metadata)
    assert failed_state(answer) and "more than 3 tool calls" in answer.text
    assert sum(1 for r in env.trajectory_records() if r.get("tool_calls")) == 3


async def test_llm_reports_an_endpoint_that_closed(green: GreenServer) -> None:
    env = await AttemptEnvironment.create(resolve_task("retail", "test", 0))
    fake = make_fake_openai([text_reply("unused")])
    assert green.component.gateway is not None
    async with green.component.gateway.open(env, "direct/closed/1") as endpoint:
        pass  # the attempt ended before the agent connected
    async with serve_app(fake) as llm_url, serving(_llm(llm_url)) as white, talk(white) as talker:
        text, data, metadata = _first(env, endpoint)
        answer = await talker.send("ctx-closed", text, data=data, metadata=metadata)
    assert failed_state(answer) and "MCP tool endpoint failed" in answer.text and "closed" in answer.text
    assert fake_state(fake).completion_requests == []

"""Battles in tool mode "mcp", driven through the control tools: the reference agents call the attempt's tools over
MCP, the environment records them verbatim, and the scores equal those of the same battle in text mode."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.green_agent.service.mcp.conftest import GreenServer, control, structured, trajectory_tool_calls, white_agent
from tests.support.fake_openai import fake_state, make_fake_openai, text_reply, tool_call_reply
from tests.support.servers import serve_app
from white_agent.gold import load_gold_task
from white_agent.llm import LlmAgentSettings
from white_agent.replay import CLOSING_TEXT, final_statement

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def _battle(green: GreenServer, white: str, config: dict[str, Any], **extra: Any) -> dict[str, Any]:
    async with control(green) as client:
        result = await client.call_tool(
            "start_battle", {"white_agent_url": white, "config": config, "wait": True, **extra}
        )
    started = structured(result)
    assert started["state"] == "finished", started
    results: dict[str, Any] = started["results"]
    return results


def _rewards(results: dict[str, Any]) -> dict[tuple[str, int], float | None]:
    return {(a["task_key"], a["attempt"]): a["reward"] for a in results["attempts"]}


async def test_replay_in_mcp_mode_scores_like_text_mode(green: GreenServer) -> None:
    config = {"domain": "retail", "task_id": [0, 1, 9], "k": 2, "calibration": True}
    async with white_agent("replay") as white:
        text = await _battle(green, white, {**config, "tool_mode": "text"}, battle_id="replay-text")
        mcp = await _battle(green, white, {**config, "tool_mode": "mcp"}, battle_id="replay-mcp")
    assert _rewards(mcp) == _rewards(text)
    assert set(_rewards(mcp).values()) == {1.0}
    # The same calls, in the same order, recorded in every attempt's trajectory.
    text_calls = trajectory_tool_calls(green.runs_dir / "replay-text")
    mcp_calls = trajectory_tool_calls(green.runs_dir / "replay-mcp")
    assert mcp_calls == text_calls and all(mcp_calls.values())
    # Steps count the agent's actions however they travel (A2A <json> actions or MCP tool calls): equal in both modes.
    assert [a["steps"] for a in mcp["attempts"]] == [t["steps"] for t in text["attempts"]]
    assert green.component.gateway is not None and green.component.gateway.open_endpoints == 0


async def test_telecom_dual_control_in_mcp_mode_scores_like_text_mode(green: GreenServer) -> None:
    # telecom/test 0: only the customer's device actions; 10 and 39: the agent's and the customer's interleaved.
    # The agent calls its tools over MCP up to each action that is the customer's, then asks for it over A2A.
    config = {"domain": "telecom", "split": "test", "task_id": [0, 10, 39], "k": 2, "calibration": True}
    async with white_agent("replay") as white:
        text = await _battle(green, white, {**config, "tool_mode": "text"}, battle_id="telecom-text")
        mcp = await _battle(green, white, {**config, "tool_mode": "mcp"}, battle_id="telecom-mcp")
    assert _rewards(mcp) == _rewards(text)
    assert set(_rewards(mcp).values()) == {1.0}
    text_calls = trajectory_tool_calls(green.runs_dir / "telecom-text")
    assert trajectory_tool_calls(green.runs_dir / "telecom-mcp") == text_calls
    assert ("make_payment", "{}") in text_calls["telecom-test-0010-attempt01.jsonl"]


async def test_an_a2a_assessment_request_can_use_mcp_mode(green: GreenServer) -> None:
    # The A2A entry point shares the registry, hence the tool gateway, with the MCP control tools.
    from launcher.cli.assessment_client import run_assessment

    config = {"domain": "airline", "task_id": 0, "k": 2, "calibration": True, "tool_mode": "mcp"}
    async with white_agent("replay") as white:
        outcome = await run_assessment(
            green.url, white, config, idle_timeout_s=120, operator_token=green.operator_token
        )
    assert outcome.state == "completed" and outcome.result is not None, outcome.error
    assert [a["reward"] for a in outcome.result["attempts"]] == [1.0, 1.0]
    assert outcome.result["config"]["tool_mode"] == "mcp"


async def test_failing_agent_in_mcp_mode_scores_like_text_mode(green: GreenServer) -> None:
    # Script faults only (a skipped or corrupted write): the same draw happens in both modes.
    faults = {"skip_action": 0.4, "wrong_argument": 0.3}
    config = {"domain": "retail", "task_id": [1, 9], "k": 4, "calibration": True}
    async with white_agent("flaky", seed=3, fault_rates=faults) as white:
        text = await _battle(green, white, {**config, "tool_mode": "text"})
        mcp = await _battle(green, white, {**config, "tool_mode": "mcp"})
    assert _rewards(mcp) == _rewards(text)
    assert 0.0 in _rewards(mcp).values() and 1.0 in _rewards(mcp).values()
    assert mcp["failure_breakdown"] == text["failure_breakdown"]


def _scripted_model(domain: str, split: str, task_id: str) -> Any:
    """A fake model that plays a task's gold actions as native tool calls, then says what the user must hear."""
    gold = load_gold_task(domain, split, task_id)

    def answer(request: dict[str, Any]) -> Any:
        messages = request["messages"]
        done = sum(1 for m in messages if m["role"] == "tool")
        if done < len(gold.actions):
            action = gold.actions[done]
            return tool_call_reply(action.name, action.arguments())
        told = any(
            m["role"] == "assistant" and m.get("content") == final_statement(gold.communicate_info) for m in messages
        )
        return text_reply(CLOSING_TEXT if told else final_statement(gold.communicate_info))

    return answer


async def test_llm_agent_calls_tools_over_mcp_and_scores_like_text_mode(green: GreenServer) -> None:
    # retail/test index 10 is tau2 task 38: four calls (lookups, a calculation, a cancellation), two strings to tell.
    fake = make_fake_openai(_scripted_model("retail", "test", "38"))
    settings = LlmAgentSettings(model="fake-model", retry_base_delay_s=0.0, retry_max_delay_s=0.0)
    config = {"domain": "retail", "task_id": 10, "k": 2}
    async with serve_app(fake) as llm_url:
        settings = settings.model_copy(update={"base_url": f"{llm_url}/v1"})
        async with white_agent("llm", llm=settings, api_key="sk-test") as white:
            mcp = await _battle(green, white, {**config, "tool_mode": "mcp"}, battle_id="llm-mcp")
            mcp_requests = list(fake_state(fake).completion_requests)
            text = await _battle(green, white, {**config, "tool_mode": "text"}, battle_id="llm-text")
    assert _rewards(mcp) == _rewards(text) == {("retail/test/10", 1): 1.0, ("retail/test/10", 2): 1.0}
    assert trajectory_tool_calls(green.runs_dir / "llm-mcp") == trajectory_tool_calls(green.runs_dir / "llm-text")
    # The model saw the tools the agent listed over MCP, and the tool results the environment produced.
    first = mcp_requests[0]
    names = {tool["function"]["name"] for tool in first["tools"]}
    assert {"find_user_id_by_email", "calculate", "cancel_pending_order"} <= names
    seen = [m["content"] for m in mcp_requests[-1]["messages"] if m["role"] == "tool"]
    recorded = {
        json.loads(line).get("content")
        for path in (green.runs_dir / "llm-mcp" / "trajectories").iterdir()
        for line in path.read_text().splitlines()[1:]
        if json.loads(line).get("role") == "tool"
    }
    assert len(seen) == 4 and set(seen) <= recorded


async def test_mcp_tool_calls_count_against_max_steps(green: GreenServer) -> None:
    # retail/test index 7 has 13 gold actions, more than max_steps allows: the endpoint refuses the calls beyond it.
    config = {"domain": "retail", "task_id": 7, "k": 2, "calibration": True, "tool_mode": "mcp", "max_steps": 5}
    async with white_agent("replay") as white:
        results = await _battle(green, white, config, battle_id="mcp-max-steps")
    assert {a["outcome"] for a in results["attempts"]} == {"failure"}
    assert {a["failure_category"] for a in results["attempts"]} == {"timeout"}
    assert all("max_steps (5)" in a["failure_detail"] for a in results["attempts"])
    assert all(len(calls) == 5 for calls in trajectory_tool_calls(green.runs_dir / "mcp-max-steps").values())


async def test_mcp_mode_against_an_agent_that_ignores_mcp_still_runs(green: GreenServer) -> None:
    # Without the calibration block the replay agent only apologises: a plain respond, scored (reward 0).
    config = {"domain": "retail", "task_id": 0, "k": 2, "tool_mode": "mcp"}
    async with white_agent("replay") as white:
        results = await _battle(green, white, config)
    assert [a["outcome"] for a in results["attempts"]] == ["failure", "failure"]
    assert results["infrastructure_errors"] == 0

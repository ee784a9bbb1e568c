"""AttemptEnvironment: fresh per attempt, initialised like tau2's orchestrator, recording calls as tau2 expects."""

from __future__ import annotations

import json

import pytest

from green_agent.engine.tau.environment import (
    GREETING,
    TERMINATION_REASONS,
    AttemptEnvironment,
)
from green_agent.engine.tau.quiet import quiet_tau2
from green_agent.engine.tau.tasks import resolve_task
from tests.green_agent.engine.tau.conftest import ENDED, STARTED

quiet_tau2()
from tau2.data_model.message import ToolCall  # noqa: E402
from tau2.data_model.simulation import SimulationRun  # noqa: E402
from tau2.domains.retail.environment import get_environment as retail_environment  # noqa: E402
from tau2.domains.telecom.environment import get_environment as telecom_environment  # noqa: E402

USER_ID = "mei_kovacs_8020"  # retail/test/0's customer


async def test_create_opens_with_tau2_greeting_and_exposes_policy_and_tools() -> None:
    env = await AttemptEnvironment.create(resolve_task("retail", "test", 0))
    records = env.trajectory_records()
    assert [(r["role"], r["content"]) for r in records] == [("assistant", GREETING)]
    reference = retail_environment()
    assert env.policy == reference.get_policy()
    assert env.tools == [tool.openai_schema for tool in reference.get_tools()]
    assert env.user_tools == []
    assert env.steps == 0


async def test_telecom_has_user_tools_and_applies_the_initial_state() -> None:
    ref = resolve_task("telecom", "test", 0)  # initialisation turns data saver mode on and roaming off
    env = await AttemptEnvironment.create(ref)
    assert {t["function"]["name"] for t in env.user_tools} == {t.name for t in telecom_environment().get_user_tools()}
    outcome = await env.call_tool("check_data_restriction_status", {}, requestor="user")
    assert not outcome.error
    assert outcome.content.startswith("Data Saver mode is ON")
    fresh = telecom_environment().get_response(
        ToolCall(id="x", name="check_data_restriction_status", arguments={}, requestor="user")
    )
    assert fresh.content.startswith("Data Saver mode is OFF")  # so the ON above came from the task's initial state


async def test_each_attempt_owns_its_tools_list() -> None:
    ref = resolve_task("retail", "test", 0)
    first, second = await AttemptEnvironment.create(ref), await AttemptEnvironment.create(ref)
    first.tools.clear()
    assert second.tools


async def test_tool_call_is_recorded_with_verbatim_output() -> None:
    env = await AttemptEnvironment.create(resolve_task("retail", "test", 0))
    outcome = await env.call_tool("get_user_details", {"user_id": USER_ID})
    expected = retail_environment().get_response(
        ToolCall(id="x", name="get_user_details", arguments={"user_id": USER_ID})
    )
    assert outcome.content == expected.content
    assert outcome.error is False
    call, result = env.trajectory_records()[1:]
    assert call["role"] == "assistant" and call["content"] is None
    assert call["tool_calls"] == [
        {
            "id": call["tool_calls"][0]["id"],
            "name": "get_user_details",
            "arguments": {"user_id": USER_ID},
            "requestor": "assistant",
        }
    ]
    assert result["role"] == "tool" and result["id"] == call["tool_calls"][0]["id"]
    assert result["content"] == expected.content and result["requestor"] == "assistant"
    assert env.steps == 1


async def test_unknown_tool_and_bad_arguments_are_error_outcomes() -> None:
    env = await AttemptEnvironment.create(resolve_task("retail", "test", 0))
    unknown = await env.call_tool("launch_rocket", {})
    assert unknown.error and unknown.content == "Error: Tool 'launch_rocket' not found."
    bad = await env.call_tool("get_user_details", {"uid": USER_ID})
    assert bad.error and bad.content.startswith("Error:")
    clash = await env.call_tool("get_user_details", {"user_id": USER_ID, "requestor": "user"})
    assert clash.error
    assert env.tool_errors == 3
    assert env.message_count == 1 + 2 * 3  # greeting + call/result pairs, all replayable by tau2


async def test_arguments_that_are_not_an_object_are_refused_without_recording() -> None:
    env = await AttemptEnvironment.create(resolve_task("retail", "test", 0))
    outcome = await env.call_tool("get_user_details", ["mei"])  # type: ignore[arg-type]
    assert outcome.error and "JSON object" in outcome.content
    assert env.message_count == 1
    assert env.steps == 1


async def test_user_tool_call_outside_telecom_is_an_error() -> None:
    env = await AttemptEnvironment.create(resolve_task("retail", "test", 0))
    outcome = await env.call_tool("toggle_airplane_mode", {}, requestor="user")
    assert outcome.error
    assert env.steps == 0


async def test_user_tool_calls_are_recorded_as_user_messages() -> None:
    env = await AttemptEnvironment.create(resolve_task("telecom", "test", 0))
    outcome = await env.call_tool("toggle_data_saver_mode", {}, requestor="user", call_id="u1")
    assert not outcome.error
    call, result = env.trajectory_records()[1:]
    assert (
        call["role"] == "user" and call["tool_calls"][0]["requestor"] == "user" and call["tool_calls"][0]["id"] == "u1"
    )
    assert result["role"] == "tool" and result["requestor"] == "user" and result["id"] == "u1"
    assert env.steps == 0


async def test_attempts_share_no_state() -> None:
    ref = resolve_task("retail", "test", 0)
    first, second = await AttemptEnvironment.create(ref), await AttemptEnvironment.create(ref)
    before = (await second.call_tool("get_order_details", {"order_id": "#W6390527"})).content
    changed = await first.call_tool(
        "return_delivered_order_items",
        {"order_id": "#W6390527", "item_ids": ["8538875209"], "payment_method_id": "paypal_7644869"},
    )
    assert not changed.error
    after_first = (await first.call_tool("get_order_details", {"order_id": "#W6390527"})).content
    after_second = (await second.call_tool("get_order_details", {"order_id": "#W6390527"})).content
    assert after_first != before
    assert after_second == before
    third = await AttemptEnvironment.create(ref)
    assert (await third.call_tool("get_order_details", {"order_id": "#W6390527"})).content == before


async def test_simulation_is_a_valid_tau2_run_in_recording_order() -> None:
    ref = resolve_task("retail", "test", 0)
    env = await AttemptEnvironment.create(ref)
    env.record_user_text("I want to return a water bottle.")
    await env.call_tool("find_user_id_by_name_zip", {"first_name": "Mei", "last_name": "Kovacs", "zip": "28236"})
    env.record_assistant_text("Done.")
    env.record_user_text("Thanks ###STOP###")
    simulation = env.simulation("user_stop", started_at=STARTED, ended_at=ENDED)
    json.dumps(simulation)
    run = SimulationRun.model_validate(simulation)
    assert run.task_id == ref.task_id
    assert run.termination_reason.value == "user_stop"
    assert run.duration == 30.0
    assert [m.turn_idx for m in run.messages] == list(range(6))
    assert [m.role for m in run.messages] == ["assistant", "user", "assistant", "tool", "assistant", "user"]
    assert run.messages[-1].content == "Thanks ###STOP###"
    assert env.steps == 2
    records = env.trajectory_records()
    assert len(records) == env.message_count == 6
    assert records == simulation["messages"]


def test_termination_reasons_are_tau2s() -> None:
    assert set(TERMINATION_REASONS) >= {
        "user_stop",
        "agent_stop",
        "max_steps",
        "too_many_errors",
        "agent_error",
        "user_error",
    }


async def test_unknown_termination_reason_is_refused() -> None:
    env = await AttemptEnvironment.create(resolve_task("mock", None, 0))
    with pytest.raises(ValueError, match="not one of tau2's"):
        env.simulation("gave_up", started_at=STARTED, ended_at=ENDED)


async def test_every_mock_task_builds_and_a_message_history_replaces_the_greeting() -> None:
    for index in range(9):
        ref = resolve_task("mock", None, index)
        env = await AttemptEnvironment.create(ref)
        history = ref.task.initial_state.message_history if ref.task.initial_state else None
        records = env.trajectory_records()
        if history:
            assert len(records) == len(history)
            assert [r["role"] for r in records] == [m.role for m in history]
        else:
            assert [r["content"] for r in records] == [GREETING]

"""The scripted user's documented rules, and its goal: the replay reference agent ends with user_stop and scores 1."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from green_agent.engine.attribution import tool_fault_stop
from green_agent.engine.config import UserSimulatorConfig
from green_agent.engine.tau.environment import AttemptEnvironment
from green_agent.engine.tau.sandbox import ToolFault
from green_agent.engine.tau.scoring import ScoringPool
from green_agent.engine.tau.tasks import load_tasks, resolve_task
from green_agent.engine.tau.users import ScriptedUser, UserTurn, first_person, make_user
from green_agent.engine.tau.users.scripted import given_arguments
from tests.green_agent.engine.tau.conftest import (
    ENDED,
    STARTED,
    communicate_info,
    final_statement,
    gold_actions,
)

STOP = "###STOP###"


@pytest.mark.parametrize(
    ("second", "first"),
    [
        ("You are mei_kovacs_8020 in zipcode 28236.", "I am mei_kovacs_8020 in zipcode 28236."),
        ("You do not remember your email address", "I do not remember my email address"),
        ("Your name is James Lee.", "My name is James Lee."),
        ("It was given to you by your friend and you love it.", "It was given to me by my friend and I love it."),
        ("You're in a hurry, but you'll wait.", "I'm in a hurry, but I'll wait."),
    ],
)
def test_first_person(second: str, first: str) -> None:
    assert first_person(second) == first


async def test_opening_states_reason_and_known_info_without_agent_instructions() -> None:
    user = ScriptedUser(resolve_task("retail", "test", 0))
    turn = await user.opening()
    assert not turn.stop
    assert "I want to exchange the water bottle and the desk lamp." in turn.text
    assert "I am mei_kovacs_8020 in zipcode 28236." in turn.text
    assert "agent" not in turn.text  # "If the agent asks for confirmation, ..." is for a simulator, not said
    assert "You " not in turn.text


@pytest.mark.parametrize("token", ["###OUT-OF-SCOPE###", "###STOP###", "###TRANSFER###"])
async def test_a_token_in_free_text_instructions_does_not_end_the_call_at_once(token: str) -> None:
    # banking_knowledge's instructions are free text telling the simulator when to use a token ("If your request is
    # refused, use the '###OUT-OF-SCOPE###' tag to end the conversation"): the opening must not end the call
    ref = resolve_task("mock", None, 0)
    scenario = ref.task.user_scenario.model_copy(
        update={"instructions": f"You want your task created. Otherwise use the '{token}' tag to end it. Bye {token}"}
    )
    task = ref.task.model_copy(update={"user_scenario": scenario})
    turn = await ScriptedUser(dataclasses.replace(ref, task=task)).opening()
    assert not turn.stop and "###" not in turn.text
    assert "I want my task created." in turn.text


async def test_statement_ends_the_conversation() -> None:
    user = ScriptedUser(resolve_task("retail", "test", 0))
    await user.opening()
    turn = await user.reply("Your exchange has been processed.")
    assert turn == UserTurn(text=f"Thank you, that's all I needed. {STOP}", stop=True, stop_token=STOP)


async def test_identification_question_gets_known_info() -> None:
    user = ScriptedUser(resolve_task("airline", "test", 3))
    turn = await user.reply("Could you tell me your user id?")
    assert "My user id is james_lee_6136." in turn.text
    assert not turn.stop


async def test_question_about_unknown_info_gets_i_dont_know() -> None:
    user = ScriptedUser(resolve_task("retail", "test", 0))  # unknown_info: does not remember the email address
    turn = await user.reply("What is your email address?")
    assert turn.text.startswith("I'm sorry, I don't know that: I do not remember my email address.")
    both = await user.reply("Please provide your email, or your name and zip code.")
    assert "I do not remember my email address." in both.text and "zipcode 28236" in both.text


@pytest.mark.parametrize(
    "question",
    [
        "I will exchange the lamp for item 123. Can you confirm?",
        "Would you like to proceed?",
        "Shall I go ahead with the return (yes/no)?",
        "Is that correct?",
    ],
)
async def test_confirmation_gets_yes(question: str) -> None:
    user = ScriptedUser(resolve_task("retail", "test", 0))
    assert await user.reply(question) == UserTurn(text="Yes.")


async def test_other_questions_repeat_the_request() -> None:
    user = ScriptedUser(resolve_task("retail", "test", 0))
    turn = await user.reply("Which item do you want to return?")
    assert "I want to exchange the water bottle" in turn.text and "mei_kovacs_8020" in turn.text


async def test_requests_without_question_mark_are_questions() -> None:
    user = ScriptedUser(resolve_task("airline", "test", 3))
    turn = await user.reply("Please provide your reservation number.")
    assert "XEWRD9" in turn.text and not turn.stop


async def test_transfer_gets_transfer_token() -> None:
    user = ScriptedUser(resolve_task("airline", "test", 3))
    turn = await user.reply("I am transferring you to a human agent now.")
    assert turn.stop and turn.stop_token == "###TRANSFER###"


async def test_stops_after_max_user_turns() -> None:
    user = ScriptedUser(resolve_task("retail", "test", 0), max_user_turns=3)
    await user.opening()
    assert not (await user.reply("Is that correct?")).stop
    assert not (await user.reply("Is that correct?")).stop
    last = await user.reply("Is that correct?")
    assert last.stop and last.stop_token == STOP


async def test_named_device_tool_is_run_on_the_environment() -> None:
    ref = resolve_task("telecom", "test", 0)
    env = await AttemptEnvironment.create(ref)
    user = ScriptedUser(ref, environment=env)
    turn = await user.reply("Please run toggle_data_saver_mode on your phone.")
    assert turn.text.startswith("I ran toggle_data_saver_mode. It returned: Data Saver Mode is now OFF.")
    assert not turn.stop
    call = env.trajectory_records()[1]
    assert call["role"] == "user" and call["tool_calls"][0]["name"] == "toggle_data_saver_mode"


async def test_device_tool_runs_with_the_arguments_the_agent_gave() -> None:
    ref = resolve_task("telecom", "test", 2)  # gold: set_network_mode_preference {"mode": "4g_5g_preferred"}, ...
    async with await AttemptEnvironment.create(ref) as env:
        user = ScriptedUser(ref, environment=env)
        told = await user.reply('Please do this on your phone: set_network_mode_preference with {"mode": "3g_only"}.')
        assert told.text.startswith("I ran set_network_mode_preference.")
        bare = await user.reply("Now please run set_network_mode_preference again.")  # no arguments given
        calls = [r["tool_calls"][0] for r in env.trajectory_records() if r.get("tool_calls")]
    assert [c["arguments"] for c in calls] == [{"mode": "3g_only"}, {}]  # the gold step was used by the first
    assert "3g_only" in told.text and bare.text.startswith("I ran set_network_mode_preference.")


@pytest.mark.parametrize(
    ("after_name", "expected"),
    [
        (' with {"mode": "4g_5g_preferred"}. Let me know.', {"mode": "4g_5g_preferred"}),
        (' {"a": 1} and more text', {"a": 1}),
        (' with arguments: {"a": [1, 2]}', {"a": [1, 2]}),
        (". Let me know when it is done.", None),
        (' now, then {"a": 1}', None),  # not right after the name
        (' with ["not", "an", "object"]', None),
        (" with {broken", None),
        (" with " + "{" * 100_000, None),  # deep: refused before parsing
        (' with {"a": "' + "x" * 10_000 + '"}', None),  # longer than the bound: not read
    ],
)
def test_given_arguments(after_name: str, expected: dict[str, object] | None) -> None:
    assert given_arguments(after_name) == expected


@settings(max_examples=60, deadline=None)
@given(message=st.text(max_size=200))
def test_rules_are_deterministic_and_never_empty(message: str) -> None:
    ref = resolve_task("retail", "test", 5)

    async def play() -> list[UserTurn]:
        user = ScriptedUser(ref, max_user_turns=4)
        return [await user.opening(), await user.reply(message), await user.reply(message)]

    first, second = asyncio.run(play()), asyncio.run(play())
    assert first == second
    assert all(turn.text.strip() for turn in first)


def test_make_user_builds_the_scripted_user() -> None:
    user = make_user(resolve_task("retail", "test", 0), UserSimulatorConfig(kind="scripted", max_user_turns=5), None)
    assert isinstance(user, ScriptedUser)


async def _replay_with_scripted_user(domain: str, index: int) -> tuple[UserTurn, dict[str, Any]]:
    """The replay reference agent's conversation: opening, one gold action per turn, one final statement."""
    ref = resolve_task(domain, "test", index)
    env = await AttemptEnvironment.create(ref)
    user = ScriptedUser(ref, environment=env)
    opening = await user.opening()
    env.record_user_text(opening.text)
    for name, arguments, requestor in gold_actions(ref):
        await env.call_tool(name, arguments, requestor=requestor)  # type: ignore[arg-type]
    final = final_statement(communicate_info(ref))
    env.record_assistant_text(final)
    turn = await user.reply(final)
    env.record_user_text(turn.text)
    return turn, env.simulation("user_stop" if turn.stop else "max_steps", started_at=STARTED, ended_at=ENDED)


@pytest.mark.parametrize("domain", ["retail", "airline"])
async def test_replay_agent_always_ends_with_user_stop(domain: str) -> None:
    for index in range(len(load_tasks(domain, "test"))):
        turn, _ = await _replay_with_scripted_user(domain, index)
        assert turn.stop and turn.stop_token in ("###STOP###", "###TRANSFER###"), (domain, index, turn)


@pytest.mark.parametrize(("domain", "index"), [("retail", 9), ("airline", 5)])
async def test_replay_agent_with_scripted_user_scores_one(scoring_pool: ScoringPool, domain: str, index: int) -> None:
    turn, simulation = await _replay_with_scripted_user(domain, index)
    assert turn.stop
    breakdown = await scoring_pool.score(resolve_task(domain, "test", index), simulation)
    assert breakdown.reward == 1.0


class _FaultingPhone:
    """An environment whose every user-tool call exhausts the sandbox (what a hostile call could provoke)."""

    user_tools: ClassVar[list[dict[str, Any]]] = [{"type": "function", "function": {"name": "toggle_roaming"}}]

    async def call_tool(self, name: str, arguments: dict[str, Any], *, requestor: str) -> Any:
        raise ToolFault("memory", f"tool call {name}: out of memory", requestor=requestor, tool=name)


@pytest.mark.parametrize(
    ("message", "blamed"),
    [
        ('Please do this on your phone: toggle_roaming with {"x": "' + "9" * 100 + '"}.', "white_agent"),
        ("Please do this on your phone: toggle_roaming.", "user_simulator"),  # the task's own step: not the agent's
    ],
)
async def test_a_fault_provoked_by_the_agents_arguments_is_the_agents(message: str, blamed: str) -> None:
    user = ScriptedUser(resolve_task("telecom", "test", 0), environment=_FaultingPhone())  # type: ignore[arg-type]
    with pytest.raises(ToolFault) as caught:
        await user.reply(message)
    assert tool_fault_stop(caught.value).fault_author.value == blamed

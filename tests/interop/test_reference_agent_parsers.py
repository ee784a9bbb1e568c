"""Arena's reference white agents read by the two public green agents' parsers (tests/interop/green_parsers.py).

Each agent is served on loopback and driven over A2A the way those green agents drive it, on retail test task 5:
every reply must parse under the seed's parser and under tau2-bench's to the same (name, arguments), and Arena's
own parser must agree. The replies carry the action under both "arguments" and "kwargs"; the checks on the
single-key form show that the seed fixture refuses "arguments" alone, so these tests fail if ``format_action`` loses
either key. The flaky ``task_reply`` fault answers with A2A Tasks, which both green agents refuse whatever they hold.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from green_agent.engine.tau.environment import schemas
from green_agent.engine.tau.quiet import quiet_tau2
from green_agent.engine.turn_protocol import parse_action
from tests.interop.green_parsers import (
    RESPOND,
    Attempt,
    FirstMessage,
    SeedRejected,
    Style,
    Tau2Rejected,
    WhiteReply,
    Wire,
    first_message_text,
    green_channel,
    ok_tool_output,
    parse_like_seed,
    parse_like_tau2,
    run_attempt,
    tags_of,
    tau2_reads_as_tool_call,
)
from tests.support.fake_openai import fake_state, make_fake_openai, text_reply, tool_call_reply
from tests.support.servers import serve_app, serve_app_factory
from tests.white_agent.conftest import tau2_task
from tests.white_agent.helpers import arena_block
from white_agent.app import create_white_agent_app, make_agent
from white_agent.llm import LlmAgentSettings
from white_agent.replay import CLOSING_TEXT

TASK = "5"
USER_TEXT = "Hi, I would like to return some items of a delivered order."

Action = tuple[str, dict[str, Any]]


@contextlib.asynccontextmanager
async def serving(kind: str, **options: Any) -> AsyncIterator[str]:
    """The reference white agent ``kind`` on a free loopback port (stopped on exit); yields its base URL."""
    agent = make_agent(kind, **options)
    async with serve_app_factory(lambda url: create_white_agent_app(agent, url + "/")) as base_url:
        yield base_url


def gold_actions(task_id: str = TASK) -> list[Action]:
    """The assistant's gold tool calls of the retail test task, straight from tau2."""
    criteria = tau2_task("retail", "test", task_id).evaluation_criteria
    return [(a.name, a.arguments) for a in criteria.actions if a.requestor == "assistant"]


def retail_first_message(*, style: Style, arena: dict[str, Any] | None = None) -> FirstMessage:
    """The first message of a retail attempt as the public green agents write it (one text part, no data part).

    ``arena``: Arena's calibration block (message metadata), which replay and flaky need to know the task.
    """
    tools, _user_tools, policy = schemas("retail")
    metadata = {"arena": arena} if arena is not None else None
    return FirstMessage(first_message_text(policy, tools, USER_TEXT, style=style), metadata=metadata)


def read_alike(attempt: Attempt) -> list[Action]:
    """Every reply read by the seed, by tau2 and by Arena: the three must agree; returns the actions."""
    actions = []
    for reply in attempt.replies:
        seed = parse_like_seed(reply, context_id=attempt.context_id)
        tau2 = parse_like_tau2(reply, context_id=attempt.context_id)
        assert seed == tau2, reply.text
        arena = parse_action(reply.text, [])
        assert (arena.name, arena.arguments) == seed, reply.text
        actions.append(seed)
    return actions


def assert_single_key_forms_split_the_green_agents(reply: WhiteReply) -> None:
    """The reply's action with only one of its two keys: the seed needs "kwargs", tau2 "arguments"."""
    action = json.loads(tags_of(reply.text)["json"])
    assert set(action) == {"name", "arguments", "kwargs"} and action["arguments"] == action["kwargs"]
    expected = parse_like_seed(reply)
    only_arguments = {"name": action["name"], "arguments": action["arguments"]}
    only_kwargs = {"name": action["name"], "kwargs": action["kwargs"]}
    old_form = "<json>" + json.dumps(only_arguments) + "</json>"
    with pytest.raises(SeedRejected) as refused:
        parse_like_seed(old_form)
    assert refused.value.step == "action_model"
    assert "kwargs" in refused.value.reason and "Field required" in refused.value.reason
    assert parse_like_tau2(old_form) == expected
    kwargs_form = "<json>" + json.dumps(only_kwargs) + "</json>"
    assert parse_like_seed(kwargs_form) == expected
    with pytest.raises(Tau2Rejected):
        parse_like_tau2(kwargs_form)


@pytest.mark.parametrize(
    ("wire", "style", "fresh_context"),
    [("0.3", "seed", False), ("0.3", "seed", True), ("1.0", "seed", True), ("0.3", "tau2", False)],
)
async def test_replay_replies_read_alike_under_both_green_agents(wire: Wire, style: Style, fresh_context: bool) -> None:
    first = retail_first_message(style=style, arena=arena_block(TASK))
    async with serving("replay") as url, green_channel(url, wire) as channel:
        attempt = await run_attempt(
            channel, first, style=style, user_turns=["Thank you, that is all."], fresh_context=fresh_context
        )
    assert attempt.context_id and all(r.kind == "message" for r in attempt.replies)
    actions = read_alike(attempt)
    gold = gold_actions()
    assert actions[: len(gold)] == gold
    final, closing = actions[len(gold) :]
    assert final[0] == RESPOND and final[1]["content"]
    assert closing == (RESPOND, {"content": CLOSING_TEXT})
    for reply in attempt.replies:
        assert_single_key_forms_split_the_green_agents(reply)


async def test_fault_free_flaky_replies_read_alike_under_both_green_agents() -> None:
    first = retail_first_message(style="seed", arena=arena_block(TASK))
    async with serving("flaky", seed=11, fault_rates={}) as url, green_channel(url) as channel:
        attempt = await run_attempt(channel, first, fresh_context=False)
    assert all(r.kind == "message" for r in attempt.replies)
    actions = read_alike(attempt)
    assert actions[:-1] == gold_actions()
    assert actions[-1][0] == RESPOND
    for reply in attempt.replies:
        assert_single_key_forms_split_the_green_agents(reply)


async def test_flaky_task_reply_is_refused_by_both_green_agents_because_it_is_a_task() -> None:
    first = retail_first_message(style="seed", arena=arena_block(TASK))
    async with serving("flaky", seed=11, fault_rates={"task_reply": 1.0}) as url, green_channel(url) as channel:
        attempt = await run_attempt(channel, first, fresh_context=False)
    gold = gold_actions()
    assert len(attempt.replies) == len(gold) + 1
    inside = []
    for reply in attempt.replies:
        assert reply.kind == "task" and reply.task_state == "completed"
        with pytest.raises(SeedRejected) as seed_refusal:
            parse_like_seed(reply, context_id=attempt.context_id)
        assert seed_refusal.value.step == "message_type"
        with pytest.raises(Tau2Rejected) as tau2_refusal:
            parse_like_tau2(reply, context_id=attempt.context_id)
        assert tau2_refusal.value.step == "message_type"
        # The refusal is about the Task alone: the same text in a Message reads alike under both.
        assert reply.artifact_texts == (reply.text,)
        as_message = WhiteReply.message(reply.text)
        assert parse_like_seed(as_message) == parse_like_tau2(as_message)
        inside.append(parse_like_seed(as_message))
    assert inside[:-1] == gold and inside[-1][0] == RESPOND


@pytest.mark.parametrize("style", ["seed", "tau2"])
async def test_llm_replies_read_alike_under_both_green_agents(style: Style) -> None:
    """The public green agents send the tools only in the first message's text, and tau2 labels later turns
    "tool: " / "user: ": the model must still get the tools natively, and each turn in its role."""
    name, arguments = gold_actions()[0]
    final_text = "Thank you, I found your account. Which items would you like to return?"
    goodbye = "Thanks, that is all."
    fake = make_fake_openai(
        [tool_call_reply(name, arguments, call_id="call_1"), text_reply(final_text), text_reply("Goodbye!")]
    )
    first = retail_first_message(style=style)
    assert first.data is None
    async with serve_app(fake) as llm_url:
        settings = LlmAgentSettings(
            model="fake-model",
            base_url=f"{llm_url}/v1",
            api_key_env="ARENA_TEST_LLM_KEY",
            retry_base_delay_s=0.0,
            retry_max_delay_s=0.0,
        )
        async with serving("llm", llm=settings, api_key="sk-test") as url, green_channel(url) as channel:
            attempt = await run_attempt(channel, first, style=style, user_turns=[goodbye], fresh_context=False)
    assert [r.kind for r in attempt.replies] == ["message"] * 3
    assert read_alike(attempt) == [(name, arguments), (RESPOND, {"content": final_text}), said("Goodbye!")]
    for reply in attempt.replies:
        assert_single_key_forms_split_the_green_agents(reply)
    requests = fake_state(fake).completion_requests
    tools, _user_tools, policy = schemas("retail")
    # The tools recovered from the text, offered natively; the policy without the tools JSON or the reply format.
    assert all(request["tools"] == tools for request in requests)
    system, user = requests[0]["messages"]
    assert system["role"] == "system" and policy.strip() in system["content"]
    assert '"parameters"' not in system["content"] and "<json>" not in system["content"]
    assert user["role"] == "user" and user["content"].strip() == USER_TEXT  # tau2's quoted "user: ..." unwrapped
    # The tool result answers the model's tool call with the real output; the next user turn is a user message.
    tool_message = requests[1]["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == "call_1"
    assert tool_message["content"].strip() == ok_tool_output(name, arguments)
    assert requests[2]["messages"][-1]["role"] == "user"
    assert requests[2]["messages"][-1]["content"].strip() == goodbye
    if style == "tau2":  # tau2's observation lines arrive without framing
        assert tool_message["content"] == ok_tool_output(name, arguments)
        assert requests[2]["messages"][-1]["content"] == goodbye
    assert all(m.get("content") != "(no result)" for m in requests[2]["messages"])


# --------------------------------------------------------------------------------------------------------------
# The fixtures themselves: where the two green agents part ways (each row would fail if a fixture were too lenient)


def tagged(name: Any, arguments: Any, keys: tuple[str, ...] = ("arguments", "kwargs")) -> str:
    """An action in ``<json>`` tags with ``arguments`` under each of ``keys``."""
    return "<json>" + json.dumps({"name": name, **dict.fromkeys(keys, arguments)}) + "</json>"


ORDER: Action = ("get_order_details", {"order_id": "#W1"})
BOTH = tagged(*ORDER)


def said(content: str) -> Action:
    return (RESPOND, {"content": content})


@pytest.mark.parametrize(
    ("text", "seed", "tau2"),
    [
        (BOTH, ORDER, ORDER),
        (tagged(*ORDER, keys=("arguments",)), "action_model", ORDER),
        (tagged(*ORDER, keys=("kwargs",)), ORDER, "tool_call"),
        (tagged(RESPOND, {"content": "Hi"}, keys=("arguments",)), "action_model", said("Hi")),
        (tagged(RESPOND, {"content": "Hi"}, keys=("kwargs",)), said("Hi"), "respond_content"),
        (tagged(RESPOND, {}), "respond_content", "respond_content"),
        (tagged(RESPOND, {"content": " "}), said(" "), "respond_content"),  # tau2: empty action, not delivered
        (tagged(RESPOND, {"content": "find_user(id=3)"}), said("find_user(id=3)"), "respond_content"),  # a tool call
        (tagged(RESPOND, {"content": "Done (as asked)."}), said("Done (as asked)."), said("Done (as asked).")),
        (BOTH[len("<json>") : -len("</json>")], "json_tag", "json_tag"),  # bare JSON: no tag, no action
        ("```json\n" + BOTH[len("<json>") : -len("</json>")] + "\n```", "json_tag", "json_tag"),
        ("<json>\n  " + BOTH[len("<json>") :], ORDER, ORDER),  # whitespace inside the tag is stripped
        (tagged(RESPOND, {"content": "a </json> b"}), "json_decode", "json_decode"),  # the tag ends early
        (tagged(RESPOND, {"content": "x"}) + " then " + BOTH, ORDER, ORDER),  # the last <json> wins
        ("<json>[1, 2]</json>", "action_model", "action_name"),
        (tagged(5, {}), "action_model", "tool_call"),
    ],
)
def test_fixtures_follow_the_green_agents(text: str, seed: Action | str, tau2: Action | str) -> None:
    for parse, rejection, expected in ((parse_like_seed, SeedRejected, seed), (parse_like_tau2, Tau2Rejected, tau2)):
        if isinstance(expected, str):
            with pytest.raises(rejection) as refused:
                parse(text)
            assert refused.value.step == expected
        else:
            assert parse(text) == expected


@pytest.mark.parametrize(
    ("reply", "step"),
    [
        (WhiteReply(kind="task", text_parts=(BOTH,), context_id="c", task_state="completed"), "message_type"),
        (WhiteReply(kind="error", error="internal error"), "response_type"),
        (WhiteReply(kind="message", text_parts=(BOTH, BOTH), context_id="c"), "text_parts"),
        (WhiteReply(kind="message", text_parts=(), context_id="c"), "text_parts"),
        (WhiteReply(kind="message", text_parts=(BOTH,), context_id="other"), "context_id"),
    ],
)
def test_fixtures_refuse_what_both_green_agents_refuse_before_reading(reply: WhiteReply, step: str) -> None:
    for parse, rejection in ((parse_like_seed, SeedRejected), (parse_like_tau2, Tau2Rejected)):
        with pytest.raises(rejection) as refused:
            parse(reply, context_id="c")
        assert refused.value.step == step


@pytest.mark.parametrize(
    "action",
    [
        "find_user(id=3)",
        "hello()",
        "ok( )",
        "a(1)",
        "f(**k)",
        "f(x=[1, 2], y=(1,), z={'a': None})",
        "f(x=-'a')",
        "f(x=a+b)",
        "f(x={**y})",
        "f(x=1), g(y=2)",
        "Done (as asked).",
        "Thanks. f(x=1)",
        "multi\nline(x=1)",
        " f(x=1)\n",
        '{"name": "x", "arguments": {}}',
        '{"name": "x", "arguments": {}, "kwargs": {}}',
        '{"name": "x", "kwargs": {}}',
        '{"name": "x", "arguments": [1]}',
        "Your request has been completed. Details: 746342064230.",
    ],
)
def test_tau2_fixture_agrees_with_the_installed_tau2(action: str) -> None:
    """The installed tau2's own ``parse_action_string`` is the oracle for what becomes a tool call."""
    quiet_tau2()
    from tau2.utils.tools import parse_action_string

    assert tau2_reads_as_tool_call(action) == bool(parse_action_string(action).tool_calls)

"""What the attempt viewer needs beside the conversation (green_agent/engine/attempt_details.py): the malformed reply
of every format_error attempt (kept bounded and clean in the result, the trajectory file, the event and summary.md),
the task's user scenario and tau2's checks with the reward split (bounded, in the attempt_finished event)."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from markdown_it import MarkdownIt

from green_agent.engine.attempt_details import (
    MAX_CHECKS,
    MAX_CHECKS_JSON_CHARS,
    MAX_REPLY_CHARS,
    MAX_SCENARIO_CHARS,
    malformed_reply,
    reward_checks,
    task_scenario,
)
from green_agent.engine.capped_transport import HEAD_BYTES, CappedTransport, ReplyTooLarge
from green_agent.engine.events import AttemptFinished, read_event
from green_agent.engine.report import malformed_reply_line, render_markdown
from green_agent.engine.results import AttemptResult, FailureCategory, RewardBreakdown
from green_agent.engine.white_client import WhiteAgentReplyTooLarge, WhiteReply
from tests.green_agent.engine.conftest import MOCK, RETAIL, Arena
from tests.green_agent.engine.fakes import ScriptedWhite, respond, tool
from tests.green_agent.engine.results.builders import battle_result

CREATE = tool("create_task", user_id="user_1", title="Important Meeting")
DONE = respond("Done: the task 'Important Meeting' now exists for user_1.")
HOSTILE = "Sure!\n<script>alert(1)</script>\x1b[31mred\x1b[0m\r\u202eevil\x00 ```json" + "la " * 5_000
"""A reply that is no action: markup, a terminal escape, a carriage return, a direction override, NUL, a fence,
and more than MAX_REPLY_CHARS characters."""
CONTROL = ("\x1b", "\r", "\u202e", "\x00")


def trajectory_lines(arena: Arena, result: AttemptResult) -> list[dict[str, Any]]:
    assert result.trajectory_file is not None
    path = arena.trajectories.parent / result.trajectory_file
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


async def test_a_reply_that_is_no_action_is_kept_bounded_and_clean(arena: Arena) -> None:
    result = await arena.play(ScriptedWhite(CREATE, HOSTILE))
    assert result.failure is not None and result.failure.category is FailureCategory.FORMAT_ERROR
    reply = result.malformed_reply
    assert reply is not None and reply.source == "reply" and reply.truncated
    assert len(reply.text) == MAX_REPLY_CHARS and reply.chars == len(HOSTILE)
    assert reply.text.startswith("Sure!\n<script>alert(1)</script>")  # kept as text; line breaks stay
    assert not any(char in reply.text for char in CONTROL)
    assert reply.step == 2  # the failure detail's "reply at step 2"
    assert "reply at step 2" in result.failure.detail
    # the trajectory file ends with the reply, at the turn it would have been, flagged
    lines = trajectory_lines(arena, result)
    last = lines[-1]
    assert last["role"] == "assistant" and last["error"] is True and last["format_error"] is True
    assert last["content"] == reply.text and last["turn_idx"] == reply.turn == len(lines) - 2
    assert lines[-2]["turn_idx"] == reply.turn - 1
    # the event carries it, and reads back
    event = AttemptFinished.from_result(result, done=1, total=1)
    assert event.malformed_reply == reply
    typed = read_event(event.event("x").wire())
    assert isinstance(typed, AttemptFinished) and typed.malformed_reply == reply
    # summary.json keeps it; summary.md shows it as one inline code span
    assert AttemptResult.model_validate_json(result.model_dump_json()).malformed_reply == reply


async def test_a_data_part_that_is_no_action_is_kept(arena: Arena) -> None:
    odd = WhiteReply(text="", data_parts=[{"nam": "respond", "arguments": {"content": "x" * 9_000}}], kind="message")
    result = await arena.play(ScriptedWhite(odd))
    reply = result.malformed_reply
    assert reply is not None and reply.text.startswith('[data parts] [{"nam": "respond"')
    assert (
        reply.truncated and len(reply.text) == MAX_REPLY_CHARS and reply.turn == 2 and reply.step == 1
    )  # after greeting and opening


async def test_a_reply_over_the_byte_cap_keeps_its_first_bytes(arena: Arena) -> None:
    head = b'{"jsonrpc": "2.0", "result": {"parts": [{"text": "\x1b[2J' + b"A" * 20_000
    too_large = WhiteAgentReplyTooLarge("the reply is larger than 1048576 bytes", max_bytes=1_048_576, head=head)
    result = await arena.play(ScriptedWhite(CREATE, too_large))
    reply = result.malformed_reply
    assert reply is not None and reply.source == "http_body" and reply.truncated
    assert reply.text.startswith('{"jsonrpc": "2.0"') and "\x1b" not in reply.text
    assert len(reply.text) == MAX_REPLY_CHARS and reply.step == 2
    assert trajectory_lines(arena, result)[-1]["format_error"] is True


async def test_other_failures_and_successes_record_no_reply(arena: Arena) -> None:
    done = await arena.play(ScriptedWhite(CREATE, DONE))
    assert done.outcome == "success" and done.malformed_reply is None
    assert "malformed_reply" not in done.model_dump(mode="json")  # summary.json unchanged for every other attempt
    assert all(not line.get("format_error") for line in trajectory_lines(arena, done))


async def test_the_capped_transport_keeps_the_head_of_a_refused_body() -> None:
    body = b"<html>" + b"B" * 100_000

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=httpx.ByteStream(body), headers={"transfer-encoding": "chunked"})

    transport = CappedTransport(httpx.MockTransport(answer), max_bytes=50_000)
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(ReplyTooLarge) as raised:
            await client.get("http://white.invalid/")
    assert raised.value.head == body[:HEAD_BYTES]

    def declared(request: httpx.Request) -> httpx.Response:  # refused for its Content-Length: its head still read
        return httpx.Response(200, content=body)

    transport = CappedTransport(httpx.MockTransport(declared), max_bytes=50_000)
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(ReplyTooLarge) as raised:
            await client.get("http://white.invalid/")
    assert raised.value.head == body[:HEAD_BYTES]


async def test_a_refused_body_that_trickles_keeps_what_arrived(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("green_agent.engine.capped_transport.HEAD_READ_S", 0.05)

    class Trickle(httpx.AsyncByteStream):  # its first bytes, then nothing more (a stalled agent)
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield b"<html>first"
            await asyncio.Event().wait()

    def declared(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=Trickle(), headers={"content-length": "100000"})

    transport = CappedTransport(httpx.MockTransport(declared), max_bytes=50_000)
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(ReplyTooLarge) as raised:
            await client.get("http://white.invalid/")
    assert raised.value.head == b"<html>first"


def test_the_summary_shows_the_reply_as_one_inline_code_span() -> None:
    reply = malformed_reply(HOSTILE + "\n\n# heading\n<b>x</b> `tick`", [], turn=3, step=2)
    line = malformed_reply_line(reply)
    assert line.startswith("Reply that is not an action (turn 3, ") and ", cut)" in line
    assert "\n" not in line and not any(char in line for char in CONTROL)
    result = battle_result()
    failed = next(a for a in result.attempts if a.failure is not None and a.outcome == "failure")
    failed.malformed_reply = reply
    markdown = render_markdown(result)
    assert f"    - ↳ {line}" in markdown
    tokens = MarkdownIt("commonmark").parseInline(line)[0].children or []
    assert [t.type for t in tokens] == ["text", "code_inline"]  # no HTML, no emphasis, no second block


def test_the_reply_text_is_cut_and_cleaned_without_data_parts() -> None:
    reply = malformed_reply("ok\tfine\u2028x\x7f", [], turn=None, step=None)
    assert reply.text == "ok\tfine\ufffdx\ufffd" and not reply.truncated and reply.chars == 10


def test_the_scenario_of_tau2_tasks() -> None:
    retail = task_scenario(RETAIL.task)
    assert retail is not None and retail.task_id == RETAIL.task_id
    assert retail.reason_for_call and retail.task_instructions and retail.known_info
    mock = task_scenario(MOCK.task)
    assert mock is not None and (mock.task_instructions or mock.reason_for_call)

    class Scenario:
        instructions = "y" * 10_000 + "\x1b"
        persona = None

    class Task:
        id = "t"
        description = None
        user_scenario = Scenario()

    free = task_scenario(Task())
    assert free is not None and free.task_instructions == "y" * MAX_SCENARIO_CHARS and free.reason_for_call is None
    assert task_scenario(object()) is None


def reward_info(actions: int = 2, text: str = "say it") -> dict[str, Any]:
    """tau2's RewardInfo JSON with every kind of check."""
    return {
        "reward": 0.0,
        "db_check": {"db_match": False, "db_reward": 0.0},
        "action_checks": [
            {
                "action": {"action_id": f"a{i}", "name": "cancel_order", "arguments": {"order_id": f"#{i}"}},
                "action_match": i % 2 == 0,
                "action_reward": float(i % 2 == 0),
            }
            for i in range(actions)
        ],
        "communicate_checks": [{"info": text, "met": False, "justification": "never said"}],
        "nl_assertions": [{"nl_assertion": "polite", "met": True, "justification": "it was"}],
        "env_assertions": [
            {"env_assertion": {"env_type": "user", "func_name": "assert_data", "arguments": {}}, "met": False}
        ],
        "reward_basis": ["DB", "COMMUNICATE"],
        "reward_breakdown": {"DB": 0.0, "COMMUNICATE": 0.0, "ACTION": math.nan},
    }


def test_the_checks_of_a_reward_info() -> None:
    checks = reward_checks(reward_info())
    assert checks is not None and checks.db_match is False
    assert checks.reward_split == {"DB": 0.0, "COMMUNICATE": 0.0}  # NaN is not a reward
    assert checks.reward_basis == ["DB", "COMMUNICATE"]
    assert [(a.name, a.arguments, a.met) for a in checks.actions] == [
        ("cancel_order", {"order_id": "#0"}, True),
        ("cancel_order", {"order_id": "#1"}, False),
    ]
    assert [(c.text, c.met, c.justification) for c in checks.communicate] == [("say it", False, "never said")]
    assert [(c.text, c.met) for c in checks.nl_assertions] == [("polite", True)]
    assert [(e.function, e.env_type, e.met) for e in checks.env_assertions] == [("assert_data", "user", False)]
    assert reward_checks({"reward": 0.0, "note": "termination max_steps is not scored by tau2"}) is None


def test_the_checks_are_bounded() -> None:
    checks = reward_checks(reward_info(actions=5_000, text="z" * 100_000))
    assert checks is not None
    assert len(checks.model_dump_json()) <= MAX_CHECKS_JSON_CHARS
    assert len(checks.actions) <= MAX_CHECKS and checks.left_out >= 5_000 - MAX_CHECKS
    assert all(len(c.text) <= 500 for c in checks.communicate)


async def test_a_scored_attempt_event_carries_its_checks_and_scenario(arena: Arena) -> None:
    result = await arena.play(ScriptedWhite(CREATE, DONE))
    event = AttemptFinished.from_result(result, done=1, total=1, scenario=task_scenario(MOCK.task))
    assert event.checks is not None and event.scenario is not None and event.malformed_reply is None
    assert [(a.name, a.met) for a in event.checks.actions] == [("create_task", True)]
    assert event.checks.reward_split and all(value == 1.0 for value in event.checks.reward_split.values())
    wire = event.event("x").wire()
    assert wire["checks"]["actions"][0]["name"] == "create_task" and wire["scenario"]["task_id"] == MOCK.task_id
    unscored = result.model_copy(update={"breakdown": RewardBreakdown(reward=0.0, raw={"note": "not scored"})})
    assert AttemptFinished.from_result(unscored, done=1, total=1).checks is None

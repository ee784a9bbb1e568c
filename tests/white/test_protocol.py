"""Reading green-agent messages and writing actions (white side of the turn protocol), and the LRU map."""

from __future__ import annotations

import json
import re

import pytest
from a2a.helpers import new_data_part, new_text_part
from a2a.types.a2a_pb2 import Message, Role
from hypothesis import given
from hypothesis import strategies as st

from tests.white.helpers import arena_block, first_message
from white_agent.contexts import BoundedContexts
from white_agent.errors import WhiteAgentConfigError
from white_agent.protocol import format_action, format_respond, normalize_tool_schema, parse_green_message


def _message(text: str, data: dict | None = None, metadata: dict | None = None) -> Message:
    parts = [new_text_part(text)] + ([new_data_part(data)] if data is not None else [])
    message = Message(role=Role.ROLE_USER, message_id="m", context_id="c", parts=parts)
    if metadata:
        message.metadata.update(metadata)
    return message


def test_first_message_with_data_part_and_arena() -> None:
    text, data, metadata = first_message(
        "I want a refund.", policy="POLICY", tools=[{"name": "f"}], arena=arena_block("40", attempt=3)
    )
    turn = parse_green_message(_message(text, data, metadata))
    assert turn.kind == "first" and turn.content == "I want a refund."
    assert turn.policy == "POLICY" and turn.tools == [{"name": "f"}]
    assert turn.arena is not None
    assert (turn.arena.domain, turn.arena.task_id, turn.arena.attempt, turn.arena.task_index) == ("retail", "40", 3, 0)


def test_first_message_without_data_part_uses_the_text() -> None:
    turn = parse_green_message(_message("Policy text.\nTools: []\nUser message: hello there"))
    assert turn.kind == "first" and turn.content == "hello there"
    assert turn.policy is not None and turn.policy.startswith("Policy text.")
    assert turn.tools is None and turn.arena is None


def test_later_turns_keep_their_content_verbatim() -> None:
    output = '{"a": 1}\n  second line  \n'
    tool = parse_green_message(_message(f"Tool call result:\n{output}"))
    user = parse_green_message(_message("User message:\nUser message: quoted"))
    assert (tool.kind, tool.content) == ("tool_result", output)
    assert (user.kind, user.content) == ("user", "User message: quoted")
    assert parse_green_message(_message("what?")).kind == "other"


def test_numeric_task_id_and_invalid_arena() -> None:
    ok = parse_green_message(_message("User message: x", {"policy": "p", "arena": {"domain": "retail", "task_id": 7}}))
    assert ok.arena is not None and ok.arena.task_id == "7"
    bad = parse_green_message(_message("User message: x", {"policy": "p", "arena": {"task_id": "7"}}))
    assert bad.arena is None and bad.arena_error is not None and "domain" in bad.arena_error


@given(name=st.text(min_size=1), arguments=st.dictionaries(st.text(), st.integers() | st.text() | st.booleans()))
def test_format_action_round_trips(name: str, arguments: dict) -> None:
    text = format_action(name, arguments)
    match = re.fullmatch(r"<json>(.*)</json>", text, re.DOTALL)
    assert match is not None
    assert json.loads(match.group(1)) == {"name": name, "arguments": arguments}


def test_respond_and_tool_schema_normalisation() -> None:
    assert json.loads(format_respond("hi")[6:-7]) == {"name": "respond", "arguments": {"content": "hi"}}
    wrapped = {"type": "function", "function": {"name": "f", "parameters": {}}}
    assert normalize_tool_schema(wrapped) == wrapped
    assert normalize_tool_schema({"name": "f", "parameters": {}}) == wrapped
    assert normalize_tool_schema({"nothing": 1}) is None


@given(size=st.integers(1, 5), ops=st.lists(st.integers(0, 9), max_size=60))
def test_bounded_contexts_behave_like_an_lru(size: int, ops: list[int]) -> None:
    contexts: BoundedContexts[list[int]] = BoundedContexts(size)
    model: list[int] = []  # least recently used first
    for key in ops:
        state = contexts.get_or_create(str(key), list)
        state.append(key)
        if key in model:
            model.remove(key)
        model.append(key)
        model = model[-size:]
        assert contexts.context_ids() == [str(k) for k in model]
        assert len(contexts) <= size


def test_bounded_contexts_reject_a_zero_bound() -> None:
    with pytest.raises(WhiteAgentConfigError):
        BoundedContexts(0)

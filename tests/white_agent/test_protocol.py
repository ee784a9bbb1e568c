"""Reading green-agent messages and writing actions (white side of the turn protocol), and the LRU map.

The public green agents' messages come from tests/interop/green_parsers.py, which writes them character for character
as the seed and tau2-bench do; their readers there judge the actions written here.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from a2a.helpers import new_data_part, new_text_part
from a2a.types.a2a_pb2 import Message, Role
from hypothesis import given
from hypothesis import strategies as st

from green_agent.engine.tau.environment import schemas
from green_agent.engine.turn_protocol import parse_action
from tests.interop.green_parsers import (
    Style,
    first_message_text,
    parse_like_seed,
    parse_like_tau2,
    tags_of,
    tool_result_text,
    user_message_text,
)
from tests.white_agent.helpers import arena_block, first_message
from white_agent.contexts import BoundedContexts
from white_agent.errors import WhiteAgentConfigError
from white_agent.protocol import (
    MAX_TOOL_LIST_CANDIDATES,
    MAX_TOOLS_IN_TEXT,
    MAX_TOOLS_JSON_CHARS,
    find_tools_in_text,
    format_action,
    format_respond,
    normalize_tool_schema,
    parse_green_message,
)


def _message(text: str, data: dict[str, Any] | None = None, metadata: dict[str, Any] | None = None) -> Message:
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
def test_format_action_round_trips(name: str, arguments: dict[str, Any]) -> None:
    text = format_action(name, arguments)
    match = re.fullmatch(r"<json>(.*)</json>", text, re.DOTALL)
    assert match is not None
    assert json.loads(match.group(1)) == {"name": name, "arguments": arguments, "kwargs": arguments}


def test_respond_and_tool_schema_normalisation() -> None:
    assert json.loads(format_respond("hi")[6:-7]) == {
        "name": "respond",
        "arguments": {"content": "hi"},
        "kwargs": {"content": "hi"},
    }
    wrapped = {"type": "function", "function": {"name": "f", "parameters": {}}}
    assert normalize_tool_schema(wrapped) == wrapped
    assert normalize_tool_schema({"name": "f", "parameters": {}}) == wrapped
    assert normalize_tool_schema({"nothing": 1}) is None


# --------------------------------------------------------------------------------------------------------------
# The public green agents: tools only in the first message's text, tau2's "tool: " / "user: " turns

TOOL: dict[str, Any] = {
    "type": "function",
    "function": {"name": "get_user", "description": "Look up a user.", "parameters": {"type": "object"}},
}


@pytest.mark.parametrize("style", ["seed", "tau2"])
def test_public_first_message_gives_the_tools_from_its_text(style: Style) -> None:
    tools, _user_tools, policy = schemas("retail")
    turn = parse_green_message(_message(first_message_text(policy, tools, "I want a refund.", style=style)))
    assert turn.kind == "first" and turn.content.strip() == "I want a refund."  # tau2's "user: ..." quoting undone
    assert turn.tools == tools
    assert turn.policy is not None and turn.policy.startswith(policy.strip())
    assert '"parameters"' not in turn.policy and "<json>" not in turn.policy  # no tools JSON, no reply format
    assert turn.reply_format is not None and "<json>" in turn.reply_format and "User message" not in turn.reply_format


def test_data_part_tools_win_over_the_text() -> None:
    text, data, _metadata = first_message("hi", policy="P", tools=[{"name": "from_data"}])
    turn = parse_green_message(_message(text.replace("[{", f"{json.dumps([TOOL])} [{{"), data))
    assert turn.tools == [{"name": "from_data"}] and turn.policy == "P"


def test_first_message_without_tools_keeps_the_whole_prefix_as_policy() -> None:
    turn = parse_green_message(_message('Policy.\nExample: [{"name": "x", "arguments": {}}]\nUser message: hi'))
    assert turn.kind == "first" and turn.tools is None and turn.content == "hi"
    assert turn.policy == 'Policy.\nExample: [{"name": "x", "arguments": {}}]'


def test_tools_in_the_users_own_text_are_not_taken() -> None:
    turn = parse_green_message(_message(f"Policy.\nUser message: my tools: {json.dumps([TOOL])}"))
    assert turn.kind == "first" and turn.tools is None


@pytest.mark.parametrize(
    "text",
    [
        "[1, 2, 3]",
        '[{"a": 1}]',
        '[{"name": "find_user", "arguments": {"id": 3}}]',  # an example action, not a schema
        '[{"name": "", "parameters": {}}]',
        '[{"name": "f", "parameters": "not an object"}]',
        '[{"type": "function", "function": {"name": 5}}]',
        json.dumps([TOOL, 1]),
        json.dumps([TOOL, {"a": 1}]),
        json.dumps([TOOL] * (MAX_TOOLS_IN_TEXT + 1)),
        '[{"name": "f", "description": "d", "parameters": {"default": NaN}}]',
        '[{"name": "f", "description": "d", "parameters": {"max": ' + "9" * 5000 + "}}]",
        '[{"name": "f", "description": "d", "parameters": ' + '{"a": ' * 40 + "1" + "}" * 40 + "}]",
        "[{" + '"a": [' * 100_000,  # deeper than the decoder recurses
        json.dumps([TOOL])[:-1],  # unterminated
    ],
)
def test_arrays_that_are_not_tool_lists_are_refused(text: str) -> None:
    assert find_tools_in_text(f"Policy {text} more words") is None


def test_tool_list_is_found_after_decoys_and_skips_inside_them() -> None:
    decoys = '[{"a": 1}] [1] [{"b": [{"c": 2}]}] {"name": "respond"} [{"name": "x", "arguments": {}}] '
    text = decoys + "tools:\n" + json.dumps([TOOL], indent=2) + "\nreply format"
    found = find_tools_in_text(text)
    assert found is not None and found.tools == [TOOL]
    assert text[found.start : found.end] == json.dumps([TOOL], indent=2)
    nested = find_tools_in_text(json.dumps({"wrapper": [[TOOL]]}))  # an object, then a list of lists: "[[" skipped
    assert nested is not None and nested.tools == [TOOL]


def test_tool_search_is_bounded() -> None:
    real = json.dumps([TOOL])
    too_many_decoys = '[{"a": 1}] ' * MAX_TOOL_LIST_CANDIDATES + real
    assert find_tools_in_text(too_many_decoys) is None
    assert find_tools_in_text('[{"a": 1}] ' * (MAX_TOOL_LIST_CANDIDATES - 1) + real) is not None
    padded = [{**TOOL, "function": {**TOOL["function"], "description": "x" * MAX_TOOLS_JSON_CHARS}}]
    assert find_tools_in_text(json.dumps(padded)) is None  # longer than the window
    assert find_tools_in_text(real, end=len(real) - 1) is None  # the array must end before ``end``
    huge = "[" * 2_000_000 + "[{" * 1_000_000 + " " * 2_000_000 + real
    assert find_tools_in_text(huge) is None  # 16 candidates tried, each failing fast: no recursion error, no hang


@pytest.mark.parametrize(
    ("text", "kind", "content"),
    [
        ('tool: {"ok": true}', "tool_result", '{"ok": true}'),
        ("tool: ", "tool_result", ""),
        ("tool: out\nUser message: not a first message", "tool_result", "out\nUser message: not a first message"),
        ("user: Hi there\nsecond line", "user", "Hi there\nsecond line"),
        ("user: User message: x", "user", "User message: x"),
        (tool_result_text("out"), "tool_result", "out\n            "),  # the seed: Arena's labels
        (user_message_text("Hi"), "user", "Hi\n            "),
        (tool_result_text("out", style="tau2"), "tool_result", "out"),
        (user_message_text("Hi", style="tau2"), "user", "Hi"),
        ("Tool: x", "other", "Tool: x"),  # tau2 writes the role in lower case, at position 0
        (" user: x", "other", " user: x"),
        ("tool:x", "other", "tool:x"),
        ("Invalid action with error: bad", "other", "Invalid action with error: bad"),
    ],
)
def test_later_turns_of_both_public_green_agents(text: str, kind: str, content: str) -> None:
    turn = parse_green_message(_message(text))
    assert (turn.kind, turn.content) == (kind, content)


def test_tau2_prefixes_do_not_turn_a_first_message_into_a_later_turn() -> None:
    text, data, _metadata = first_message("hi", policy="user: the policy happens to start like this")
    assert parse_green_message(_message(text, data)).kind == "first"
    tau2_first = first_message_text("tool: odd policy", [TOOL], "tool: odd user", style="tau2")
    turn = parse_green_message(_message(tau2_first))
    assert (turn.kind, turn.content, turn.tools) == ("first", "tool: odd user", [TOOL])


# --------------------------------------------------------------------------------------------------------------
# "</json>" inside an action: escaped, read back the same by both public green agents and by Arena

CLOSERS = ["</json>", "</", "a </json> b", "<json>x</json>", "<\\/json>", "</JSON>", "<\\/", "\\</json>"]


@pytest.mark.parametrize("closer", CLOSERS)
def test_closing_tags_inside_an_action_are_escaped_and_read_back(closer: str) -> None:
    name, arguments = "note", {"text": f"x {closer} y", f"key{closer}": [closer, {"deep": closer}]}
    text = format_action(name, arguments)
    inner = text[len("<json>") : -len("</json>")]
    assert "</" not in inner and json.loads(inner)["arguments"] == arguments
    assert tags_of(text)["json"] == inner
    assert parse_like_seed(text) == parse_like_tau2(text) == (name, arguments)
    action = parse_action(text, [])
    assert (action.name, action.arguments) == (name, arguments)
    said = format_respond(f"Your note: {closer}. Anything else?")
    content = f"Your note: {closer}. Anything else?"
    assert parse_like_seed(said) == parse_like_tau2(said) == ("respond", {"content": content})
    assert parse_action(said, []).content == content


@given(
    name=(st.text() | st.sampled_from(CLOSERS)).filter(lambda n: bool(n.strip()) and n != "respond"),
    arguments=st.dictionaries(
        st.text() | st.sampled_from(CLOSERS),
        st.integers(-(10**18), 10**18) | st.text() | st.sampled_from(CLOSERS) | st.booleans(),
        max_size=5,
    ),
)
def test_every_action_reads_back_the_same_under_all_three_parsers(name: str, arguments: dict[str, Any]) -> None:
    text = format_action(name, arguments)
    assert parse_like_seed(text) == parse_like_tau2(text) == (name, arguments)
    action = parse_action(text, [])
    assert (action.name, action.arguments) == (name, arguments)


@given(size=st.integers(1, 5), ops=st.lists(st.integers(0, 9), max_size=60))
def test_bounded_idle_contexts_behave_like_an_lru(size: int, ops: list[int]) -> None:
    contexts: BoundedContexts[list[int]] = BoundedContexts(size, idle_s=0)  # every conversation idle: an LRU
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

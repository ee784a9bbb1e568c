"""The turn protocol: the messages the green agent sends, and every accepted and rejected form of a reply."""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from green_agent.engine.turn_protocol import (
    MCP_REPLY_FORMAT,
    REPLY_FORMAT,
    Action,
    ActionParseError,
    build_first_data,
    build_first_message,
    parse_action,
    tool_result_message,
    user_message,
)

TOOLS = [{"type": "function", "function": {"name": "get_order", "parameters": {"type": "object"}}}]


# ----------------------------------------------------------------------------------------------- green -> white


def test_first_message_has_policy_tools_format_then_user_text() -> None:
    text = build_first_message("Be nice.\n", TOOLS, "Where is my order?")
    assert text.startswith("Be nice.")
    assert json.dumps(TOOLS, indent=2) in text
    assert REPLY_FORMAT in text
    assert text.endswith("User message: Where is my order?")
    assert text.index("Be nice.") < text.index('"get_order"') < text.index(REPLY_FORMAT) < text.rindex("User message:")


def test_reply_format_names_both_argument_keys_and_respond() -> None:
    assert "<json>" in REPLY_FORMAT and '"respond"' in REPLY_FORMAT
    assert '"arguments"' in REPLY_FORMAT and '"kwargs"' in REPLY_FORMAT and '"content"' in REPLY_FORMAT


def test_first_data_carries_the_same_content() -> None:
    assert build_first_data("P", TOOLS) == {"policy": "P", "tools": TOOLS, "reply_format": REPLY_FORMAT}


MCP = {
    "url": "http://green:9009/mcp-attempts/abc/",
    "token": "s3cret",
    "transport": "streamable-http",
    "auth": "bearer",
}


def test_mcp_first_message_names_the_endpoint_and_asks_for_respond_only() -> None:
    text = build_first_message("Be nice.", TOOLS, "Where is my order?", mcp=MCP)
    assert text.startswith("Be nice.") and text.endswith("User message: Where is my order?")
    assert MCP["url"] in text and "get_order" in text and MCP_REPLY_FORMAT in text
    assert REPLY_FORMAT not in text and json.dumps(TOOLS, indent=2) not in text
    assert "s3cret" not in text  # the token travels in the data part and metadata only
    assert '"respond"' in MCP_REPLY_FORMAT and "Bearer" in MCP_REPLY_FORMAT


def test_mcp_first_data_carries_the_endpoint() -> None:
    data = build_first_data("P", TOOLS, mcp=MCP)
    assert data == {"policy": "P", "tools": TOOLS, "reply_format": MCP_REPLY_FORMAT, "mcp": MCP}
    assert data["mcp"] is not MCP


def test_later_messages_keep_their_payload_verbatim() -> None:
    output = '  {"a": 1}\n\ttrailing  \n'
    assert tool_result_message(output) == "Tool call result:\n" + output
    assert user_message("Hi\nthere ") == "User message:\nHi\nthere "


# ----------------------------------------------------------------------------------------------- accepted forms


@pytest.mark.parametrize(
    ("text", "name", "arguments", "source"),
    [
        ('<json>{"name": "get_order", "arguments": {"id": "#1"}}</json>', "get_order", {"id": "#1"}, "tag"),
        ('<JSON>\n  {"name": "get_order", "kwargs": {"id": 2}}\n</Json>', "get_order", {"id": 2}, "tag"),
        ('Let me look.\n< json >{"name": "a"}</ json >\nDone.', "a", {}, "tag"),
        ('<json>\n```json\n{"name": "a", "arguments": {"x": 1}}\n```\n</json>', "a", {"x": 1}, "tag"),
        (
            '<json>{"name": "respond", "arguments": {"content": "the tag </json> is text"}}</json>',
            "respond",
            {"content": "the tag </json> is text"},
            "tag",
        ),
        ('```json\n{"name": "a", "arguments": {"x": [1, 2]}}\n```', "a", {"x": [1, 2]}, "fenced"),
        ('Here:\n```\n{"name": "a", "kwargs": {}}\n```\nthanks', "a", {}, "fenced"),
        ('```JSON {"name": "a"} ```', "a", {}, "fenced"),
        ('```python\nprint("x")\n```\n```json\n{"name": "a"}\n```', "a", {}, "fenced"),
        ('{"name": "a", "arguments": {"x": null}}', "a", {"x": None}, "bare"),
        ('\n\n  {"name": "respond", "arguments": {"content": "Hello!"}}  \n', "respond", {"content": "Hello!"}, "bare"),
        (
            '{"name": "respond", "arguments": {"content": "<json>x</json> ```"}}',
            "respond",
            {"content": "<json>x</json> ```"},
            "bare",
        ),
        (
            'I will now call {"name": "a", "arguments": {"q": {"name": "nested"}}} for you.',
            "a",
            {"q": {"name": "nested"}},
            "bare",
        ),
        ('Found {"order": 1}; next {"name": "a", "arguments": {}}', "a", {}, "bare"),
        ('Use {braces} loosely, then {"name": "a"}', "a", {}, "bare"),
        ('<json>{"name": "a", "arguments": {"k": 1}}', "a", {"k": 1}, "bare"),  # unclosed tag: the object still counts
        ('{"name": "a", "arguments": "{\\"id\\": 7}"}', "a", {"id": 7}, "bare"),  # arguments as a JSON string
        ('{"name": "a", "arguments": ""}', "a", {}, "bare"),
        ('{"name": "a", "arguments": {"x": 1}, "kwargs": {"x": 1}}', "a", {"x": 1}, "bare"),
        ('<json>{"name": "a"}</json> and again <json>{"name": "a", "arguments": {}}</json>', "a", {}, "tag"),
        ('{"name": "respond", "kwargs": {"content": ""}}', "respond", {"content": ""}, "bare"),
    ],
)
def test_accepted_text_forms(text: str, name: str, arguments: dict[str, Any], source: str) -> None:
    action = parse_action(text, [])
    assert (action.name, action.arguments, action.source) == (name, arguments, source)


def test_data_part_action_wins_over_text() -> None:
    data = [{"tools": TOOLS}, {"name": "get_order", "arguments": {"id": 3.0}}]
    action = parse_action('<json>{"name": "respond", "arguments": {"content": "hi"}}</json>', data)
    assert action == Action(name="get_order", arguments={"id": 3.0}, source="data")


def test_data_part_with_kwargs_and_no_text() -> None:
    assert parse_action(None, [{"name": "respond", "kwargs": {"content": "ok"}}]).content == "ok"


def test_identical_data_actions_are_one_action() -> None:
    part = {"name": "a", "arguments": {"x": 1}}
    assert parse_action("", [part, dict(part)]).name == "a"


def test_data_parts_that_are_not_actions_fall_back_to_text() -> None:
    # A tool schema has a "name" but no arguments: it is not an action.
    data = [{"name": "get_order", "description": "...", "parameters": {}}]
    assert parse_action('<json>{"name": "b"}</json>', data).source == "tag"


def test_action_helpers() -> None:
    respond = parse_action('{"name": "respond", "arguments": {"content": "bye"}}', [])
    tool = parse_action('{"name": "t"}', [])
    assert respond.is_respond and respond.content == "bye"
    assert not tool.is_respond and tool.content is None


def test_action_is_frozen() -> None:
    action = parse_action('{"name": "t"}', [])
    with pytest.raises(ValueError):
        action.name = "other"  # type: ignore[misc]


# ----------------------------------------------------------------------------------------------- rejections


@pytest.mark.parametrize(
    ("text", "data", "reason"),
    [
        ("", [], "the reply is empty"),
        ("   \n", [], "the reply is empty"),
        (None, [{"tools": []}], "data parts hold no action"),
        ("Sure, I can help with that.", [], "no JSON action found"),
        ('<json>{"name": "a",}</json>', [], "invalid JSON inside <json> tag #1: Expecting property name"),
        ("<json>{'name': 'a'}</json>", [], "invalid JSON inside <json> tag #1"),
        ('```json\n{"name": "a"\n```', [], "invalid JSON in fenced block #1: Expecting ',' delimiter at line 2"),
        (
            'x {"name": "a", "arguments": {"name": "b"}, } y',
            [],
            "invalid JSON in the object starting at line 1 column 3",
        ),
        ("[1, 2]", [], "the reply is JSON array, expected an action object"),
        ('"respond"', [], "the reply is JSON string"),
        ("<json>[1]</json>", [], "the action must be a JSON object, got array"),
        ('{"arguments": {}}', [], 'the action object has no "name"'),
        ('{"a": 1} {"b": 2}', [], 'holds 2 JSON objects and none of them has a "name"'),
        ('{"name": 3}', [], '"name" must be a string, got number'),
        ('{"name": null}', [], '"name" must be a string, got null'),
        ('{"name": "  "}', [], '"name" is empty'),
        ('{"name": "a", "arguments": [1]}', [], '"arguments" must be a JSON object, got array'),
        ('{"name": "a", "kwargs": 5}', [], '"kwargs" must be a JSON object, got number'),
        ('{"name": "a", "arguments": "[1]"}', [], '"arguments" is a string holding JSON array'),
        ('{"name": "a", "arguments": "{oops"}', [], 'invalid JSON in the string value of "arguments"'),
        ('{"name": "a", "arguments": {"x": 1}, "kwargs": {"x": 2}}', [], 'both "arguments" and "kwargs"'),
        ('<json>{"name": "a"}</json><json>{"name": "b"}</json>', [], "several different actions in <json> tags"),
        (
            '<json>{"name": "a", "arguments": {"x": 1}}</json><json>{"name": "a", "arguments": {"x": 2}}</json>',
            [],
            "several different actions",
        ),
        ('```json\n{"name": "a"}\n```\n```json\n{"name": "b"}\n```', [], "several different actions in fenced blocks"),
        ('Either {"name": "a"} or {"name": "b"}', [], "several different actions in the reply"),
        ('{"name": "respond"}', [], '"respond" needs "arguments": {"content": <string>}, but "arguments" is missing'),
        ('{"name": "respond", "arguments": null}', [], 'but "arguments" is null'),
        ('{"name": "respond", "arguments": {}}', [], '"content" is missing'),
        ('{"name": "respond", "arguments": {"content": 42}}', [], '"respond" content must be a string, got number'),
        ('{"name": "respond", "kwargs": {"content": ["a"]}}', [], "got array"),
        (
            None,
            [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}],
            "several different actions in the data parts",
        ),
        (None, [{"name": "respond", "arguments": {"content": None}}], "content must be a string, got null"),
        (None, [{"name": 1, "arguments": {}}], '"name" must be a string'),
    ],
)
def test_rejections_say_why(text: str | None, data: list[dict[str, Any]], reason: str) -> None:
    with pytest.raises(ActionParseError) as caught:
        parse_action(text, data)
    assert reason in caught.value.reason
    assert str(caught.value) == caught.value.reason


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (
            '<json>{"name": "calculate", "arguments": {"x": ' + "9" * 5000 + "}}</json>",
            "an integer with 5000 digits (at most 64 are accepted)",
        ),
        ('{"name": "calculate", "arguments": {"x": -' + "9" * 65 + "}}", "an integer with 65 digits"),
        ("<json>" + "[" * 5000 + "]" * 5000 + "</json>", "nested too deeply"),
        ('{"a":' * 5000, "nested too deeply"),
        ('{"name": "t", "arguments": ' + '{"a": ' * 40 + "1" + "}" * 40 + "}", "nested more than 32 levels deep"),
        ('<json>{"name": "t", "arguments": {"a": NaN}}</json>', "NaN is not a JSON value"),
        ('{"name": "t", "arguments": {"a": -Infinity}}', "-Infinity is not a JSON value"),
        ("<json>{}</json>" * 17, "more than 16 <json> tags"),
    ],
)
def test_hostile_numbers_and_nesting_are_format_errors(text: str, reason: str) -> None:
    with pytest.raises(ActionParseError) as caught:
        parse_action(text, [])
    assert reason in caught.value.reason


def test_deep_data_part_actions_are_format_errors() -> None:
    deep: dict[str, Any] = {"a": 1}
    for _ in range(40):
        deep = {"a": deep}
    with pytest.raises(ActionParseError) as caught:
        parse_action(None, [{"name": "t", "arguments": deep}])
    assert "nested more than 32 levels deep" in caught.value.reason


@pytest.mark.parametrize(
    "text",
    [
        '{"' * 200_000,
        '{"a": "' * 60_000,
        "<json>" * 60_000,
        '<json>{"' * 50_000,
        "```json\n" * 50_000,
        "<json>" + "</json>" * 60_000,
        "{a" * 200_000,
        '{"name": "t", "arguments": {"s": "' + "x" * 400_000 + '"}}' + " {" * 1000,
    ],
    ids=["open-quotes", "open-strings", "tags", "tags-quotes", "fences", "closers", "prose-braces", "big-then-braces"],
)
def test_parser_work_is_linear_in_the_reply(text: str) -> None:
    """400 KB hostile replies: a quadratic parser needs seconds to minutes; counted in decode calls, not seconds."""
    import green_agent.engine.turn_protocol as protocol

    calls = 0
    real = protocol._decoder.raw_decode

    def counting(doc: str, idx: int = 0) -> Any:
        nonlocal calls
        calls += 1
        return real(doc, idx)

    protocol._decoder.raw_decode = counting  # type: ignore[method-assign]
    try:
        with contextlib.suppress(ActionParseError):
            parse_action(text, [])
    finally:
        protocol._decoder.raw_decode = real  # type: ignore[method-assign]
    assert calls <= 2 * protocol.MAX_BLOCKS + 2


# ----------------------------------------------------------------------------------------------- round trip

_json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
_json_value = st.recursive(
    _json_leaf,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)
_tool_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True).filter(lambda n: n != "respond")


@st.composite
def actions(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    if draw(st.booleans()):
        extra = draw(st.dictionaries(st.text(max_size=8).filter(lambda k: k != "content"), _json_value, max_size=2))
        return "respond", {"content": draw(st.text(max_size=40)), **extra}
    return draw(_tool_names), draw(st.dictionaries(st.text(max_size=8), _json_value, max_size=4))


_prose = st.text(alphabet=st.characters(blacklist_characters="{}<>`", blacklist_categories=("Cs",)), max_size=30)
_TAG_LIKE = re.compile(r"<\s*/?\s*json\s*>", re.IGNORECASE)

FORMS = ["tag", "tag_fenced", "fenced_json", "fenced_plain", "bare", "bare_in_prose", "data"]


def render(
    form: str, name: str, arguments: dict[str, Any], *, key: str, as_string: bool, prose: str
) -> tuple[str | None, list[dict[str, Any]]]:
    args: Any = json.dumps(arguments) if as_string else arguments
    body = json.dumps({"name": name, key: args})
    if form == "tag":
        return f"{prose}<json>{body}</json>{prose}", []
    if form == "tag_fenced":
        return f"{prose}<json>\n```json\n{body}\n```\n</json>", []
    if form == "fenced_json":
        return f"{prose}\n```json\n{body}\n```\n{prose}", []
    if form == "fenced_plain":
        return f"{prose}\n```\n{body}\n```", []
    if form == "bare":
        return f"  {body}\n", []
    if form == "bare_in_prose":
        return f"{prose} {body} {prose}", []
    return prose or None, [{"name": name, key: args}]


EXPECTED_SOURCE = {
    "tag": "tag",
    "tag_fenced": "tag",
    "fenced_json": "fenced",
    "fenced_plain": "fenced",
    "bare": "bare",
    "bare_in_prose": "bare",
    "data": "data",
}


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    action=actions(),
    form=st.sampled_from(FORMS),
    key=st.sampled_from(["arguments", "kwargs"]),
    as_string=st.booleans(),
    prose=_prose,
)
def test_any_action_in_any_accepted_form_parses_back(
    action: tuple[str, dict[str, Any]], form: str, key: str, as_string: bool, prose: str
) -> None:
    name, arguments = action
    text, data = render(form, name, arguments, key=key, as_string=as_string, prose=prose)
    rendered = (text or "") + json.dumps(data)
    if form.startswith("fenced") or form == "bare_in_prose":
        # Delimiters of a higher-precedence form inside JSON strings would (rightly) be read as that form.
        assume(not _TAG_LIKE.search(rendered))
    if form == "bare_in_prose":
        assume("```" not in rendered)
    parsed = parse_action(text, data)
    assert parsed == Action(name=name, arguments=arguments, source=EXPECTED_SOURCE[form])


@settings(max_examples=300)
@given(text=st.text(max_size=200))
def test_arbitrary_text_parses_or_raises_action_parse_error(text: str) -> None:
    try:
        action = parse_action(text, [])
    except ActionParseError as error:
        assert error.reason
    else:
        assert action.name.strip()

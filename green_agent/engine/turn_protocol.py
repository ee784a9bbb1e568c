"""The turn protocol between the green agent and the white agent: what we send, and how we read the reply.

Why a pure module: the wording of the messages and the leniency of the reply parser decide which attempts count as
``format_error``. Keeping both free of I/O makes every accepted form and every rejection testable in isolation,
and lets the attempt loop treat "could not parse" as one precise, explained exception (:class:`ActionParseError`).

Green -> white, one A2A text message per turn:

* first turn: the domain policy, the tool schemas as JSON, :data:`REPLY_FORMAT`, then ``"User message: <text>"``
  (:func:`build_first_message`; :func:`build_first_data` gives the same content as a data part);
* later turns: ``"Tool call result:\\n<output verbatim>"`` (:func:`tool_result_message`) or
  ``"User message:\\n<text>"`` (:func:`user_message`).

In tool mode ``mcp`` the first message names the attempt's MCP endpoint instead of listing the schemas and uses
:data:`MCP_REPLY_FORMAT` (tools are called over MCP, replies are ``respond`` actions); its data part carries the
endpoint (``"mcp": {"url", "token", ...}``). Pass ``mcp=`` to :func:`build_first_message` and
:func:`build_first_data`. A ``<json>`` tool action is still accepted in that mode (it runs on the same environment).

White -> green: exactly one action per reply, ``{"name": <tool name> | "respond", "arguments": {...}}``
(``"kwargs"`` is a synonym of ``"arguments"``). :func:`parse_action` accepts, in this order of precedence:

1. ``data``   -- an A2A data part that is an action object (it has ``"name"`` and ``"arguments"`` or ``"kwargs"``);
   data parts win over the text (which is then not read) because they are unambiguous;
2. ``bare``   -- the whole text is one JSON object (whitespace around it allowed), whatever its strings contain;
3. ``tag``    -- ``<json>...</json>`` (tag name case-insensitive, whitespace allowed inside the tags, the content
   may itself be a fenced block; a ``</json>`` inside a JSON string does not end the tag);
4. ``fenced`` -- a Markdown fence `````json ... ````` or a plain ````` ... ````` fence holding an object (fences
   of code in other languages are ignored);
5. ``bare``   -- the only JSON object in the prose, or the only one that has a ``"name"`` key (other objects, e.g.
   quoted data, are ignored; an object that is broken JSON is reported, never skipped).

The same action repeated (twice in tags, in two data parts) is one action; two *different* actions in one reply
are ambiguous and rejected.

Argument rules: missing or ``null`` arguments of a tool call mean ``{}``; arguments given as a JSON-encoded string
(a habit of some LLMs) are decoded; ``"respond"`` requires ``{"content": <string>}``. Values are kept as given:
numbers from A2A data parts arrive as floats (protobuf ``Struct``); the environment's tool validation decides
whether ``3.0`` is acceptable where ``3`` is expected.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

RESPOND = "respond"
"""The action name whose ``arguments["content"]`` goes to the user instead of a tool."""

TOOL_RESULT_PREFIX = "Tool call result:"
USER_MESSAGE_PREFIX = "User message:"

REPLY_FORMAT = """\
Reply format: answer every message with exactly ONE action, written as a JSON object inside <json></json> tags:

<json>{"name": "<tool name>", "arguments": {<the tool's arguments>}}</json>

- To call a tool, use the tool's name and its arguments as described by its JSON schema above.
- To send a message to the user, use the name "respond" with the text in "content":
  <json>{"name": "respond", "arguments": {"content": "<your message to the user>"}}</json>
- "kwargs" is accepted as a synonym of "arguments".
- One action per reply. After a tool call you receive "Tool call result:" followed by the tool's output; after a
  "respond" you receive "User message:" followed by the user's answer."""
"""The reply-format instructions sent in the first message of every attempt."""

MCP_REPLY_FORMAT = """\
Tools: this conversation's tools are served over MCP (streamable HTTP) at the URL given above and in the "mcp"
object of this message's data part and metadata. Authenticate with its token ("Authorization: Bearer <token>").
Every call runs on this conversation's environment and is recorded. Call the tools there, as many as you need,
before you reply.

Reply format: answer every message with exactly ONE action for the user, written as a JSON object inside
<json></json> tags:

<json>{"name": "respond", "arguments": {"content": "<your message to the user>"}}</json>

After a "respond" you receive "User message:" followed by the user's answer."""
"""The reply-format instructions of tool mode ``mcp``: tools over MCP, replies are ``respond`` actions."""

ActionSource = Literal["tag", "fenced", "bare", "data"]


class Action(BaseModel):
    """One action of the white agent: a tool call, or ``respond`` with ``{"content": ...}`` for the user."""

    model_config = ConfigDict(frozen=True)

    name: str
    arguments: dict[str, Any]
    source: ActionSource

    @property
    def is_respond(self) -> bool:
        """True when the action is a message to the user rather than a tool call."""
        return self.name == RESPOND

    @property
    def content(self) -> str | None:
        """The text for the user of a ``respond`` action (None for tool calls)."""
        return self.arguments.get("content") if self.is_respond else None


class ActionParseError(ValueError):
    """The reply is not exactly one well-formed action; ``reason`` says precisely why (for the failure detail)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# --------------------------------------------------------------------------------------------------------------
# Green -> white


def _tool_names(tools: list[dict[str, Any]]) -> list[str]:
    names = []
    for tool in tools:
        function = tool.get("function", tool)
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.append(function["name"])
    return names


def build_first_message(
    policy: str, tools: list[dict[str, Any]], user_text: str, *, mcp: Mapping[str, Any] | None = None
) -> str:
    """The first message of an attempt: policy, tools, reply format, then the user's first words.

    Text mode lists the tool schemas as JSON; with ``mcp`` (the attempt's endpoint description, tool mode "mcp")
    it names the endpoint and the tools, and explains that tools are called over MCP and replies are ``respond``.
    """
    if mcp is None:
        tools_part = f"Tools you can call (JSON schemas):\n{json.dumps(tools, indent=2, ensure_ascii=False)}"
        reply_format = REPLY_FORMAT
    else:
        tools_part = (
            f"Tools you can call over MCP at {mcp.get('url', '(see the data part)')}: {', '.join(_tool_names(tools))}"
        )
        reply_format = MCP_REPLY_FORMAT
    return f"{policy.strip()}\n\n{tools_part}\n\n{reply_format}\n\n{USER_MESSAGE_PREFIX} {user_text}"


def build_first_data(
    policy: str, tools: list[dict[str, Any]], *, mcp: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The first message's structured twin, sent as an A2A data part so agents need not re-parse the text.

    With ``mcp`` (tool mode "mcp") it also carries the endpoint under ``"mcp"`` and the MCP reply format; the tool
    schemas stay, so agents that want them need not list them over MCP.
    """
    if mcp is None:
        return {"policy": policy, "tools": tools, "reply_format": REPLY_FORMAT}
    return {"policy": policy, "tools": tools, "reply_format": MCP_REPLY_FORMAT, "mcp": dict(mcp)}


def tool_result_message(output: str) -> str:
    """A tool's output, verbatim, for the white agent."""
    return f"{TOOL_RESULT_PREFIX}\n{output}"


def user_message(text: str) -> str:
    """The simulated user's words for the white agent."""
    return f"{USER_MESSAGE_PREFIX}\n{text}"


# --------------------------------------------------------------------------------------------------------------
# White -> green

_TAG_OPEN = re.compile(r"<\s*json\s*>", re.IGNORECASE)
_TAG_CLOSE = re.compile(r"<\s*/\s*json\s*>", re.IGNORECASE)
_FENCE_OPEN = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[ \t]*\r?\n?")
_FENCE_CLOSE = re.compile(r"```")
_JSON_FENCE_LANGS = frozenset({"json", "json5", "jsonc"})
_WHITESPACE = re.compile(r"\s*")
_OBJECT_START = re.compile(r"\{\s*[\"}]")

MAX_BLOCKS = 16
"""At most this many <json> tags or fenced blocks are read per reply; more is a format error (bounds the work)."""
MAX_INT_DIGITS = 64
"""Integers in an action may have at most this many digits (no tau2 tool takes more)."""
MAX_ACTION_DEPTH = 32
"""Deepest nesting of objects/arrays accepted in an action."""


class _Unreadable(ValueError):
    """A JSON value the parser refuses to build (an integer too long, NaN/Infinity)."""


def _bounded_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise _Unreadable(f"an integer with {len(digits.lstrip('-'))} digits (at most {MAX_INT_DIGITS} are accepted)")
    return int(digits)


def _no_constant(name: str) -> Any:
    raise _Unreadable(f"{name} is not a JSON value")


_decoder = json.JSONDecoder(parse_int=_bounded_int, parse_constant=_no_constant)


def _location(doc: str, base: int, position: int) -> tuple[int, int]:
    """1-based line and column of ``position`` counted from ``base`` (the start of the block being decoded)."""
    line = doc.count("\n", base, position) + 1
    column = position - (max(doc.rfind("\n", base, position), base - 1) + 1) + 1
    return line, column


def _decode_at(text: str, position: int, where: str) -> tuple[Any, int]:
    """One JSON value starting exactly at ``position``: (value, end). ActionParseError saying why not.

    Linear in the length of the value; integers, constants and nesting are bounded (the module docstring).
    """
    try:
        value, end = _decoder.raw_decode(text, position)
    except _Unreadable as error:
        raise ActionParseError(f"invalid JSON {where}: {error}") from None
    except json.JSONDecodeError as error:
        line, column = _location(text, position, error.pos)
        raise ActionParseError(f"invalid JSON {where}: {error.msg} at line {line} column {column}") from None
    except RecursionError:
        raise ActionParseError(f"invalid JSON {where}: nested too deeply") from None
    _check_depth(value, where)
    return value, end


def _check_depth(value: Any, where: str) -> None:
    """Refuse actions nested deeper than :data:`MAX_ACTION_DEPTH` (iterative: no recursion on hostile input)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > MAX_ACTION_DEPTH:
                raise ActionParseError(f"invalid JSON {where}: nested more than {MAX_ACTION_DEPTH} levels deep")
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)


def _loads(text: str, where: str) -> Any:
    """The whole of ``text`` (surrounding whitespace allowed) as one bounded JSON value."""
    start = _WHITESPACE.match(text, 0).end()  # type: ignore[union-attr]
    value, end = _decode_at(text, start, where)
    rest = _WHITESPACE.match(text, end).end()  # type: ignore[union-attr]
    if rest != len(text):
        line, column = _location(text, start, rest)
        raise ActionParseError(f"invalid JSON {where}: Extra data at line {line} column {column}")
    return value


def _block_value(text: str, start: int, closer: re.Pattern[str], *, inner_fence: bool, where: str) -> tuple[Any, int]:
    """The JSON value of a block whose content starts at ``start``: (value, end of the closing delimiter).

    The value is decoded where it starts, so a closing delimiter inside a JSON string cannot cut it short; after it
    only whitespace (and, in a tag, the end of an inner fence) may come before the closing delimiter.
    """
    position = _WHITESPACE.match(text, start).end()  # type: ignore[union-attr]
    fenced = False
    if inner_fence:
        fence = _FENCE_OPEN.match(text, position)
        if fence is not None:
            fenced = True
            position = _WHITESPACE.match(text, fence.end()).end()  # type: ignore[union-attr]
    value, end = _decode_at(text, position, where)
    after = _WHITESPACE.match(text, end).end()  # type: ignore[union-attr]
    if fenced and text.startswith("```", after):
        after = _WHITESPACE.match(text, after + 3).end()  # type: ignore[union-attr]
    closing = closer.match(text, after)
    if closing is None:
        line, column = _location(text, position, after)
        raise ActionParseError(f"invalid JSON {where}: Extra data at line {line} column {column}")
    return value, closing.end()


def _delimited_json(
    text: str, opener: re.Pattern[str], closer: re.Pattern[str], *, kind: Literal["tag", "fenced"]
) -> tuple[list[Any], str | None]:
    """JSON values between delimiters (tags or fences), and the decode error of the first broken block.

    Each block's value is decoded from where it starts (see :func:`_block_value`), so the work is linear in the
    reply and at most :data:`MAX_BLOCKS` blocks are read. A block that is not valid JSON is reported by the error
    (the first such block). Fences in another language, and plain fences that do not hold an object, are not
    actions and are skipped; unclosed blocks are left to the bare scan.
    """
    values: list[Any] = []
    first_error: str | None = None
    position = 0
    index = 0
    while (opening := opener.search(text, position)) is not None:
        first_closing = closer.search(text, opening.end())
        if first_closing is None:
            break
        index += 1
        if index > MAX_BLOCKS:
            raise ActionParseError(
                f"the reply has more than {MAX_BLOCKS} {'<json> tags' if kind == 'tag' else 'fenced blocks'}"
            )
        position = first_closing.end()
        language = opening.group(1).lower() if kind == "fenced" else ""
        if language and language not in _JSON_FENCE_LANGS:
            continue
        where = f"inside <json> tag #{index}" if kind == "tag" else f"in fenced block #{index}"
        if kind == "fenced" and not language:
            content_start = _WHITESPACE.match(text, opening.end()).end()  # type: ignore[union-attr]
            if not text.startswith("{", content_start):
                continue
        try:
            value, position = _block_value(text, opening.end(), closer, inner_fence=kind == "tag", where=where)
        except ActionParseError as error:
            first_error = first_error or error.reason
            continue
        values.append(value)
    return values, first_error


def _scan_objects(text: str) -> list[dict[str, Any]]:
    """Top-level JSON objects embedded in prose; ActionParseError for the first broken one.

    Only braces that open an object (``{"`` or ``{}``, whitespace allowed) are decoded, so prose braces cost
    nothing, and the first object that fails to decode ends the scan (it is reported): the scan stays linear.
    """
    objects: list[dict[str, Any]] = []
    position = text.find("{")
    while position != -1:
        if not _OBJECT_START.match(text, position):
            position = text.find("{", position + 1)
            continue
        try:
            value, end = _decoder.raw_decode(text, position)
        except json.JSONDecodeError as error:
            line, column = _location(text, 0, position)
            inner_line, inner_column = _location(text, position, error.pos)
            raise ActionParseError(
                f"invalid JSON in the object starting at line {line} column {column} of the reply: "
                f"{error.msg} at line {inner_line} column {inner_column}"
            ) from None
        except _Unreadable as error:
            raise ActionParseError(f"invalid JSON in the reply: {error}") from None
        except RecursionError:
            raise ActionParseError("invalid JSON in the reply: nested too deeply") from None
        _check_depth(value, "in the reply")
        objects.append(value)
        position = text.find("{", end)
    return objects


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _to_action(value: Any, source: ActionSource) -> Action:
    """Validate one decoded JSON value as an action (the rules in the module docstring)."""
    if not isinstance(value, dict):
        raise ActionParseError(f"the action must be a JSON object, got {_type_name(value)}")
    if "name" not in value:
        raise ActionParseError('the action object has no "name"')
    name = value["name"]
    if not isinstance(name, str):
        raise ActionParseError(f'"name" must be a string, got {_type_name(name)}')
    if not name.strip():
        raise ActionParseError('"name" is empty')

    has_arguments, has_kwargs = "arguments" in value, "kwargs" in value
    if has_arguments and has_kwargs and value["arguments"] != value["kwargs"]:
        raise ActionParseError('both "arguments" and "kwargs" are given, with different values')
    key = "kwargs" if has_kwargs and not has_arguments else "arguments"
    present = has_arguments or has_kwargs
    arguments = value.get(key)
    if isinstance(arguments, str):
        if not arguments.strip():
            arguments = None
        else:
            arguments = _loads(arguments, f'in the string value of "{key}"')
            if not isinstance(arguments, dict):
                raise ActionParseError(
                    f'"{key}" is a string holding JSON {_type_name(arguments)}, expected a JSON object'
                )
    if arguments is None:
        if name == RESPOND:
            missing = "is null" if present else "is missing"
            raise ActionParseError(f'"respond" needs "arguments": {{"content": <string>}}, but "{key}" {missing}')
        arguments = {}
    if not isinstance(arguments, dict):
        raise ActionParseError(f'"{key}" must be a JSON object, got {_type_name(arguments)}')
    if name == RESPOND:
        if "content" not in arguments:
            raise ActionParseError('"respond" needs "arguments": {"content": <string>}; "content" is missing')
        if not isinstance(arguments["content"], str):
            raise ActionParseError(f'"respond" content must be a string, got {_type_name(arguments["content"])}')
    return Action(name=name, arguments=arguments, source=source)


def _single(actions: list[Action], where: str) -> Action:
    """One action out of several identical ones; different ones are ambiguous."""
    first = actions[0]
    for other in actions[1:]:
        if (other.name, other.arguments) != (first.name, first.arguments):
            raise ActionParseError(
                f"several different actions {where} ({first.name!r} and {other.name!r}); send exactly one per reply"
            )
    return first


def _is_data_action(part: Any) -> bool:
    return isinstance(part, dict) and "name" in part and ("arguments" in part or "kwargs" in part)


def parse_action(text: str | None, data_parts: list[dict[str, Any]]) -> Action:
    """Read the one action of a white-agent reply, or raise :class:`ActionParseError` saying precisely why not.

    ``data_parts`` are the reply's A2A data parts; when one of them is an action object it wins and the text is
    not read at all.
    """
    candidates = [part for part in data_parts if _is_data_action(part)]
    for part in candidates:  # numbers arrive as doubles (no long integers), but nesting is the agent's choice
        _check_depth(part, "in a data part")
    data_actions = [_to_action(part, "data") for part in candidates]
    if data_actions:
        return _single(data_actions, "in the data parts")
    text = text or ""
    if not text.strip():
        if data_parts:
            raise ActionParseError(
                'the reply has no text and its data parts hold no action (an object with "name" and "arguments")'
            )
        raise ActionParseError("the reply is empty")
    return _parse_text(text)


def _parse_text(text: str) -> Action:
    # The whole reply being one JSON value is unambiguous, whatever its strings contain (tags, fences).
    try:
        whole = _loads(text, "in the reply")
    except ActionParseError:
        pass  # not one JSON value: read the other forms (which report their own errors)
    else:
        if not isinstance(whole, dict):
            raise ActionParseError(f"the reply is JSON {_type_name(whole)}, expected an action object")
        return _to_action(whole, "bare")

    tag_values, tag_error = _delimited_json(text, _TAG_OPEN, _TAG_CLOSE, kind="tag")
    if tag_error is not None:
        raise ActionParseError(tag_error)
    if tag_values:
        return _single([_to_action(v, "tag") for v in tag_values], "in <json> tags")

    fence_values, fence_error = _delimited_json(text, _FENCE_OPEN, _FENCE_CLOSE, kind="fenced")
    if fence_error is not None:
        raise ActionParseError(fence_error)
    if fence_values:
        return _single([_to_action(v, "fenced") for v in fence_values], "in fenced blocks")

    objects = _scan_objects(text)
    named = [o for o in objects if "name" in o]
    if named:
        return _single([_to_action(o, "bare") for o in named], "in the reply")
    if len(objects) == 1:
        return _to_action(objects[0], "bare")
    if objects:
        raise ActionParseError(f'the reply holds {len(objects)} JSON objects and none of them has a "name"')
    raise ActionParseError(
        "no JSON action found in the reply (expected <json>{...}</json>, a ```json block or a bare JSON object)"
    )

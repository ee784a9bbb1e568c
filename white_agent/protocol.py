"""The harness turn protocol as the white agent sees it: reading the green agent's messages, writing actions.

Why a module of its own: all three reference agents read the same three kinds of green-agent message and answer with
the same action syntax, and the tests need one place that states the contract.

Green -> white (one A2A user Message per turn, a fresh context id per attempt):

* first message: text = policy + tools as JSON + reply format + ``"User message: <text>"``, plus a data part
  ``{"tools": [...], "policy": str, "reply_format": str}``; in calibration battles the message metadata and the data
  part also carry ``"arena": {"battle_id", "domain", "split", "task_index", "task_id", "attempt", "calibration"}``;
* later: ``"Tool call result:\\n<tool output>"`` or ``"User message:\\n<user text>"``.

The two public green agents send one text part and no data part, so everything is read from the text:

* the seed: first ``"\\n<wiki>\\nHere's a list of tools you can use (you can use at most one tool at a time):\\n"``
  + ``json.dumps(env.tools_info, indent=2)`` (OpenAI ``{"type": "function", "function": {...}}`` entries) + its reply
  format + ``"User message: <observation>\\n    "``; later ``"\\nTool call result:\\n<observation>\\n"`` and
  ``"\\nUser message:\\n<observation>\\n"`` (each followed by 12 spaces), i.e. Arena's labels;
* tau2-bench: the same layout with ``json.dumps([tool.openai_schema ...], indent=2)``, a reply format holding two
  example ``<json>`` objects, and ``"User message: " + json.dumps("user: <text>")``; later turns are its gym
  observation verbatim, one ``"<role>: <content>"`` line per message since the agent's last action
  (``TauGymEnv._format_observation``): ``"tool: <output>"`` after a tool call, ``"user: <text>"`` after a respond,
  lower case, at position 0 (``"Invalid action with error: ..."`` when its own parsing failed: an "other" turn).

:func:`parse_green_message` therefore recovers the tools of a first message without data-part tools from its text
(:func:`find_tools_in_text`: the first JSON array of tool schemas before the user message, bounded work), takes the
text before that array as the policy and the text after it as the reply format, unwraps tau2's JSON-quoted
``"user: ..."`` first observation, and reads ``"tool: "`` / ``"user: "`` turns as tool results / user turns (after
Arena's own labels, and only without a data part: a first message of any of the three starts otherwise).

White -> green: exactly one action per reply, written as
``<json>{"name": ..., "arguments": {...}, "kwargs": {...}}</json>`` with the same object under both keys
(:func:`format_action`); ``"respond"`` carries ``{"content": ...}`` for the user. Every ``"</"`` inside the JSON is
written ``"<\\/"`` (the same JSON value): both public green agents find the tag with the regex ``<(.*?)>(.*?)</\\1>``,
so a ``</json>`` in any string would end it early. Both keys, because the public green
agents disagree and each ignores the key it does not read: the seed (the tau-bench green agent of AgentBeats'
tau-bench-agents / agentify-example-tau-bench) validates the action as tau-bench's ``Action(name, kwargs)`` and
rejects a reply without ``"kwargs"``; tau2-bench's A2A green agent (``src/experiments/agentify_tau_bench``) reads
``"arguments"`` (tau2's ``ToolCall``; a tool call without it reaches the user as plain text). Arena's own green agent
accepts either, and both when they are equal. Both public green agents also read only A2A Messages with exactly one
text part, never Tasks (tests/interop/green_parsers.py re-implements their parsers; the sources it follows are named
there).

Tool mode "mcp": the first message's metadata and data part also carry ``"mcp": {"url", "token", "transport":
"streamable-http", "auth": "bearer"}``, the attempt's own MCP endpoint. The agent calls the tools there (bearer token
in the Authorization header; :class:`white_agent.mcp_client.McpConnector`) between A2A turns and replies to the
green agent only with ``respond`` actions.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal, NamedTuple

from a2a.helpers import get_message_text
from a2a.types.a2a_pb2 import Message
from google.protobuf.json_format import MessageToDict
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from white_agent.mcp_client import McpConnector as McpConnector  # re-exported: the MCP client lived here
from white_agent.mcp_client import McpToolsError as McpToolsError
from white_agent.mcp_client import describe_mcp_error as describe_mcp_error
from white_agent.mcp_client import openai_tools_from_mcp as openai_tools_from_mcp
from white_agent.mcp_client import tool_result_text as tool_result_text
from white_agent.proto_values import data_part_values

RESPOND = "respond"
"""The action name that sends ``arguments["content"]`` to the user instead of calling a tool."""

TOOL_RESULT_PREFIX = "Tool call result:"
USER_MESSAGE_PREFIX = "User message:"
TAU2_TOOL_PREFIX = "tool: "
"""tau2-bench's green agent: a tool result is its observation line ``"tool: <output>"`` (module docstring)."""
TAU2_USER_PREFIX = "user: "
"""tau2-bench's green agent: a user turn is ``"user: <text>"``, its first observation the same, JSON-quoted."""

MAX_TOOLS_JSON_CHARS = 262_144
"""The longest tool list read from a first message's text (tau2's retail list is ~16 KB at indent 2)."""
MAX_TOOL_LIST_CANDIDATES = 16
"""How many ``[{`` positions of a first message's text are decoded before giving up (bounds the work)."""
MAX_TOOLS_IN_TEXT = 256
"""The most tools accepted from a first message's text."""
MAX_TOOL_SCHEMA_DEPTH = 32
"""The deepest nesting accepted in a tool list read from text (tau2's schemas nest about 8 levels)."""

TurnKind = Literal["first", "tool_result", "user", "other"]


class ArenaInfo(BaseModel):
    """Which attempt of which tau2 task this conversation is (sent only in calibration battles).

    Numbers arrive as floats because A2A data parts and metadata are protobuf Structs; the validators turn
    integral floats back into ints/strings so ``task_id`` 5.0 and "5" name the same task.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    battle_id: str | None = None
    domain: str
    split: str | None = None
    task_index: int | None = None
    task_id: str
    attempt: int = Field(default=1, ge=1)
    calibration: bool = False

    @field_validator("task_id", "battle_id", mode="before")
    @classmethod
    def _integral_float_to_str(cls, value: Any) -> Any:
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        return value

    @field_validator("split", mode="before")
    @classmethod
    def _empty_split_is_none(cls, value: Any) -> Any:
        return None if value == "" else value


class McpEndpointInfo(BaseModel):
    """Where this attempt's tools are served over MCP (tool mode "mcp") and the bearer token for them."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    url: str
    token: str = Field(repr=False)
    transport: str = "streamable-http"
    auth: str = "bearer"


class GreenTurn(BaseModel):
    """One green-agent message, classified.

    ``content`` is what the agent should react to: the user's text (first and user turns), the tool output
    verbatim (tool-result turns) or the whole text (anything else).
    """

    model_config = ConfigDict(frozen=True)

    kind: TurnKind
    text: str
    content: str
    tools: list[dict[str, Any]] | None = None
    policy: str | None = None
    reply_format: str | None = None
    arena: ArenaInfo | None = None
    arena_error: str | None = None
    """Set when an ``arena`` block was present but invalid (the reason, for the agent's reply)."""
    mcp: McpEndpointInfo | None = None
    """The attempt's MCP tool endpoint, in tool mode "mcp" (first message only)."""


def _strip_label(text: str, label: str) -> str:
    """Drop ``label`` and the separator after it (one newline or spaces), keep everything else verbatim."""
    rest = text[len(label) :]
    if rest.startswith("\r\n"):
        return rest[2:]
    if rest.startswith("\n"):
        return rest[1:]
    return rest.lstrip(" ")


def _first_data(message: Message) -> dict[str, Any]:
    """The merged dict of the message's data parts (later parts win), ignoring non-object parts."""
    merged: dict[str, Any] = {}
    for data in data_part_values(message.parts):
        if isinstance(data, dict):
            merged.update(data)
    return merged


def _read_arena(candidates: list[Any]) -> tuple[ArenaInfo | None, str | None]:
    """The first ``arena`` block among ``candidates`` that validates; otherwise the last validation problem."""
    problem: str | None = None
    for candidate in candidates:
        if not isinstance(candidate, dict):
            continue
        try:
            return ArenaInfo.model_validate(candidate), None
        except ValidationError as error:
            problem = "; ".join(
                f"arena.{'.'.join(str(p) for p in item['loc'])}: {item['msg']}" for item in error.errors()
            )
    return None, problem


def _read_mcp(candidates: list[Any]) -> McpEndpointInfo | None:
    """The first valid ``mcp`` block among ``candidates`` (message metadata, data part, request metadata)."""
    for candidate in candidates:
        if isinstance(candidate, dict):
            try:
                return McpEndpointInfo.model_validate(candidate)
            except ValidationError:
                continue
    return None


class TextTools(NamedTuple):
    """A tool list found in a message's text, and where its JSON array starts and ends."""

    tools: list[dict[str, Any]]
    start: int
    end: int


def _reject_constant(name: str) -> Any:
    """NaN and Infinity are not JSON: a tool list holding one would break the model request."""
    raise ValueError(f"{name} is not a JSON value")


_TOOLS_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_TOOL_LIST_START = re.compile(r"\[\s*\{")


def _nested_within(value: Any, limit: int) -> bool:
    """True when ``value`` nests at most ``limit`` containers deep (iterative: hostile input cannot recurse)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return False
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return True


def _looks_like_tool_schema(item: Any) -> bool:
    """An OpenAI function schema (wrapped or bare) with a name and a description or parameters object.

    Stricter than :func:`normalize_tool_schema` because the text is prose around JSON: an array such as
    ``[{"name": "x", "arguments": {}}]`` (an example action) must not become a tool.
    """
    if not isinstance(item, dict) or normalize_tool_schema(item) is None:
        return False
    function = item["function"] if isinstance(item.get("function"), dict) else item
    name, parameters = function.get("name"), function.get("parameters")
    return (
        isinstance(name, str)
        and bool(name.strip())
        and (parameters is None or isinstance(parameters, dict))
        and (isinstance(parameters, dict) or isinstance(function.get("description"), str))
    )


def _tool_list(value: Any) -> list[dict[str, Any]] | None:
    """``value`` when it is a non-empty, bounded list of tool schemas; otherwise None."""
    if not isinstance(value, list) or not 0 < len(value) <= MAX_TOOLS_IN_TEXT:
        return None
    if not all(_looks_like_tool_schema(item) for item in value):
        return None
    return value if _nested_within(value, MAX_TOOL_SCHEMA_DEPTH) else None


def find_tools_in_text(text: str, end: int | None = None) -> TextTools | None:
    """The first JSON array of tool schemas in ``text[:end]``, for green agents that send tools only as text.

    Both public green agents embed ``json.dumps(tools, indent=2)`` in the first message's prose (module docstring).
    The text is another party's input, so the work is bounded: only positions where ``[`` is followed by ``{`` are
    tried, at most :data:`MAX_TOOL_LIST_CANDIDATES` of them, each decoded from a window of
    :data:`MAX_TOOLS_JSON_CHARS` (a longer list is not found); an array that decodes but is not a tool list is
    skipped whole, so arrays nested in it are not tried; decode errors, deep nesting and huge integers only reject
    the candidate.
    """
    limit = len(text) if end is None else min(end, len(text))
    position = 0
    for _ in range(MAX_TOOL_LIST_CANDIDATES):
        match = _TOOL_LIST_START.search(text, position, limit)
        if match is None:
            return None
        start = match.start()
        try:
            value, length = _TOOLS_DECODER.raw_decode(text[start : min(start + MAX_TOOLS_JSON_CHARS, limit)])
        except (ValueError, RecursionError):  # JSONDecodeError, int digits limit, constants; deep nesting
            position = start + 1
            continue
        tools = _tool_list(value)
        if tools is not None:
            return TextTools(tools, start, start + length)
        position = start + length
    return None


def _unquote_tau2_user(content: str) -> str:
    """tau2's first observation is ``json.dumps("user: <text>")``: give back ``<text>``; other content verbatim."""
    candidate = content.strip()
    if not candidate.startswith('"'):
        return content
    try:
        decoded = json.loads(candidate)
    except ValueError:
        return content
    if isinstance(decoded, str) and decoded.startswith(TAU2_USER_PREFIX):
        return decoded[len(TAU2_USER_PREFIX) :]
    return content


def _later_turn(text: str, *, has_data: bool) -> tuple[TurnKind, str] | None:
    """A tool-result or user turn (Arena's and the seed's labels, then tau2's observation lines); None otherwise.

    ``has_data``: the message carries Arena's first-message data part (policy or tools), so it cannot be a user turn.
    tau2's prefixes are matched at position 0 only: its observation starts there, while every first message of the
    three green agents starts with the policy (the public ones with a newline) and Arena's carries the data part.
    """
    stripped = text.lstrip()
    if stripped.startswith(TOOL_RESULT_PREFIX):
        return "tool_result", _strip_label(stripped, TOOL_RESULT_PREFIX)
    if has_data:
        return None
    if stripped.startswith(USER_MESSAGE_PREFIX):
        return "user", _strip_label(stripped, USER_MESSAGE_PREFIX)
    if text.startswith(TAU2_TOOL_PREFIX):
        return "tool_result", text[len(TAU2_TOOL_PREFIX) :]
    if text.startswith(TAU2_USER_PREFIX):
        return "user", text[len(TAU2_USER_PREFIX) :]
    return None


class _FirstTurn(NamedTuple):
    content: str
    tools: list[dict[str, Any]] | None
    policy: str | None
    reply_format: str | None


def _read_first(
    text: str, tools: list[dict[str, Any]] | None, policy: str | None, reply_format: str | None
) -> _FirstTurn:
    """The first message: the user's text after the last "User message:"; what the data part lacks, from the text.

    Tools found in the text split it: before them the policy, after them (up to the user message) the reply format,
    so a model given the tools natively is not also told to write them as ``<json>`` text.
    """
    cut = text.rfind(USER_MESSAGE_PREFIX)
    content = _unquote_tau2_user(_strip_label(text[cut:], USER_MESSAGE_PREFIX)) if cut >= 0 else ""
    end = cut if cut >= 0 else len(text)
    found = find_tools_in_text(text, end) if tools is None else None
    if found is not None:
        tools = found.tools
        policy = policy if policy is not None else text[: found.start].strip()
        reply_format = reply_format if reply_format is not None else (text[found.end : end].strip() or None)
    elif policy is None and cut > 0:
        policy = text[:cut].strip()
    return _FirstTurn(content, tools, policy, reply_format)


def parse_green_message(message: Message, request_metadata: dict[str, Any] | None = None) -> GreenTurn:
    """Classify a green-agent message and pull out what the agents need.

    ``request_metadata`` is the SendMessage request's own metadata; the arena block is looked for in the message
    metadata, then the data part, then the request metadata (the contract puts it in the first two). Tools and
    policy come from Arena's data part, else from the first message's text (the public green agents send no data
    part; module docstring).
    """
    text = get_message_text(message)
    data = _first_data(message)
    message_metadata = MessageToDict(message.metadata)
    arena, arena_error = _read_arena(
        [message_metadata.get("arena"), data.get("arena"), (request_metadata or {}).get("arena")]
    )

    mcp = _read_mcp([message_metadata.get("mcp"), data.get("mcp"), (request_metadata or {}).get("mcp")])

    tools_raw = data.get("tools")
    tools = [t for t in tools_raw if isinstance(t, dict)] if isinstance(tools_raw, list) else None
    policy = data.get("policy") if isinstance(data.get("policy"), str) else None
    reply_format = data.get("reply_format") if isinstance(data.get("reply_format"), str) else None

    kind: TurnKind
    later = _later_turn(text, has_data=tools is not None or policy is not None)
    if later is not None:
        kind, content = later
    elif tools is not None or policy is not None or USER_MESSAGE_PREFIX in text:
        kind = "first"
        content, tools, policy, reply_format = _read_first(text, tools, policy, reply_format)
    else:
        kind, content = "other", text
    return GreenTurn(
        kind=kind,
        text=text,
        content=content,
        tools=tools,
        policy=policy,
        reply_format=reply_format,
        arena=arena,
        arena_error=arena_error,
        mcp=mcp,
    )


def format_action(name: str, arguments: dict[str, Any]) -> str:
    """One action in the tag form every green agent of the harness accepts: ``arguments`` under both keys.

    ``"arguments"`` is what tau2-bench's green agent and Arena read, ``"kwargs"`` what the seed requires (module
    docstring); each reader ignores the other key, and Arena accepts both because they are equal.
    """
    action = {"name": name, "arguments": arguments, "kwargs": arguments}
    return "<json>" + _escape_closing_tags(json.dumps(action, ensure_ascii=False)) + "</json>"


def _escape_closing_tags(json_text: str) -> str:
    """``"</"`` written ``"<\\/"``: both public green agents end the tag at the first ``</json>``, even in a string.

    Safe on serialized JSON: ``<`` occurs only inside strings, where ``\\/`` is the standard escape of ``/``, so
    ``json.loads`` gives back the same value (Arena's parser included: it decodes the JSON where the tag opens).
    """
    return json_text.replace("</", "<\\/")


def format_respond(content: str) -> str:
    """A ``respond`` action: ``content`` goes to the user."""
    return format_action(RESPOND, {"content": content})


def normalize_tool_schema(tool: dict[str, Any]) -> dict[str, Any] | None:
    """An OpenAI ``tools`` entry from either ``{"type": "function", "function": {...}}`` or a bare function schema."""
    if isinstance(tool.get("function"), dict) and tool["function"].get("name"):
        return {"type": "function", "function": tool["function"]}
    if isinstance(tool.get("name"), str):
        return {"type": "function", "function": tool}
    return None

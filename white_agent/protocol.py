"""The harness turn protocol as the white agent sees it: reading the green agent's messages, writing actions.

Why a module of its own: all three reference agents read the same three kinds of green-agent message and answer with
the same action syntax, and the tests need one place that states the contract.

Green -> white (one A2A user Message per turn, a fresh context id per attempt):

* first message: text = policy + tools as JSON + reply format + ``"User message: <text>"``, plus a data part
  ``{"tools": [...], "policy": str, "reply_format": str}``; in calibration battles the message metadata and the data
  part also carry ``"arena": {"battle_id", "domain", "split", "task_index", "task_id", "attempt", "calibration"}``;
* later: ``"Tool call result:\\n<tool output>"`` or ``"User message:\\n<user text>"``.

White -> green: exactly one action per reply, written as ``<json>{"name": ..., "arguments": {...}}</json>``;
``"respond"`` carries ``{"content": ...}`` for the user.

Tool mode "mcp": the first message's metadata and data part also carry ``"mcp": {"url", "token", "transport":
"streamable-http", "auth": "bearer"}``, the attempt's own MCP endpoint. The agent calls the tools there (bearer token
in the Authorization header; :class:`McpConnector`) between A2A turns and replies to the green agent only with
``respond`` actions.
"""

from __future__ import annotations

import contextlib
import json
import ssl
from collections.abc import AsyncIterator
from typing import Any, Literal

import httpx2
import mcp_types
from a2a.helpers import get_data_parts, get_message_text
from a2a.types.a2a_pb2 import Message
from google.protobuf.json_format import MessageToDict
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

RESPOND = "respond"
"""The action name that sends ``arguments["content"]`` to the user instead of calling a tool."""

TOOL_RESULT_PREFIX = "Tool call result:"
USER_MESSAGE_PREFIX = "User message:"

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
    for data in get_data_parts(message.parts):
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


def parse_green_message(message: Message, request_metadata: dict[str, Any] | None = None) -> GreenTurn:
    """Classify a green-agent message and pull out what the agents need.

    ``request_metadata`` is the SendMessage request's own metadata; the arena block is looked for in the message
    metadata, then the data part, then the request metadata (the contract puts it in the first two).
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

    stripped = text.lstrip()
    kind: TurnKind
    if stripped.startswith(TOOL_RESULT_PREFIX):
        kind, content = "tool_result", _strip_label(stripped, TOOL_RESULT_PREFIX)
    elif stripped.startswith(USER_MESSAGE_PREFIX) and tools is None and policy is None:
        kind, content = "user", _strip_label(stripped, USER_MESSAGE_PREFIX)
    elif tools is not None or policy is not None or USER_MESSAGE_PREFIX in text:
        # The first message: everything before the last "User message:" is policy, tools and reply format.
        kind = "first"
        cut = text.rfind(USER_MESSAGE_PREFIX)
        content = _strip_label(text[cut:], USER_MESSAGE_PREFIX) if cut >= 0 else ""
        if policy is None and cut > 0:
            policy = text[:cut].strip()
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
    """One action in the tag form every green agent of the harness accepts."""
    return "<json>" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "</json>"


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


# --------------------------------------------------------------------------------------------------------------
# Tool mode "mcp": the attempt's tools over MCP


class McpToolsError(RuntimeError):
    """The attempt's MCP endpoint could not be reached or refused us (the agent reports it as its own failure)."""


class McpConnector:
    """Opens MCP client sessions on attempt endpoints, authenticated with each endpoint's bearer token.

    One session per A2A turn: a2a-sdk runs each turn in its own task and mcp's client holds a task group, which must
    be left in the task that entered it. What can be shared is shared: the TLS context (building one costs ~40-80 ms,
    more than a whole turn of tool calls on loopback) is created once per connector, on first use.
    """

    def __init__(self, *, timeout_s: float = 60.0) -> None:
        self._timeout_s = timeout_s
        self._tls: ssl.SSLContext | None = None

    @contextlib.asynccontextmanager
    async def open(self, info: McpEndpointInfo) -> AsyncIterator[Client]:
        """A connected client; connection and handshake failures raise :class:`McpToolsError`."""
        if self._tls is None:
            self._tls = httpx2.create_ssl_context()
        headers = {"Authorization": f"Bearer {info.token}"}
        async with contextlib.AsyncExitStack() as stack:
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(self._timeout_s), verify=self._tls)
            )
            try:
                client = await stack.enter_async_context(
                    Client(streamable_http_client(info.url, http_client=http), cache=None)
                )
            except Exception as error:  # transport, HTTP and protocol errors all mean "no tools"
                raise McpToolsError(f"cannot open the MCP tool endpoint: {describe_mcp_error(error)}") from error
            yield client


def describe_mcp_error(error: BaseException) -> str:
    """Class and message of the innermost error (task groups wrap transport errors in exception groups)."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    text = str(error).replace("\n", " ")[:200]
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def tool_result_text(result: mcp_types.CallToolResult) -> str:
    """A tool result as the text a model reads: the text blocks joined, else the structured content as JSON."""
    texts = [block.text for block in result.content if isinstance(block, mcp_types.TextContent)]
    if texts:
        return "\n".join(texts)
    if result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    return ""


def openai_tools_from_mcp(tools: list[mcp_types.Tool]) -> list[dict[str, Any]]:
    """MCP tools as OpenAI ``tools`` entries (name, description, JSON schema of the parameters)."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description or "",
                "parameters": tool.input_schema or {"type": "object", "properties": {}},
            },
        }
        for tool in tools
    ]

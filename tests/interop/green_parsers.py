"""How two public green agents read a white agent's reply, re-implemented as test fixtures, and a driver that talks
A2A to a white agent the way they do.

Why: Arena's reference white agents must be readable by the green agents people actually run, not only by Arena's
own (lenient) parser. The two readers below are written from the sources, not copied; every rule cites where it
comes from. Both raise :class:`GreenRejected` (``step`` says at which point of the original code the reply would have
been refused or misread) and otherwise return ``(name, arguments)`` as that green agent would act on them: a tool
call's arguments, or ``{"content": ...}`` for ``respond`` (the only key either green agent uses for the user).

The seed: the tau-bench green agent of AgentBeats' tau-bench-agents line, read in
    agentbeats/agentify-example-tau-bench @ 904ed9f80e7bcdd42abd3057e731350300b43961 (files as of 59b1a4c)
        src/green_agent/agent.py (``ask_agent_to_solve``), src/my_util/__init__.py (``parse_tags``),
        src/my_util/my_a2a.py (``send_message``: a2a-sdk 0.3 ``A2AClient``, JSON-RPC ``message/send``);
    sierra-research/tau-bench @ 4754e6b406507dbcbce8e8b3855dcf80aaec18ac (the version its uv.lock pins)
        tau_bench/types.py (``Action``: pydantic, ``name: str``, ``kwargs: Dict[str, Any]``),
        tau_bench/envs/base.py (``Env.step``: ``respond`` sends ``action.kwargs["content"]`` to the user);
    the same loop in maxchr63/tau-bench-agents (a tau-bench-agents fork; agentbeats/tau-bench-agents itself was not
    available) @ 26cf6d485b821f9fb0d83e63fba76d360317b6c7 src/green_agent/agent.py and, with the asserts turned into
    error results, @ 6477e6af0563c0df44518a2be53adef582e96d6a implementations/mcp/green_agent/tools.py.

tau2: tau2-bench's A2A green agent, read in sierra-research/tau2-bench @ a2c024725189473d2d7cea3a5cfdbcc67478e41f
        src/experiments/agentify_tau_bench/src/agentify_tau_bench/green_agent/agent.py (``ask_agent_to_solve``,
        unchanged since 377cecff73b873e63430a0acfce00e0eff024855), .../utils/utils.py (``parse_tags``, the seed's),
        .../utils/a2a_utils.py (a2a-sdk 0.3 ``A2AClient``), src/tau2/gym/gym_agent.py (``TauGymEnv.step``),
        src/tau2/utils/tools.py (``parse_action_string``, ``is_functional_tool_call``, ``parse_functional_tool_call``),
        src/tau2/data_model/message.py (``ToolCall``).

What both do with a reply (the same skeleton; they differ in the action's keys and in what follows):

1. the JSON-RPC result must be an A2A **Message**: a Task (even a completed one) fails an ``assert isinstance``;
2. after the first turn the reply's context id must equal the conversation's (the first message carries none: the
   conversation adopts the id of the first reply);
3. the Message must have exactly one text part (data parts are not counted, and not read);
4. ``parse_tags``: every ``<tag>...</tag>`` pair is found with the regex ``<(.*?)>(.*?)</\\1>`` (DOTALL, left to
   right, non-overlapping), later tags of a name replace earlier ones, contents are stripped; the ``json`` entry must
   exist and ``json.loads`` must read it. Consequence: a ``</json>`` inside a JSON string ends the tag early.
5. seed: ``Action(**action_dict)`` (the object must be a mapping with ``name: str`` and ``kwargs: dict``; other keys
   are ignored, so "arguments" alone fails with pydantic's "kwargs / Field required"); ``respond`` then needs
   ``kwargs["content"]`` (``KeyError`` otherwise).
   tau2: ``action_dict["name"] != "respond"`` decides. A tool call is re-serialised and validated as tau2's
   ``ToolCall`` (``name: str``, ``arguments: dict``, optional ``id: str``, ``requestor: "user" | "assistant"``;
   other keys, e.g. "kwargs", ignored); when that fails the whole JSON is sent **to the user as plain text** (no
   error; here a rejection). ``respond`` uses ``action_dict["arguments"]["content"]``, which tau2 parses again as an
   action string: empty or non-string content is an invalid action (not delivered), and content that is itself a
   ``ToolCall`` JSON or looks like ``name(key=value, ...)`` is executed as a tool call instead of reaching the user.
"""

from __future__ import annotations

import ast
import contextlib
import json
import re
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers import new_data_part, new_text_part
from a2a.types.a2a_pb2 import Message, Role, SendMessageRequest, TaskState
from a2a.utils.errors import A2AError
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

RESPOND = "respond"

Wire = Literal["0.3", "1.0"]
Style = Literal["seed", "tau2"]
ReplyKind = Literal["message", "task", "error"]


# --------------------------------------------------------------------------------------------------------------
# What came back


@dataclass(frozen=True)
class WhiteReply:
    """One answer of the white agent as the green agent's client sees it: a Message, a Task, or a JSON-RPC error.

    ``text_parts`` are the text parts of the Message, or of the Task's status message; ``artifact_texts`` the texts
    of a Task's artifacts.
    """

    kind: ReplyKind
    text_parts: tuple[str, ...] = ()
    context_id: str = ""
    task_state: str | None = None
    artifact_texts: tuple[str, ...] = ()
    error: str = ""

    @classmethod
    def message(cls, text: str, context_id: str = "") -> WhiteReply:
        """A Message with one text part (for checking a reply text directly)."""
        return cls(kind="message", text_parts=(text,), context_id=context_id)

    @property
    def text(self) -> str:
        """All text parts joined (the status message's, for a Task)."""
        return "\n".join(self.text_parts)


class GreenRejected(ValueError):
    """The green agent would refuse or misread this reply; ``step`` names where (see the module docstring)."""

    def __init__(self, green: str, step: str, reason: str) -> None:
        super().__init__(f"{green} rejects the reply at {step}: {reason}")
        self.green = green
        self.step = step
        self.reason = reason


class SeedRejected(GreenRejected):
    """A rejection by the seed (tau-bench green agent of AgentBeats)."""

    def __init__(self, step: str, reason: str) -> None:
        super().__init__("seed", step, reason)


class Tau2Rejected(GreenRejected):
    """A rejection (or a misreading) by tau2-bench's A2A green agent."""

    def __init__(self, step: str, reason: str) -> None:
        super().__init__("tau2", step, reason)


# --------------------------------------------------------------------------------------------------------------
# The common skeleton

_TAG_PAIR = re.compile(r"<(?P<tag>.*?)>(?P<body>.*?)</(?P=tag)>", re.DOTALL)


def tags_of(text: str) -> dict[str, str]:
    """Tag name -> stripped content, as ``parse_tags`` of both green agents finds them (later names win)."""
    found: dict[str, str] = {}
    for match in _TAG_PAIR.finditer(text):
        found[match.group("tag")] = match.group("body").strip()
    return found


def _action_dict(reply: WhiteReply | str, context_id: str | None, reject: Callable[[str, str], GreenRejected]) -> Any:
    """Steps 1-4 of the module docstring: the decoded JSON of the reply's ``<json>`` tag."""
    if isinstance(reply, str):
        reply = WhiteReply.message(reply)
    if reply.kind == "error":
        raise reject("response_type", f"a JSON-RPC error, not a SendMessageSuccessResponse ({reply.error})")
    if reply.kind != "message":
        raise reject("message_type", f"the result is an A2A Task (state {reply.task_state}), not a Message")
    if context_id is not None and reply.context_id != context_id:
        raise reject("context_id", f"context id {reply.context_id!r} is not the conversation's {context_id!r}")
    if len(reply.text_parts) != 1:
        raise reject("text_parts", f"expected exactly one text part, got {len(reply.text_parts)}")
    tags = tags_of(reply.text_parts[0])
    if "json" not in tags:
        raise reject("json_tag", f"no <json>...</json> pair among the tags {sorted(tags)}")
    try:
        return json.loads(tags["json"])
    except json.JSONDecodeError as error:
        raise reject("json_decode", str(error)) from None


# --------------------------------------------------------------------------------------------------------------
# The seed


_SeedAction = create_model(
    "Action",  # errors then read as the seed's: "1 validation error for Action"
    __doc__="The shape of tau-bench's ``Action`` (pydantic defaults: unknown keys ignored, lax types).",
    name=(str, ...),
    kwargs=(dict[str, Any], ...),  # in a class body, mypy's pydantic plugin reports a field "kwargs" as redefined
)


def parse_like_seed(reply: WhiteReply | str, *, context_id: str | None = None) -> tuple[str, dict[str, Any]]:
    """(name, arguments) as the seed acts on them; :class:`SeedRejected` where the seed would fail.

    ``context_id``: the conversation's id once known (the seed asserts that every later reply carries it).
    """
    value = _action_dict(reply, context_id, SeedRejected)
    if not isinstance(value, dict):
        raise SeedRejected("action_model", f"Action(**...) needs a mapping, got JSON {type(value).__name__}")
    try:
        action = _SeedAction(**value).model_dump()
    except ValidationError as error:
        raise SeedRejected("action_model", str(error)) from None
    name: str = action["name"]
    kwargs: dict[str, Any] = action["kwargs"]
    if name == RESPOND:
        if "content" not in kwargs:
            raise SeedRejected("respond_content", 'Env.step reads kwargs["content"]: KeyError')
        return RESPOND, {"content": kwargs["content"]}
    return name, kwargs


# --------------------------------------------------------------------------------------------------------------
# tau2-bench


class _Tau2ToolCall(BaseModel):
    """The shape of tau2's ``ToolCall`` (pydantic defaults: unknown keys ignored)."""

    model_config = ConfigDict(title="ToolCall")

    id: str = ""
    name: str
    arguments: dict[Any, Any]
    requestor: Literal["user", "assistant"] = "assistant"


_FUNCTIONAL_CALL = re.compile(r"^(\w+)\s*\((.*)\)$")


def _literal(node: ast.AST) -> Any:
    """The value of an argument of a functional-form call, for the node types tau2 accepts (ValueError else)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd | ast.USub):
        operand = _literal(node.operand)
        return +operand if isinstance(node.op, ast.UAdd) else -operand
    if isinstance(node, ast.List):
        return [_literal(item) for item in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(_literal(item) for item in node.elts)
    if isinstance(node, ast.Dict):
        if any(key is None for key in node.keys):
            raise ValueError("dict unpacking")
        return {_literal(key): _literal(value) for key, value in zip(node.keys, node.values, strict=True)}  # type: ignore[arg-type]
    if isinstance(node, ast.Name):
        return {"True": True, "False": False, "None": None}.get(node.id, node.id)
    raise ValueError(f"unsupported node {type(node).__name__}")


def _functional_call_parses(text: str) -> bool:
    """True when tau2 would turn ``text`` (stripped) into a tool call of the form ``name(key=value, ...)``."""
    match = _FUNCTIONAL_CALL.match(text)
    if match is None:
        return False
    inner = match.group(2).strip()
    if not inner:
        return True
    try:
        tree = ast.parse(f"call({inner})")
        statement = tree.body[0]
        if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)):
            return False
        for keyword in statement.value.keywords:
            _literal(keyword.value)
    except Exception:  # tau2 falls back to plain text on any failure here
        return False
    return True


def tau2_reads_as_tool_call(action: str) -> bool:
    """True when tau2's ``parse_action_string`` makes a tool call of ``action`` (a ToolCall JSON or a call form)."""
    stripped = action.strip()
    try:
        _Tau2ToolCall.model_validate_json(stripped)
    except ValidationError:
        return _functional_call_parses(stripped)
    return True


def parse_like_tau2(reply: WhiteReply | str, *, context_id: str | None = None) -> tuple[str, dict[str, Any]]:
    """(name, arguments) as tau2-bench's green agent acts on them; :class:`Tau2Rejected` where it fails or misreads."""
    value = _action_dict(reply, context_id, Tau2Rejected)
    if not isinstance(value, dict):
        raise Tau2Rejected("action_name", f'action_dict["name"] on JSON {type(value).__name__}')
    if "name" not in value:
        raise Tau2Rejected("action_name", 'action_dict["name"]: KeyError')
    if value["name"] == RESPOND:
        arguments = value.get("arguments")
        if not isinstance(arguments, dict) or "content" not in arguments:
            raise Tau2Rejected("respond_content", 'action_dict["arguments"]["content"] fails')
        content = arguments["content"]
        if not isinstance(content, str) or not content.strip():
            raise Tau2Rejected("respond_content", "empty or non-string content is an invalid action, not delivered")
        if tau2_reads_as_tool_call(content):
            raise Tau2Rejected("respond_content", "the content would be executed as a tool call, not sent to the user")
        return RESPOND, {"content": content}
    try:
        call = _Tau2ToolCall.model_validate_json(json.dumps(value))
    except ValidationError as error:
        raise Tau2Rejected("tool_call", f"not a ToolCall, so it would reach the user as text: {error}") from None
    return call.name, call.arguments


# --------------------------------------------------------------------------------------------------------------
# The green agents' messages


def _seed_first_message(wiki: str, tools_info: list[dict[str, Any]], observation: str) -> str:
    """The seed's ``task_description`` (src/green_agent/agent.py, ``ask_agent_to_solve``), character for character."""
    return f"""
{wiki}
Here's a list of tools you can use (you can use at most one tool at a time):
{json.dumps(tools_info, indent=2)}
Please response in the JSON format. Please wrap the JSON part with <json>...</json> tags.
The JSON should contain:
- "name": the tool call function name, or "{RESPOND}" if you want to respond directly.
- "kwargs": the arguments for the tool call, or {{"content": "your message here"}} if you want to respond directly.

Next, I'll provide you with the user message and tool call results.
User message: {observation}
    """


_TAU2_TOOL_EXAMPLE = {
    "name": "find_user_id_by_name_zip",
    "arguments": {"first_name": "Yusuf", "last_name": "Rossi", "zip_code": "19122"},
}
# tau2 writes "{RESPOND_ACTION_NAME}" inside a plain string nested in its f-string: it reaches the agent unexpanded.
_TAU2_RESPOND_EXAMPLE = {"name": "{RESPOND_ACTION_NAME}", "arguments": {"content": "Hello, how can I help you today?"}}


def _tau2_first_message(policy: str, tools: list[dict[str, Any]], observation: str) -> str:
    """tau2's ``task_description`` (green_agent/agent.py, ``ask_agent_to_solve``), character for character.

    ``tools`` are the ``openai_schema`` of its tools (``tools_to_str``); ``observation`` is ``env.reset()``'s, the
    formatted history after the agent's greeting: ``"user: <first user text>"``.
    """
    return f"""
{policy}
Here's a list of tools you can use (you can use at most one tool at a time):
{json.dumps(tools, indent=2)}
Please response in the JSON format. Please wrap the JSON part with <json>...</json> tags.
The JSON should contain:
- "name": the tool call function name, or "{RESPOND}" if you want to respond directly.
- "arguments": the arguments for the tool call, or {{"content": "your message here"}} if you want to respond directly.
You should only use one tool at a time!!
You cannot respond to user and use a tool at the same time!!

Examples of responses:
<json>
{json.dumps(_TAU2_TOOL_EXAMPLE, indent=2)}
</json>

<json>
{json.dumps(_TAU2_RESPOND_EXAMPLE, indent=2)}
</json>

Next, I'll provide you with the user message and tool call results.
User message: {json.dumps(observation, indent=2)}
    """


def first_message_text(policy: str, tools: list[dict[str, Any]], user_text: str, *, style: Style = "seed") -> str:
    """An attempt's first message exactly as these green agents write it: policy, tools JSON, reply format, user.

    The seed asks for ``"kwargs"``, tau2 for ``"arguments"`` (and shows two example ``<json>`` objects); tau2's
    observation is ``"user: <text>"``, JSON-quoted. Neither sends a data part: the tools exist only in this text.
    """
    if style == "seed":
        return _seed_first_message(policy, tools, user_text)
    return _tau2_first_message(policy, tools, f"user: {user_text}")


def tool_result_text(output: str, *, style: Style = "seed") -> str:
    """The message after a tool call: the seed's ``Tool call result:`` block, or tau2's observation ``tool: ...``.

    tau2 sends its gym observation verbatim (``TauGymEnv._format_observation``: ``f"{m.role}: {m.content}"`` per
    message since the agent's last action, here the one tool message).
    """
    return f"\nTool call result:\n{output}\n            " if style == "seed" else f"tool: {output}"


def user_message_text(text: str, *, style: Style = "seed") -> str:
    """The message after a ``respond``: the seed's ``User message:`` block, or tau2's observation ``user: ...``."""
    return f"\nUser message:\n{text}\n            " if style == "seed" else f"user: {text}"


# --------------------------------------------------------------------------------------------------------------
# Talking A2A


class GreenChannel:
    """Sends one green-agent message per call (text part, optional data part and metadata); returns the reply."""

    async def send(
        self,
        text: str,
        *,
        context_id: str | None,
        data: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> WhiteReply:
        raise NotImplementedError


class _JsonRpc03Channel(GreenChannel):
    """JSON-RPC ``message/send`` in the 0.3 wire format, as a2a-sdk 0.3's ``A2AClient`` of both green agents sends it
    (``contextId`` left out when there is none yet)."""

    def __init__(self, http: httpx.AsyncClient, url: str) -> None:
        self._http = http
        self._url = url

    async def send(
        self,
        text: str,
        *,
        context_id: str | None,
        data: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> WhiteReply:
        parts: list[dict[str, Any]] = [{"kind": "text", "text": text}]
        if data is not None:
            parts.append({"kind": "data", "data": data})
        message: dict[str, Any] = {"kind": "message", "role": "user", "messageId": uuid.uuid4().hex, "parts": parts}
        if context_id is not None:
            message["contextId"] = context_id
        if metadata:
            message["metadata"] = metadata
        body = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": "message/send", "params": {"message": message}}
        response = await self._http.post(self._url, json=body)
        response.raise_for_status()
        answer = response.json()
        if "error" in answer:
            return WhiteReply(kind="error", error=json.dumps(answer["error"]))
        result = answer["result"]

        def texts(parts: list[dict[str, Any]]) -> tuple[str, ...]:
            return tuple(p["text"] for p in parts if p.get("kind") == "text")

        if result.get("kind") == "message":
            return WhiteReply(kind="message", text_parts=texts(result["parts"]), context_id=result.get("contextId", ""))
        status = result.get("status", {})
        return WhiteReply(
            kind="task",
            text_parts=texts((status.get("message") or {}).get("parts", [])),
            context_id=result.get("contextId", ""),
            task_state=status.get("state"),
            artifact_texts=tuple("\n".join(texts(a.get("parts", []))) for a in result.get("artifacts", [])),
        )


class _SdkChannel(GreenChannel):
    """The a2a-sdk 1.x client (card resolver + ClientFactory, non-streaming SendMessage), as tests/white_agent uses
    it."""

    def __init__(self, client: Any) -> None:
        self._client = client

    async def send(
        self,
        text: str,
        *,
        context_id: str | None,
        data: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> WhiteReply:
        parts = [new_text_part(text)]
        if data is not None:
            parts.append(new_data_part(data))
        message = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=parts)
        if context_id is not None:
            message.context_id = context_id
        if metadata:
            message.metadata.update(metadata)
        try:
            items = [item async for item in self._client.send_message(SendMessageRequest(message=message))]
        except A2AError as error:
            return WhiteReply(kind="error", error=f"{type(error).__name__}: {error}")
        if len(items) != 1:
            raise AssertionError(f"a non-streaming send gave {len(items)} responses")
        item = items[0]
        if item.WhichOneof("payload") == "message":
            reply = item.message
            return WhiteReply(
                kind="message",
                text_parts=tuple(p.text for p in reply.parts if p.HasField("text")),
                context_id=reply.context_id,
            )
        task = item.task
        return WhiteReply(
            kind="task",
            text_parts=tuple(p.text for p in task.status.message.parts if p.HasField("text")),
            context_id=task.context_id,
            task_state=TaskState.Name(task.status.state),
            artifact_texts=tuple("\n".join(p.text for p in a.parts if p.HasField("text")) for a in task.artifacts),
        )


@contextlib.asynccontextmanager
async def green_channel(base_url: str, wire: Wire = "0.3") -> AsyncIterator[GreenChannel]:
    """A channel to the white agent at ``base_url``: the public green agents' 0.3 wire, or a2a-sdk 1.x."""
    async with httpx.AsyncClient(timeout=60.0) as http:
        if wire == "0.3":
            yield _JsonRpc03Channel(http, base_url.rstrip("/") + "/")
        else:
            card = await A2ACardResolver(http, base_url).get_agent_card()
            yield _SdkChannel(ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card))


# --------------------------------------------------------------------------------------------------------------
# One attempt


def peek_action(reply: WhiteReply) -> tuple[str, dict[str, Any]] | None:
    """The action the driver reacts to (``arguments`` or ``kwargs``, Message or Task): None when there is none.

    Deliberately lenient: the driver only decides what to send next; the fixtures above judge the reply.
    """
    tag = tags_of(reply.text).get("json")
    if tag is None:
        return None
    try:
        value = json.loads(tag)
    except json.JSONDecodeError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get("arguments", value.get("kwargs"))
    return value["name"], arguments if isinstance(arguments, dict) else {}


@dataclass(frozen=True)
class FirstMessage:
    """What opens an attempt: the text, and for Arena's extensions an optional data part and message metadata."""

    text: str
    data: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None


@dataclass
class Attempt:
    """One conversation: its context id, what the green agent sent and what came back, turn by turn."""

    context_id: str | None
    sent: list[str] = field(default_factory=list)
    replies: list[WhiteReply] = field(default_factory=list)


def ok_tool_output(name: str, arguments: dict[str, Any]) -> str:
    """A neutral tool output (the reference agents do not depend on it)."""
    return json.dumps({"tool": name, "ok": True})


async def run_attempt(
    channel: GreenChannel,
    first: FirstMessage,
    *,
    style: Style = "seed",
    user_turns: Sequence[str] = (),
    tool_output: Callable[[str, dict[str, Any]], str] = ok_tool_output,
    fresh_context: bool = True,
    max_turns: int = 30,
) -> Attempt:
    """Drive one attempt like a green agent: tool results after tool calls, ``user_turns`` after ``respond`` actions.

    It ends after a ``respond`` when no user turn is left, on a reply without a readable action, or after
    ``max_turns`` replies (a bound on a misbehaving agent, not a time limit). ``fresh_context``: a new context id
    generated here and sent with every message (Arena's way); otherwise the first message has none and the id of the
    first reply is used from then on (what the seed and tau2 do).
    """
    attempt = Attempt(context_id=uuid.uuid4().hex if fresh_context else None)
    users = list(user_turns)
    text, data, metadata = first.text, first.data, first.metadata
    while len(attempt.replies) < max_turns:
        attempt.sent.append(text)
        reply = await channel.send(text, context_id=attempt.context_id, data=data, metadata=metadata)
        attempt.replies.append(reply)
        data = metadata = None
        if attempt.context_id is None:
            attempt.context_id = reply.context_id or None
        action = peek_action(reply)
        if reply.kind == "error" or action is None:
            break
        name, arguments = action
        if name == RESPOND:
            if not users:
                break
            text = user_message_text(users.pop(0), style=style)
        else:
            text = tool_result_text(tool_output(name, arguments), style=style)
    return attempt

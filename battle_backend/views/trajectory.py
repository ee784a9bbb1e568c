"""An attempt's conversation as the viewer shows it: every message with its step, latency and role, its text, the
tool calls with their arguments and the tool results with their error flag.

The trajectory arrives in the ``attempt_finished`` event's detail (``arena.trajectory/1``: see
docs/design/progress-events.md, section 2), already bounded by the green agent (strings cut at 4000 characters, middle
messages dropped beyond 256 KB). A foreign or hostile sender may ignore those bounds, so they are applied again here: at
most :data:`MAX_MESSAGES` messages and :data:`~battle_backend.battles.tolerant.MAX_TEXT_CHARS` characters per string.
Everything stays text for the autoescaping template.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from battle_backend.battles.tolerant import (
    MAX_NAME_CHARS,
    dict_of,
    float_of,
    int_of,
    json_text,
    list_of,
    name_of,
    text_of,
)

TRAJECTORY_SCHEMA = "arena.trajectory/1"
MAX_MESSAGES = 2_000
"""Messages shown at most (the rest is counted in a note; the raw JSONL has them all)."""
MAX_TOOL_CALLS = 50
"""Tool calls shown per message."""
ROLE_LABELS = {"assistant": "white agent", "user": "user", "tool": "tool", "system": "system"}
MAX_FIELDS = 60
"""Fields shown of one tool call's arguments or one tool result (the rest counted)."""
MAX_FIELD_CHARS = 4_000
MAX_PARSED_RESULT_CHARS = 20_000
"""A tool result longer than this is shown as text, not parsed into fields."""


@dataclass(frozen=True)
class FieldView:
    """One key of a tool call's arguments or a tool result: the key and its value as text (pretty JSON for objects
    and lists, the string itself for a string)."""

    key: str
    value: str
    block: bool
    """True for an object or list (shown as a preformatted block)."""


def _field_value(value: Any) -> tuple[str, bool]:
    if isinstance(value, str):
        return text_of(value, MAX_FIELD_CHARS) or "", False
    return json_text(value, MAX_FIELD_CHARS), isinstance(value, dict | list)


def fields_of(value: Any) -> tuple[list[FieldView], int]:
    """The fields of a JSON object (at most :data:`MAX_FIELDS`) and how many were left out; a list is shown with its
    indexes as keys; anything else gives no fields."""
    if isinstance(value, dict):
        items: list[tuple[str, Any]] = [(name_of(k) or '""', v) for k, v in list(value.items())[: MAX_FIELDS + 1]]
        total = len(value)
    elif isinstance(value, list):
        items, total = [(f"[{i}]", v) for i, v in enumerate(value[: MAX_FIELDS + 1])], len(value)
    else:
        return [], 0
    shown = [FieldView(key, *_field_value(v)) for key, v in items[:MAX_FIELDS]]
    return shown, max(0, total - len(shown))


def result_fields(content: str | None) -> tuple[list[FieldView], int] | None:
    """A tool result's fields when its text is a JSON object or list (tau2's tools answer JSON); None otherwise."""
    if content is None or len(content) > MAX_PARSED_RESULT_CHARS or content.lstrip()[:1] not in ("{", "["):
        return None
    try:
        value = json.loads(content)
    except (ValueError, RecursionError):
        return None
    fields, left_out = fields_of(value)
    return (fields, left_out) if fields or value in ({}, []) else None


@dataclass(frozen=True)
class ToolCallView:
    """One tool call of a message: which tool, with which arguments, asked by whom."""

    call_id: str
    name: str
    arguments: str
    """Pretty JSON text."""
    requestor: str
    fields: list[FieldView] = field(default_factory=list)
    """The arguments one per key (empty when they are not a JSON object: ``arguments`` is shown)."""
    fields_left_out: int = 0


@dataclass(frozen=True)
class MessageView:
    """One message of the conversation."""

    index: int
    step: int | None
    role: str
    """assistant | user | tool | system | other (a CSS class: never the posted text)."""
    role_label: str
    content: str | None
    tool_calls: list[ToolCallView]
    tool_call_id: str
    answers: str
    """For a tool result: the name of the call it answers (when that call is in the trajectory)."""
    error: bool
    timestamp: str
    latency_s: float | None
    result_fields: list[FieldView] | None = None
    """A tool result that is a JSON object or list, one field per key (None: shown as text)."""
    result_fields_left_out: int = 0

    @property
    def turn(self) -> int | None:
        """The message's turn: its index in the conversation (tau2's ``turn_idx``, posted as ``step``)."""
        return self.step

    @property
    def preview(self) -> str:
        """The first characters of the content on one line (a collapsed tool result's summary)."""
        text = " ".join((self.content or "").split())
        return text if len(text) <= 120 else text[:119] + "…"

    @property
    def latency_text(self) -> str:
        """``+0.412 s`` or ``""`` when unknown."""
        return "" if self.latency_s is None else f"+{self.latency_s:.3f} s"


@dataclass(frozen=True)
class TrajectoryView:
    """The conversation with what was left out of it."""

    messages: list[MessageView] = field(default_factory=list)
    message_count: int = 0
    """Messages in the attempt (as the sender counted them)."""
    omitted_by_sender: int = 0
    """Middle messages the green agent dropped to stay within its size bound."""
    truncated_by_sender: bool = False
    """Strings the green agent cut at 4000 characters."""
    not_shown: int = 0
    """Messages posted but beyond what the page shows (:data:`MAX_MESSAGES`)."""
    schema: str = ""


def _tool_call(raw: Any) -> ToolCallView | None:
    call = dict_of(raw)
    if not call:
        return None
    arguments = call.get("arguments")
    if isinstance(arguments, str):  # some agents send the arguments as JSON text: shown as sent
        arguments_text = text_of(arguments) or ""
    else:
        arguments_text = json_text(arguments if arguments is not None else {})
    fields, left_out = fields_of(arguments) if isinstance(arguments, dict) else ([], 0)
    return ToolCallView(
        call_id=name_of(call.get("id")),
        name=name_of(call.get("name")) or "(unnamed tool)",
        arguments=arguments_text,
        requestor=name_of(call.get("requestor")),
        fields=fields,
        fields_left_out=left_out,
    )


def _message(index: int, raw: Any, call_names: dict[str, str]) -> MessageView:
    message = dict_of(raw)
    raw_role = message.get("role")
    role = raw_role if isinstance(raw_role, str) and raw_role in ROLE_LABELS else "other"
    calls = [c for c in map(_tool_call, list_of(message.get("tool_calls"), MAX_TOOL_CALLS)) if c]
    for call in calls:
        if call.call_id:
            call_names[call.call_id] = call.name
    tool_call_id = name_of(message.get("tool_call_id"), MAX_NAME_CHARS)
    latency = float_of(message.get("latency_s"))
    content = text_of(message.get("content"))
    parsed = result_fields(content) if role == "tool" else None
    return MessageView(
        index=index,
        step=int_of(message.get("step")),
        role=role,
        role_label=ROLE_LABELS.get(role, name_of(raw_role, 40) or "unknown role"),
        content=content,
        tool_calls=calls,
        tool_call_id=tool_call_id,
        answers=call_names.get(tool_call_id, "") if tool_call_id else "",
        error=message.get("error") is True,
        timestamp=name_of(message.get("timestamp"), 64),
        latency_s=latency if latency is not None and latency >= 0 else None,
        result_fields=parsed[0] if parsed is not None else None,
        result_fields_left_out=parsed[1] if parsed is not None else 0,
    )


def raw_messages(trajectory: Any) -> list[Any]:
    """The posted messages (unbounded: the raw JSONL writes them all; the event that carried them was bounded)."""
    messages = dict_of(trajectory).get("messages")
    return messages if isinstance(messages, list) else []


def trajectory_view(raw: Any) -> TrajectoryView | None:
    """The conversation of a posted trajectory; None when nothing was posted (null or not an object)."""
    trajectory = dict_of(raw)
    if not trajectory:
        return None
    posted = raw_messages(trajectory)
    call_names: dict[str, str] = {}
    messages = [_message(i, m, call_names) for i, m in enumerate(posted[:MAX_MESSAGES])]
    count = int_of(trajectory.get("message_count"), low=0)
    omitted = int_of(trajectory.get("omitted_messages"), low=0) or 0
    return TrajectoryView(
        messages=messages,
        message_count=count if count is not None else len(posted) + omitted,
        omitted_by_sender=omitted,
        truncated_by_sender=trajectory.get("truncated") is True,
        not_shown=max(0, len(posted) - MAX_MESSAGES),
        schema=name_of(trajectory.get("schema"), 64),
    )

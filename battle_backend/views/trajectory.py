"""An attempt's conversation as the viewer shows it: every message with its step, latency and role, its text, the
tool calls with their arguments and the tool results with their error flag.

The trajectory arrives in the ``attempt_finished`` event's detail (``arena.trajectory/1``: see
docs/design/progress-events.md, section 2), already bounded by the green agent (strings cut at 4000 characters, middle
messages dropped beyond 256 KB). A foreign or hostile sender may ignore those bounds, so they are applied again here: at
most :data:`MAX_MESSAGES` messages and :data:`~battle_backend.battles.tolerant.MAX_TEXT_CHARS` characters per string.
Everything stays text for the autoescaping template.
"""

from __future__ import annotations

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


@dataclass(frozen=True)
class ToolCallView:
    """One tool call of a message: which tool, with which arguments, asked by whom."""

    call_id: str
    name: str
    arguments: str
    """Pretty JSON text."""
    requestor: str


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
    return ToolCallView(
        call_id=name_of(call.get("id")),
        name=name_of(call.get("name")) or "(unnamed tool)",
        arguments=arguments_text,
        requestor=name_of(call.get("requestor")),
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
    return MessageView(
        index=index,
        step=int_of(message.get("step")),
        role=role,
        role_label=ROLE_LABELS.get(role, name_of(raw_role, 40) or "unknown role"),
        content=text_of(message.get("content")),
        tool_calls=calls,
        tool_call_id=tool_call_id,
        answers=call_names.get(tool_call_id, "") if tool_call_id else "",
        error=message.get("error") is True,
        timestamp=name_of(message.get("timestamp"), 64),
        latency_s=latency if latency is not None and latency >= 0 else None,
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

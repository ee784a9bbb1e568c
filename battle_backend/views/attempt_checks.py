"""What the attempt viewer shows beside the conversation, read from the ``attempt_finished`` event (and the result's
attempt entry for the malformed reply): the task's user scenario, tau2's every check with met/unmet and the reward
split, and a ``format_error`` attempt's malformed reply.

The green agent bounds all of it (green_agent/engine/attempt_details.py); a foreign or hostile sender may not, so
everything is read tolerantly and cut again here, and stays text for the autoescaping template. An event without
these fields (an older green agent) gives None: the template hides the section.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from battle_backend.battles.tolerant import DASH, dict_of, float_of, int_of, json_text, list_of, name_of, text_of

MAX_REPLY_CHARS = 8_000
"""The green agent keeps 4096 characters of a malformed reply; a foreign one may send more: the page shows this."""
MAX_SCENARIO_CHARS = 4_000
MAX_CHECKS = 100
MAX_CHECK_CHARS = 2_000
MAX_SPLIT = 10

SCENARIO_FIELDS = (
    ("purpose", "Purpose of the task"),
    ("reason_for_call", "Reason for call"),
    ("known_info", "Known info"),
    ("unknown_info", "Unknown info"),
    ("task_instructions", "Task instructions"),
    ("persona", "Persona"),
    ("relevant_policies", "Relevant policies"),
    ("notes", "Notes"),
)
"""The scenario's fields in the order ``tau2 view`` shows them, with their labels."""
REWARD_KINDS = ("DB", "ACTION", "COMMUNICATE", "NL_ASSERTION", "ENV_ASSERTION")
"""tau2's reward types (``RewardType``) in its order."""


@dataclass(frozen=True)
class MalformedReplyView:
    """The reply that ended the attempt as a format_error."""

    text: str
    chars: int | None
    truncated: bool
    over_cap: bool
    """True: the first bytes of an HTTP body refused for its size (not a parsed reply)."""
    turn: int | None
    step: int | None


@dataclass(frozen=True)
class ScenarioView:
    """What the simulated user was told, as labelled rows (empty fields left out)."""

    task_id: str
    domain: str
    rows: list[tuple[str, str]]


@dataclass(frozen=True)
class CheckRow:
    """One check: what was checked (a name and pretty JSON arguments, or a text), whether it was met, and why."""

    label: str
    met: bool
    arguments: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class CheckGroup:
    """The checks of one kind, with how many were met."""

    kind: str
    """A reward type (ACTION, COMMUNICATE, NL_ASSERTION, ENV_ASSERTION): the section's id and CSS hook."""
    title: str
    rows: list[CheckRow]
    counts_in_reward: bool

    @property
    def met(self) -> int:
        return sum(1 for row in self.rows if row.met)


@dataclass(frozen=True)
class ChecksView:
    """tau2's verdict: the reward split and every check."""

    reward_split: list[tuple[str, str, bool]]
    """(reward type, value, part of the reward basis) in tau2's order; unknown types after."""
    db_match: bool | None
    db_counts: bool
    groups: list[CheckGroup] = field(default_factory=list)
    left_out: int = 0


def malformed_reply_view(raw: Any) -> MalformedReplyView | None:
    """The malformed reply as posted; None when there is none."""
    reply = dict_of(raw)
    text = reply.get("text")
    if not isinstance(text, str):
        return None
    return MalformedReplyView(
        text=text_of(text, MAX_REPLY_CHARS) or "",
        chars=int_of(reply.get("chars"), low=0),
        truncated=reply.get("truncated") is True or len(text) > MAX_REPLY_CHARS,
        over_cap=reply.get("source") == "http_body",
        turn=int_of(reply.get("turn"), low=0),
        step=int_of(reply.get("step"), low=0),
    )


def scenario_view(raw: Any) -> ScenarioView | None:
    """The task's user scenario as posted; None when there is none or it holds no field."""
    scenario = dict_of(raw)
    rows = [
        (label, text)
        for key, label in SCENARIO_FIELDS
        if (text := text_of(scenario.get(key), MAX_SCENARIO_CHARS)) is not None and text.strip()
    ]
    if not rows:
        return None
    return ScenarioView(task_id=name_of(scenario.get("task_id")), domain=name_of(scenario.get("domain")), rows=rows)


def _arguments(value: Any) -> str:
    return json_text(value if value is not None else {}, MAX_CHECK_CHARS)


def _named_rows(items: list[Any], name_key: str) -> list[CheckRow]:
    rows = []
    for raw in items:
        item = dict_of(raw)
        if not item:
            continue
        requestor = name_of(item.get("requestor"), 40)
        env_type = name_of(item.get("env_type"), 40)
        where = f"by {requestor}" if requestor else f"on the {env_type} side" if env_type else None
        message = text_of(item.get("message"), MAX_CHECK_CHARS)
        rows.append(
            CheckRow(
                label=name_of(item.get(name_key)) or "(unnamed)",
                met=item.get("met") is True,
                arguments=_arguments(item.get("arguments")),
                note=" · ".join(part for part in (where, message) if part) or None,
            )
        )
    return rows


def _text_rows(items: list[Any]) -> list[CheckRow]:
    rows = []
    for raw in items:
        item = dict_of(raw)
        if not item:
            continue
        rows.append(
            CheckRow(
                label=text_of(item.get("text"), MAX_CHECK_CHARS) or "",
                met=item.get("met") is True,
                note=text_of(item.get("justification"), MAX_CHECK_CHARS),
            )
        )
    return rows


def checks_view(raw: Any) -> ChecksView | None:
    """tau2's checks as posted; None when nothing was posted."""
    checks = dict_of(raw)
    if not checks:
        return None
    basis = {name_of(b, 40) for b in list_of(checks.get("reward_basis"), MAX_SPLIT)}
    split = dict_of(checks.get("reward_split"))
    values = {name_of(k, 40): float_of(v) for k, v in list(split.items())[:MAX_SPLIT]}
    order = [kind for kind in REWARD_KINDS if kind in values or kind in basis]
    order += [kind for kind in values if kind not in order]
    reward_split = [
        (kind, DASH if values.get(kind) is None else f"{values[kind]:.3f}", kind in basis) for kind in order
    ]
    db = checks.get("db_match")
    found = [
        ("ACTION", "Action checks", _named_rows(list_of(checks.get("actions"), MAX_CHECKS), "name")),
        ("COMMUNICATE", "Communicate checks", _text_rows(list_of(checks.get("communicate"), MAX_CHECKS))),
        ("NL_ASSERTION", "NL assertions", _text_rows(list_of(checks.get("nl_assertions"), MAX_CHECKS))),
        (
            "ENV_ASSERTION",
            "Environment assertions",
            _named_rows(list_of(checks.get("env_assertions"), MAX_CHECKS), "function"),
        ),
    ]
    groups = [CheckGroup(kind, title, rows, not basis or kind in basis) for kind, title, rows in found if rows]
    return ChecksView(
        reward_split=reward_split,
        db_match=db if isinstance(db, bool) else None,
        db_counts=not basis or "DB" in basis,
        groups=groups,
        left_out=int_of(checks.get("left_out"), low=0) or 0,
    )

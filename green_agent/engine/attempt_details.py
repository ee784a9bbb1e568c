"""What the attempt viewer shows beside the conversation, as bounded data: the malformed reply of a ``format_error``
attempt, the task's user scenario (what the simulated user was told), and tau2's every check with met/unmet and the
reward split (what ``tau2 view`` shows of a simulation).

The malformed reply is kept on the attempt (``AttemptResult.malformed_reply``: summary.json, summary.md, the
trajectory file's last line); the scenario and the checks travel only in the ``attempt_finished`` event
(:class:`~green_agent.engine.events.AttemptFinished`), so a backend that never sees the run directory can show them.

Everything here may be text an agent chose (its reply) or long task data (instructions, gold arguments): it is
bounded (:data:`MAX_REPLY_CHARS`, :data:`MAX_SCENARIO_CHARS`, :data:`MAX_CHECKS` per kind, :data:`MAX_CHECK_CHARS`)
and the reply has its control characters replaced (a terminal or a markdown reader must not act on them; line
breaks and tabs stay). Views must still escape it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final, Literal

from pydantic import BaseModel, Field

from green_agent.engine.bounded_json import bounded_copy, json_excerpt
from green_agent.text_safety import clean_text

MAX_REPLY_CHARS: Final = 4096
"""Characters kept of a malformed reply (the rest is counted in ``chars`` and ``truncated`` says so)."""
MAX_SCENARIO_CHARS: Final = 2000
"""Characters kept of one field of the user scenario."""
MAX_CHECKS: Final = 40
"""Checks kept of each kind (``left_out`` counts the rest)."""
MAX_CHECK_CHARS: Final = 500
"""Characters kept of one check's text (communicate info, NL assertion, justification)."""
MAX_CHECKS_JSON_CHARS: Final = 32 * 1024
"""Longest checks object as JSON (the event's body is capped; the trajectory gets what is left)."""
MAX_ARGUMENT_CHARS: Final = 1000
"""Text kept of one gold action's or assertion's arguments (a bounded copy)."""
_CONTROL: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
"""Control characters (all but tab and line feed), direction overrides and Unicode line separators."""
REPLACEMENT: Final = "\ufffd"


def safe_text(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut at ``limit`` characters, valid UTF-8, its control characters replaced by U+FFFD; and whether it
    was cut."""
    cut = len(text) > limit
    return _CONTROL.sub(REPLACEMENT, clean_text(text[:limit])), cut


class MalformedReply(BaseModel):
    """The white agent's reply that ended the attempt as ``format_error``: what it sent, bounded."""

    text: str
    """The reply's text (and its data parts as JSON), at most MAX_REPLY_CHARS characters, control characters
    replaced by U+FFFD. For a reply over the byte cap: the first bytes of the HTTP body read before the cap."""
    chars: int = 0
    """Characters of the reply's text plus its data parts' JSON excerpt (for a reply over the cap: the bytes of the
    body kept before it)."""
    truncated: bool = False
    """True when ``text`` is cut."""
    source: Literal["reply", "http_body"] = "reply"
    """``reply``: the A2A reply's text and data parts; ``http_body``: the raw body of a reply over max_reply_bytes."""
    turn: int | None = None
    """The turn (message index in the conversation, tau2's ``turn_idx``) the reply would have been."""
    step: int | None = None
    """The agent's step (its action count, as the failure detail counts) that the reply was."""


def malformed_reply(
    text: str, data_parts: list[dict[str, Any]], *, turn: int | None, step: int | None
) -> MalformedReply:
    """The bounded record of a reply that is not one action (its text, then its data parts as JSON)."""
    whole = text
    if data_parts:  # the excerpt is bounded: a reply's data parts may hold megabytes
        parts = f"[data parts] {json_excerpt(data_parts, MAX_REPLY_CHARS + 1)}"
        whole = f"{text}\n{parts}" if text else parts
    shown, cut = safe_text(whole, MAX_REPLY_CHARS)
    return MalformedReply(text=shown, chars=len(whole), truncated=cut, source="reply", turn=turn, step=step)


def oversize_reply(head: bytes, *, turn: int | None, step: int | None) -> MalformedReply:
    """The bounded record of a reply refused for its size: the first bytes of its HTTP body (always ``truncated``)."""
    shown, _ = safe_text(head[: MAX_REPLY_CHARS * 4].decode("utf-8", "replace"), MAX_REPLY_CHARS)
    return MalformedReply(text=shown, chars=len(head), truncated=True, source="http_body", turn=turn, step=step)


def malformed_record(reply: MalformedReply, timestamp: str) -> dict[str, Any]:
    """The trajectory file's line for the malformed reply (after the conversation): an assistant message flagged
    ``error`` and ``format_error``, at the turn it would have been."""
    return {
        "role": "assistant",
        "content": reply.text,
        "turn_idx": reply.turn,
        "timestamp": timestamp,
        "error": True,
        "format_error": True,
        "truncated": reply.truncated,
        "chars": reply.chars,
    }


class TaskScenario(BaseModel):
    """What the task told the simulated user (tau2's ``user_scenario``) and what the task is for."""

    task_id: str = ""
    purpose: str | None = None
    """The task's ``description.purpose``."""
    notes: str | None = None
    relevant_policies: str | None = None
    """The task's ``description.relevant_policies`` (what of the policy the task exercises)."""
    persona: str | None = None
    domain: str | None = None
    reason_for_call: str | None = None
    known_info: str | None = None
    unknown_info: str | None = None
    task_instructions: str | None = None
    """For free-text instructions (not tau2's structured ones): the whole text."""


def _field(owner: Any, name: str) -> str | None:
    value = getattr(owner, name, None) if not isinstance(owner, Mapping) else owner.get(name)
    if value is None:
        return None
    return safe_text(value if isinstance(value, str) else str(value), MAX_SCENARIO_CHARS)[0] or None


def task_scenario(task: Any) -> TaskScenario | None:
    """The scenario of a tau2 ``Task`` (read tolerantly); None when the task has no user scenario."""
    scenario = getattr(task, "user_scenario", None)
    if scenario is None:
        return None
    description = getattr(task, "description", None)
    instructions = getattr(scenario, "instructions", None)
    structured = instructions is not None and not isinstance(instructions, str)
    return TaskScenario(
        task_id=safe_text(str(getattr(task, "id", "")), 200)[0],
        purpose=_field(description, "purpose"),
        notes=_field(description, "notes"),
        relevant_policies=_field(description, "relevant_policies"),
        persona=_field(scenario, "persona"),
        domain=_field(instructions, "domain") if structured else None,
        reason_for_call=_field(instructions, "reason_for_call") if structured else None,
        known_info=_field(instructions, "known_info") if structured else None,
        unknown_info=_field(instructions, "unknown_info") if structured else None,
        task_instructions=_field(instructions, "task_instructions")
        if structured
        else (safe_text(instructions, MAX_SCENARIO_CHARS)[0] if isinstance(instructions, str) else None),
    )


class ActionCheck(BaseModel):
    """A gold action and whether a call of the conversation matched it."""

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    requestor: str = "assistant"
    met: bool
    reward: float | None = None


class TextCheck(BaseModel):
    """A communicate check (``info`` the agent had to tell) or an NL assertion, with tau2's verdict."""

    text: str
    met: bool
    justification: str | None = None


class AssertionCheck(BaseModel):
    """An environment assertion of the task and whether it held."""

    function: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    env_type: str | None = None
    met: bool
    message: str | None = None


class RewardChecks(BaseModel):
    """tau2's ``reward_info`` as the viewer shows it: every check with met/unmet and the reward split."""

    reward_basis: list[str] = Field(default_factory=list)
    """The checks the reward is made of (DB, ACTION, COMMUNICATE, NL_ASSERTION, ENV_ASSERTION)."""
    reward_split: dict[str, float] = Field(default_factory=dict)
    """tau2's ``reward_breakdown``: the reward of each check in the basis."""
    db_match: bool | None = None
    """The database check (None when tau2 did not run it)."""
    actions: list[ActionCheck] = Field(default_factory=list)
    communicate: list[TextCheck] = Field(default_factory=list)
    nl_assertions: list[TextCheck] = Field(default_factory=list)
    env_assertions: list[AssertionCheck] = Field(default_factory=list)
    left_out: int = 0
    """Checks beyond MAX_CHECKS of a kind, not listed."""


def _text(value: Any, limit: int = MAX_CHECK_CHARS) -> str:
    return safe_text(value if isinstance(value, str) else "" if value is None else str(value), limit)[0]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if number == number and abs(number) != float("inf") else None


def _items(value: Any) -> list[Mapping[str, Any]]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def _arguments(value: Any) -> dict[str, Any]:
    copied = bounded_copy(value, chars=MAX_ARGUMENT_CHARS) if isinstance(value, Mapping) else {}
    return copied if isinstance(copied, dict) else {}


def _action(item: Mapping[str, Any]) -> ActionCheck:
    action = item.get("action") if isinstance(item.get("action"), Mapping) else {}
    assert isinstance(action, Mapping)
    return ActionCheck(
        name=_text(action.get("name"), 200) or "(unnamed action)",
        arguments=_arguments(action.get("arguments")),
        requestor=_text(action.get("requestor"), 40) or "assistant",
        met=item.get("action_match") is True,
        reward=_number(item.get("action_reward")),
    )


def _text_check(item: Mapping[str, Any], key: str) -> TextCheck:
    justification = item.get("justification")
    return TextCheck(
        text=_text(item.get(key)),
        met=item.get("met") is True,
        justification=_text(justification) if isinstance(justification, str) and justification else None,
    )


def _assertion(item: Mapping[str, Any]) -> AssertionCheck:
    assertion = item.get("env_assertion") if isinstance(item.get("env_assertion"), Mapping) else {}
    assert isinstance(assertion, Mapping)
    message = assertion.get("message")
    return AssertionCheck(
        function=_text(assertion.get("func_name"), 200) or "(unnamed assertion)",
        arguments=_arguments(assertion.get("arguments")),
        env_type=_text(assertion.get("env_type"), 40) or None,
        met=item.get("met") is True,
        message=_text(message) if isinstance(message, str) and message else None,
    )


def fit(checks: RewardChecks, limit: int = MAX_CHECKS_JSON_CHARS) -> RewardChecks:
    """``checks`` with the last entries of its longest list dropped (and counted in ``left_out``) until its JSON is at
    most ``limit`` characters: it travels in the ``attempt_finished`` event, whose body the backend caps."""
    while len(checks.model_dump_json()) > limit:
        lists: list[list[Any]] = [checks.actions, checks.communicate, checks.nl_assertions, checks.env_assertions]
        longest = max(lists, key=len)
        if not longest:
            break
        dropped = max(1, len(longest) // 4)
        del longest[-dropped:]
        checks.left_out += dropped
    return checks


def reward_checks(raw: Mapping[str, Any]) -> RewardChecks | None:
    """The checks of tau2's ``reward_info`` JSON (``RewardBreakdown.raw``); None when it holds none of them (a
    termination tau2 does not score)."""
    keys = ("db_check", "action_checks", "communicate_checks", "nl_assertions", "env_assertions", "reward_breakdown")
    if not any(raw.get(key) for key in keys):
        return None
    lists = {key: _items(raw.get(key)) for key in keys[1:5]}
    left_out = sum(max(0, len(items) - MAX_CHECKS) for items in lists.values())
    split = raw.get("reward_breakdown")
    db = raw.get("db_check")
    basis = raw.get("reward_basis")
    checks = RewardChecks(
        reward_basis=[_text(b, 40) for b in basis[:10]] if isinstance(basis, list) else [],
        reward_split={
            _text(name, 40): number
            for name, value in list(split.items())[:10]
            if (number := _number(value)) is not None
        }
        if isinstance(split, Mapping)
        else {},
        db_match=(db.get("db_match") is True) if isinstance(db, Mapping) else None,
        actions=[_action(item) for item in lists["action_checks"][:MAX_CHECKS]],
        communicate=[_text_check(item, "info") for item in lists["communicate_checks"][:MAX_CHECKS]],
        nl_assertions=[_text_check(item, "nl_assertion") for item in lists["nl_assertions"][:MAX_CHECKS]],
        env_assertions=[_assertion(item) for item in lists["env_assertions"][:MAX_CHECKS]],
        left_out=left_out,
    )
    return fit(checks)


__all__ = [
    "MAX_CHECKS",
    "MAX_CHECK_CHARS",
    "MAX_REPLY_CHARS",
    "MAX_SCENARIO_CHARS",
    "ActionCheck",
    "AssertionCheck",
    "MalformedReply",
    "RewardChecks",
    "TaskScenario",
    "TextCheck",
    "fit",
    "malformed_record",
    "malformed_reply",
    "oversize_reply",
    "reward_checks",
    "safe_text",
    "task_scenario",
]

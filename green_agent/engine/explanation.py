"""Why a scored attempt failed, as data: the field-level database diff, the strings never told, the gold actions
and assertions not met.

Computed once, in the scoring worker, from the same simulation tau2 scored (green_agent/engine/tau/explain.py), and
stored with the attempt (``AttemptResult.explanation``): the summary, the battle page and the trajectory viewer read
it instead of replaying anything. It never feeds back into the verdict: tau2's reward and breakdown are computed
first and left as they were.

Every value in it may come from the agent under test (a record it created, arguments it sent), so everything is
bounded here: at most :data:`MAX_DIFFERENCES` differences, :data:`MAX_ACTIONS` actions, :data:`MAX_ASSERTIONS`
assertions, JSON excerpts of at most :data:`MAX_VALUE_CHARS` characters. Views must still escape it (it is text an
agent chose); the markdown summary shows it as inline code.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, Field

MAX_DIFFERENCES: Final = 50
"""Database differences listed (``total`` counts them all, ``truncated`` says some were left out)."""
MAX_ACTIONS: Final = 20
"""Unmatched gold actions listed."""
MAX_ASSERTIONS: Final = 20
"""Unmet environment assertions listed."""
MAX_COMMUNICATE: Final = 20
"""Missing strings listed (they come from the task, so there are few)."""
MAX_VALUE_CHARS: Final = 500
"""Longest ``expected`` / ``actual`` JSON excerpt (cut with "…")."""
MAX_NAME_CHARS: Final = 200
"""Longest table name, record id, field path, tool name or argument name (cut with "…")."""
MAX_SUMMARY_CHARS: Final = 300
"""Longest one-line summary."""
MAX_ARGUMENTS_CHARS: Final = 1000
"""Text kept of one action's or assertion's arguments (bounded copy: long strings cut, the rest elided)."""
MAX_EXPLANATION_CHARS: Final = 64 * 1024
"""Longest explanation as JSON: it travels in the ``attempt_finished`` event, whose whole body the backend caps at
256 KB (the trajectory gets the rest). Beyond it the last differences, then actions, then assertions are dropped."""

ChangeKind = Literal["changed", "missing_record", "unexpected_record", "missing_field", "unexpected_field"]
"""How the attempt's database differs from the gold one at one place: ``missing_*`` is in gold only,
``unexpected_*`` in the attempt's database only."""


class DbDifference(BaseModel):
    """One place where the attempt's final database differs from the gold database."""

    table: str
    """The top-level key of the database (``orders``), or ``user_db`` for the user's device database (telecom)."""
    record: str | None = None
    """The record's id inside the table (``#W2378156``; ``[3]`` for a list without ids); None for a table that is a
    single object."""
    field: str = ""
    """Dotted path inside the record (``address.city``, ``items[2].price``); empty for the whole record."""
    expected: str | None = None
    """The gold value as JSON text (at most MAX_VALUE_CHARS characters); None when gold has nothing there."""
    actual: str | None = None
    """The attempt's value as JSON text (same bound); None when the attempt's database has nothing there."""
    change: ChangeKind


class DbExplanation(BaseModel):
    """The database check failed: where the attempt's final database differs from the gold one.

    ``total`` 0 with the check failed means the values differ only where Python equality cannot see it (e.g. ``1``
    against ``1.0``, which tau2's JSON hash tells apart)."""

    differences: list[DbDifference] = Field(default_factory=list)
    total: int = 0
    truncated: bool = False


class CommunicateExplanation(BaseModel):
    """The communicate check failed: the required strings no agent message contained."""

    missing: list[str] = Field(default_factory=list)


class CalledTool(BaseModel):
    """A tool call the agent (or the simulated user) made, as recorded in the simulation."""

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    """Bounded copy: long strings cut, deep or wide values elided with "…"."""
    step: int | None = None
    """The message's index in the conversation (tau2's ``turn_idx``; the trajectory viewer's step number)."""


class UnmatchedAction(BaseModel):
    """A gold action no call of the conversation matched, with the call that came closest."""

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    requestor: str = "assistant"
    """``assistant`` (the agent's tool) or ``user`` (the customer's own device tool, telecom)."""
    closest: CalledTool | None = None
    """The same tool first, then the fewest differing arguments, then the earliest; None when no call is close."""
    differing_arguments: list[str] = Field(default_factory=list)
    """The arguments where ``closest`` differs from the gold action (the ones tau2 compares)."""


class UnmetAssertion(BaseModel):
    """An environment assertion of the task (telecom: the device's final state) that did not hold."""

    function: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    message: str | None = None


class FailureExplanation(BaseModel):
    """Why a scored attempt got a reward below 1 (``AttemptResult.explanation``).

    ``db`` and ``communicate`` are None when that check passed or is not part of the task's reward. ``actions``
    lists the unmatched gold actions: all of them when ACTION is part of the reward, else only the write actions
    (the ones that explain a database difference; a different lookup path is not a failure). ``env_assertions``
    lists the unmet assertions when ENV_ASSERTION is part of the reward."""

    summary: str
    """One line, e.g. "database: 1 difference (orders #W2378156 status)"."""
    db: DbExplanation | None = None
    communicate: CommunicateExplanation | None = None
    actions: list[UnmatchedAction] = Field(default_factory=list)
    env_assertions: list[UnmetAssertion] = Field(default_factory=list)


def fit(explanation: FailureExplanation, limit: int = MAX_EXPLANATION_CHARS) -> FailureExplanation:
    """``explanation`` with its last entries dropped until its JSON is at most ``limit`` characters (at least one of
    each list is kept; dropped database differences still count in ``total``, and ``truncated`` says so)."""
    while len(explanation.model_dump_json()) > limit:
        db = explanation.db
        if db is not None and len(db.differences) > 1:
            db.differences = db.differences[: max(1, len(db.differences) * 3 // 4)]
            db.truncated = True
        elif len(explanation.actions) > 1:
            explanation.actions = explanation.actions[: max(1, len(explanation.actions) * 3 // 4)]
        elif len(explanation.env_assertions) > 1:
            explanation.env_assertions = explanation.env_assertions[: max(1, len(explanation.env_assertions) * 3 // 4)]
        elif explanation.communicate is not None and len(explanation.communicate.missing) > 1:
            explanation.communicate.missing = explanation.communicate.missing[:1]
        else:
            break
    return explanation


def cut(text: str, limit: int) -> str:
    """``text`` at most ``limit`` characters long, the cut marked with "…"."""
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


def difference_place(difference: DbDifference) -> str:
    """``orders #W2378156 status``: table, record and field, the empty parts left out."""
    return " ".join(part for part in (difference.table, difference.record, difference.field) if part)


def _plural(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def summarize(explanation: FailureExplanation) -> str:
    """The one-line summary of an explanation's parts (at most MAX_SUMMARY_CHARS characters)."""
    parts: list[str] = []
    if explanation.db is not None:
        db = explanation.db
        if db.total == 0:
            parts.append("database: differs from the goal state, but not in any value equality can see")
        else:
            places = ", ".join(difference_place(d) for d in db.differences[:2])
            more = f" and {db.total - 2} more" if db.total > 2 else ""
            parts.append(f"database: {_plural(db.total, 'difference', 'differences')} ({places}{more})")
    if explanation.communicate is not None and explanation.communicate.missing:
        missing = explanation.communicate.missing
        parts.append(f"never told the user: {_plural(len(missing), 'required string', 'required strings')}")
    if explanation.actions:
        names = ", ".join(dict.fromkeys(action.name for action in explanation.actions))
        parts.append(f"{_plural(len(explanation.actions), 'gold action', 'gold actions')} not matched ({names})")
    if explanation.env_assertions:
        parts.append(f"{_plural(len(explanation.env_assertions), 'assertion', 'assertions')} not met")
    return cut("; ".join(parts) or "no check explains the reward", MAX_SUMMARY_CHARS)


__all__ = [
    "MAX_ACTIONS",
    "MAX_ARGUMENTS_CHARS",
    "MAX_ASSERTIONS",
    "MAX_COMMUNICATE",
    "MAX_DIFFERENCES",
    "MAX_EXPLANATION_CHARS",
    "MAX_NAME_CHARS",
    "MAX_SUMMARY_CHARS",
    "MAX_VALUE_CHARS",
    "CalledTool",
    "ChangeKind",
    "CommunicateExplanation",
    "DbDifference",
    "DbExplanation",
    "FailureExplanation",
    "UnmatchedAction",
    "UnmetAssertion",
    "cut",
    "difference_place",
    "fit",
    "summarize",
]

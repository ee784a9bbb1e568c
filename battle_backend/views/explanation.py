"""The failure explanation of an attempt (``AttemptResult.explanation``; docs/design/progress-events.md, section 1) as a
view: which database fields differ from the gold database, which required strings were never said, which gold actions
the agent missed (with its closest call and the arguments that differ), which environment assertions failed.

The explanation is computed by the green agent and posted with the ``attempt_finished`` event (and in the
BattleResult's attempts); here it is only read, tolerantly and bounded, because a foreign or hostile green agent can
post anything under that key. Values stay text: the template escapes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from battle_backend.battles.tolerant import (
    MAX_NAME_CHARS,
    dict_of,
    int_of,
    json_text,
    list_of,
    name_of,
    str_list,
    text_of,
)

MAX_DIFFERENCES = 100
"""The green agent lists at most 50; a foreign one may list more: the page shows this many."""
MAX_ACTIONS = 40
MAX_ASSERTIONS = 40
MAX_MISSING_STRINGS = 40
MAX_VALUE_CHARS = 2_000
"""expected / actual are JSON text of at most 500 characters as sent; cut again here."""

CHANGE_WORDS = {
    "changed": "value differs",
    "missing_record": "record missing (in the gold database, not in the attempt's)",
    "unexpected_record": "unexpected record (in the attempt's database, not in the gold one)",
    "missing_field": "field missing (in gold, not in the attempt)",
    "unexpected_field": "unexpected field (in the attempt, not in gold)",
}


@dataclass(frozen=True)
class DbDifference:
    """One row of the database diff: where, what gold expected, what the attempt left, and the kind of change."""

    table: str
    record: str
    field: str
    expected: str | None
    """JSON text; None when the value is absent on that side."""
    actual: str | None
    change: str
    change_words: str


@dataclass(frozen=True)
class ActionGap:
    """A gold action the agent did not perform as required, with the closest call it made."""

    name: str
    arguments: str
    """Pretty JSON of the gold arguments."""
    requestor: str
    closest_name: str | None
    closest_arguments: str | None
    closest_step: int | None
    differing_arguments: list[str]


@dataclass(frozen=True)
class AssertionGap:
    """An environment assertion that did not hold."""

    function: str
    arguments: str
    message: str | None


@dataclass(frozen=True)
class ExplanationView:
    """Everything the explanation section shows."""

    summary: str | None
    db_checked: bool
    """False when the database check passed or was not part of the task (``db`` is null)."""
    db_differences: list[DbDifference] = field(default_factory=list)
    db_total: int | None = None
    db_truncated: bool = False
    missing_communicate: list[str] = field(default_factory=list)
    actions: list[ActionGap] = field(default_factory=list)
    env_assertions: list[AssertionGap] = field(default_factory=list)

    @property
    def db_left_out(self) -> int:
        """Differences the green agent counted but did not list (or that the page cut)."""
        if self.db_total is None:
            return 0
        return max(0, self.db_total - len(self.db_differences))


def _difference(raw: Any) -> DbDifference | None:
    item = dict_of(raw)
    if not item:
        return None
    change = name_of(item.get("change")) or "changed"
    return DbDifference(
        table=name_of(item.get("table")),
        record=name_of(item.get("record")),
        field=name_of(item.get("field"), MAX_VALUE_CHARS),
        expected=text_of(item.get("expected"), MAX_VALUE_CHARS),
        actual=text_of(item.get("actual"), MAX_VALUE_CHARS),
        change=change,
        change_words=CHANGE_WORDS.get(change, change),
    )


def _action(raw: Any) -> ActionGap | None:
    item = dict_of(raw)
    if not item:
        return None
    closest = item.get("closest")
    closest_item = dict_of(closest)
    return ActionGap(
        name=name_of(item.get("name")) or "(unnamed action)",
        arguments=json_text(item.get("arguments", {}), MAX_VALUE_CHARS),
        requestor=name_of(item.get("requestor")),
        closest_name=(name_of(closest_item.get("name")) or "(unnamed)") if closest_item else None,
        closest_arguments=json_text(closest_item.get("arguments", {}), MAX_VALUE_CHARS) if closest_item else None,
        closest_step=int_of(closest_item.get("step")) if closest_item else None,
        differing_arguments=str_list(item.get("differing_arguments"), 50, MAX_NAME_CHARS),
    )


def _assertion(raw: Any) -> AssertionGap | None:
    item = dict_of(raw)
    if not item:
        return None
    return AssertionGap(
        function=name_of(item.get("function")) or "(unnamed assertion)",
        arguments=json_text(item.get("arguments", {}), MAX_VALUE_CHARS),
        message=text_of(item.get("message"), MAX_VALUE_CHARS),
    )


def explanation_view(raw: Any) -> ExplanationView | None:
    """The view of a posted explanation; None when there is none (null, or not an object)."""
    explanation = dict_of(raw)
    if not explanation:
        return None
    db = explanation.get("db")
    db_item = dict_of(db)
    communicate = dict_of(explanation.get("communicate"))
    differences = [d for d in map(_difference, list_of(db_item.get("differences"), MAX_DIFFERENCES)) if d]
    actions = [a for a in map(_action, list_of(explanation.get("actions"), MAX_ACTIONS)) if a]
    assertions = [a for a in map(_assertion, list_of(explanation.get("env_assertions"), MAX_ASSERTIONS)) if a]
    return ExplanationView(
        summary=text_of(explanation.get("summary"), MAX_VALUE_CHARS),
        db_checked=bool(db_item),
        db_differences=differences,
        db_total=int_of(db_item.get("total"), low=0),
        db_truncated=db_item.get("truncated") is True,
        missing_communicate=str_list(communicate.get("missing"), MAX_MISSING_STRINGS, MAX_VALUE_CHARS),
        actions=actions,
        env_assertions=assertions,
    )

"""The field-level difference between two tau2 databases, as ``model_dump()`` gives them (plain dicts and lists).

Why a diff of our own: tau2 only compares hashes of the two databases (``get_db_hash``), so a failed database check
says nothing about *where* they differ. This walks both dumps and names each place: the table (top-level key), the
record (its id: the key in a dict of records, or the ``*_id`` field of a list of records) and the field (a dotted
path inside the record, list positions as ``[i]``).

Costs and bounds: tables and records equal as a whole are skipped with one C-level ``==`` (a failed retail attempt
typically differs in one or two records out of ~1 550), so the walk is proportional to what differs. Only the first
:data:`~green_agent.engine.explanation.MAX_DIFFERENCES` differences are rendered (JSON excerpts of at most
:data:`~green_agent.engine.explanation.MAX_VALUE_CHARS` characters); the rest are only counted. Nesting deeper than
:data:`MAX_FIELD_DEPTH` inside a record is compared as one value; a comparison too deep for Python's ``==`` counts
as different. The order is deterministic: tables, records and fields in gold's order (tau2's data files fix it), then
what only the attempt's database has, in its order.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from green_agent.engine.bounded_json import json_excerpt, safe_equal
from green_agent.engine.explanation import (
    MAX_DIFFERENCES,
    MAX_NAME_CHARS,
    MAX_VALUE_CHARS,
    ChangeKind,
    DbDifference,
    DbExplanation,
    cut,
)

MAX_FIELD_DEPTH: Final = 12
"""Levels walked inside a record; deeper values are compared (and shown) whole."""
USER_DB_TABLE: Final = "user_db"
"""The table name given to the user's own database (telecom's phone: its records are ``device``, ``surroundings``)."""


class _Absent:
    """Nothing at this place (distinct from a JSON null)."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Final = _Absent()


@dataclass(frozen=True, slots=True)
class _Place:
    table: str
    record: str | None
    field: str
    expected: Any
    actual: Any
    change: ChangeKind


def _same_leaf(left: Any, right: Any) -> bool:
    """Leaves are the same when equal *and* of one type: tau2's JSON hash tells ``1`` from ``1.0`` and ``True``."""
    return type(left) is type(right) and safe_equal(left, right)


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _ordered_keys(expected: Mapping[Any, Any], actual: Mapping[Any, Any]) -> list[Any]:
    """Gold's keys in order, then the attempt's extra keys in order."""
    return [*expected, *(key for key in actual if key not in expected)]


def _walk_value(table: str, record: str | None, path: str, expected: Any, actual: Any, depth: int) -> Iterator[_Place]:
    """The places inside one record (or one single-object table) where the two values differ."""
    missing: ChangeKind = "missing_field" if path else "missing_record"
    unexpected: ChangeKind = "unexpected_field" if path else "unexpected_record"
    if expected is ABSENT:
        yield _Place(table, record, path, ABSENT, actual, unexpected)
    elif actual is ABSENT:
        yield _Place(table, record, path, expected, ABSENT, missing)
    elif depth < MAX_FIELD_DEPTH and isinstance(expected, Mapping) and isinstance(actual, Mapping):
        if safe_equal(expected, actual):
            return
        for key in _ordered_keys(expected, actual):
            yield from _walk_value(
                table, record, _join(path, key), expected.get(key, ABSENT), actual.get(key, ABSENT), depth + 1
            )
    elif depth < MAX_FIELD_DEPTH and isinstance(expected, list) and isinstance(actual, list):
        if safe_equal(expected, actual):
            return
        for index in range(max(len(expected), len(actual))):
            yield from _walk_value(
                table,
                record,
                f"{path}[{index}]",
                expected[index] if index < len(expected) else ABSENT,
                actual[index] if index < len(actual) else ABSENT,
                depth + 1,
            )
    elif not _same_leaf(expected, actual):
        yield _Place(table, record, path, expected, actual, "changed")


def _id_field(items: Sequence[Any]) -> str | None:
    """The field that identifies the records of a list (``plan_id``, ``customer_id``...), if one does.

    A candidate is a key of the first record named ``id`` or ending in ``_id``; it identifies the records when every
    item is a dict holding it with a distinct string or integer value."""
    if not items or not all(isinstance(item, Mapping) for item in items):
        return None
    for key in items[0]:
        if not (key == "id" or str(key).endswith("_id")):
            continue
        values = [item.get(key, ABSENT) for item in items]
        if all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in values) and len(set(values)) == len(
            values
        ):
            return str(key)
    return None


def _records(value: Any) -> dict[Any, Any] | None:
    """A table's records by id, or None when the table is a single object (not a collection of records)."""
    if isinstance(value, Mapping):
        if value and all(isinstance(item, Mapping) for item in value.values()):
            return dict(value)
        return None
    if isinstance(value, list) and value and all(isinstance(item, Mapping) for item in value):
        key = _id_field(value)
        if key is not None:
            return {item[key]: item for item in value}
        return {f"[{index}]": item for index, item in enumerate(value)}
    return None


def _empty_collection(value: Any) -> bool:
    return isinstance(value, (Mapping, list)) and len(value) == 0


def _walk_table(table: str, expected: Any, actual: Any) -> Iterator[_Place]:
    """The places where one table differs: whole records missing or unexpected, then fields of shared records."""
    if safe_equal(expected, actual):
        return
    expected_records, actual_records = _records(expected), _records(actual)
    if expected_records is None and actual_records is not None and _empty_collection(expected):
        expected_records = {}
    if actual_records is None and expected_records is not None and _empty_collection(actual):
        actual_records = {}
    if expected_records is None or actual_records is None:
        yield from _walk_value(table, None, "", expected, actual, 1)
        return
    for key in _ordered_keys(expected_records, actual_records):
        left, right = expected_records.get(key, ABSENT), actual_records.get(key, ABSENT)
        if left is not ABSENT and right is not ABSENT and safe_equal(left, right):
            continue
        yield from _walk_value(table, str(key), "", left, right, 1)


def _walk_database(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> Iterator[_Place]:
    """Every table of an agent database (its top-level keys)."""
    for table in _ordered_keys(expected, actual):
        left, right = expected.get(table, ABSENT), actual.get(table, ABSENT)
        if left is ABSENT or right is ABSENT:
            yield _Place(str(table), None, "", left, right, "missing_field" if right is ABSENT else "unexpected_field")
        else:
            yield from _walk_table(str(table), left, right)


def _excerpt(value: Any) -> str | None:
    return None if value is ABSENT else json_excerpt(value, MAX_VALUE_CHARS)


def _difference(place: _Place) -> DbDifference:
    return DbDifference(
        table=cut(place.table, MAX_NAME_CHARS),
        record=None if place.record is None else cut(place.record, MAX_NAME_CHARS),
        field=cut(place.field, MAX_NAME_CHARS),
        expected=_excerpt(place.expected),
        actual=_excerpt(place.actual),
        change=place.change,
    )


def diff_databases(
    expected: Mapping[str, Any],
    actual: Mapping[str, Any],
    *,
    expected_user: Mapping[str, Any] | None = None,
    actual_user: Mapping[str, Any] | None = None,
) -> DbExplanation:
    """Where the attempt's databases (``actual``; ``actual_user`` the user's device database, telecom) differ from
    the gold ones; the first MAX_DIFFERENCES rendered, all of them counted."""
    places: Iterator[_Place] = _walk_database(expected, actual)
    if expected_user is not None and actual_user is not None:
        places = _chain(places, _walk_table(USER_DB_TABLE, expected_user, actual_user))
    differences: list[DbDifference] = []
    total = 0
    for place in places:
        total += 1
        if len(differences) < MAX_DIFFERENCES:
            differences.append(_difference(place))
    return DbExplanation(differences=differences, total=total, truncated=total > len(differences))


def _chain(*parts: Iterator[_Place]) -> Iterator[_Place]:
    for part in parts:
        yield from part


__all__ = ["ABSENT", "MAX_FIELD_DEPTH", "USER_DB_TABLE", "diff_databases"]

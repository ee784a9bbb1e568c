"""A2A data parts (``google.protobuf.Value``) read into Python values: what ``MessageToDict`` gives, with less work.

Why: json_format's ``MessageToDict`` (behind ``a2a.helpers.get_data_parts``) dispatches every node through its
generic machinery (descriptor lookups, well-known-type tables); the first message of an attempt carries the policy
and every tool schema as one data part of hundreds of nested values, and converting it was a visible share of the
white agent's CPU for that turn. :func:`data_part_values` walks the Value tree directly and returns the same thing:
the same types (numbers are floats, as protobuf stores them), the same key order (the map's iteration order, which
json_format follows too), ``None`` for null and unset values. What json_format refuses to convert (an infinite or
NaN number) is handed back to it, so the error raised is its own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from a2a.types.a2a_pb2 import Part
from google.protobuf.json_format import MessageToDict
from google.protobuf.struct_pb2 import Value


class _NotJson(Exception):
    """A number JSON cannot hold: json_format decides what happens (it raises)."""


def _plain(value: Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        fields = value.struct_value.fields
        return {key: _plain(fields[key]) for key in fields}
    if kind == "list_value":
        return [_plain(item) for item in value.list_value.values]
    if kind == "string_value":
        return value.string_value
    if kind == "number_value":
        number = value.number_value
        if math.isinf(number) or math.isnan(number):
            raise _NotJson
        return number
    if kind == "bool_value":
        return value.bool_value
    return None  # null_value, or no kind set


def data_part_values(parts: Iterable[Part]) -> list[Any]:
    """The values of the data parts among ``parts``, in order (``a2a.helpers.get_data_parts``' result)."""
    values: list[Any] = []
    for part in parts:
        if part.HasField("data"):
            try:
                values.append(_plain(part.data))
            except _NotJson:
                values.append(MessageToDict(part.data))
    return values

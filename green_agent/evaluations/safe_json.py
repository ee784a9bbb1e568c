"""JSON in and out of the evaluations endpoints, safe against hostile values.

Why: Python's ``json`` accepts what a browser's ``JSON.parse`` refuses (``NaN``, ``Infinity``) and decodes escapes
into strings that cannot be encoded as UTF-8 (lone surrogates, ``"\\ud800"``). Both come from requests, from CSV
cells and from the agent under test's replies; one of them in a server-sent event made the page drop that event,
one in a /run answer made the server fail to encode it. Values are made safe where they leave
(:func:`wire_safe`), and text parsed from cells or form fields is bounded before ``json`` sees it
(:func:`loads_bounded`: deep nesting raises RecursionError in ``json``, numbers of thousands of digits a bare
ValueError).
"""

from __future__ import annotations

import json
import math
from typing import Any

from green_agent.body_limits import json_shape_problem
from green_agent.text_safety import clean_json

MAX_JSON_DEPTH = 64
FLOAT_RANGE = 2**1023
"""Integers from this magnitude up may not convert to a float (OverflowError); refused where they are compared."""


class JsonRefused(ValueError):
    """Text that is not usable JSON; the message says why (never the text itself)."""


def wire_safe(value: Any) -> Any:
    """A copy of a JSON-like value fit for any JSON parser: strings (keys included) cleaned of lone surrogates,
    non-finite floats as null (what ``JSON.stringify`` does), tuples as lists. Iterative: no recursion limit."""
    return clean_json(value, null_non_finite=True)


def _refuse_constant(name: str) -> Any:
    raise JsonRefused(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonRefused(f"the number {text[:40]} is out of range")
    return value


def _float_range_int(text: str) -> int:
    value = int(text)
    if abs(value) >= FLOAT_RANGE:  # tool arguments are compared numerically: a float must be able to hold it
        raise JsonRefused(f"the integer {text[:20]}... is out of range (beyond a double)")
    return value


def loads_bounded(text: str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` that raises only :class:`json.JSONDecodeError` (with its position) or :class:`JsonRefused`:
    nesting deeper than ``max_depth``, numbers of more than 1000 digits, NaN / Infinity and numbers no double can
    hold are refused; lone surrogates in strings are replaced by U+FFFD."""
    problem = json_shape_problem(text.encode("utf-8", "surrogatepass"), max_depth=max_depth)
    if problem:
        raise JsonRefused(problem.replace(" in the body", ""))
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float, parse_int=_float_range_int)
    except (json.JSONDecodeError, JsonRefused):
        raise
    except (ValueError, RecursionError) as error:
        raise JsonRefused(f"not usable JSON ({type(error).__name__})") from None
    return wire_safe(value)

"""Tool-call matching: argument canonicalisation and an optimal assignment of expected calls to actual calls.

Why canonicalise: agents and references disagree on representation, not meaning: key order of nested objects,
``1`` vs ``1.0``, ``" Tech"`` vs ``"tech"``, ``"7"`` vs ``7``, list order of an unordered set of tickers. Comparing
``str()`` of the values (as ragas does) or raw ``==`` turns those into errors. What counts as "the same" is a
per-use decision, hence :class:`CanonicalOptions`; only key order and int/float are always normalised.

Why an optimal assignment: matching each expected call to "the first actual call with that name" (deepeval,
Fair-Forge) or greedily in list order (the Java ragas port) makes the score depend on call order and fails repeated
calls of one tool: two identical expected ``search(q=a)`` calls against the same two actual calls score 0.5. Here
the expected x actual matrix is solved with ``scipy.optimize.linear_sum_assignment`` maximising, in strict priority,
(1) the number of *correct* pairs, (2) the number of same-name pairs, (3) the total argument score. Every
order-insensitive number below is therefore invariant under any permutation of either list.

Reported separately (one number cannot say all of it):
- precision, recall, F1 over calls (a call counts when its pair is *correct* under the mode);
- mean argument score over the same-name pairs (how close the arguments were, correct or not);
- order score: longest common subsequence of the two *name* sequences divided by the number of expected calls
  (argument quality is already measured above, so order is judged on which tools were called when);
- exact-sequence flag: same length and every position a correct pair.

Modes: STRICT, a pair is correct when the names are equal and the canonical arguments are equal (same keys, equal
values). FLEXIBLE, when the names are equal and the argument score is >= ``argument_match_threshold`` (0.8).
The argument score is the share of reference keys whose values match (extra actual keys ignored), or with
``extra_arguments="penalize"`` the share of the union of keys present on both sides with matching values.

Empty lists: when both sides are empty every score is 1.0; when only one side is empty precision, recall, F1 and
the order score are 0.0 (nothing expected was done, or everything done was unexpected).
"""

from __future__ import annotations

import json
import math
import numbers
import re
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from decimal import Decimal
from enum import StrEnum
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from green_agent.statistics._validation import ordered_items, require_probability


class MatchMode(StrEnum):
    """When an (expected, actual) pair of same-name calls counts as correct."""

    STRICT = "strict"
    FLEXIBLE = "flexible"


class ExtraArguments(StrEnum):
    """Whether actual arguments absent from the reference lower the argument score."""

    IGNORE = "ignore"
    PENALIZE = "penalize"


class CanonicalOptions(BaseModel):
    """How argument values are normalised and compared. Key order and int vs float never matter."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    casefold_strings: bool = False
    """Compare strings case-insensitively (``str.casefold``)."""
    trim_strings: bool = False
    """Strip leading and trailing whitespace of strings."""
    numeric_strings: bool = False
    """Read strings holding a decimal number literal (``"7"``, ``" 1.5e3 "``) as that number."""
    unordered_lists: bool = False
    """Compare lists as multisets (order ignored, multiplicity kept)."""
    rel_tol: float = Field(default=1e-9, ge=0.0, allow_inf_nan=False)
    """Relative tolerance for numbers (as in ``math.isclose``)."""
    abs_tol: float = Field(default=1e-12, ge=0.0, allow_inf_nan=False)
    """Absolute tolerance for numbers."""


DEFAULT_OPTIONS = CanonicalOptions()


class ToolCall(BaseModel):
    """One tool call: a name and its arguments (a JSON object)."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class MatchedPair(BaseModel):
    """A same-name (expected, actual) pair chosen by the optimal assignment."""

    model_config = ConfigDict(frozen=True)

    expected_index: int
    actual_index: int
    name: str
    argument_score: float
    correct: bool


class ToolCallMatch(BaseModel):
    """Everything :func:`match_tool_calls` measured."""

    model_config = ConfigDict(frozen=True)

    mode: MatchMode
    argument_match_threshold: float
    extra_arguments: ExtraArguments
    expected_count: int
    actual_count: int
    pairs: list[MatchedPair]
    """Same-name pairs of the optimal assignment, by expected index."""
    correct_count: int
    precision: float
    recall: float
    f1: float
    mean_argument_score: float | None
    """Mean argument score over ``pairs``; ``None`` when no same-name pair exists."""
    order_score: float
    exact_sequence: bool
    missing_expected: list[int]
    """Expected calls without a correct partner."""
    unexpected_actual: list[int]
    """Actual calls without a correct partner."""


# --- canonicalisation ----------------------------------------------------------------------------------------------

_NUMBER_LITERAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_INT_LITERAL = re.compile(r"[+-]?\d+")


def _parse_number(text: str) -> int | float | None:
    stripped = text.strip()
    if not _NUMBER_LITERAL.fullmatch(stripped):
        return None
    if _INT_LITERAL.fullmatch(stripped):
        return int(stripped)
    value = float(stripped)
    return value if math.isfinite(value) else None


def _type_rank(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, bool):
        return 1
    if isinstance(value, (int, float)):
        return 2
    if isinstance(value, str):
        return 3
    if isinstance(value, list):
        return 4
    if isinstance(value, dict):
        return 5
    return 6


def _sort_key(value: Any) -> tuple[int, str]:
    return _type_rank(value), repr(value)


def _canon(value: Any, o: CanonicalOptions) -> Any:
    if value is None or type(value) is bool:
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, (numbers.Real, Decimal)):
        return float(value)
    if isinstance(value, str):
        text = value
        if o.numeric_strings:
            number = _parse_number(text)
            if number is not None:
                return number
        if o.trim_strings:
            text = text.strip()
        if o.casefold_strings:
            text = text.casefold()
        return text
    if isinstance(value, Mapping):
        keys = sorted(value.keys(), key=_sort_key)
        return {key: _canon(value[key], o) for key in keys}
    if isinstance(value, (list, tuple)):
        items = [_canon(item, o) for item in value]
        if o.unordered_lists:
            items.sort(key=_sort_key)
        return items
    if isinstance(value, AbstractSet):
        return sorted((_canon(item, o) for item in value), key=_sort_key)
    return value


def canonicalize(value: Any, options: CanonicalOptions | None = None) -> Any:
    """The canonical form of a JSON-like value under ``options``; idempotent.

    Mappings become dicts with sorted keys, tuples become lists, numbers become int or float (bools stay bools:
    ``true`` is not ``1``), strings are trimmed / case-folded / read as numbers as the options say, lists are sorted
    when ``unordered_lists`` (sets always). Other objects are returned unchanged and compared with ``==``.
    """
    return _canon(value, options or DEFAULT_OPTIONS)


_NUMBER_TYPES = (int, float)


def _equal(a: Any, b: Any, o: CanonicalOptions) -> bool:
    """Equality of two canonical values: numbers within tolerance, dicts by keys, lists ordered or as multisets.

    Canonical values are exactly None, bool, int, float, str, list or dict (or an opaque object), so dispatching on
    the exact type is safe and keeps ``True`` apart from ``1``.
    """
    ta, tb = type(a), type(b)
    if ta is str or tb is str:
        return ta is tb and a == b
    if ta in _NUMBER_TYPES and tb in _NUMBER_TYPES:
        if a == b:
            return True
        fa, fb = float(a), float(b)
        if math.isnan(fa) or math.isnan(fb):
            return math.isnan(fa) and math.isnan(fb)
        return math.isclose(fa, fb, rel_tol=o.rel_tol, abs_tol=o.abs_tol)
    if ta is bool or tb is bool:
        return ta is tb and a == b
    if ta is dict and tb is dict:
        return a.keys() == b.keys() and all(_equal(a[k], b[k], o) for k in a)
    if ta is list and tb is list:
        if len(a) != len(b):
            return False
        if all(_equal(x, y, o) for x, y in zip(a, b, strict=True)):
            return True
        if not o.unordered_lists:
            return False
        # Multiset equality under tolerance: a perfect matching must exist.
        eq = np.array([[_equal(x, y, o) for y in b] for x in a], dtype=np.float64)
        from scipy.optimize import linear_sum_assignment  # lazily: ~0.6 s of import the start-up skips

        rows, cols = linear_sum_assignment(eq, maximize=True)
        return bool(eq[rows, cols].sum() == len(a))
    if ta in (dict, list) or tb in (dict, list):
        return False
    return bool(a == b)


def _fingerprint(value: Any) -> str | None:
    """``repr`` of a canonical JSON-like value: equal fingerprints imply equal values (``True`` and ``1`` differ).

    ``None`` when an opaque object is inside, whose ``repr`` proves nothing. A cheap sufficient test used before
    the tolerance-aware comparison.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(item.values())
            if not all(type(k) is str for k in item):
                return None
        elif kind is list:
            stack.extend(item)
        elif item is not None and kind not in (str, int, float, bool):
            return None
    return repr(value)


def values_match(expected: Any, actual: Any, options: CanonicalOptions | None = None) -> bool:
    """True when two values are equal after canonicalisation, numbers within the options' tolerances."""
    o = options or DEFAULT_OPTIONS
    return _equal(_canon(expected, o), _canon(actual, o), o)


class _Args:
    """Canonical arguments of one call with a fingerprint per value, computed once per call, not once per pair."""

    __slots__ = ("prints", "values")

    def __init__(self, values: dict[Any, Any]) -> None:
        self.values = values
        self.prints = {k: _fingerprint(v) for k, v in values.items()}


def _hits(expected: _Args, actual: _Args, o: CanonicalOptions) -> int:
    hits = 0
    act_values, act_prints = actual.values, actual.prints
    for key, value in expected.values.items():
        if key not in act_values:
            continue
        fp = expected.prints[key]
        if (fp is not None and fp == act_prints[key]) or _equal(value, act_values[key], o):
            hits += 1
    return hits


def _arg_score(expected: _Args, actual: _Args, o: CanonicalOptions, penalize: bool) -> float:
    total = len(expected.values.keys() | actual.values.keys()) if penalize else len(expected.values)
    if total == 0:
        return 1.0
    return _hits(expected, actual, o) / total


def _check_arguments(name: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{name} must be a mapping of argument name -> value, got {type(value).__name__}")
    return value


def _extra_mode(value: Any) -> ExtraArguments:
    try:
        return ExtraArguments(value)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in ExtraArguments)
        raise ValueError(f"extra_arguments must be one of {allowed}, got {value!r}") from None


def _match_mode(value: Any) -> MatchMode:
    try:
        return MatchMode(value)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in MatchMode)
        raise ValueError(f"mode must be one of {allowed}, got {value!r}") from None


def argument_score(
    expected: Mapping[str, Any],
    actual: Mapping[str, Any],
    *,
    options: CanonicalOptions | None = None,
    extra_arguments: ExtraArguments | str = ExtraArguments.IGNORE,
) -> float:
    """Share of the reference's argument keys whose values match (extra actual keys ignored by default).

    With ``extra_arguments="penalize"`` the denominator is the union of both key sets, so unexpected arguments
    lower the score. No keys at all scores 1.0.

    >>> argument_score({"id": 1, "seats": 2}, {"id": 1.0, "seats": 3})
    0.5
    """
    o = options or DEFAULT_OPTIONS
    penalize = _extra_mode(extra_arguments) is ExtraArguments.PENALIZE
    exp = _Args(_canon(dict(_check_arguments("expected", expected)), o))
    act = _Args(_canon(dict(_check_arguments("actual", actual)), o))
    return _arg_score(exp, act, o, penalize)


# --- matching ------------------------------------------------------------------------------------------------------


def as_tool_call(value: Any, where: str = "call") -> ToolCall:
    """Accept a :class:`ToolCall` or a mapping with ``name``/``tool_name`` and ``arguments``/``parameters``/``args``.

    Arguments given as a JSON string (as in OpenAI tool calls) are parsed; they must decode to an object.
    """
    if isinstance(value, ToolCall):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} must be a ToolCall or a mapping with a 'name', got {type(value).__name__}")
    name = value.get("name", value.get("tool_name"))
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where} must have a non-empty string 'name' (or 'tool_name'), got {name!r}")
    args: Any = {}
    for key in ("arguments", "parameters", "args"):
        if key in value:
            args = value[key]
            break
    if args is None:
        args = {}
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}.arguments is a string that is not valid JSON: {exc.msg}") from None
    if not isinstance(args, Mapping):
        raise ValueError(f"{where}.arguments must be a mapping (JSON object), got {type(args).__name__}")
    return ToolCall(name=name, arguments=dict(args))


def as_tool_calls(values: Any, name: str) -> list[ToolCall]:
    """Validate a list of calls (see :func:`as_tool_call`)."""
    return [as_tool_call(v, f"{name}[{i}]") for i, v in enumerate(ordered_items(name, values))]


def _lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    if not a or not b:
        return 0
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def _ratio(num: int, den: int, *, empty_other: bool) -> float:
    if den:
        return num / den
    return 1.0 if empty_other else 0.0


def match_tool_calls(
    expected: Sequence[ToolCall | Mapping[str, Any]],
    actual: Sequence[ToolCall | Mapping[str, Any]],
    *,
    mode: MatchMode | str = MatchMode.STRICT,
    argument_match_threshold: float = 0.8,
    options: CanonicalOptions | None = None,
    extra_arguments: ExtraArguments | str = ExtraArguments.IGNORE,
) -> ToolCallMatch:
    """Optimally match expected to actual tool calls and score the result (see the module docstring).

    >>> m = match_tool_calls([{"name": "search", "arguments": {"q": "a"}}] * 2,
    ...                      [{"name": "search", "arguments": {"q": "a"}}] * 2)
    >>> m.f1
    1.0
    """
    mode = _match_mode(mode)
    threshold = require_probability("argument_match_threshold", argument_match_threshold)
    extra = _extra_mode(extra_arguments)
    if options is not None and not isinstance(options, CanonicalOptions):
        raise ValueError(f"options must be a CanonicalOptions, got {type(options).__name__}")
    o = options or DEFAULT_OPTIONS
    exp_calls = as_tool_calls(expected, "expected")
    act_calls = as_tool_calls(actual, "actual")
    n_exp, n_act = len(exp_calls), len(act_calls)
    exp_args = [_Args(_canon(c.arguments, o)) for c in exp_calls]
    act_args = [_Args(_canon(c.arguments, o)) for c in act_calls]
    penalize = extra is ExtraArguments.PENALIZE

    # Score only same-name pairs; everything else has weight 0 and is never a match.
    score: dict[tuple[int, int], tuple[float, bool]] = {}
    by_name: dict[str, list[int]] = {}
    for j, call in enumerate(act_calls):
        by_name.setdefault(call.name, []).append(j)
    for i, call in enumerate(exp_calls):
        for j in by_name.get(call.name, ()):
            ea, aa = exp_args[i], act_args[j]
            hits = _hits(ea, aa, o)
            n_ref = len(ea.values)
            same_keys = ea.values.keys() == aa.values.keys()
            if penalize:
                union = n_ref if same_keys else len(ea.values.keys() | aa.values.keys())
                s = hits / union if union else 1.0
            else:
                s = hits / n_ref if n_ref else 1.0
            ok = same_keys and hits == n_ref if mode is MatchMode.STRICT else s >= threshold
            score[(i, j)] = (s, ok)

    pairs: list[MatchedPair] = []
    if score:
        big = min(n_exp, n_act) + 1
        weights = np.zeros((n_exp, n_act), dtype=np.float64)
        for (i, j), (s, ok) in score.items():
            weights[i, j] = (big * big if ok else 0.0) + big + s
        from scipy.optimize import linear_sum_assignment  # lazily, as above

        rows, cols = linear_sum_assignment(weights, maximize=True)
        for i, j in zip(rows.tolist(), cols.tolist(), strict=True):
            if (i, j) in score:
                s, ok = score[(i, j)]
                pairs.append(
                    MatchedPair(expected_index=i, actual_index=j, name=exp_calls[i].name, argument_score=s, correct=ok)
                )
    pairs.sort(key=lambda p: p.expected_index)
    correct = [p for p in pairs if p.correct]
    n_ok = len(correct)
    precision = _ratio(n_ok, n_act, empty_other=n_exp == 0)
    recall = _ratio(n_ok, n_exp, empty_other=n_act == 0)
    f1 = 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
    lcs = _lcs_length([c.name for c in exp_calls], [c.name for c in act_calls])
    order = _ratio(lcs, n_exp, empty_other=n_act == 0)
    exact = n_exp == n_act and all((i, i) in score and score[(i, i)][1] for i in range(n_exp))
    ok_exp = {p.expected_index for p in correct}
    ok_act = {p.actual_index for p in correct}
    return ToolCallMatch(
        mode=mode,
        argument_match_threshold=threshold,
        extra_arguments=extra,
        expected_count=n_exp,
        actual_count=n_act,
        pairs=pairs,
        correct_count=n_ok,
        precision=precision,
        recall=recall,
        f1=f1,
        mean_argument_score=(math.fsum(p.argument_score for p in pairs) / len(pairs)) if pairs else None,
        order_score=order,
        exact_sequence=exact,
        missing_expected=[i for i in range(n_exp) if i not in ok_exp],
        unexpected_actual=[j for j in range(n_act) if j not in ok_act],
    )

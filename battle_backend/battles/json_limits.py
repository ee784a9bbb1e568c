"""Bounds on the JSON a remote party sends the backend: event bodies, results, agent cards, MCP arguments.

Why: the backend's callers are agents, launchers and browsers it does not control, and Python's defaults are unsafe
for hostile input. ``await request.body()`` buffers whatever arrives (a chunked body has no Content-Length to
refuse up front); ``json.loads`` recurses once per nesting level (a RecursionError: a 500), turns ``1e999`` into
``inf`` and accepts ``NaN`` (which ``JSONResponse`` then refuses to send: a 500 on every later read of the battle),
raises on integers of more than 4300 digits, and turns ``"\\ud800"`` escapes into lone surrogates, which neither
SQLite nor any UTF-8 encoder accepts. This module turns each of those into a 4xx that names the field and the
limit, in one place used by every route, the MCP tools and the agent-card fetch. Reading the bytes of a request
body, bounded, is :mod:`battle_backend.http.body`'s job; the text checks the stores share are
:mod:`battle_backend.store.json_text`'s.

Status codes (bodies are FastAPI-shaped: ``{"detail": [{"type", "loc", "msg", "ctx"?}]}``):

- 413: a body or an event larger than its cap; ``ctx`` holds ``limit`` (bytes) and ``setting`` (its name in
  ``BackendSettings``);
- 400: a JSON value out of bounds: nesting deeper than ``max_json_depth``, an integer longer than
  ``max_json_int_digits``, NaN/Infinity or a number that overflows to infinity, a lone surrogate in a string or a
  key (rejected, never replaced: the sender learns which field to fix);
- 422: not JSON at all (malformed, empty, not UTF-8: ``json_invalid``), as FastAPI and AgentBeats answer.

Limits live in ``BackendSettings`` and are passed down; nothing here is process-wide.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from battle_backend.battles.api_models import ApiError
from battle_backend.settings import BackendSettings
from battle_backend.store.json_text import has_lone_surrogate, safe_text

Loc = Sequence[str | int]

OFFLOAD_BYTES = 256 * 1024
"""Bodies at least this large are parsed and checked in a worker thread, so a big result does not stall the loop."""


@dataclass(frozen=True)
class JsonLimits:
    """What a JSON value may contain (see ``BackendSettings.max_json_depth`` / ``max_json_int_digits``)."""

    max_depth: int = 64
    max_int_digits: int = 64

    @classmethod
    def from_settings(cls, settings: BackendSettings) -> JsonLimits:
        """The limits configured for one backend."""
        return cls(max_depth=settings.max_json_depth, max_int_digits=settings.max_json_int_digits)


def _error(status: int, kind: str, loc: Loc, msg: str, **ctx: Any) -> ApiError:
    item: dict[str, Any] = {"type": kind, "loc": [safe_text(p) if isinstance(p, str) else p for p in loc], "msg": msg}
    if ctx:
        item["ctx"] = ctx
    return ApiError(status, [item])


class BodyTooLarge(ApiError):
    """413: a body or event over its cap. An ApiError, so the app's handler renders it wherever it is raised."""

    def __init__(self, limit: int, setting: str, *, what: str = "request body", loc: Loc = ("body",)) -> None:
        error = _error(
            413,
            "too_large",
            loc,
            f"{what} is larger than {limit} bytes (the backend's {setting} setting)",
            limit=limit,
            setting=setting,
        )
        super().__init__(413, error.detail)
        self.limit = limit
        self.setting = setting


# --- parsing and checking JSON --------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Rejected:
    """Stands in for a number the decoder must not produce; the walk reports it with its location."""

    kind: str
    msg: str


def _decoder(limits: JsonLimits, rejected: list[_Rejected]) -> json.JSONDecoder:
    """A decoder whose number hooks put a :class:`_Rejected` stand-in (also noted in ``rejected``) where a number
    out of bounds was: the check then locates it, instead of json failing with a position only (or a ValueError
    that would read as malformed JSON)."""

    def reject(kind: str, msg: str) -> _Rejected:
        stand_in = _Rejected(kind, msg)
        rejected.append(stand_in)
        return stand_in

    def parse_int(text: str) -> int | _Rejected:
        digits = len(text) - (1 if text.startswith("-") else 0)
        if digits > limits.max_int_digits:
            return reject("int_too_long", f"integer with {digits} digits; at most {limits.max_int_digits} are accepted")
        return int(text)

    def parse_float(text: str) -> float | _Rejected:
        number = float(text)
        if not math.isfinite(number):
            return reject("non_finite_number", f"number {text[:40]} overflows to infinity; JSON numbers must be finite")
        return number

    def parse_constant(name: str) -> _Rejected:
        return reject("non_finite_number", f"{name} is not valid JSON (numbers must be finite)")

    return json.JSONDecoder(parse_int=parse_int, parse_float=parse_float, parse_constant=parse_constant)


_WHITESPACE = re.compile(r"[ \t\n\r]*")


def _locate_too_deep(text: str, decoder: json.JSONDecoder, max_depth: int) -> list[str | int]:
    """Where a body too deep for ``json.loads`` itself (a RecursionError, ~1000 levels) goes too deep.

    Descends the text one container at a time: each member is decoded whole (in C) until one fails with a
    RecursionError, which is the member to enter; the descent stops at ``max_depth``, far above the recursion
    limit, so it never recurses deeply itself. Only hostile bodies come here. Gives up (with the path so far) on
    anything malformed.
    """
    path: list[str | int] = []
    pos = _WHITESPACE.match(text, 0).end()  # type: ignore[union-attr]
    for depth in range(max_depth):  # entering the container at level depth + 1
        if pos >= len(text) or text[pos] not in "[{":
            return path
        is_object = text[pos] == "{"
        pos = _WHITESPACE.match(text, pos + 1).end()  # type: ignore[union-attr]
        index = 0
        while True:
            try:
                member: str | int = index
                if is_object:
                    key, pos = decoder.raw_decode(text, pos)
                    pos = _WHITESPACE.match(text, pos).end()  # type: ignore[union-attr]
                    if not isinstance(key, str) or text[pos : pos + 1] != ":":
                        return path
                    member = key
                    pos = _WHITESPACE.match(text, pos + 1).end()  # type: ignore[union-attr]
                value, end = decoder.raw_decode(text, pos)
            except RecursionError:
                path.append(member)
                break  # descend into the member at ``pos``
            except (ValueError, IndexError):
                return path
            inner = _too_deep_path(value, max_depth - depth - 1)
            if inner is not None:  # decodable from here on, but still too deep
                return [*path, member, *inner]
            pos = _WHITESPACE.match(text, end).end()  # type: ignore[union-attr]
            if text[pos : pos + 1] != ",":
                return path
            pos = _WHITESPACE.match(text, pos + 1).end()  # type: ignore[union-attr]
            index += 1
    return path


def _too_deep_path(value: Any, levels: int) -> list[str | int] | None:
    """The path (inside ``value``) of the first container more than ``levels`` levels down, or None."""
    stack: list[tuple[Any, list[str | int], int]] = [(value, [], 1)]
    while stack:
        node, path, level = stack.pop()
        if isinstance(node, dict | list):
            if level > levels:
                return path
            items = node.items() if isinstance(node, dict) else enumerate(node)
            stack.extend((child, [*path, key], level + 1) for key, child in items)
    return None


def parse_json(raw: bytes, limits: JsonLimits, *, loc: Loc = ("body",)) -> Any:
    """Strict, bounded JSON: UTF-8 only (a leading BOM is ignored), no NaN/Infinity, bounded nesting and integers,
    no lone surrogates. ApiError 422 (not JSON) or 400 (out of bounds) naming the place otherwise.

    Cheap on well-formed input (an 8 MB result costs about twice a bare ``json.loads``): numbers are checked by
    the decoder's hooks, surrogates only looked for when the text has ``\\uD8..``-``\\uDF..`` escapes that do not
    pair up, nesting only measured when the text has more brackets than the limit. The exact walk that names the
    place runs only when something is wrong (or a string merely looks suspicious).
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _error(
            422,
            "json_invalid",
            loc,
            f"Invalid JSON: the body is not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
        ) from None
    text = text.removeprefix("\ufeff")
    rejected: list[_Rejected] = []
    decoder = _decoder(limits, rejected)
    try:
        value = decoder.decode(text)
    except RecursionError:
        raise _error(
            400,
            "json_too_deep",
            [*loc, *_locate_too_deep(text, decoder, limits.max_depth)],
            f"JSON nested deeper than {limits.max_depth} levels",
            limit=limits.max_depth,
        ) from None
    except ValueError as exc:  # JSONDecodeError: its message holds positions only, never the input
        raise _error(422, "json_invalid", loc, f"Invalid JSON: {exc}") from None
    if rejected or _may_hold_lone_surrogate(text) or _too_deep(value, text, limits.max_depth):
        _walk(value, limits, loc)
    return value


def check_json_value(value: Any, limits: JsonLimits, *, loc: Loc = ("body",)) -> int:
    """Raise ApiError(400) naming the first out-of-bounds place in ``value`` (which did not come from
    :func:`parse_json`, e.g. MCP arguments); return its size as compact UTF-8 JSON.

    Fast path: serialising with ``allow_nan=False`` and encoding as UTF-8 (both in C) fail on every non-finite
    number, lone surrogate and integer Python cannot print; nesting and integer length are measured on the text.
    The exact walk runs only when one of those finds something.
    """
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        encoded = text.encode("utf-8")
    except (ValueError, TypeError, RecursionError, UnicodeEncodeError):
        _walk(value, limits, loc)
        raise _error(400, "json_value", loc, "not a JSON value") from None
    if _too_deep(value, text, limits.max_depth) or b"1" * (limits.max_int_digits + 1) in encoded.translate(_DIGITS):
        _walk(value, limits, loc)
    return len(encoded)


_DIGITS = bytes(0x31 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
"""bytes.translate table: every digit to ``1``, everything else to a space (a run of n ones = n digits in a row)."""
_SURROGATE_ESCAPE = re.compile(r"\\u[dD]([89abAB]|[c-fC-F])[0-9a-fA-F]{2}")


def _may_hold_lone_surrogate(text: str) -> bool:
    """Whether the JSON text has a ``\\uD800``-``\\uDFFF`` escape that is not part of a high+low pair (an escaped
    backslash before ``u`` can make this say yes wrongly; the walk then decides)."""
    if "\\ud" not in text and "\\uD" not in text:
        return False
    pending_high_end = -1
    for match in _SURROGATE_ESCAPE.finditer(text):
        is_high = match.group(1) in "89abAB"
        if pending_high_end >= 0:
            if is_high or match.start() != pending_high_end:
                return True
            pending_high_end = -1
        elif is_high:
            pending_high_end = match.end()
        else:
            return True
    return pending_high_end >= 0


def _too_deep(value: Any, text: str, max_depth: int) -> bool:
    """Whether ``value`` nests containers more than ``max_depth`` levels (measured only when the text has more
    brackets than that, breadth first, containers only)."""
    if text.count("[") + text.count("{") <= max_depth:
        return False
    level: list[Any] = [value] if isinstance(value, dict | list) else []
    for _ in range(max_depth):
        following: list[Any] = []
        for node in level:
            for child in node.values() if isinstance(node, dict) else node:
                if isinstance(child, dict | list):
                    following.append(child)
        if not following:
            return False
        level = following
    return True


_Path = tuple[str | int, "_Path"] | None


def _loc(root: Loc, path: _Path) -> list[str | int]:
    parts: list[str | int] = []
    while path is not None:
        key, path = path
        parts.append(key)
    return [*root, *reversed(parts)]


def _walk(value: Any, limits: JsonLimits, root: Loc) -> None:
    """Iterative (a deep value cannot exhaust the stack); raises at the first problem it meets."""
    int_bound = 10**limits.max_int_digits
    stack: list[tuple[Any, _Path, int]] = [(value, None, 0)]
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, dict | list | tuple):
            if depth + 1 > limits.max_depth:
                raise _error(
                    400,
                    "json_too_deep",
                    _loc(root, path),
                    f"JSON nested deeper than {limits.max_depth} levels",
                    limit=limits.max_depth,
                )
            if isinstance(node, dict):
                for key, child in node.items():
                    if isinstance(key, str) and has_lone_surrogate(key):
                        raise _error(
                            400,
                            "string_unicode",
                            _loc(root, (key, path)),
                            "the key contains a lone UTF-16 surrogate (\\ud800-\\udfff not in a pair); send valid "
                            "Unicode",
                        )
                    stack.append((child, (key if isinstance(key, str) else str(key), path), depth + 1))
            else:
                stack.extend((child, (index, path), depth + 1) for index, child in enumerate(node))
        elif isinstance(node, str):
            if has_lone_surrogate(node):
                raise _error(
                    400,
                    "string_unicode",
                    _loc(root, path),
                    "the string contains a lone UTF-16 surrogate (\\ud800-\\udfff not in a pair); send valid Unicode",
                )
        elif node is None or isinstance(node, bool):
            continue
        elif isinstance(node, int):
            if abs(node) >= int_bound:
                raise _error(
                    400,
                    "int_too_long",
                    _loc(root, path),
                    f"integer longer than {limits.max_int_digits} digits",
                    limit=limits.max_int_digits,
                )
        elif isinstance(node, float):
            if not math.isfinite(node):
                raise _error(400, "non_finite_number", _loc(root, path), "NaN and Infinity are not valid JSON")
        elif isinstance(node, _Rejected):
            raise _error(400, node.kind, _loc(root, path), node.msg)
        else:
            raise _error(400, "json_value", _loc(root, path), f"not a JSON value ({type(node).__name__})")

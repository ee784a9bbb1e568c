"""An attempt's trajectory file made small and safe enough to post to a backend with the attempt's event.

Why: the battle page's attempt viewer must work for battles that report to a backend (AgentBeats-style), where the
backend never sees the green agent's run directory. So the conversation travels with the ``attempt_finished``
progress event. Everything in it came from the agent under test or its tools and is hostile: it is bounded here,
never interpreted (a message that looks like this module's own fields stays a string inside ``content``).

The posted object (``"schema": "arena.trajectory/1"``, ``detail["trajectory"]`` of the event)::

    {"schema", "messages": [{"step", "role", "content", "tool_calls", "tool_call_id", "error", "timestamp",
     "latency_s"}], "message_count", "omitted_messages", "truncated"}

Bounds: strings cut at :data:`MAX_STRING_CHARS`; containers at :data:`MAX_ITEMS` entries and :data:`MAX_DEPTH`
levels; one message at a quarter of the budget (tighter cuts, then a placeholder); the whole object at ``max_bytes``
of compact UTF-8 JSON (how the backend measures an event), by dropping middle messages (the first and last are
always kept; ``omitted_messages`` says how many went). Numbers the backend refuses (NaN, Infinity, integers of more
than 64 digits) become strings, lone surrogates U+FFFD, so one odd value cannot get the whole event refused.

Reading (:func:`read_trajectory`) streams the file and keeps at most about two budgets of converted messages in
memory (the first ones and a sliding window of the last ones), so a huge file costs time proportional to its size
but bounded memory. It is blocking: the reporting sink runs it in a worker thread
(:func:`green_agent.wire.backend_posts.progress_post_for`). A missing, unreadable or
corrupt file gives None (logged at debug), never an exception.
"""

from __future__ import annotations

import json
import logging
import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any, Final

from green_agent.run_files import MAX_TRAJECTORY_FILE_BYTES, open_run_file
from green_agent.text_safety import clean_text

log = logging.getLogger(__name__)

TRAJECTORY_SCHEMA: Final = "arena.trajectory/1"
MAX_TRAJECTORY_BYTES: Final = 256 * 1024
"""Largest posted trajectory (compact UTF-8 JSON); the caller may ask for less (what is left of the event's cap)."""
MIN_TRAJECTORY_BYTES: Final = 4 * 1024
"""Below this budget no trajectory is posted (not even the first and last message would fit usefully)."""
MAX_STRING_CHARS: Final = 4000
MAX_ITEMS: Final = 200
"""Entries kept of one object or list inside a message (tool arguments)."""
MAX_TOOL_CALLS: Final = 50
MAX_DEPTH: Final = 8
"""Nesting kept inside a message's tool arguments; deeper values become (cut) JSON text."""
MAX_LINE_BYTES: Final = 4 * 1024 * 1024
"""A longer line is not parsed (the engine writes lines of at most 256 Ki characters): a placeholder message."""
ROLES: Final = frozenset({"assistant", "user", "tool", "system"})
_ENVELOPE_BYTES: Final = 256
"""Room kept for the object around the messages (schema, counts, flags)."""
_SHRINK_STEPS: Final = ((MAX_STRING_CHARS, MAX_ITEMS, MAX_DEPTH), (1000, 20, 4), (200, 5, 2))
"""Ever tighter (string chars, container items, depth) for a message over its share of the budget."""
_INT_LIMIT: Final = 10**63
"""Integers at least this large are posted as strings (the backend refuses integers of more than 64 digits)."""


def json_size(value: Any) -> int:
    """Bytes of ``value`` as compact UTF-8 JSON: what the backend counts against its event cap."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8"))


@dataclass
class _Cut:
    """What bounding a value cut (shared by one message's fields)."""

    truncated: bool = False


def _text(value: str, max_chars: int, cut: _Cut) -> str:
    value = clean_text(value)
    if len(value) <= max_chars:
        return value
    cut.truncated = True
    return f"{value[:max_chars]}… [{len(value) - max_chars} more characters]"


def _json_text(value: Any, max_chars: int, cut: _Cut) -> str:
    """A value shown as (cut) JSON text: for nesting too deep to keep as structure."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        text = "[a value nested too deeply to show]"
    return _text(text, max_chars, cut)


def bound_value(value: Any, *, max_chars: int, max_items: int, depth: int, cut: _Cut) -> Any:
    """A JSON value the backend accepts and of bounded size: strings cut, containers cut to ``max_items`` entries
    (the rest named in a last entry), nesting beyond ``depth`` turned into text, odd numbers into strings."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _text(value, max_chars, cut)
    if isinstance(value, int):
        return value if -_INT_LIMIT < value < _INT_LIMIT else _text(str(value), max_chars, cut)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping | list | tuple) and depth <= 0:
        return _json_text(value, max_chars, cut)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for index, (key, item) in enumerate(value.items()):
            if index >= max_items:
                cut.truncated = True
                out["…"] = f"{len(value) - max_items} more entries"
                break
            name = _text(key if isinstance(key, str) else str(key), max_chars, cut)
            out[name] = bound_value(item, max_chars=max_chars, max_items=max_items, depth=depth - 1, cut=cut)
        return out
    if isinstance(value, list | tuple):
        items = [
            bound_value(item, max_chars=max_chars, max_items=max_items, depth=depth - 1, cut=cut)
            for item in value[:max_items]
        ]
        if len(value) > max_items:
            cut.truncated = True
            items.append(f"… {len(value) - max_items} more items")
        return items
    return _text(str(value), max_chars, cut)


def _timestamp(value: Any) -> datetime | None:
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def latency_s(previous: Any, current: Any) -> float | None:
    """Seconds between two message timestamps (ISO 8601); None when either is unknown or time went backwards."""
    before, after = _timestamp(previous), _timestamp(current)
    if before is None or after is None:
        return None
    try:
        seconds = (after - before).total_seconds()
    except TypeError:  # one naive, one with a zone
        return None
    return round(seconds, 3) if seconds >= 0 else None


def _tool_calls(value: Any, max_chars: int, max_items: int, depth: int, cut: _Cut) -> list[dict[str, Any]] | None:
    if not isinstance(value, list):
        return None
    if len(value) > MAX_TOOL_CALLS:
        cut.truncated = True
    calls = []
    for call in value[:MAX_TOOL_CALLS]:
        call = call if isinstance(call, Mapping) else {"arguments": call}
        calls.append(
            {
                "id": _short(call.get("id"), cut),
                "name": _short(call.get("name"), cut),
                "arguments": bound_value(
                    call.get("arguments"), max_chars=max_chars, max_items=max_items, depth=depth, cut=cut
                ),
                "requestor": _short(call.get("requestor"), cut),
            }
        )
    return calls


def _short(value: Any, cut: _Cut, max_chars: int = 200) -> str | None:
    """An identifier-like field (ids, names, roles): a string of at most ``max_chars``, or None."""
    if value is None:
        return None
    return _text(value if isinstance(value, str) else str(value), max_chars, cut)


def _message(
    record: Mapping[str, Any], latency: float | None, limits: tuple[int, int, int]
) -> tuple[dict[str, Any], bool]:
    """One trajectory line (a tau2 message) in the posted shape, bounded by ``limits``; and whether it was cut."""
    max_chars, max_items, depth = limits
    cut = _Cut()
    role = record.get("role")
    content = record.get("content")
    if "role" not in record and record.get("cut") is True:  # a line the engine had to cut: its preview only
        role, content, cut.truncated = "system", record.get("preview"), True
    if content is not None and not isinstance(content, str):
        content = _json_text(content, max_chars, cut)
    step = record.get("turn_idx")
    timestamp = record.get("timestamp")
    message = {
        "step": step if isinstance(step, int) and not isinstance(step, bool) and abs(step) < _INT_LIMIT else None,
        "role": role if role in ROLES else "system",
        "content": None if content is None else _text(content, max_chars, cut),
        "tool_calls": _tool_calls(record.get("tool_calls"), max_chars, max_items, depth, cut),
        "tool_call_id": _short(record.get("id"), cut) if role == "tool" else None,
        "error": record.get("error") is True,
        "timestamp": timestamp if isinstance(timestamp, str) and len(timestamp) <= 64 else None,
        "latency_s": latency,
    }
    return message, cut.truncated


def compact_message(
    record: Mapping[str, Any], latency: float | None, max_bytes: int
) -> tuple[dict[str, Any], int, bool]:
    """A message of at most ``max_bytes`` (ever tighter cuts, then a placeholder naming its size), its size in
    bytes and whether anything was cut."""
    size = 0
    for limits in _SHRINK_STEPS:
        message, truncated = _message(record, latency, limits)
        size = json_size(message)
        if size <= max_bytes:
            return message, size, truncated or limits != _SHRINK_STEPS[0]
    placeholder, _ = _message({**record, "content": None, "tool_calls": None}, latency, _SHRINK_STEPS[-1])
    placeholder["content"] = f"[a message of more than {size} bytes even when cut; not posted]"
    return placeholder, json_size(placeholder), True


@dataclass
class TrajectoryBuilder:
    """Turns trajectory records (in file order) into the posted object within ``max_bytes``, holding only the first
    messages and a sliding window of the last ones (each at most one budget of bytes)."""

    max_bytes: int = MAX_TRAJECTORY_BYTES
    count: int = 0
    truncated: bool = False
    _head: list[tuple[dict[str, Any], int]] = field(default_factory=list)
    _head_bytes: int = 0
    _tail: deque[tuple[dict[str, Any], int]] = field(default_factory=deque)
    _tail_bytes: int = 0
    _dropped: int = 0
    _previous_timestamp: Any = None

    @property
    def message_budget(self) -> int:
        """Bytes one message may take: a quarter of the budget, so the first and the last always fit."""
        return max(512, (self.max_bytes - _ENVELOPE_BYTES) // 4)

    def add(self, record: Mapping[str, Any]) -> None:
        """Take the next message of the file."""
        latency = latency_s(self._previous_timestamp, record.get("timestamp"))
        self._previous_timestamp = record.get("timestamp")
        message, size, truncated = compact_message(record, latency, self.message_budget)
        self.count += 1
        self.truncated = self.truncated or truncated
        if not self._tail and self._head_bytes + size + 1 <= self.max_bytes:
            self._head.append((message, size + 1))
            self._head_bytes += size + 1
            return
        self._tail.append((message, size + 1))
        self._tail_bytes += size + 1
        while self._tail_bytes > self.max_bytes and len(self._tail) > 1:
            self._tail_bytes -= self._tail.popleft()[1]
            self._dropped += 1

    def build(self) -> dict[str, Any]:
        """The posted object: every message when they fit, else the first ones (up to half the budget) and the last
        ones (the rest), the middle dropped and counted."""
        budget = self.max_bytes - _ENVELOPE_BYTES
        items = [*self._head, *self._tail]
        if not self._dropped and sum(size for _, size in items) <= budget:
            kept = items
        else:
            # With messages already dropped, the first ones come from the head and the last ones from the tail
            # only, so the kept messages have one gap, where the count says.
            first, used = _take(self._head if self._dropped else items, budget // 2)
            rest = list(self._tail) if self._dropped else items[len(first) :]
            last, _ = _take(rest[::-1], budget - used)
            kept = first + last[::-1]
        trajectory = self._envelope(kept)
        # A safety net (the sizes above add up): drop middle messages worth the excess, measured again.
        while (excess := json_size(trajectory) - self.max_bytes) > 0 and len(kept) > 2:
            middle = len(kept) // 2
            end = middle
            while end < len(kept) - 1 and excess > 0:
                excess -= kept[end][1]
                end += 1
            kept = kept[:middle] + kept[max(end, middle + 1) :]
            trajectory = self._envelope(kept)
        return trajectory

    def _envelope(self, kept: list[tuple[dict[str, Any], int]]) -> dict[str, Any]:
        return {
            "schema": TRAJECTORY_SCHEMA,
            "messages": [message for message, _ in kept],
            "message_count": self.count,
            "omitted_messages": self.count - len(kept),
            "truncated": self.truncated,
        }


def _take(items: list[tuple[dict[str, Any], int]], budget: int) -> tuple[list[tuple[dict[str, Any], int]], int]:
    """The leading items within ``budget`` bytes (at least one: a message fits a quarter of the budget)."""
    taken: list[tuple[dict[str, Any], int]] = []
    used = 0
    for item in items:
        if taken and used + item[1] > budget:
            break
        taken.append(item)
        used += item[1]
    return taken, used


def compact_records(records: Iterable[Mapping[str, Any]], *, max_bytes: int = MAX_TRAJECTORY_BYTES) -> dict[str, Any]:
    """The posted trajectory of messages already in memory (tau2 message dicts, in order)."""
    builder = TrajectoryBuilder(max_bytes=max_bytes)
    for record in records:
        builder.add(record)
    return builder.build()


class TrajectoryFileError(ValueError):
    """The trajectory file is not what the engine writes (a line that is not a JSON object)."""


def read_trajectory(
    path: Path, *, max_bytes: int = MAX_TRAJECTORY_BYTES, run_dir: Path | None = None
) -> dict[str, Any]:
    """The posted trajectory of the file at ``path`` (blocking). The first line, the attempt's result, is skipped.

    The file is read as run-directory input (:func:`green_agent.run_files.open_run_file`: a regular file inside
    ``run_dir``, default its own directory, of bounded size). Raises OSError when the file cannot be read or is
    refused, :class:`TrajectoryFileError` when a line is not a JSON object."""
    builder = TrajectoryBuilder(max_bytes=max_bytes)
    base = run_dir if run_dir is not None else path.parent
    with open_run_file(base, path.relative_to(base), max_bytes=MAX_TRAJECTORY_FILE_BYTES) as handle:
        first = True
        while raw := handle.readline(MAX_LINE_BYTES + 1):
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                skipped = len(raw) + _skip_rest_of_line(handle)
                record: Any = {"role": "system", "content": f"[a line of {skipped} bytes, too long to read]"}
            elif not raw.strip():
                continue
            else:
                try:
                    record = json.loads(raw)
                except (ValueError, RecursionError) as error:
                    raise TrajectoryFileError(f"{path}: a line is not JSON ({type(error).__name__})") from None
            if not isinstance(record, dict):
                raise TrajectoryFileError(f"{path}: a line is not a JSON object")
            if first and "attempt" in record and "role" not in record:
                first = False
                continue  # the header: the attempt's result, already in the event
            first = False
            builder.add(record)
    return builder.build()


def _skip_rest_of_line(handle: Any) -> int:
    skipped = 0
    while chunk := handle.readline(MAX_LINE_BYTES):
        skipped += len(chunk)
        if chunk.endswith(b"\n"):
            break
    return skipped


def trajectory_path(run_dir: Path, data: Mapping[str, Any]) -> Path | None:
    """Where the attempt of an ``attempt_finished`` event's ``data`` keeps its trajectory: ``trajectory_file`` (run
    directory relative, as the engine reports it), or when the event predates that key the engine's naming rule
    (``trajectories/<domain>-<split or all>-<index:04d>-attempt<nn>.jsonl``). None when there is none or the
    reported path leaves the run directory."""
    if "trajectory_file" in data:
        relative = data["trajectory_file"]
        if not isinstance(relative, str) or not relative:
            return None
        parts = PurePosixPath(relative.replace("\\", "/")).parts
        if not parts or PurePosixPath(relative).is_absolute() or ".." in parts:
            return None
        return run_dir.joinpath(*parts)
    task_key, attempt = data.get("task_key"), data.get("attempt")
    if not isinstance(task_key, str) or not isinstance(attempt, int) or isinstance(attempt, bool):
        return None
    domain, _, rest = task_key.partition("/")
    split, _, index = rest.rpartition("/")
    if not domain or not index.isdigit() or not split or "/" in split or ".." in (domain, split):
        return None
    split = "all" if split == "-" else split
    return run_dir / "trajectories" / f"{domain}-{split}-{int(index):04d}-attempt{attempt:02d}.jsonl"


def trajectory_for_event(
    run_dir: Path | None, data: Mapping[str, Any], *, max_bytes: int = MAX_TRAJECTORY_BYTES
) -> dict[str, Any] | None:
    """The posted trajectory of an ``attempt_finished`` event (blocking); None, logged at debug, when there is no
    run directory, no file, or the file cannot be read or is corrupt. Never raises for the file's sake."""
    if run_dir is None or max_bytes < MIN_TRAJECTORY_BYTES:
        return None
    path = trajectory_path(run_dir, data)
    if path is None:
        return None
    try:
        return read_trajectory(path, max_bytes=max_bytes, run_dir=run_dir)
    except (OSError, TrajectoryFileError) as error:
        log.debug("no trajectory posted for %s: %s", path, error)
        return None

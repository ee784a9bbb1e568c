"""The divergence view of one task: its attempts side by side, one column per attempt and one row per turn (the
agent's n-th message: its tool calls with their arguments, or its reply), the first turn where a passing and a
failing attempt part marked, and the task's flip rate (share of pairs of attempts whose outcomes differ).

The conversations come from the stored ``attempt_finished`` events (the trajectory each carries); outcomes from the
events and the result's ``attempts[]``. The rows are aligned here, for display, by the same rule the green agent
uses (docs/metrics.md, "Consistency"): calls are the same turn when their names and arguments are equal (canonical
JSON), replies are the same turn whatever their wording. The *authoritative* flip rate and first divergence are the
result's (``consistency.least_consistent`` of summary.json) when the battle finished with one; while the battle is
live the page says "not final" and shows its own alignment. Everything is hostile: at most :data:`MAX_COLUMNS`
attempts, :data:`MAX_ROWS` turns and :data:`MAX_CELL_CHARS` characters per cell; the template escapes it all.

Also the battle page's "least consistent tasks" box (:func:`consistency_box`), from the result's ``consistency``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from battle_backend.battles.arena_results import find_battle_result
from battle_backend.battles.tolerant import (
    DASH,
    clip,
    dict_of,
    float_of,
    int_of,
    json_text,
    list_of,
    name_of,
    text_of,
)
from battle_backend.store.records import BattleRecord
from battle_backend.views.attempt_data import finished_details, linkable_task_key, result_entries
from battle_backend.views.results import OUTCOMES
from battle_backend.views.trajectory import MAX_TOOL_CALLS, raw_messages

MAX_COLUMNS = 64
"""Attempts shown side by side (the green agent's largest k); more are counted in a note."""
MAX_ROWS = 150
"""Turns shown; the rest are counted in a note (each attempt's viewer shows its whole conversation)."""
MAX_CELL_CHARS = 600
"""Characters of one cell's text (a reply, or one call's arguments)."""
MAX_BOX_TASKS = 10
"""Tasks in the battle page's "least consistent tasks" box."""
REPLY = "reply"


def task_path(battle_id: str, task_key: str) -> str:
    """The divergence view's URL path of a task (each part percent-encoded; the task key keeps its slashes)."""
    return f"/ui/battles/{quote(battle_id, safe='')}/tasks/{quote(task_key, safe='/')}"


@dataclass(frozen=True)
class CallCell:
    """One tool call of a turn."""

    name: str
    arguments: str


@dataclass(frozen=True)
class TurnCell:
    """One attempt's turn: its calls, or its reply text."""

    calls: list[CallCell]
    text: str | None
    signature: str


@dataclass(frozen=True)
class Column:
    """One attempt: its outcome on top, then its turns."""

    attempt: int
    outcome: str
    """success | failure | infra_error | unknown (safe as a CSS class)."""
    category: str
    turns: list[TurnCell]
    has_trajectory: bool

    @property
    def outcome_words(self) -> str:
        """The outcome in words."""
        return {"infra_error": "infrastructure error", "unknown": "outcome unknown"}.get(self.outcome, self.outcome)


@dataclass(frozen=True)
class Row:
    """One turn across the attempts (None where an attempt's conversation had already ended)."""

    turn: int
    cells: list[TurnCell | None]
    differs: bool
    """Some of the shown attempts took different actions at this turn."""
    divergence: bool
    """The first turn where a passing and a failing attempt part (the marked row)."""


@dataclass(frozen=True)
class DivergenceView:
    """Everything the task page shows."""

    task_key: str
    columns: list[Column]
    rows: list[Row]
    attempts_not_shown: int
    turns_not_shown: int
    successes: int
    counted: int
    flip_rate: float | None
    divergence_turn: int | None
    divergence_pair: tuple[int, int] | None
    final: bool
    """The battle is over (no more attempts will be reported)."""
    authoritative: bool
    """The flip rate and the marker are the result's (``consistency`` of summary.json), not this page's."""
    source: str
    """Where the flip rate and the marker come from, in words."""
    notes: list[str] = field(default_factory=list)

    @property
    def flip_rate_text(self) -> str:
        """The flip rate with three decimals, or a dash."""
        return DASH if self.flip_rate is None else f"{self.flip_rate:.3f}"


def _canonical(value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)[:100_000]
    except (TypeError, ValueError, RecursionError):
        return repr(value)[:100_000]


def _turn(message: Mapping[str, Any]) -> TurnCell:
    calls = list_of(message.get("tool_calls"), MAX_TOOL_CALLS)
    if not calls:
        return TurnCell(calls=[], text=text_of(message.get("content"), MAX_CELL_CHARS), signature=REPLY)
    shown = []
    named = []
    for raw in calls:
        call = dict_of(raw)
        arguments = call.get("arguments")
        named.append([call.get("name"), arguments])
        text = text_of(arguments, MAX_CELL_CHARS) if isinstance(arguments, str) else None
        shown.append(
            CallCell(
                name=name_of(call.get("name"), 200) or "(unnamed tool)",
                arguments=text if text is not None else json_text(arguments, MAX_CELL_CHARS, indent=None),
            )
        )
    return TurnCell(calls=shown, text=None, signature="call:" + _canonical(named))


def _turns(trajectory: Any) -> tuple[list[TurnCell], int]:
    """The agent's turns of a posted trajectory (at most :data:`MAX_ROWS`) and how many more there were."""
    turns: list[TurnCell] = []
    more = 0
    for message in raw_messages(trajectory):
        if isinstance(message, dict) and message.get("role") == "assistant":
            if len(turns) < MAX_ROWS:
                turns.append(_turn(message))
            else:
                more += 1
    return turns, more


def _outcome(detail: Mapping[str, Any], entry: Mapping[str, Any]) -> tuple[str, str]:
    raw = detail.get("outcome") if detail.get("outcome") is not None else entry.get("outcome")
    outcome = raw if isinstance(raw, str) and raw in OUTCOMES else "unknown"
    category = detail.get("category") or dict_of(entry.get("failure")).get("category")
    return outcome, name_of(category, 80)


def _local_divergence(columns: list[Column], rows: list[list[TurnCell | None]]) -> tuple[int, int, int] | None:
    """(turn, passing attempt, failing attempt) of the first row where a passing and a failing column differ."""
    passing = [i for i, c in enumerate(columns) if c.outcome == "success" and c.has_trajectory]
    failing = [i for i, c in enumerate(columns) if c.outcome == "failure" and c.has_trajectory]
    for number, cells in enumerate(rows, start=1):
        for p in passing:
            for f in failing:
                a, b = cells[p], cells[f]
                if (a.signature if a else None) != (b.signature if b else None):
                    return number, columns[p].attempt, columns[f].attempt
    return None


def _consistency(battle: Any) -> Mapping[str, Any] | None:
    """The result's ``consistency`` object, when the battle's result holds an Arena result with one (``battle``: a
    BattleRecord, or whatever a template was given as one: anything without a result dict has none)."""
    result = battle.get("result") if isinstance(battle, dict) else getattr(battle, "result", None)
    if not isinstance(result, dict):
        return None
    found = find_battle_result(result.get("detail"))
    consistency = dict_of(found.get("consistency")) if found else {}
    return consistency or None


def _listed(consistency: Mapping[str, Any], task_key: str) -> Mapping[str, Any] | None:
    for entry in list_of(consistency.get("least_consistent"), 1000):
        if isinstance(entry, dict) and entry.get("task_key") == task_key:
            return entry
    return None


def divergence_view(battle: BattleRecord, task_key: str) -> DivergenceView | None:
    """The task's attempts side by side; None when the battle has no attempt of that task. Blocking (CPU over the
    stored events): call it from a worker thread."""
    if not linkable_task_key(task_key):
        return None
    details = {n: d for (key, n), d in finished_details(battle.events).items() if key == task_key}
    entries = {n: e for (key, n), e in result_entries(battle).items() if key == task_key}
    numbers = sorted({*details, *entries})
    if not numbers:
        return None
    columns: list[Column] = []
    more_turns = 0
    for number in numbers[:MAX_COLUMNS]:
        detail, entry = details.get(number, {}), entries.get(number, {})
        trajectory = detail.get("trajectory")
        turns, more = _turns(trajectory)
        more_turns = max(more_turns, more)
        outcome, category = _outcome(detail, entry)
        columns.append(Column(number, outcome, category, turns, has_trajectory=isinstance(trajectory, dict)))
    length = max((len(c.turns) for c in columns), default=0)
    grid = [[c.turns[i] if i < len(c.turns) else None for c in columns] for i in range(length)]
    counted = [c for c in columns if c.outcome in ("success", "failure")]
    successes = sum(1 for c in counted if c.outcome == "success")
    n = len(counted)
    flip = successes * (n - successes) / (n * (n - 1) / 2) if n >= 2 else None
    local = _local_divergence(columns, grid)
    marker: tuple[int, int, int] | None = local
    notes: list[str] = []
    consistency = _consistency(battle)
    final = battle.state.is_terminal
    listed = _listed(consistency, task_key) if consistency is not None else None
    authoritative = False
    if not final:
        source = "not final: the battle is still running; computed on this page from the attempts reported so far"
    elif consistency is None:
        source = "this page (the battle's result carries no consistency figures: k = 1, an older or a foreign result)"
    elif listed is not None:
        source, authoritative = "the battle's result", True
        flip = float_of(listed.get("flip_rate"))
        found = dict_of(listed.get("first_divergence"))
        turn = int_of(found.get("turn"), low=1, high=10**6)
        pair = (int_of(found.get("passing_attempt"), low=1), int_of(found.get("failing_attempt"), low=1))
        marker = (turn, pair[0], pair[1]) if turn and pair[0] and pair[1] else None
        if marker is None and local is not None:
            notes.append(
                "The result names no divergence turn for this task (its trajectories were not available to the "
                "green agent, or its actions never part); rows whose actions differ are this page's alignment."
            )
    elif int_of(consistency.get("not_listed"), low=0):
        source = "this page (the result lists only the least consistent tasks, not this one)"
    else:
        source, authoritative = "the battle's result (not among its tasks with mixed outcomes)", True
    if len(numbers) > MAX_COLUMNS:
        notes.append(f"{len(numbers) - MAX_COLUMNS} more attempt(s) are not shown (at most {MAX_COLUMNS} columns).")
    if more_turns:
        notes.append(
            f"Turns beyond {MAX_ROWS} are not shown ({more_turns} more in the longest attempt); each attempt's "
            "viewer has its whole conversation."
        )
    if not any(c.has_trajectory for c in columns):
        notes.append(
            "No conversation was posted for these attempts (their green agent posts no trajectory with its events); "
            "the run directory's trajectory files have them."
        )
    rows = [
        Row(
            turn=i + 1,
            cells=cells,
            differs=len({cell.signature if cell else None for cell in cells}) > 1,
            divergence=marker is not None and marker[0] == i + 1,
        )
        for i, cells in enumerate(grid)
    ]
    return DivergenceView(
        task_key=task_key,
        columns=columns,
        rows=rows,
        attempts_not_shown=max(0, len(numbers) - MAX_COLUMNS),
        turns_not_shown=more_turns,
        successes=successes,
        counted=n,
        flip_rate=flip,
        divergence_turn=marker[0] if marker else None,
        divergence_pair=(marker[1], marker[2]) if marker else None,
        final=final,
        authoritative=authoritative,
        source=source,
        notes=notes,
    )


@dataclass(frozen=True)
class BoxTask:
    """One line of the "least consistent tasks" box."""

    task_key: str
    successes: int | None
    attempts: int | None
    flip_rate: float
    divergence_turn: int | None


@dataclass(frozen=True)
class ConsistencyBox:
    """The battle page's box: the least consistent tasks of the result, linked to their divergence views."""

    tasks: list[BoxTask]
    mixed_tasks: int | None
    measured_tasks: int | None
    mean_flip_rate: float | None


def consistency_box(battle: Any) -> ConsistencyBox | None:
    """The box's content; None when the battle's result has no ``consistency`` (live, k = 1, older results)."""
    consistency = _consistency(battle)
    if consistency is None:
        return None
    tasks = []
    for raw in list_of(consistency.get("least_consistent"), MAX_BOX_TASKS):
        entry = dict_of(raw)
        key, rate = entry.get("task_key"), float_of(entry.get("flip_rate"))
        if not isinstance(key, str) or not key or len(key) > 500 or not linkable_task_key(key) or rate is None:
            continue
        tasks.append(
            BoxTask(
                task_key=clip(key, 500),
                successes=int_of(entry.get("successes"), low=0),
                attempts=int_of(entry.get("attempts"), low=0),
                flip_rate=rate,
                divergence_turn=int_of(dict_of(entry.get("first_divergence")).get("turn"), low=1),
            )
        )
    return ConsistencyBox(
        tasks=tasks,
        mixed_tasks=int_of(consistency.get("mixed_tasks"), low=0),
        measured_tasks=int_of(consistency.get("tasks"), low=0),
        mean_flip_rate=float_of(consistency.get("mean_flip_rate")),
    )

"""How consistent a task's k attempts are, and where its passing and failing attempts part (pure: no I/O).

Definitions (docs/metrics.md, "Consistency across a task's attempts"):

- **Turn**: the agent's n-th message in the attempt's conversation (1-based; the harness's greeting, sent as the
  agent's first message, is turn 1 of every attempt). A turn that calls tools is identified by the tool names and
  their arguments (canonical JSON: keys sorted, so key order never matters); a text reply is identified as "a reply",
  whatever its wording: an LLM agent never words two replies alike, so comparing text would mark the first reply of
  every task as a divergence. A reply against a tool call, or calls differing in a name or an argument, do differ.
  The page shows the text of every reply side by side; this marker speaks of actions.
- **First divergence**: the first turn at which some passing attempt and some failing attempt differ (an attempt
  whose conversation already ended has "no turn" there, which differs from any turn). None when the task has no
  passing or no failing attempt, or when they never differ (they parted on what was said, or on the user).
- **Flip rate**: among a task's counted attempts (infrastructure errors excluded), the share of unordered pairs of
  attempts with different outcomes, ``s (n - s) / (n (n - 1) / 2)`` for s successes in n attempts: 0 when all agree,
  at most ``n / (2 (n - 1))`` (1 for n = 2, 0.667 for n = 4). It is the unbiased estimate of ``2 p (1 - p)``, the
  chance that two independent attempts of the task disagree. None for fewer than two counted attempts.

Turns are kept as short digests (:func:`turn_signatures`), so a battle holds at most :data:`MAX_TURNS` small strings
per attempt whatever an agent sends.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from pydantic import BaseModel, Field

__all__ = [
    "MAX_LISTED_TASKS",
    "MAX_TURNS",
    "NO_TURN",
    "REPLY",
    "ConsistencySummary",
    "Divergence",
    "TaskConsistency",
    "first_divergence",
    "flip_rate",
    "summarize_consistency",
    "turn_signatures",
]

MAX_TURNS: Final = 500
"""Turns compared per attempt (a conversation longer than this is compared on its first turns only)."""
MAX_LISTED_TASKS: Final = 100
"""Tasks listed in a battle's ``consistency`` (the least consistent first; ``not_listed`` counts the rest)."""
MAX_ARGUMENT_CHARS: Final = 1_000_000
"""Canonical JSON of one turn's calls hashed at most (a longer one is hashed on its first characters)."""
REPLY: Final = "reply"
"""The signature of every text reply (and of an agent message with neither text nor calls)."""
NO_TURN: Final = "(no turn)"
"""What an attempt whose conversation ended before a turn has at that turn."""


def _canonical(value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError, RecursionError):
        return repr(value)


def _signature(message: Mapping[str, Any]) -> str:
    calls = message.get("tool_calls")
    if not isinstance(calls, list) or not calls:
        return REPLY
    named = [[call.get("name"), call.get("arguments")] if isinstance(call, Mapping) else [None, call] for call in calls]
    text = _canonical(named)[:MAX_ARGUMENT_CHARS]
    return "call:" + hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=12).hexdigest()


def turn_signatures(messages: Iterable[Any]) -> list[str]:
    """The agent's turns of a conversation (tau2's message records or ``arena.trajectory/1`` messages: both have
    ``role``, ``content`` and ``tool_calls`` with ``name`` and ``arguments``), at most :data:`MAX_TURNS`.

    Equal signatures mean the same action: :data:`REPLY` for a text reply, ``call:<digest>`` of the calls' names
    and arguments otherwise. Anything that is not an agent message is skipped."""
    turns: list[str] = []
    for message in messages:
        if isinstance(message, Mapping) and message.get("role") == "assistant":
            turns.append(_signature(message))
            if len(turns) >= MAX_TURNS:
                break
    return turns


def flip_rate(outcomes: Sequence[bool]) -> float | None:
    """The share of unordered pairs of attempts whose outcomes differ; None for fewer than two attempts."""
    n = len(outcomes)
    if n < 2:
        return None
    successes = sum(1 for outcome in outcomes if outcome)
    return successes * (n - successes) / (n * (n - 1) / 2)


class Divergence(BaseModel):
    """Where a task's passing and failing attempts first part."""

    turn: int = Field(ge=1)
    """1-based turn (the agent's n-th message)."""
    passing_attempt: int
    """The lowest-numbered passing attempt that differs there from :attr:`failing_attempt`."""
    failing_attempt: int
    """The lowest-numbered failing attempt that differs there from some passing attempt."""


def _at(turns: Sequence[str], index: int) -> str:
    return turns[index] if index < len(turns) else NO_TURN


def first_divergence(turns: Mapping[int, Sequence[str]], passed: Mapping[int, bool]) -> Divergence | None:
    """The first turn at which a passing and a failing attempt differ; None when there is no passing or no failing
    attempt among those with known turns, or when they never differ.

    ``turns`` maps attempt numbers to their :func:`turn_signatures`; ``passed`` maps attempt numbers to their
    outcome (infrastructure errors left out). Attempts missing from either are not compared."""
    passing = sorted(a for a, ok in passed.items() if ok and a in turns)
    failing = sorted(a for a, ok in passed.items() if not ok and a in turns)
    if not passing or not failing:
        return None
    length = max(len(turns[a]) for a in (*passing, *failing))
    for index in range(length):
        # passing and failing attempts all agree at a turn exactly when every compared attempt agrees there
        if len({_at(turns[a], index) for a in (*passing, *failing)}) == 1:
            continue
        for p in passing:
            for f in failing:
                if _at(turns[p], index) != _at(turns[f], index):
                    return Divergence(turn=index + 1, passing_attempt=p, failing_attempt=f)
    return None


class TaskConsistency(BaseModel):
    """One task's consistency across its attempts."""

    task_key: str
    """``domain/split/index``, as in ``AttemptResult.task_key``."""
    task_id: str
    attempts: int = Field(ge=0)
    """Counted attempts (infrastructure errors excluded)."""
    successes: int = Field(ge=0)
    flip_rate: float | None = Field(default=None, ge=0, le=1)
    """Share of pairs of counted attempts with different outcomes (None for fewer than two)."""
    first_divergence: Divergence | None = None
    """The first turn where a passing and a failing attempt part; None when their actions never differ."""
    attempts_compared: int = Field(default=0, ge=0)
    """Counted attempts whose turns were known (read from their trajectory files); the divergence compares these."""


class ConsistencySummary(BaseModel):
    """How consistent a battle's tasks are across their k attempts (``consistency`` in summary.json)."""

    tasks: int = Field(ge=0)
    """Tasks with at least two counted attempts (the ones a flip rate is defined for)."""
    mixed_tasks: int = Field(ge=0)
    """Of those, tasks with both a success and a failure (flip rate above 0)."""
    mean_flip_rate: float | None = Field(default=None, ge=0, le=1)
    """Mean of the per-task flip rates over :attr:`tasks` (None when there is none)."""
    least_consistent: list[TaskConsistency] = Field(default_factory=list)
    """The mixed tasks, highest flip rate first (then by task key), at most :data:`MAX_LISTED_TASKS`."""
    not_listed: int = Field(default=0, ge=0)
    """Mixed tasks left out of :attr:`least_consistent` by its bound."""


def summarize_consistency(tasks: Iterable[TaskConsistency]) -> ConsistencySummary | None:
    """The battle's summary of its tasks' consistency; None when no task has two counted attempts (k = 1)."""
    measured = [task for task in tasks if task.flip_rate is not None]
    if not measured:
        return None
    mixed = sorted(
        (task for task in measured if task.flip_rate),
        key=lambda task: (-(task.flip_rate or 0.0), task.task_key),
    )
    return ConsistencySummary(
        tasks=len(measured),
        mixed_tasks=len(mixed),
        mean_flip_rate=sum(task.flip_rate or 0.0 for task in measured) / len(measured),
        least_consistent=mixed[:MAX_LISTED_TASKS],
        not_listed=max(0, len(mixed) - MAX_LISTED_TASKS),
    )

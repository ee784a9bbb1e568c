"""The live progress of a running battle, computed from its stored events: attempts done / total, the running pass^1
over the attempts scored so far with its Wilson 95% interval, an ETA, and a per-task strip that fills in as the
green agent's ``attempt_finished`` events arrive.

Why from the events: the backend knows a battle only through what its green agent posts; Arena's green agent posts a
``battle_started`` event (``attempts_total``, ``tasks``, ``k``, ``calibration``) and one ``attempt_finished`` per
attempt (``task_key``, ``attempt``, ``outcome``, ``category``, ``done``, ``total``). Other green agents post none of
these and simply get no progress box. :class:`ProgressTracker` folds events one at a time, so the SSE stream keeps one
per connection and never re-reads the whole battle; :func:`live_progress` is the same fold over a list (the page).

Honest numbers: pass^1 so far is the success rate over the *scored* attempts (infrastructure errors excluded, as in
the final result), not the battle's macro pass^1 over tasks; the label says so. The ETA is the elapsed time since the
first attempt event, per attempt finished in this run, times the attempts left; a dash until one attempt is done.
Timing uses the backend's receive times (its own clock), never the agent's timestamps.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from battle_backend.battles import events as ev
from battle_backend.battles.facts import started_says_calibration
from battle_backend.battles.tolerant import DASH, MAX_NAME_CHARS, int_of, name_of
from battle_backend.store.records import EventRecord
from battle_backend.views.attempt_data import MAX_ATTEMPT_NUMBER, AttemptKey, finished_event_detail
from battle_backend.views.results import MAX_ATTEMPTS_SHOWN, OUTCOMES

Z_95 = 1.959963984540054
"""The standard normal quantile of 0.975."""
MAX_TASKS_SHOWN = 500
"""Rows of the live strip at most (the counters still count every attempt)."""
MAX_CELLS_SHOWN = 1_000
"""Cells of the live strip at most (fewer rows when k is large): the box is pushed on every attempt."""
MAX_TOTAL = 10**7
OUTCOME_WORDS = {
    "success": "success",
    "failure": "failure",
    "infra_error": "infrastructure error",
    "unknown": "unknown outcome",
}


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float] | None:
    """The Wilson score interval of a binomial proportion (None for n = 0): it stays inside [0, 1] and is not
    degenerate at 0/n or n/n, unlike the normal approximation, which matters for the few attempts of a live battle."""
    if n <= 0:
        return None
    p = successes / n
    z2 = z * z
    denominator = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def duration_text(seconds: float) -> str:
    """``45 s``, ``3 min 20 s``, ``2 h 05 min``."""
    total = max(0, round(seconds))
    if total < 60:
        return f"{total} s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


@dataclass(frozen=True)
class ProgressCell:
    """One finished attempt in the live strip."""

    outcome: str
    """success | failure | infra_error | unknown (safe as a CSS class)."""
    category: str
    label: str
    title: str

    @property
    def outcome_words(self) -> str:
        """The outcome for a screen reader."""
        return OUTCOME_WORDS.get(self.outcome, self.outcome)


@dataclass(frozen=True)
class ProgressRow:
    """One task: its attempts 1..max, None where the attempt has not finished yet."""

    task_key: str
    cells: list[ProgressCell | None]


@dataclass(frozen=True)
class LiveProgress:
    """Everything the progress box shows."""

    total: int | None
    done: int
    successes: int
    failures: int
    infra_errors: int
    pass1: float | None
    ci: tuple[float, float] | None
    eta_s: float | None
    running: bool
    calibration: bool
    rows: list[ProgressRow] = field(default_factory=list)
    max_attempt: int = 0
    tasks_not_shown: int = 0
    """Tasks beyond the strip's bound (counted, not drawn)."""
    skipped: int = 0
    """Attempts a pass^k certify battle skipped at a task's first failure (left out of ``total``)."""

    @property
    def known(self) -> bool:
        """Whether the green agent posted anything this box can show (else the page leaves it out)."""
        return self.total is not None or self.done > 0 or bool(self.rows)

    @property
    def scored(self) -> int:
        """Attempts that count for pass^1 (infrastructure errors do not)."""
        return self.successes + self.failures

    @property
    def done_text(self) -> str:
        """``12 / 56`` (or ``12`` when the total is unknown), and the attempts certify skipped if any."""
        text = f"{self.done} / {self.total}" if self.total is not None else str(self.done)
        if self.skipped:
            text += f" ({self.skipped} skipped by certify: their task's pass^k was already 0)"
        return text

    @property
    def pass1_text(self) -> str:
        """``0.750 [0.301, 0.954]`` or a dash before the first scored attempt."""
        if self.pass1 is None or self.ci is None:
            return DASH
        return f"{self.pass1:.3f} [{self.ci[0]:.3f}, {self.ci[1]:.3f}]"

    @property
    def eta_text(self) -> str:
        """The ETA, a dash while it cannot be estimated, "done" once every attempt is."""
        if self.total is not None and self.done >= self.total:
            return "done"
        if not self.running or self.eta_s is None:
            return DASH
        return duration_text(self.eta_s)


def _received(event: EventRecord) -> datetime | None:
    try:
        return datetime.fromisoformat(event.received_at)
    except (TypeError, ValueError):
        return None


def _cell(detail: dict[str, Any]) -> ProgressCell:
    raw = name_of(detail.get(ev.OUTCOME), 40)
    outcome = raw if raw in OUTCOMES else "unknown"
    category = name_of(detail.get(ev.CATEGORY))
    if outcome == "success":
        return ProgressCell(outcome=outcome, category="", label="✓", title="success")
    return ProgressCell(outcome=outcome, category=category, label=category or outcome, title=category or outcome)


class ProgressTracker:
    """The fold of a battle's events into its live progress (one per page render or SSE connection)."""

    def __init__(self) -> None:
        self._total: int | None = None
        self._reported_done = 0
        self._k = 0
        self._tasks: dict[str, None] = {}
        self._cells: dict[AttemptKey, ProgressCell] = {}
        self._calibration = False
        self._first_attempt_at: datetime | None = None
        self._finished_here = 0
        self._skipped: set[AttemptKey] = set()

    def add(self, event: EventRecord) -> bool:
        """Fold one event in; True when it changed the progress. An unverified event (posted without the battle's
        token) changes nothing: anyone may post those."""
        if not event.verified:
            return False
        payload = event.payload
        detail = payload.get("detail")
        if payload.get("is_result") or not isinstance(detail, dict):
            return False
        kind = detail.get(ev.TYPE)
        if kind in ev.ATTEMPT_EVENTS and self._first_attempt_at is None:
            self._first_attempt_at = _received(event)
        if kind == ev.BATTLE_STARTED:
            self._total = int_of(detail.get(ev.ATTEMPTS_TOTAL), low=0, high=MAX_TOTAL)
            self._k = int_of(detail.get(ev.K), low=0, high=MAX_ATTEMPTS_SHOWN) or 0
            self._reported_done = int_of(detail.get(ev.RESUMED_ATTEMPTS), low=0, high=MAX_TOTAL) or 0
            # A second battle_started is a resume into the same battle: the ETA's clock restarts with it (the time
            # the green agent was down and the attempts of the earlier run would inflate it).
            self._first_attempt_at = None
            self._finished_here = 0
            tasks = detail.get(ev.TASKS)
            for task in tasks if isinstance(tasks, list) else []:
                if isinstance(task, str) and task and len(task) <= MAX_NAME_CHARS and len(self._tasks) < MAX_TOTAL:
                    self._tasks.setdefault(task, None)
            self._calibration = self._calibration or started_says_calibration(payload)
            return True
        if kind == ev.ATTEMPTS_SKIPPED:
            return self._add_skipped(detail)
        keyed = finished_event_detail(payload)
        if keyed is None:
            return False
        (task_key, attempt), finished = keyed
        if (task_key, attempt) not in self._cells:
            self._finished_here += 1
        self._cells[(task_key, attempt)] = _cell(finished)
        self._tasks.setdefault(task_key, None)
        total = int_of(finished.get(ev.TOTAL), low=0, high=MAX_TOTAL)
        if total is not None:
            self._total = total
        done = int_of(finished.get(ev.DONE), low=0, high=MAX_TOTAL)
        self._reported_done = max(self._reported_done, done or 0)
        return True

    def _add_skipped(self, detail: dict[str, Any]) -> bool:
        """A pass^k certify battle's ``attempts_skipped``: attempts (1..k, at most k of them) that will never finish."""
        task_key, attempts = detail.get(ev.TASK_KEY), detail.get(ev.ATTEMPTS)
        if not isinstance(task_key, str) or not task_key or len(task_key) > MAX_NAME_CHARS:
            return False
        if not isinstance(attempts, list) or self._k <= 0:
            return False
        numbers = {n for a in attempts[:MAX_ATTEMPTS_SHOWN] if (n := int_of(a, low=1, high=self._k)) is not None}
        if not numbers or len(self._skipped) >= MAX_TOTAL:
            return False
        self._skipped.update((task_key, n) for n in numbers)
        return True

    def snapshot(self, *, now: datetime, running: bool) -> LiveProgress:
        """The progress as of ``now`` (an aware datetime, the backend's clock)."""
        outcomes = [cell.outcome for cell in self._cells.values()]
        successes, failures = outcomes.count("success"), outcomes.count("failure")
        skipped = len(self._skipped - self._cells.keys())
        total = None if self._total is None else max(self._total - skipped, 0)  # skipped attempts never finish
        done = max(len(self._cells), self._reported_done)
        if total is not None:
            done = min(done, max(total, len(self._cells)))
        interval = wilson_interval(successes, successes + failures)
        eta: float | None = None
        if running and self._finished_here > 0 and self._first_attempt_at is not None and total is not None:
            elapsed = max(0.0, (now - self._first_attempt_at).total_seconds())
            eta = elapsed / self._finished_here * max(0, total - done)
        max_attempt = min(
            max([self._k, *(number for _, number in self._cells)], default=0), MAX_ATTEMPTS_SHOWN, MAX_ATTEMPT_NUMBER
        )
        shown = min(MAX_TASKS_SHOWN, MAX_CELLS_SHOWN // max(1, max_attempt))
        rows = [
            ProgressRow(task_key=task, cells=[self._cells.get((task, n)) for n in range(1, max_attempt + 1)])
            for task in list(self._tasks)[:shown]
        ]
        return LiveProgress(
            total=total,
            done=done,
            successes=successes,
            failures=failures,
            infra_errors=outcomes.count("infra_error"),
            pass1=successes / (successes + failures) if successes + failures else None,
            ci=interval,
            eta_s=eta,
            running=running,
            calibration=self._calibration,
            rows=rows,
            max_attempt=max_attempt,
            tasks_not_shown=max(0, len(self._tasks) - len(rows)),
            skipped=skipped,
        )


def live_progress(events: Iterable[EventRecord], *, now: datetime, running: bool) -> LiveProgress:
    """The live progress of a battle from its events, as of ``now``."""
    tracker = ProgressTracker()
    for event in events:
        tracker.add(event)
    return tracker.snapshot(now=now, running=running)

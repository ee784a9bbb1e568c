"""What ``arena run`` shows while a battle runs: a rich progress bar fed by the battle's events and plain lines (the
verdict it ends with is :mod:`launcher.cli.run_verdict`'s).

Why its own module: both run modes (direct, and through a backend) show the same display, and the line printer
``say`` is how every message of the CLI reaches the terminal without markup interpretation or hard wrapping.
Readable in a pipe too: rich prints no colour codes and no cursor movement when standard output is not a terminal
(the bar is drawn once, in its final state, when the battle ends).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Self

from markdown_it import MarkdownIt
from rich.console import Console
from rich.markdown import Markdown
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from green_agent.engine.events import AttemptFinished, AttemptsSkipped, BattleFinished, BattleStarted, read_event

__all__ = [
    "NO_ESTIMATE",
    "AttemptEtaColumn",
    "BattleDisplay",
    "SummaryMarkdown",
    "estimate_remaining_s",
    "format_eta",
    "print_summary",
    "say",
]

NO_ESTIMATE = "\u2013"  # an en dash
"""What the ETA column says before the first attempt of this run has finished (nothing to extrapolate from)."""


def say(console: Console, message: str, *, label: str | None = None) -> None:
    """Print one message verbatim (no markup interpretation, no hard wrapping: paths stay copyable)."""
    text = Text(message)
    if label:
        text = Text.assemble((label, "bold red"), " ", text)
    console.print(text, highlight=False, soft_wrap=True)


class SummaryMarkdown(Markdown):
    """Rich's Markdown with raw HTML shown as text.

    Why: rich parses with HTML enabled and then drops HTML tokens it cannot draw, so agent text such as the reply
    hint ``expected <json>{...}</json>`` would lose its ``<json>`` tags when it is not inside a code span. A terminal
    renders no HTML: every character of the summary is shown as written (code spans stay code spans).
    """

    def __init__(self, markup: str, **kwargs: Any) -> None:
        super().__init__(markup, **kwargs)
        parser = MarkdownIt("commonmark", {"html": False}).enable("strikethrough").enable("table")
        self.parsed = parser.parse(markup)


def print_summary(console: Console, markdown: str | None) -> None:
    """A battle's markdown summary, rendered (never the raw text). ``arena run`` no longer ends with it: it ends
    with the verdict (:mod:`launcher.cli.run_verdict`); the markdown is summary.md."""
    if markdown:
        console.print(SummaryMarkdown(markdown))


def estimate_remaining_s(done: float, total: float | None, baseline: float, elapsed_s: float) -> float | None:
    """Seconds left, extrapolated from the attempts this run has finished so far.

    ``baseline`` is how many attempts were already done when the battle started (a resumed battle carries its
    stored attempts: they took no time in this run and must not make it look faster). ``None`` until one attempt
    of this run has finished or while the total is unknown.
    """
    finished_here = done - baseline
    if total is None or finished_here <= 0 or elapsed_s < 0:
        return None
    return elapsed_s / finished_here * max(total - done, 0)


def format_eta(seconds: float | None) -> str:
    """``ETA m:ss`` (``h:mm:ss`` past an hour), or ``ETA`` and an en dash with no estimate yet."""
    if seconds is None:
        return f"ETA {NO_ESTIMATE}"
    minutes, secs = divmod(int(seconds + 0.5), 60)
    hours, minutes = divmod(minutes, 60)
    return f"ETA {hours}:{minutes:02d}:{secs:02d}" if hours else f"ETA {minutes}:{secs:02d}"


class AttemptEtaColumn(ProgressColumn):
    """Time remaining from attempts done / total since the battle started (not rich's speed sampling).

    Why not rich's TimeRemainingColumn: it measures from the moment the bar appears, which includes starting the
    agents, and it smooths over a short window; attempts finish in bursts when they run concurrently. The battle's
    own start (the ``eta_start`` task field) and its carried attempts (``eta_baseline``) give a steadier estimate.
    """

    max_refresh = 0.5

    def render(self, task: Task) -> Text:
        """The ETA text of one task (no estimate until the battle started and an attempt finished)."""
        start = task.fields.get("eta_start")
        baseline = task.fields.get("eta_baseline", 0)
        remaining = None
        if isinstance(start, (int, float)):
            remaining = estimate_remaining_s(task.completed, task.total, baseline, task.get_time() - start)
        return Text(format_eta(remaining), style="progress.remaining")


class BattleDisplay:
    """Live progress: a rich bar (attempts done / total, successes, failures, infrastructure errors, ETA) plus log
    lines. The battle's summary is not printed here: the caller ends with the verdict read from summary.json
    (:mod:`launcher.cli.run_verdict`); ``finished_markdown`` keeps the ``battle_finished`` text for callers."""

    def __init__(self, console: Console, *, quiet: bool, clock: Callable[[], float] | None = None) -> None:
        self.console = console
        self.quiet = quiet
        self.ok = 0
        self.failed = 0
        self.infra = 0
        self.total: int | None = None
        self._k: int | None = None
        self._tasks: frozenset[str] = frozenset()
        self.skipped: dict[str, int] = {}
        """Per task, the attempts a pass^k certify battle skipped at its first failure (never to finish: the bar's
        total leaves them out)."""
        self.finished_markdown: str | None = None
        self._clock = clock
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> Self:
        if not self.quiet:
            self._progress = Progress(
                SpinnerColumn(),
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("✅ {task.fields[ok]}  ❌ {task.fields[failed]}  ⚠️  {task.fields[infra]}"),
                TimeElapsedColumn(),
                AttemptEtaColumn(),
                console=self.console,
                transient=False,
                get_time=self._clock,
            )
            self._progress.__enter__()
            self._task = self._progress.add_task("starting", total=None, ok=0, failed=0, infra=0)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(None, None, None)
            self._progress = None

    def status(self, text: str) -> None:
        """A setup step ("starting the green agent...")."""
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, description=text)

    def line(self, text: str) -> None:
        """A log line above the bar (nothing with ``--quiet``)."""
        if not self.quiet:
            say(self.console, text)

    def on_event(self, event: dict[str, Any], text: str) -> None:
        """The assessment client's callback (also fed by the backend follower). The event is read as its typed
        model (docs/events.schema.json); one this launcher does not know, or that does not fit, only shows its text."""
        typed = read_event(event)
        if isinstance(typed, BattleStarted):
            self.total = typed.attempts_total
            self._k, self._tasks = typed.k, frozenset(typed.tasks)
            carried = max(typed.resumed_attempts, 0)
            started: dict[str, Any] = {"eta_baseline": carried, "completed": carried}
            if self._progress is not None:
                started["eta_start"] = self._progress.get_time()
            self._update(description=f"battle {typed.battle_id}", total=self.total, **started)
        elif isinstance(typed, AttemptFinished):
            if typed.outcome == "success":
                self.ok += 1
            elif typed.outcome == "infra_error":
                self.infra += 1
            else:
                self.failed += 1
            if typed.total is not None:
                self.total = typed.total
            done = typed.done if typed.done is not None else self.ok + self.failed + self.infra
            self._update(completed=done, total=self._left_total())
        elif isinstance(typed, AttemptsSkipped):
            # Events are the green agent's (possibly relayed by a backend): only the battle's tasks and attempts 1..k
            # count, so a malformed skip can neither grow this map nor shrink the total past what it can skip.
            if not self._tasks or typed.task_key in self._tasks:
                self.skipped[typed.task_key] = len({a for a in typed.attempts if 1 <= a <= (self._k or a)})
            self._update(total=self._left_total())
        elif isinstance(typed, BattleFinished) or event.get("type") == "battle_finished":
            # The text is the whole markdown summary (or its first line, through a backend): printed raw it would
            # come out hard-wrapped above the rendered copy the caller prints.
            self.finished_markdown = text or None
            return
        if text:
            self.line(text)

    def _left_total(self) -> int | None:
        """The attempts the battle will finish: its total less the attempts certify skipped."""
        return None if self.total is None else max(self.total - sum(self.skipped.values()), 0)

    def _update(self, **kwargs: Any) -> None:
        if self._progress is None or self._task is None:
            return
        self._progress.update(self._task, ok=self.ok, failed=self.failed, infra=self.infra, **kwargs)

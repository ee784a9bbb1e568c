"""What ``arena run`` shows while a battle runs: a rich progress bar fed by the battle's events, and plain lines.

Why its own module: both run modes (direct, and through a backend) show the same display, and the line printer
``say`` is how every message of the CLI reaches the terminal without markup interpretation or hard wrapping.
"""

from __future__ import annotations

from typing import Any, Self

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

__all__ = ["BattleDisplay", "say"]


def say(console: Console, message: str, *, label: str | None = None) -> None:
    """Print one message verbatim (no markup interpretation, no hard wrapping: paths stay copyable)."""
    text = Text(message)
    if label:
        text = Text.assemble((label, "bold red"), " ", text)
    console.print(text, highlight=False, soft_wrap=True)


class BattleDisplay:
    """Live progress: a rich bar (attempts done / total, successes, failures, infrastructure errors) plus log lines."""

    def __init__(self, console: Console, *, quiet: bool) -> None:
        self.console = console
        self.quiet = quiet
        self.ok = 0
        self.failed = 0
        self.infra = 0
        self.total: int | None = None
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
                console=self.console,
                transient=False,
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
        if not self.quiet:
            say(self.console, text)

    def on_event(self, event: dict[str, Any], text: str) -> None:
        """The assessment client's callback."""
        kind = event.get("type")
        if kind == "battle_started":
            total = event.get("attempts_total")
            self.total = int(total) if isinstance(total, (int, float)) else None
            self._update(description=f"battle {event.get('battle_id', '')}", total=self.total)
        elif kind == "attempt_finished":
            outcome = event.get("outcome")
            if outcome == "success":
                self.ok += 1
            elif outcome == "infra_error":
                self.infra += 1
            else:
                self.failed += 1
            done = event.get("done")
            total = event.get("total")
            if isinstance(total, int):
                self.total = total
            self._update(
                completed=done if isinstance(done, int) else self.ok + self.failed + self.infra, total=self.total
            )
        if text:
            self.line(text)

    def _update(self, **kwargs: Any) -> None:
        if self._progress is None or self._task is None:
            return
        self._progress.update(self._task, ok=self.ok, failed=self.failed, infra=self.infra, **kwargs)

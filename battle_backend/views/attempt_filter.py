"""Filtering the battle page's attempt grids (the final one and the live one) by outcome, failure category and task.

The page works without script: ``?outcome=&category=&task=`` are applied when the server renders the grids (cells
that do not match are hidden, rows without a matching cell too). With script, static/app.js applies the same rule
to the same ``data-*`` attributes on every change of the form and after every live update, without a reload. The
rule lives here and in app.js only; keep the two equal.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from battle_backend.battles.tolerant import MAX_NAME_CHARS

FILTER_OUTCOMES = ("success", "failure", "infra_error")
MAX_OPTIONS = 500


class FilterableCell(Protocol):
    """What the filter reads of a grid cell (result_views.GridCell, progress_view.ProgressCell)."""

    @property
    def outcome(self) -> str: ...

    @property
    def category(self) -> str: ...


@dataclass(frozen=True)
class AttemptFilter:
    """The selected outcome, category and task ("" for any)."""

    outcome: str = ""
    category: str = ""
    task: str = ""

    @classmethod
    def from_query(cls, params: Mapping[str, str]) -> AttemptFilter:
        """The filter of a page's query string (unknown outcomes and over-long values select nothing)."""
        outcome = params.get("outcome", "")
        return cls(
            outcome=outcome if outcome in FILTER_OUTCOMES else "",
            category=params.get("category", "")[:MAX_NAME_CHARS],
            task=params.get("task", "")[:MAX_NAME_CHARS],
        )

    @property
    def active(self) -> bool:
        """Whether anything is selected."""
        return bool(self.outcome or self.category or self.task)

    def cell_matches(self, outcome: str | None, category: str | None) -> bool:
        """Whether a cell shows under the outcome and category filters (an empty cell only when neither is set)."""
        if not self.outcome and not self.category:
            return True
        if outcome is None:
            return False
        return (not self.outcome or outcome == self.outcome) and (not self.category or category == self.category)

    def row_matches(self, task_key: str, cells: Iterable[FilterableCell | None]) -> bool:
        """Whether a task's row shows: the task filter, then at least one cell matching (when one is selected)."""
        if self.task and task_key != self.task:
            return False
        if not self.outcome and not self.category:
            return True
        return any(cell is not None and self.cell_matches(cell.outcome, cell.category) for cell in cells)


@dataclass(frozen=True)
class FilterOptions:
    """The choices of the filter form: the categories and tasks seen in the grids."""

    categories: list[str]
    tasks: list[str]

    @property
    def empty(self) -> bool:
        """No attempt known: the form is left out."""
        return not self.tasks


def filter_options(tasks: Iterable[str], categories: Iterable[str]) -> FilterOptions:
    """Distinct tasks in order of appearance and distinct categories sorted, each bounded."""
    task_list = list(dict.fromkeys(t for t in tasks if t))[:MAX_OPTIONS]
    category_list = sorted({c for c in categories if c})[:MAX_OPTIONS]
    return FilterOptions(categories=category_list, tasks=task_list)

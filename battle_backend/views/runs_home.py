"""The runs home page and the compare view of ``arena view runs/`` (the data: battles/runs_home.py).

Filtering and sorting are done here, from the query string (``?q=&domain=&status=&sort=``), so the page works
without script; static/app.js only submits the form when a select changes. Every string reaches the page through
the templates' autoescaping; numbers are formatted here.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from battle_backend.battles.runs_home import Comparison, HomeRun, RunsHome

SortKey = Literal["date", "score", "name"]
SORTS: tuple[SortKey, ...] = ("date", "score", "name")
MAX_QUERY_CHARS = 200
FAILURE_MIX_SHOWN = 3


@dataclass(frozen=True)
class HomeQuery:
    """What the home page is asked to show: text (in the name, battle id, domains, path), domain, status, sort."""

    text: str = ""
    domain: str = ""
    status: str = ""
    sort: SortKey = "date"

    @classmethod
    def from_query(cls, params: Mapping[str, str]) -> HomeQuery:
        wanted = params.get("sort", "date")
        sort: SortKey = next((key for key in SORTS if key == wanted), "date")
        return cls(
            text=params.get("q", "")[:MAX_QUERY_CHARS].strip(),
            domain=params.get("domain", "")[:MAX_QUERY_CHARS],
            status=params.get("status", "")[:MAX_QUERY_CHARS],
            sort=sort,
        )

    @property
    def active(self) -> bool:
        return bool(self.text or self.domain or self.status)

    def matches(self, run: HomeRun) -> bool:
        if self.domain and self.domain not in run.domains:
            return False
        if self.status and run.status != self.status:
            return False
        if self.text:
            haystack = " ".join([run.name, run.battle_id, run.path, *run.domains]).casefold()
            return self.text.casefold() in haystack
        return True


def shown_runs(home: RunsHome, query: HomeQuery) -> list[HomeRun]:
    """The runs the query keeps, in its order: date and score newest/highest first (runs without a score last),
    name A to Z."""
    runs = [run for run in home.runs if query.matches(run)]
    if query.sort == "name":
        return sorted(runs, key=lambda r: (r.name.casefold(), r.battle_id))
    if query.sort == "score":
        return sorted(runs, key=lambda r: (r.pass_hat is None, -(r.pass_hat or 0.0), r.name.casefold()))
    return sorted(runs, key=lambda r: (r.date, r.name.casefold()), reverse=True)


def domains_of(home: RunsHome) -> list[str]:
    return sorted({domain for run in home.runs for domain in run.domains})


def statuses_of(home: RunsHome) -> list[str]:
    return sorted({run.status for run in home.runs})


def score_text(run: HomeRun) -> str:
    return "\N{EN DASH}" if run.pass_hat is None else f"{run.pass_hat:.3f}"


def interval_text(low: float | None, high: float | None, signed: bool = False) -> str:
    if low is None or high is None:
        return ""
    return f"[{low:+.3f}, {high:+.3f}]" if signed else f"[{low:.2f}, {high:.2f}]"


def failure_mix_text(run: HomeRun) -> str:
    """The commonest failure categories with their counts ("task_incomplete 5 · format_error 2 · 1 more")."""
    items = sorted(run.failure_mix.items(), key=lambda item: (-item[1], item[0]))
    parts = [f"{name} {count}" for name, count in items[:FAILURE_MIX_SHOWN]]
    if len(items) > FAILURE_MIX_SHOWN:
        parts.append(f"{len(items) - FAILURE_MIX_SHOWN} more")
    return " · ".join(parts) if parts else "none"


def cost_text(run: HomeRun) -> str:
    if run.cost_usd is None:
        return "n/a"
    return f"${run.cost_usd:,.2f}" if run.cost_usd >= 0.01 or run.cost_usd == 0 else f"${run.cost_usd:.4f}"


def num(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "\N{EN DASH}"
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def p_text(value: float | None) -> str:
    return "\N{EN DASH}" if value is None else f"{value:.2g}"


@dataclass(frozen=True)
class CompareView:
    """What the compare page shows: the two runs as picked, and the comparison (report or refusal) if there is one."""

    first: HomeRun
    second: HomeRun
    comparison: Comparison | None

    @property
    def run_a(self) -> HomeRun:
        """A, the candidate: the comparison's ``a`` (the newer run) when there is one."""
        if self.comparison is not None and self.comparison.a == self.second.battle_id:
            return self.second
        return self.first

    @property
    def run_b(self) -> HomeRun:
        return self.first if self.run_a is self.second else self.second

    @property
    def command(self) -> str:
        """The command that compares the two runs in a terminal."""
        return f"arena compare {shlex.quote(self.run_a.path)} {shlex.quote(self.run_b.path)}"  # shown, never run


def compare_view(home: RunsHome, picked: list[str]) -> CompareView | str:
    """The view of two picked runs, or why there is none (the page's message)."""
    ids = list(dict.fromkeys(picked))
    if len(ids) != 2:
        return f"pick two different runs to compare (picked: {len(ids)})"
    first, second = home.run(ids[0]), home.run(ids[1])
    if first is None or second is None:
        return "one of the picked runs is not in this runs home"
    return CompareView(first=first, second=second, comparison=home.comparison(ids[0], ids[1]))

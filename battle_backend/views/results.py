"""Views of an Arena BattleResult found in a result's ``detail``: the pass^k table, the per-attempt grid, a
server-side SVG chart of pass^j against j, and the cost-and-latency rows (the result's ``usage``).

Two kinds of results reach the page:

- an Arena result declares ``"schema": "arena.battle-result/1"``; it was checked against the published schema when
  it was posted (:mod:`battle_backend.battles.arena_results`) and is read through the typed models there
  (:class:`~battle_backend.battles.arena_results.ArenaResult`), not through ``.get`` chains;
- any other result (another green agent, an AgentBeats-style one, an Arena result written before the identifier
  existed) is read as plain JSON, tolerantly: anything missing or oddly typed is skipped rather than failing the page.

Numbers are formatted here; every string that reaches the SVG is escaped here, because the SVG is emitted as markup.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from html import escape
from typing import Any

from battle_backend.battles.arena_results import ArenaResult, parse_arena_result
from battle_backend.views.certification import CertificationView, certification_view
from battle_backend.views.fingerprint import FingerprintView, fingerprint_view

OUTCOMES = ("success", "failure", "infra_error")
MAX_ATTEMPTS_SHOWN = 200
"""Attempt numbers beyond this are left out of the grid (a malformed result must not make a huge page)."""


# --- the views ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MacroRow:
    """One j of the macro summary (means over tasks, with their confidence intervals)."""

    j: int
    pass_hat_mean: float | None
    pass_hat_ci_low: float | None
    pass_hat_ci_high: float | None
    pass_at_mean: float | None
    pass_at_ci_low: float | None
    pass_at_ci_high: float | None
    coverage: Any
    total_tasks: Any

    @property
    def coverage_text(self) -> str:
        """Tasks with enough attempts for this j: "3 / 4" for counts, a percentage for shares."""
        if self.coverage is None:
            return "-"
        if isinstance(self.coverage, bool):
            return str(self.coverage)
        if isinstance(self.coverage, int):
            return f"{self.coverage} / {self.total_tasks}" if self.total_tasks is not None else str(self.coverage)
        if isinstance(self.coverage, float):
            return f"{self.coverage:.0%}" if self.coverage <= 1 else f"{self.coverage:g}"
        return str(self.coverage)


@dataclass(frozen=True)
class GridCell:
    """One attempt of one task."""

    outcome: str
    """success | failure | infra_error | unknown"""
    label: str
    """What the cell shows: ✓ for a success, else the failure category."""
    title: str
    """The hover text: category, whose fault, detail."""
    category: str = ""
    """The failure category ("" for a success): the filter's key."""

    @property
    def outcome_words(self) -> str:
        """The outcome for a screen reader."""
        return {"infra_error": "infrastructure error", "unknown": "unknown outcome"}.get(self.outcome, self.outcome)


@dataclass(frozen=True)
class GridRow:
    """One task across its attempts."""

    task_key: str
    cells: list[GridCell | None]
    successes: int
    attempts: int


@dataclass(frozen=True)
class ArenaResultView:
    """Everything the result section of the battle page shows."""

    rows: list[MacroRow]
    grid: list[GridRow]
    max_attempt: int
    chart_svg: str
    """Escaped SVG markup, safe to embed as is."""
    failure_breakdown: dict[str, int] = field(default_factory=dict)
    outcome_counts: dict[str, int] = field(default_factory=dict)
    status: str | None = None
    infrastructure_errors: Any = None
    usage_rows: list[tuple[str, str]] = field(default_factory=list)
    """(label, value) of the cost-and-latency table: text made here from numbers only (escaped by the template)."""
    certification: CertificationView | None = None
    """A ``certify`` battle's decision (summary.json's ``certification``); None for other battles."""
    fingerprint: FingerprintView | None = None
    """What the result was scored on (summary.json's ``fingerprint``); None for results written before them."""


def _cell(outcome: str, category: str | None, author: str, detail: str) -> GridCell:
    if outcome == "success":
        return GridCell(outcome=outcome, label="✓", title="success")
    category = category or outcome
    title = category + (f" · fault: {author}" if author else "") + (f" · {detail}" if detail else "")
    return GridCell(outcome=outcome, label=category, title=title[:1000], category=category)


def _grid(entries: Iterable[tuple[str, int, GridCell]]) -> tuple[list[GridRow], int]:
    """Rows of (task key, attempt number, cell) entries, tasks in order of first appearance."""
    by_task: dict[str, dict[int, GridCell]] = {}
    for key, number, cell in entries:
        if 1 <= number <= MAX_ATTEMPTS_SHOWN:
            by_task.setdefault(key, {})[number] = cell
    max_attempt = max((n for cells in by_task.values() for n in cells), default=0)
    rows = [
        GridRow(
            task_key=key,
            cells=[cells.get(n) for n in range(1, max_attempt + 1)],
            successes=sum(1 for c in cells.values() if c.outcome == "success"),
            attempts=len(cells),
        )
        for key, cells in by_task.items()
    ]
    return rows, max_attempt


def _view(
    rows: list[MacroRow],
    entries: Iterable[tuple[str, int, GridCell]],
    outcomes: Iterable[str],
    *,
    failure_breakdown: dict[str, int],
    status: str | None,
    infrastructure_errors: Any,
) -> ArenaResultView:
    grid, max_attempt = _grid(entries)
    counts = {name: 0 for name in OUTCOMES}
    for outcome in outcomes:
        if outcome in counts:
            counts[outcome] += 1
    return ArenaResultView(
        rows=rows,
        grid=grid,
        max_attempt=max_attempt,
        chart_svg=pass_chart_svg(rows),
        failure_breakdown=failure_breakdown,
        outcome_counts=counts,
        status=status,
        infrastructure_errors=infrastructure_errors,
    )


def arena_result_view(result: ArenaResult) -> ArenaResultView:
    """The views of a typed Arena result."""
    rows = sorted(
        (
            MacroRow(
                j=m.j,
                pass_hat_mean=_finite(m.pass_hat_mean),
                pass_hat_ci_low=_finite(m.pass_hat_ci_low),
                pass_hat_ci_high=_finite(m.pass_hat_ci_high),
                pass_at_mean=_finite(m.pass_at_mean),
                pass_at_ci_low=_finite(m.pass_at_ci_low),
                pass_at_ci_high=_finite(m.pass_at_ci_high),
                coverage=m.coverage,
                total_tasks=m.total_tasks,
            )
            for m in result.summary.macro
        ),
        key=lambda r: r.j,
    )
    entries = (
        (
            a.task_key,
            a.attempt,
            _cell(
                a.outcome,
                a.failure.category if a.failure else None,
                a.failure.fault_author if a.failure else "",
                a.failure.detail if a.failure else "",
            ),
        )
        for a in result.attempts
    )
    return _view(
        rows,
        entries,
        (a.outcome for a in result.attempts),
        failure_breakdown=dict(result.failure_breakdown),
        status=result.status,
        infrastructure_errors=result.infrastructure_errors,
    )


def build_result_view(result: dict[str, Any]) -> ArenaResultView:
    """All the views of one BattleResult: typed for an Arena result, tolerant for any other."""
    arena = parse_arena_result(result)
    if arena is None:
        return generic_result_view(result)
    view = arena_result_view(arena)
    return replace(view, usage_rows=usage_rows(result), certification=certification_view(result), **_scored_on(result))


# --- the tolerant view of foreign results ------------------------------------------------------------------------
def _finite(value: float | None) -> float | None:
    return value if value is None or math.isfinite(value) else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _macro_rows(summary: dict[str, Any]) -> list[MacroRow]:
    macro = summary.get("macro")
    items: list[tuple[Any, Any]] = []
    if isinstance(macro, list):
        items = [(row.get("j") if isinstance(row, dict) else None, row) for row in macro]
    elif isinstance(macro, dict):
        items = [(row.get("j", key) if isinstance(row, dict) else key, row) for key, row in macro.items()]
    rows: list[MacroRow] = []
    for j, row in items:
        if not isinstance(row, dict):
            continue
        try:
            j_int = int(j)
        except (TypeError, ValueError, OverflowError):
            continue
        rows.append(
            MacroRow(
                j=j_int,
                pass_hat_mean=_number(row.get("pass_hat_mean")),
                pass_hat_ci_low=_number(row.get("pass_hat_ci_low")),
                pass_hat_ci_high=_number(row.get("pass_hat_ci_high")),
                pass_at_mean=_number(row.get("pass_at_mean")),
                pass_at_ci_low=_number(row.get("pass_at_ci_low")),
                pass_at_ci_high=_number(row.get("pass_at_ci_high")),
                coverage=row.get("coverage"),
                total_tasks=row.get("total_tasks"),
            )
        )
    return sorted(rows, key=lambda r: r.j)


def task_key_of(attempt: dict[str, Any]) -> str:
    """``domain/split/index`` of a BattleResult attempt entry (its ``task_key`` when it carries one)."""
    key = attempt.get("task_key")
    if isinstance(key, str) and key:
        return key
    return f"{attempt.get('domain', '?')}/{attempt.get('split') or '-'}/{attempt.get('task_index', '?')}"


def _generic_cell(attempt: dict[str, Any]) -> GridCell:
    raw_outcome = attempt.get("outcome")
    outcome = raw_outcome if isinstance(raw_outcome, str) and raw_outcome in OUTCOMES else "unknown"
    failure = attempt.get("failure") if isinstance(attempt.get("failure"), dict) else None
    category = str(failure.get("category") or outcome) if failure else None
    author = str(failure.get("fault_author") or "") if failure else ""
    detail = str(failure.get("detail") or "") if failure else ""
    return _cell(outcome, category, author, detail)


def _generic_entries(attempts: list[Any]) -> Iterator[tuple[str, int, GridCell]]:
    for attempt in attempts:
        if not isinstance(attempt, dict):
            continue
        try:
            number = int(attempt.get("attempt", 0))
        except (TypeError, ValueError, OverflowError):
            continue
        yield task_key_of(attempt), number, _generic_cell(attempt)


def generic_result_view(result: dict[str, Any]) -> ArenaResultView:
    """The views of a result of unknown provenance, read tolerantly."""
    raw_attempts = result.get("attempts")
    attempts: list[Any] = raw_attempts if isinstance(raw_attempts, list) else []
    breakdown = result.get("failure_breakdown")
    view = _view(
        _macro_rows(result.get("summary") or {}),
        _generic_entries(attempts),
        (a["outcome"] for a in attempts if isinstance(a, dict) and isinstance(a.get("outcome"), str)),
        failure_breakdown={str(k): v for k, v in breakdown.items()} if isinstance(breakdown, dict) else {},
        status=str(result["status"]) if result.get("status") is not None else None,
        infrastructure_errors=result.get("infrastructure_errors"),
    )
    return replace(view, usage_rows=usage_rows(result), certification=certification_view(result), **_scored_on(result))


def _scored_on(result: dict[str, Any]) -> dict[str, Any]:
    return {"fingerprint": fingerprint_view(result)}


# --- cost and latency (the result's "usage", docs/results.md), read tolerantly -----------------------------------
def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**15 else None


def _secs(value: Any) -> str:
    number = _number(value)
    return "n/a" if number is None else f"{number:.3f} s"


def _usd(value: Any) -> str:
    number = _number(value)
    if number is None or number < 0:
        return "n/a"
    return f"${number:,.4f}" if number >= 0.01 or number == 0 else f"${number:.6f}"


COST_SOURCES = {"reported": "reported", "price_table": "price table", "mixed": "reported + price table"}


def _party_rows(usage: dict[str, Any], key: str, label: str, unit: str) -> list[tuple[str, str]]:
    party = usage.get(key)
    if not isinstance(party, dict):
        none = "none (scripted user: no model)" if key == "user" and key in usage else "n/a"
        return [(f"{label} tokens", none), (f"{label} cost", none)]
    calls, reported = _count(party.get("calls")), _count(party.get("reported"))
    prompt, completion = _count(party.get("prompt_tokens")), _count(party.get("completion_tokens"))
    coverage = f"{reported if reported is not None else '?'}/{calls if calls is not None else '?'} {unit}"
    tokens = (
        f"not reported ({coverage})"
        if prompt is None or completion is None
        else f"{prompt:,} prompt + {completion:,} completion ({coverage} reported)"
    )
    cost = _usd(party.get("cost_usd"))
    source_key = party.get("cost_source")
    source = COST_SOURCES.get(source_key) if isinstance(source_key, str) else None
    return [(f"{label} tokens", tokens), (f"{label} cost", cost + (f" ({source})" if source and cost != "n/a" else ""))]


def usage_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    """The cost-and-latency table of a result with a ``usage`` object; no rows without one (older results)."""
    usage = result.get("usage")
    if not isinstance(usage, dict):
        return []
    raw_latency = usage.get("agent_latency")
    latency: dict[str, Any] = raw_latency if isinstance(raw_latency, dict) else {}
    turns = _count(latency.get("count"))
    return [
        (
            "white agent turn latency p50 / p95 / max",
            f"{_secs(latency.get('p50_s'))} / {_secs(latency.get('p95_s'))} / {_secs(latency.get('max_s'))}"
            + (f" ({turns} turns)" if turns is not None else ""),
        ),
        (
            "time in white agent / user simulator / harness (summed over attempts)",
            f"{_secs(usage.get('agent_s'))} / {_secs(usage.get('user_s'))} / {_secs(usage.get('harness_s'))}",
        ),
        *_party_rows(usage, "agent", "white agent", "replies"),
        *_party_rows(usage, "user", "user simulator", "calls"),
        ("total cost", _usd(usage.get("total_cost_usd"))),
    ]


def pass_chart_svg(rows: list[MacroRow], *, width: int = 520, height: int = 300) -> str:
    """pass^j (solid, with CI whiskers) and pass@j (dashed) against j, as inline SVG (no script, no styles:
    colours come from classes in style.css, so the page's CSP needs no 'unsafe-inline')."""
    left, right, top, bottom = 52, 16, 34, 44
    plot_w, plot_h = width - left - right, height - top - bottom
    js = [row.j for row in rows]
    parts = [
        f'<svg class="pass-chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-labelledby="pass-chart-title">',
        '<title id="pass-chart-title">pass^j and pass@j against j, with 95% intervals</title>',
    ]
    if not js:
        parts.append(
            f'<text class="chart-note" x="{width / 2:.1f}" y="{height / 2:.1f}" text-anchor="middle">'
            "no summary rows</text>"
        )
        parts.append("</svg>")
        return "".join(parts)
    j_min, j_max = min(js), max(js)

    def x(j: int) -> float:
        return left + (plot_w / 2 if j_max == j_min else (j - j_min) / (j_max - j_min) * plot_w)

    def y(value: float) -> float:
        return top + (1.0 - max(0.0, min(1.0, value))) * plot_h

    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        parts.append(
            f'<line class="grid-line" x1="{left}" x2="{left + plot_w}" y1="{y(tick):.1f}" y2="{y(tick):.1f}"/>'
        )
        parts.append(
            f'<text class="axis-label" x="{left - 8}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:.2f}</text>'
        )
    for j in js:
        parts.append(f'<text class="axis-label" x="{x(j):.1f}" y="{top + plot_h + 18}" text-anchor="middle">{j}</text>')
    parts.append(f'<line class="axis" x1="{left}" x2="{left}" y1="{top}" y2="{top + plot_h}"/>')
    parts.append(f'<line class="axis" x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" y2="{top + plot_h}"/>')
    parts.append(
        f'<text class="axis-title" x="{left + plot_w / 2:.1f}" y="{height - 6}" text-anchor="middle">'
        "j (attempts that must all succeed)</text>"
    )

    def series(kind: str, mean: str, low: str, high: str) -> None:
        points = [(row.j, getattr(row, mean), getattr(row, low), getattr(row, high)) for row in rows]
        coords = [f"{x(j):.1f},{y(v):.1f}" for j, v, _, _ in points if v is not None]
        if len(coords) > 1:
            parts.append(f'<polyline class="series-{kind}" points="{" ".join(coords)}"/>')
        for j, value, lo, hi in points:
            if lo is not None and hi is not None:
                cx = x(j)
                parts.append(
                    f'<line class="whisker-{kind}" x1="{cx:.1f}" x2="{cx:.1f}" y1="{y(lo):.1f}" y2="{y(hi):.1f}"/>'
                )
                for bound in (lo, hi):
                    parts.append(
                        f'<line class="whisker-{kind}" x1="{cx - 5:.1f}" x2="{cx + 5:.1f}" '
                        f'y1="{y(bound):.1f}" y2="{y(bound):.1f}"/>'
                    )
            if value is not None:
                label = escape(
                    f"{kind} j={j}: {value:.3f}"
                    + (f" [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else "")
                )
                parts.append(
                    f'<circle class="point-{kind}" cx="{x(j):.1f}" cy="{y(value):.1f}" r="4">'
                    f"<title>{label}</title></circle>"
                )

    series("pass-at", "pass_at_mean", "pass_at_ci_low", "pass_at_ci_high")
    series("pass-hat", "pass_hat_mean", "pass_hat_ci_low", "pass_hat_ci_high")
    legend_y = 6
    parts.append(
        f'<line class="series-pass-hat" x1="{left + 10}" x2="{left + 34}" y1="{legend_y + 6}" y2="{legend_y + 6}"/>'
    )
    parts.append(f'<text class="legend" x="{left + 40}" y="{legend_y + 10}">pass^j</text>')
    parts.append(
        f'<line class="series-pass-at" x1="{left + 100}" x2="{left + 124}" y1="{legend_y + 6}" y2="{legend_y + 6}"/>'
    )
    parts.append(f'<text class="legend" x="{left + 130}" y="{legend_y + 10}">pass@j</text>')
    parts.append("</svg>")
    return "".join(parts)

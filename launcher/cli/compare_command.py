"""``arena compare RUN_A RUN_B``: a candidate battle (A, e.g. an agent's new version) against a baseline (B, the old).

Why paired: tasks differ far more from each other than two versions of an agent differ on one task, so differences
are taken within each task, then averaged (``compare_trials``): the paired interval of A-B answers "is A better?".

Sources (each side): a run directory (``runs/<battle id>/``), its ``summary.json`` (or any file ``arena export``
reads, through its own :func:`~launcher.cli.export_command.load_battles`), or with ``--backend URL`` a battle id on
that backend (``GET {URL}/battles/{id}``, whose result detail is the BattleResult).

Trials: per task key (``domain/split/index``), outcomes by attempt number (infrastructure errors are not counted).
Battles that did not complete (cancelled, interrupted, error) are compared on the attempts that finished, with a
warning naming the status.

Which is which: RUN_A is A, the candidate (e.g. the new version); RUN_B is B, the baseline (the old one, or the
stored reference run). Every difference is A minus B: positive means the candidate is better.

Decision: one primary metric chosen before looking (``--metric``, default ``pass^1``, the success rate; ``pass^k``
is pass^j at the smaller k of the two runs), one paired sign-flip test on the per-task differences of that metric
(green_agent.statistics.decide: exact over all 2^n sign patterns up to 20 tasks, seeded Monte Carlo above), and the
interval printed is the set of differences that very test does not reject. Without ``--fail-if``: two-sided at
1 - ``--confidence``: "A is better" / "A is worse" / "no significant difference". With ``--fail-if`` the gate's
one-sided question decides, at the same level:

- ``worse``: fails when A is shown worse than B (p <= 1 - confidence; the upper bound is below 0);
- ``not-better``: fails unless A is shown better than B (the lower bound is above 0);
- ``not-noninferior``: fails unless A is shown better than B minus ``--margin`` (the lower bound is above -M).

Each gate errs at most 1 - confidence of the time at any number of tasks (with 5 tasks, a one-sided test at 5% can
only decide when all 5 differ in the same direction; a two-sided one never can). Beside every difference: the
minimum detectable difference at 80% power (MDE) for that many tasks.

``--json`` prints one object with these keys (always present, in this order):

- ``schema``: ``"arena.compare/1"``;
- ``a``, ``b``: the run headers: ``role`` (candidate / baseline), ``source``, ``battle_id``, ``white_agent_url``,
  ``domains``, ``k``, ``status``, ``error``, ``tasks``, ``counted_trials``, ``infrastructure_errors``;
- ``comparison``: the :class:`~green_agent.statistics.compare.TrialsComparison` dump (``per_j``, ``success_rate``,
  ``only_in_a``, ``only_in_b``, ...);
- ``verdict``: ``j``, ``outcome`` (``better`` | ``worse`` | ``no_difference`` | ``noninferior`` |
  ``not_noninferior`` | ``undetermined``), ``text``, ``rule``, ``confidence``, ``diff``, ``ci_low``, ``ci_high``,
  ``metric``, ``p_value``, ``mde``, ``mde_note``, ``tasks``, ``test``, ``alternative``, ``gate``, ``margin``,
  ``gate_passed``;
- ``flips``: ``better_in_a`` / ``better_in_b``: tasks whose counted success rate differs, each with ``task_key``,
  ``successes_a``, ``n_a``, ``successes_b``, ``n_b``, ``rate_diff`` (A-B), largest difference first;
- ``unmatched``: ``only_in_a`` / ``only_in_b``: task keys one run has and the other has not;
- ``warnings``: the warning lines (also printed on standard error);
- ``cost``: cost and latency side by side, rows of ``label``, ``a``, ``b`` (display strings, "n/a" when unknown).

Exit codes: 0 compared (whatever the verdict without ``--fail-if``; with it, the gate passed); 1 the gate failed;
2 bad input (a source is not a run, unreadable, invalid, the runs' fingerprints differ on the shared tasks
without ``--allow-incomparable``, the runs have no task in common, or no task has enough
attempts for the metric), with the reason on standard error. Nothing is written to disk.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from green_agent.engine.battle_ids import BattleIdError, validate_battle_id
from green_agent.engine.certify import per_attempt_refusal
from green_agent.engine.costs import compare_cost_rows
from green_agent.engine.fingerprint import incomparabilities, unverifiable_warning
from green_agent.engine.results import BattleResult
from green_agent.engine.run_store import ATTEMPTS_FILE
from green_agent.statistics import Decision, TrialsComparison, compare_trials, decide
from launcher.cli.compare_models import (
    CompareReport,
    CostRow,
    Flips,
    RunHeader,
    TaskFlip,
    Unmatched,
    Verdict,
)
from launcher.cli.export_command import SUMMARY_FILE, ExportError, LoadedBattles, from_backend_record, load_battles

EXIT_GATE_FAILED = 1
EXIT_BAD_INPUT = 2
BACKEND_TIMEOUT_S = 30.0
FEW_TASKS = 10  # fewer paired tasks than this: few sign patterns, wide intervals, large MDE (warned)
Gate = Literal["worse", "not-better", "not-noninferior"]

Trials = dict[str, list[bool | None]]


class CompareError(ValueError):
    """A source cannot be compared; the message names the source (file, directory or battle) and the problem."""


def _describe_non_run(directory: Path) -> str:
    """Why ``directory`` (which has no summary.json) is not a run, and what to do about it."""
    if (directory / ATTEMPTS_FILE).is_file():
        resume = "the battle never finished; resume it with `arena run SCENARIO --resume`"
        return f"{directory}: has attempts ({ATTEMPTS_FILE}) but no {SUMMARY_FILE}: {resume}"
    try:
        names = sorted(p.name for p in itertools.islice(directory.iterdir(), 200))
    except OSError as error:
        return f"{directory}: cannot be listed ({error})"
    if not names:
        return f"{directory}: an empty directory, not a run (no {SUMMARY_FILE})"
    runs = [name for name in names if (directory / name / SUMMARY_FILE).is_file()]
    if runs:
        return f"{directory}: a directory of runs, not a run; pass one of them, e.g. {directory / runs[0]}"
    shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
    return f"{directory}: not a run directory: no {SUMMARY_FILE} (it holds: {shown})"


def _one_battle(load: Callable[[], LoadedBattles], where: str) -> BattleResult:
    """The one battle ``load`` reads (``arena export``'s reader: its ExportError becomes a CompareError)."""
    try:
        loaded = load()
    except ExportError as error:
        raise CompareError(str(error)) from None
    if len(loaded.results) != 1:
        raise CompareError(f"{where}: holds {len(loaded.results)} battle results; compare takes one battle per side")
    return loaded.results[0]


def read_local_run(source: Path) -> BattleResult:
    """The BattleResult of a run directory or summary file; :class:`CompareError` naming the problem."""
    if source.is_dir() and not (source / SUMMARY_FILE).is_file():
        raise CompareError(_describe_non_run(source))
    return _one_battle(lambda: load_battles(source), str(source))


async def _fetch_record(backend_url: str, battle_id: str, transport: Any) -> dict[str, Any]:
    import httpx

    from launcher.cli.backend_api import BackendApi, BackendError
    from launcher.ports import is_loopback_url

    timeout = httpx.Timeout(BACKEND_TIMEOUT_S)
    trust_env = not is_loopback_url(backend_url)  # a proxy must not intercept this machine's own backend
    async with httpx.AsyncClient(timeout=timeout, transport=transport, trust_env=trust_env) as http:
        try:
            return await BackendApi(http, backend_url).battle(battle_id)
        except BackendError as error:
            raise CompareError(str(error)) from None


def read_backend_run(backend_url: str, battle_id: str, *, transport: Any = None) -> BattleResult:
    """The BattleResult of ``battle_id`` on the backend at ``backend_url`` (``transport``: tests' httpx transport)."""
    if not backend_url.startswith(("http://", "https://")):
        raise CompareError(f"--backend: expected an http(s) URL, got {backend_url!r}")
    try:
        validate_battle_id(battle_id)
    except BattleIdError as error:
        raise CompareError(f"{battle_id!r}: not a battle id ({error})") from None
    record = asyncio.run(_fetch_record(backend_url.rstrip("/"), battle_id, transport))
    where = f"{backend_url.rstrip('/')}/battles/{battle_id}"
    return _one_battle(lambda: from_backend_record(record, where), where)


def read_run(source: str, backend_url: str | None = None, *, transport: Any = None) -> BattleResult:
    """One side: a path (run directory or summary file), or with ``backend_url`` a battle id on that backend."""
    if backend_url is not None:
        return read_backend_run(backend_url, source, transport=transport)
    return read_local_run(Path(source))


def trials_of(result: BattleResult) -> Trials:
    """task key -> outcomes ordered by attempt number (None: infrastructure error, not counted)."""
    trials: Trials = {}
    for attempt in sorted(result.attempts, key=lambda a: a.attempt):
        trials.setdefault(attempt.task_key, []).append(attempt.trial_outcome)
    return trials


def _counted(outcomes: Sequence[bool | None]) -> tuple[int, int]:
    """(successes, n) over the counted trials."""
    counted = [o for o in outcomes if o is not None]
    return sum(counted), len(counted)


def task_sort_key(task_key: str) -> tuple[tuple[int, int, str], ...]:
    """``retail/test/10`` after ``retail/test/9``: numeric parts compare as numbers."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in task_key.split("/"))


def task_flips(trials_a: Mapping[str, Sequence[bool | None]], trials_b: Mapping[str, Sequence[bool | None]]) -> Flips:
    """Tasks in both runs whose counted success rates differ (exactly: cross-multiplied counts), by side."""
    better_a: list[TaskFlip] = []
    better_b: list[TaskFlip] = []
    for key in trials_a.keys() & trials_b.keys():
        (sa, na), (sb, nb) = _counted(trials_a[key]), _counted(trials_b[key])
        if na == 0 or nb == 0 or sa * nb == sb * na:
            continue
        flip = TaskFlip(task_key=key, successes_a=sa, n_a=na, successes_b=sb, n_b=nb, rate_diff=sa / na - sb / nb)
        (better_a if flip.rate_diff > 0 else better_b).append(flip)
    better_a.sort(key=lambda f: (-f.rate_diff, task_sort_key(f.task_key)))
    better_b.sort(key=lambda f: (f.rate_diff, task_sort_key(f.task_key)))
    return Flips(better_in_a=better_a, better_in_b=better_b)


def level_text(confidence: float) -> str:
    """0.95 -> "95%"."""
    return f"{round(confidence * 100, 6):g}%"


def parse_metric(metric: str, k_max: int) -> tuple[str, int]:
    """``pass^1`` -> ("pass^", 1); ``pass^k`` -> ("pass^", k_max); likewise ``pass@j``. CompareError otherwise."""
    text = metric.strip().lower().replace("pass_hat", "pass^").replace("pass_at", "pass@")
    if len(text) < 6 or text[:5] not in ("pass^", "pass@"):
        raise CompareError(f"--metric: expected pass^J, pass^k, pass@J or pass@k (e.g. pass^1), got {metric!r}")
    kind, tail = text[:5], text[5:]
    if tail == "k":
        if k_max < 1:
            raise CompareError(f"--metric {metric}: no paired task has a counted attempt on both sides")
        return kind, k_max
    if not tail.isdigit() or int(tail) < 1:
        raise CompareError(f"--metric: expected pass^J with J a whole number >= 1 (or k), got {metric!r}")
    return kind, int(tail)


def verdict_of(decision: Decision) -> Verdict:
    """The report's verdict from the one decision (``green_agent.statistics.decide``)."""
    test = decision.test
    return Verdict(
        j=decision.j,
        outcome=decision.outcome,
        text=decision.text,
        rule=decision.rule,
        confidence=test.confidence,
        diff=test.diff,
        ci_low=test.ci_low if test.tasks else None,
        ci_high=test.ci_high if test.tasks else None,
        metric=decision.metric,
        p_value=test.p_value,
        mde=test.mde,
        mde_note=test.mde_note,
        tasks=test.tasks,
        test=test.method,
        alternative=test.alternative,
        gate=decision.gate,
        margin=decision.margin,
        gate_passed=decision.gate_passed,
    )


def _domains(result: BattleResult) -> list[str]:
    found = {a.domain for a in result.attempts}
    if not found:
        configured = result.config.domain
        found = {configured} if isinstance(configured, str) else set(configured)
    return sorted(found)


def run_header(result: BattleResult, role: Literal["candidate", "baseline"], source: str) -> RunHeader:
    counted = sum(1 for a in result.attempts if a.trial_outcome is not None)
    return RunHeader(
        role=role,
        source=source,
        battle_id=result.battle_id,
        white_agent_url=result.white_agent_url,
        domains=_domains(result),
        k=result.config.k,
        status=result.status,
        error=result.error,
        tasks=len({a.task_key for a in result.attempts}),
        counted_trials=counted,
        infrastructure_errors=len(result.attempts) - counted,
    )


def _warnings(a: RunHeader, b: RunHeader, comparison: TrialsComparison, uncounted: list[str]) -> list[str]:
    warnings = [
        f"{side} (battle {h.battle_id}) ended with status {h.status}: only the attempts that finished are compared"
        + (f" ({h.error})" if h.error else "")
        for side, h in (("A", a), ("B", b))
        if h.status != "completed"
    ]
    if a.domains != b.domains:
        warnings.append(f"the runs cover different domains (A: {', '.join(a.domains)}; B: {', '.join(b.domains)})")
    if comparison.only_in_a or comparison.only_in_b:
        warnings.append(
            f"the task sets differ: {len(comparison.only_in_a)} task(s) only in A, {len(comparison.only_in_b)} only "
            "in B (listed below); they are left out of every paired number"
        )
    if a.k != b.k:
        warnings.append(f"k differs (A: {a.k}, B: {b.k}): pass^j is paired only up to the smaller number of trials")
    if uncounted:
        shown = ", ".join(uncounted[:10]) + (", ..." if len(uncounted) > 10 else "")
        warnings.append(
            f"{len(uncounted)} task(s) in both runs have no counted trial on one side (infrastructure errors only), "
            f"left out of the paired numbers: {shown}"
        )
    paired = comparison.success_rate.tasks_paired if comparison.success_rate else 0
    if 0 < paired < FEW_TASKS:
        warnings.append(
            f"only {paired} paired task(s): intervals are valid but wide and only large differences can be detected "
            "(see the MDE; `arena plan` says how many tasks a question needs)"
        )
    return warnings


def _fingerprint_notes(
    result_a: BattleResult, result_b: BattleResult, common: Iterable[str], allow_incomparable: bool
) -> list[str]:
    """:class:`CompareError` naming what differs when the runs were scored on different task sets, tau2 builds or
    user simulators (green_agent.engine.fingerprint); with ``allow_incomparable`` the same as a warning."""
    differences = incomparabilities(result_a.fingerprint, result_b.fingerprint, common)
    if differences and not allow_incomparable:
        raise CompareError(
            "the runs are not comparable (their fingerprints differ on the shared tasks): "
            + "; ".join(differences)
            + " (--allow-incomparable compares them anyway)"
        )
    notes = (
        ["compared although the runs are not comparable (--allow-incomparable): " + "; ".join(differences)]
        if differences
        else []
    )
    unverifiable = unverifiable_warning(result_a.fingerprint, result_b.fingerprint)
    return notes + ([unverifiable] if unverifiable else [])


def build_report(
    result_a: BattleResult,
    result_b: BattleResult,
    *,
    sources: tuple[str, str] = ("A", "B"),
    n_bootstrap: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
    metric: str = "pass^1",
    fail_if: Gate | None = None,
    margin: float = 0.0,
    allow_incomparable: bool = False,
) -> CompareReport:
    """Compare A (candidate) with B (baseline) and decide on ``metric`` (the gate ``fail_if`` when given);
    :class:`CompareError` when they have no task in common, no task has enough attempts for the metric, or an
    argument is out of range."""
    if refusal := per_attempt_refusal(result_a, "A") or per_attempt_refusal(result_b, "B"):
        raise CompareError(refusal)
    trials_a, trials_b = trials_of(result_a), trials_of(result_b)
    a = run_header(result_a, "candidate", sources[0])
    b = run_header(result_b, "baseline", sources[1])
    common = trials_a.keys() & trials_b.keys()
    if not common:
        raise CompareError(
            f"no task in common: A (battle {a.battle_id}, status {a.status}) has {a.tasks} task(s), "
            f"B (battle {b.battle_id}, status {b.status}) has {b.tasks}; nothing can be paired"
        )
    fingerprint_notes = _fingerprint_notes(result_a, result_b, common, allow_incomparable)
    try:
        comparison = compare_trials(trials_a, trials_b, n_bootstrap=n_bootstrap, seed=seed, confidence=confidence)
        kind, j = parse_metric(metric, comparison.k_max)
        decision = decide(
            trials_a, trials_b, j=j, metric=kind, gate=fail_if, margin=margin, confidence=confidence, seed=seed
        )
    except ValueError as error:
        raise CompareError(str(error)) from None
    if decision.outcome == "undetermined":
        raise CompareError(f"--metric {decision.metric}: {decision.text}")
    uncounted = sorted(
        (t for t in common if 0 in (_counted(trials_a[t])[1], _counted(trials_b[t])[1])), key=task_sort_key
    )
    return CompareReport(
        a=a,
        b=b,
        comparison=comparison,
        verdict=verdict_of(decision),
        flips=task_flips(trials_a, trials_b),
        unmatched=Unmatched(
            only_in_a=sorted(comparison.only_in_a, key=task_sort_key),
            only_in_b=sorted(comparison.only_in_b, key=task_sort_key),
        ),
        warnings=fingerprint_notes + _warnings(a, b, comparison, uncounted),
        cost=[CostRow(label=label, a=va, b=vb) for label, va, vb in compare_cost_rows(result_a, result_b)],
    )


_TABLE_STYLE: dict[str, Any] = {"title_justify": "left", "box": box.SIMPLE_HEAD, "pad_edge": False, "show_edge": False}
"""Narrow tables: the per-j one fits 80 columns (what a pipe or CI log gets)."""


def render_json(report: CompareReport) -> str:
    return json.dumps(report.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n"


def _num(value: float | None, signed: bool = False) -> str:
    return "-" if value is None else f"{value:+.3f}" if signed else f"{value:.3f}"


def _header_table(report: CompareReport) -> Table:
    table = Table(title="arena compare: A (candidate) vs B (baseline), paired by task", **_TABLE_STYLE)
    for name in ("", "A (candidate)", "B (baseline)"):
        table.add_column(name, overflow="fold")
    a, b = report.a, report.b
    rows = [
        ("battle", a.battle_id, b.battle_id),
        ("white agent", a.white_agent_url, b.white_agent_url),
        ("domain(s)", ", ".join(a.domains), ", ".join(b.domains)),
        ("k", str(a.k), str(b.k)),
        ("status", a.status, b.status),
        ("tasks", str(a.tasks), str(b.tasks)),
        ("counted trials", str(a.counted_trials), str(b.counted_trials)),
        ("infra errors", str(a.infrastructure_errors), str(b.infrastructure_errors)),
        ("source", a.source, b.source),
    ]
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    return table


def _per_j_table(comparison: TrialsComparison) -> Table:
    level = level_text(comparison.confidence)
    table = Table(
        title=f"pass^j over {comparison.tasks_in_both} paired task(s)",
        **_TABLE_STYLE,
        caption=f"interval and p: two-sided paired sign-flip test of mean A-B at {level} (exact up to 20 tasks, "
        f"else Monte Carlo, seed {comparison.seed}); MDE: smallest difference found 80% of the time with this many "
        "tasks; A>B/B>A/=: tasks whose pass^j is higher in A, in B, equal. Only the verdict below decides.",
        caption_justify="left",
    )
    for name in ("j", "tasks", "A", "B", "A-B", f"{level} interval", "MDE", "p", "A>B/B>A/="):
        table.add_column(name, justify="right", no_wrap=True)
    for stat in comparison.per_j:
        low, high = stat.pass_hat_diff_ci_low, stat.pass_hat_diff_ci_high
        means = (_num(stat.pass_hat_a), _num(stat.pass_hat_b), _num(stat.pass_hat_diff, signed=True))
        interval = "-" if low is None or high is None else f"[{low:+.3f}, {high:+.3f}]"
        mde = "n/a" if stat.pass_hat_mde is None else f"{stat.pass_hat_mde:.3f}"
        p_value = "-" if stat.pass_hat_p_value is None else f"{stat.pass_hat_p_value:.2g}"
        counts = f"{stat.a_better}/{stat.b_better}/{stat.ties}"
        table.add_row(str(stat.j), str(stat.tasks_paired), *means, interval, mde, p_value, counts)
    return table


def _flip_table(title: str, flips: Sequence[TaskFlip]) -> Table:
    table = Table(title=title, **_TABLE_STYLE)
    table.add_column("task")
    for name in ("A successes/n", "B successes/n", "A-B"):
        table.add_column(name, justify="right")
    for f in flips:
        table.add_row(escape(f.task_key), f"{f.successes_a}/{f.n_a}", f"{f.successes_b}/{f.n_b}", f"{f.rate_diff:+.3f}")
    return table


def render_text(report: CompareReport, console: Console) -> None:
    """The header, warnings, per-j table, verdict, flipped tasks and unmatched tasks, in that order."""
    console.print(_header_table(report))
    for warning in report.warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)
    console.print()
    console.print(_per_j_table(report.comparison))
    console.print()
    verdict = report.verdict
    mde = f"{verdict.mde:.3f}" if verdict.mde is not None else f"n/a ({verdict.mde_note})"
    console.print(f"[bold]verdict ({escape(verdict.metric)}):[/] {escape(verdict.text)}", soft_wrap=True)
    console.print(f"  test: {escape(verdict.rule)}; MDE at 80% power: {escape(mde)}", soft_wrap=True)
    console.print()
    flips = report.flips
    if not flips.better_in_a and not flips.better_in_b:
        console.print("no task's success rate differs between A and B")
    for title, items in (("better in A", flips.better_in_a), ("better in B", flips.better_in_b)):
        if items:
            console.print(_flip_table(f"{title}: {len(items)} task(s) (counted success rate)", items))
            console.print()
    if report.cost:
        table = Table(title="cost and latency", **_TABLE_STYLE)
        for name in ("", "A (candidate)", "B (baseline)"):
            table.add_column(name, overflow="fold")
        for row in report.cost:
            table.add_row(escape(row.label), escape(row.a), escape(row.b))
        console.print(table)
        console.print()
    for side, keys in (("A", report.unmatched.only_in_a), ("B", report.unmatched.only_in_b)):
        if keys:
            console.print(f"only in {side} ({len(keys)}, not paired): {escape(', '.join(keys))}", soft_wrap=True)


_RUN_A_HELP = "A, the candidate (e.g. the new version): run directory, its summary.json, or with --backend a battle id"
_RUN_B_HELP = "B, the baseline (e.g. the old version): same forms as RUN_A"
_BACKEND_HELP = "read RUN_A and RUN_B as battle ids on this backend (GET URL/battles/{id})"
_JSON_HELP = "one JSON object instead of tables (keys: schema, a, b, comparison, verdict, flips, unmatched, warnings)"
_METRIC_HELP = "the one metric that decides, chosen before looking: pass^1 (success rate), pass^J, pass^k, pass@J"
_FAIL_IF_HELP = (
    "gate: exit 1 when A (the candidate) is shown worse than B (worse), is not shown better (not-better), or is "
    "not shown better than B minus --margin (not-noninferior); one-sided test at 1 - --confidence"
)


def compare_command(
    run_a: Annotated[str, typer.Argument(metavar="RUN_A", help=_RUN_A_HELP, show_default=False)],
    run_b: Annotated[str, typer.Argument(metavar="RUN_B", help=_RUN_B_HELP, show_default=False)],
    n_bootstrap: Annotated[
        int,
        typer.Option(
            "--n-bootstrap", min=0, max=100_000, hidden=True, help="kept for old scripts: 0 hides the per-j intervals"
        ),
    ] = 2000,
    seed: Annotated[
        int,
        typer.Option(
            "--seed", min=0, help="seed of the Monte Carlo sign patterns above 20 tasks (same seed, same numbers)"
        ),
    ] = 0,
    confidence: Annotated[
        float, typer.Option("--confidence", help="level of the intervals and of the verdict, in (0, 1)")
    ] = 0.95,
    backend: Annotated[str | None, typer.Option("--backend", metavar="URL", help=_BACKEND_HELP)] = None,
    json_output: Annotated[bool, typer.Option("--json", help=_JSON_HELP)] = False,
    metric: Annotated[str, typer.Option("--metric", help=_METRIC_HELP)] = "pass^1",
    fail_if: Annotated[Gate | None, typer.Option("--fail-if", help=_FAIL_IF_HELP)] = None,
    margin: Annotated[
        float, typer.Option("--margin", min=0.0, max=1.0, help="non-inferiority margin M for --fail-if not-noninferior")
    ] = 0.0,
    allow_incomparable: Annotated[
        bool,
        typer.Option(
            "--allow-incomparable",
            help="compare runs whose fingerprints (tau2 build, task, database, policy files, user simulator) differ "
            "on the shared tasks instead of exiting 2; the report then says so",
        ),
    ] = False,
) -> None:
    """Compare two battles paired by task: A (RUN_A, the candidate, e.g. the new version) minus B (RUN_B, the
    baseline, e.g. the stored reference run). Positive differences: the candidate is better.

    Per j: pass^j of A and B, A-B with the interval of a paired sign-flip test, its p-value and the minimum
    detectable difference (MDE, 80% power). Lists the tasks whose success rate differs and the tasks only one run
    has.

    Verdict on --metric (default pass^1) by one paired sign-flip test: two-sided without --fail-if ("A is better" /
    "A is worse" / "no significant difference"); with --fail-if worse | not-better | not-noninferior the gate's
    one-sided test decides. Exit 0: compared (gate passed); 1: the gate failed; 2: bad input.
    """
    try:
        result_a = read_run(run_a, backend)
        result_b = read_run(run_b, backend)
        report = build_report(
            result_a,
            result_b,
            sources=(run_a, run_b),
            n_bootstrap=n_bootstrap,
            seed=seed,
            confidence=confidence,
            metric=metric,
            fail_if=fail_if,
            margin=margin,
            allow_incomparable=allow_incomparable,
        )
    except CompareError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    if json_output:
        for warning in report.warnings:
            typer.echo(f"warning: {warning}", err=True)
        typer.echo(render_json(report), nl=False)
    else:
        render_text(report, Console())
    if report.verdict.gate_passed is False:
        raise typer.Exit(EXIT_GATE_FAILED)

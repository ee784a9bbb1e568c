"""What ``arena run`` concludes from a finished battle: the gate, the exit code and the verdict it prints last.

Why its own module: both run modes (direct and ``--backend``) end the same way, and the verdict is data first
(:class:`RunVerdict`, what ``--json`` prints) and text second (:func:`verdict_lines`, at most ~25 lines at 80
columns whatever the battle size; per-task and per-attempt detail stays in summary.md and the battle page).

The figures come from the battle's summary.json through one small function, :func:`read_figures` (macro pass^j /
pass@j and their interval bounds, the pooled rate and its interval): whatever interval method the statistics use,
the gate reads the bounds the summary holds. summary.json is read with a size bound and parsed leniently (a field
the file lacks is "n/a", never a crash): it is written by the green agent, which is not this process.

Exit codes (documented in README and docs/results.md; the constants live in :mod:`launcher.cli.run_command`):
0 completed (and every gate passed), 1 a gate failed, 2 configuration error, 3 harness error, 4 the agent under
test unreachable (checked before the battle starts), 5 nothing measured (every attempt an infrastructure error),
130 interrupted, 128 + signal number on SIGTERM/SIGHUP.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from green_agent.engine.config import ConfigError

__all__ = [
    "EXIT_AGENT_UNREACHABLE",
    "EXIT_CONFIG_ERROR",
    "EXIT_GATE_FAILED",
    "EXIT_HARNESS_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_NOTHING_MEASURED",
    "EXIT_OK",
    "FEW_TASKS",
    "VERDICT_SCHEMA",
    "Figure",
    "GateResult",
    "GateSpec",
    "RunVerdict",
    "VerdictCertification",
    "evaluate_gates",
    "load_summary",
    "one_line",
    "outcome_for_exit",
    "parse_gates",
    "read_certification",
    "read_figures",
    "verdict_from_summary",
    "verdict_lines",
]

EXIT_OK = 0
EXIT_GATE_FAILED = 1
EXIT_CONFIG_ERROR = 2
EXIT_HARNESS_ERROR = 3
EXIT_AGENT_UNREACHABLE = 4
EXIT_NOTHING_MEASURED = 5
EXIT_INTERRUPTED = 130

VERDICT_SCHEMA = "arena.run-verdict/1"
FEW_TASKS = 10
"""Fewer tasks than this: the verdict carries a caveat (intervals over so few tasks are wide)."""
WIDTH = 80
"""The verdict's lines fit this many columns (paths excepted: they are printed whole, to stay copyable)."""
MAX_SUMMARY_BYTES = 64 * 1024 * 1024
"""Largest summary.json read (a battle of 2000 attempts with explanations is a few megabytes)."""
MAX_TABLE_ROWS = 8
"""Rows of the pass^j table; a larger k shows j = 1, 2, 4, ... and k."""
MAX_FAILURE_KINDS = 4
"""Failure categories named in the verdict (the most frequent; the rest are counted)."""

Outcome = Literal[
    "completed",
    "gate_failed",
    "configuration_error",
    "harness_error",
    "agent_unreachable",
    "nothing_measured",
    "interrupted",
    "inconclusive",
]
_OUTCOME_BY_EXIT: dict[int, Outcome] = {
    EXIT_OK: "completed",
    EXIT_GATE_FAILED: "gate_failed",
    EXIT_CONFIG_ERROR: "configuration_error",
    EXIT_HARNESS_ERROR: "harness_error",
    EXIT_AGENT_UNREACHABLE: "agent_unreachable",
    EXIT_NOTHING_MEASURED: "nothing_measured",
    6: "inconclusive",  # a certify battle that spent its budget undecided (launcher.cli.run_command)
}


def outcome_for_exit(exit_code: int) -> Outcome:
    """The word for an exit code (a signal's 128 + n counts as interrupted)."""
    return _OUTCOME_BY_EXIT.get(exit_code, "interrupted" if exit_code >= 128 else "harness_error")


# --------------------------------------------------------------------------------------------------------- gates

_METRIC_RE = re.compile(r"^(?:(pass)([\^@])(\d+|k)|(pooled))$")


class GateSpec(BaseModel):
    """One threshold: the run fails its gate when the decider (the point estimate, or the lower bound of the 95%
    interval) is below ``threshold``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    flag: Literal["--fail-under", "--fail-under-lower"]
    metric: str
    """``pass^J``, ``pass@J`` (J a number, k resolved to the battle's k) or ``pooled``."""
    threshold: float = Field(ge=0.0, le=1.0)

    @property
    def decided_by(self) -> Literal["estimate", "lower"]:
        """What is compared with the threshold."""
        return "lower" if self.flag == "--fail-under-lower" else "estimate"

    def text(self) -> str:
        """The flag as given, resolved (``--fail-under pass^4=0.8``)."""
        return f"{self.flag} {self.metric}={self.threshold:g}"


def parse_gates(values: Sequence[str], flag: Literal["--fail-under", "--fail-under-lower"], k: int) -> list[GateSpec]:
    """``METRIC=VALUE`` strings into gates for a battle of ``k`` attempts per task; :class:`ConfigError` naming the
    flag when one is malformed or asks for a j the battle cannot have."""
    gates: list[GateSpec] = []
    for raw in values:
        name, sep, number = raw.partition("=")
        match = _METRIC_RE.match(name.strip().lower())
        if not sep or match is None:
            raise ConfigError(
                f"{flag}: {raw!r} is not METRIC=VALUE with METRIC one of pass^J, pass@J (J = 1..{k}, or k) or "
                "pooled, e.g. pass^k=0.8"
            )
        try:
            threshold = float(number)
        except ValueError:
            raise ConfigError(f"{flag}: {raw!r}: the value must be a number between 0 and 1") from None
        if not 0.0 <= threshold <= 1.0:
            raise ConfigError(f"{flag}: {raw!r}: the value must be a number between 0 and 1")
        if match.group(4):
            metric = "pooled"
        else:
            j = k if match.group(3) == "k" else int(match.group(3))
            if not 1 <= j <= k:
                raise ConfigError(f"{flag}: {raw!r}: j must be between 1 and k = {k} (pass_k_config.k)")
            metric = f"pass{match.group(2)}{j}"
        gates.append(GateSpec(flag=flag, metric=metric, threshold=threshold))
    return gates


class Figure(BaseModel):
    """One reported number with its interval (None where the summary has none)."""

    model_config = ConfigDict(frozen=True)

    metric: str
    estimate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None


class GateResult(BaseModel):
    """One gate, judged."""

    model_config = ConfigDict(frozen=True)

    flag: str
    metric: str
    threshold: float
    decided_by: Literal["estimate", "lower"]
    value: float | None
    """The figure compared (None: the battle has no such figure, e.g. no task with j counted attempts)."""
    passed: bool


def evaluate_gates(gates: Sequence[GateSpec], figures: Mapping[str, Figure]) -> list[GateResult]:
    """Each gate against the figures; a missing figure fails its gate (a release cannot hang on "n/a")."""
    results = []
    for gate in gates:
        figure = figures.get(gate.metric)
        value = None if figure is None else figure.ci_low if gate.decided_by == "lower" else figure.estimate
        passed = value is not None and value >= gate.threshold
        results.append(
            GateResult(
                flag=gate.flag,
                metric=gate.metric,
                threshold=gate.threshold,
                decided_by=gate.decided_by,
                value=value,
                passed=passed,
            )
        )
    return results


# ------------------------------------------------------------------------------------------------ reading summary


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def read_figures(summary: Mapping[str, Any]) -> dict[str, Figure]:
    """Every gateable figure of a summary.json object: ``pass^j`` / ``pass@j`` per macro row (point estimate and
    interval bounds as the summary states them) and ``pooled`` (the micro rate). The one place that knows where the
    figures live in summary.json."""
    stats = summary.get("summary")
    stats = stats if isinstance(stats, Mapping) else {}
    figures: dict[str, Figure] = {}
    macro = stats.get("macro")
    for row in macro if isinstance(macro, list) else []:
        if not isinstance(row, Mapping) or not isinstance(row.get("j"), int):
            continue
        j = row["j"]
        for sign, key in (("^", "pass_hat"), ("@", "pass_at")):
            figures[f"pass{sign}{j}"] = Figure(
                metric=f"pass{sign}{j}",
                estimate=_number(row.get(f"{key}_mean")),
                ci_low=_number(row.get(f"{key}_ci_low")),
                ci_high=_number(row.get(f"{key}_ci_high")),
            )
    micro = stats.get("micro")
    if isinstance(micro, Mapping):
        figures["pooled"] = Figure(
            metric="pooled",
            estimate=_number(micro.get("rate")),
            ci_low=_number(micro.get("ci_low")),
            ci_high=_number(micro.get("ci_high")),
        )
    return figures


def load_summary(run_dir: Path) -> dict[str, Any]:
    """summary.json of a run directory (bounded, no links followed). Blocking: call it through a thread.
    Raises ValueError (not JSON, not an object, too large) or OSError."""
    fd = os.open(run_dir / "summary.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        raw = handle.read(MAX_SUMMARY_BYTES + 1)
    if len(raw) > MAX_SUMMARY_BYTES:
        raise ValueError(f"summary.json is larger than {MAX_SUMMARY_BYTES} bytes")
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError("summary.json is not a JSON object")
    return data


# -------------------------------------------------------------------------------------------------------- verdict


MAX_CERTIFY_TEXT = 4096
"""Longest claim / baseline / task key a verdict's certification carries (the baseline is a path, kept whole)."""


class VerdictCertification(BaseModel):
    """summary.json's ``certification`` in the verdict (docs/results.md, "Certify early"): the object as the summary
    has it, without ``order`` (up to the scenario's tasks; it stays in summary.json and run.json). Read leniently:
    a summary whose certification is malformed gives no object (its exit code is then the fixed design's)."""

    model_config = ConfigDict(frozen=True, extra="ignore", strict=True)

    claim: str = Field(max_length=MAX_CERTIFY_TEXT)
    metric_j: int = Field(ge=1)
    threshold: float = Field(allow_inf_nan=False)
    confidence: float = Field(gt=0.0, lt=1.0)
    decision: Literal["certified", "refuted", "inconclusive"]
    tasks_observed: int = Field(ge=0)
    tasks_budget: int = Field(ge=0)
    attempts_used: int = Field(ge=0)
    attempts_fixed_design: int = Field(ge=0)
    sequence_low: float | None = Field(allow_inf_nan=False)
    sequence_high: float | None = Field(allow_inf_nan=False)
    """The anytime-valid confidence sequence at the stop: the decision's basis."""
    estimate: float | None = Field(allow_inf_nan=False)
    interval_low: float | None = Field(default=None, allow_inf_nan=False)
    interval_high: float | None = Field(default=None, allow_inf_nan=False)
    interval_note: str | None = Field(default=None, max_length=MAX_CERTIFY_TEXT)
    """Why the interval is not to be re-read as a fixed-sample interval (as summary.json states it)."""
    order_seed: int
    waiting_for: str | None = Field(default=None, max_length=MAX_CERTIFY_TEXT)
    baseline: str | None = Field(default=None, max_length=MAX_CERTIFY_TEXT)
    method: str | None = Field(default=None, max_length=200)
    method_note: str | None = Field(default=None, max_length=MAX_CERTIFY_TEXT)
    stop_reason: Literal["decided", "futility", "budget"] | None = None


def read_certification(summary: Mapping[str, Any]) -> VerdictCertification | None:
    """The verdict's ``certification`` from a summary.json object (None without a well-formed one)."""
    raw = summary.get("certification")
    if not isinstance(raw, Mapping):
        return None
    try:
        return VerdictCertification.model_validate(dict(raw))
    except ValidationError:
        return None


class RunVerdict(BaseModel):
    """What ``arena run --json`` prints (``"schema": "arena.run-verdict/1"``, documented in docs/results.md)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: Literal["arena.run-verdict/1"] = Field(default="arena.run-verdict/1", alias="schema")
    outcome: Outcome
    exit_code: int
    error: str | None = None
    battle_id: str | None = None
    status: str | None = None
    """The battle's status in summary.json (completed, cancelled, interrupted, error)."""
    calibration: bool = False
    k: int | None = None
    tasks: int | None = None
    attempts: int = 0
    successes: int = 0
    failures: int = 0
    infrastructure_errors: int = 0
    confidence: float | None = None
    interval_method: str | None = None
    """The intervals' method as the summary states it (``summary.interval_method``; older summaries: the pooled
    interval's ``method``)."""
    interval_target: str | None = None
    """What the intervals are about as the summary states it (``summary.interval_target``, e.g.
    ``tasks_of_this_kind``); None when the summary does not say."""
    metrics: list[Figure] = Field(default_factory=list)
    """pass^1..pass^k, pass@1..pass@k and pooled, in that order (as many as the summary holds)."""
    failure_breakdown: dict[str, int] = Field(default_factory=dict)
    gates: list[GateResult] = Field(default_factory=list)
    gate_passed: bool | None = None
    """None without gates."""
    warnings: list[str] = Field(default_factory=list)
    run_dir: str | None = None
    summary_json: str | None = None
    summary_md: str | None = None
    battle_url: str | None = None
    """The battle's page (``--backend`` runs)."""
    duration_s: float | None = None
    certification: VerdictCertification | None = None
    """A ``certify`` battle's decision (summary.json's ``certification`` without its task order); None otherwise."""
    budget_stop: dict[str, Any] | None = None
    """summary.json's ``budget_stop`` when max_cost_usd / max_wall_s stopped the battle (launcher/cli/run_budget.py)."""

    def to_json(self) -> str:
        """One JSON object, keys in declaration order."""
        return self.model_dump_json(by_alias=True)


def _text(value: Any) -> str | None:
    return value[:100] if isinstance(value, str) and value else None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _count_outcomes(attempts: Any) -> tuple[int, int, int, int]:
    total = successes = infra = 0
    for attempt in attempts if isinstance(attempts, list) else []:
        if not isinstance(attempt, Mapping):
            continue
        total += 1
        outcome = attempt.get("outcome")
        successes += outcome == "success"
        infra += outcome == "infra_error"
    return total, successes, total - successes - infra, infra


def _metric_order(figure: Figure) -> tuple[int, int]:
    name = figure.metric
    if name == "pooled":
        return (2, 0)
    return (0 if name.startswith("pass^") else 1, int(name[5:]))


def verdict_from_summary(
    summary: Mapping[str, Any],
    gates: Sequence[GateSpec],
    run_dir: Path,
    *,
    duration_s: float | None = None,
    battle_url: str | None = None,
) -> RunVerdict:
    """The verdict of a battle whose summary.json is ``summary``: exit 5 when nothing was measured (every attempt
    an infrastructure error, or none ran), else 1 when a gate failed, else 0."""
    attempts, successes, failures, infra = _count_outcomes(summary.get("attempts"))
    figures = read_figures(summary)
    config = _mapping(summary.get("config"))
    stats = _mapping(summary.get("summary"))
    micro = _mapping(stats.get("micro"))
    k = config.get("k") if isinstance(config.get("k"), int) else stats.get("k_max")
    tasks = stats.get("total_tasks")
    breakdown = summary.get("failure_breakdown")
    infra_total = summary.get("infrastructure_errors")
    infra = infra_total if isinstance(infra_total, int) and infra_total >= infra else infra
    measured = attempts - infra
    results = evaluate_gates(gates, figures)
    warnings: list[str] = []
    if isinstance(tasks, int) and 0 < tasks < FEW_TASKS:
        warnings.append(
            f"only {tasks} task{'s' if tasks != 1 else ''}: the intervals are wide; {FEW_TASKS} or more tasks say more"
        )
    status = summary.get("status") if isinstance(summary.get("status"), str) else None
    if status not in (None, "completed"):
        warnings.append(f"the battle's status is {status}: the figures cover the attempts that finished")
    if measured <= 0:
        exit_code = EXIT_NOTHING_MEASURED
        error = (
            f"nothing measured: all {attempts} attempt(s) were infrastructure errors (not the agent's fault)"
            if attempts
            else "nothing measured: no attempt ran"
        )
    elif results and not all(r.passed for r in results):
        exit_code, error = EXIT_GATE_FAILED, None
    else:
        exit_code, error = EXIT_OK, None
    return RunVerdict(
        outcome=outcome_for_exit(exit_code),
        exit_code=exit_code,
        error=error,
        battle_id=summary.get("battle_id") if isinstance(summary.get("battle_id"), str) else run_dir.name,
        status=status,
        calibration=summary.get("calibration") is True,
        k=k if isinstance(k, int) else None,
        tasks=tasks if isinstance(tasks, int) else None,
        attempts=attempts,
        successes=successes,
        failures=failures,
        infrastructure_errors=infra,
        confidence=_number(stats.get("confidence")),
        interval_method=_text(stats.get("interval_method")) or _text(micro.get("method")),
        interval_target=_text(stats.get("interval_target")),
        metrics=sorted(figures.values(), key=_metric_order),
        failure_breakdown={
            str(name): count
            for name, count in (breakdown.items() if isinstance(breakdown, Mapping) else [])
            if isinstance(count, int) and not isinstance(count, bool)
        },
        gates=results,
        gate_passed=None if not results else all(r.passed for r in results),
        warnings=warnings,
        run_dir=str(run_dir),
        summary_json=str(run_dir / "summary.json"),
        summary_md=str(run_dir / "summary.md"),
        battle_url=battle_url,
        duration_s=duration_s,
        certification=read_certification(summary),
    )


# ----------------------------------------------------------------------------------------------------------- text


def _fmt(value: float | None) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.3f}"


def _interval(figure: Figure | None) -> str:
    if figure is None or figure.ci_low is None or figure.ci_high is None:
        return "n/a"
    return f"[{figure.ci_low:.3f}, {figure.ci_high:.3f}]"


def _count(n: int | None, noun: str) -> str:
    return f"? {noun}s" if n is None else f"{n} {noun}{'' if n == 1 else 's'}"


def _table_js(k: int) -> list[int]:
    if k <= MAX_TABLE_ROWS:
        return list(range(1, k + 1))
    js = [1]
    while js[-1] * 2 < k:
        js.append(js[-1] * 2)
    return [*js[: MAX_TABLE_ROWS - 1], k]


def _wrap(prefix: str, items: Sequence[str], width: int = WIDTH) -> list[str]:
    """``prefix`` then the items joined by ", ", broken into lines of at most ``width`` columns."""
    lines: list[str] = []
    current = prefix
    for index, item in enumerate(items):
        piece = item + ("," if index < len(items) - 1 else "")
        if len(current) + 1 + len(piece) > width and current.strip():
            lines.append(current)
            current = "  " + piece
        else:
            current = f"{current} {piece}" if current else piece
    lines.append(current)
    return lines


def _gate_line(gate: GateResult) -> str:
    what = "lower bound" if gate.decided_by == "lower" else "estimate"
    mark = "passed" if gate.passed else "FAILED"
    return f"gate {gate.metric} {what} {_fmt(gate.value)} >= {gate.threshold:g}: {mark}"


def _headline(verdict: RunVerdict) -> str:
    if verdict.exit_code == EXIT_NOTHING_MEASURED:
        return "verdict: NOTHING MEASURED (exit 5): every attempt was an infrastructure error"
    if verdict.exit_code == EXIT_GATE_FAILED:
        failed = [g.metric for g in verdict.gates if not g.passed]
        return f"verdict: GATE FAILED (exit 1): {', '.join(failed) or 'the certify claim was refuted'}"
    if verdict.outcome == "inconclusive":
        if verdict.budget_stop is not None:
            return "verdict: INCONCLUSIVE (exit 6): stopped by its budget before every attempt ran (--resume)"
        return "verdict: INCONCLUSIVE (exit 6): the certify budget was spent before the claim was decided"
    if verdict.gates:
        return "verdict: completed, every gate passed (exit 0)"
    return "verdict: completed (exit 0; no gate given: --fail-under METRIC=VALUE)"


def verdict_lines(verdict: RunVerdict) -> list[str]:
    """The verdict as terminal lines: at most about 25 at 80 columns whatever the battle size (paths excepted)."""
    lines = [f"Arena pass^k evaluation: {verdict.battle_id}"]
    if verdict.calibration:
        lines.append("CALIBRATION: the agent was told the task; this checks the harness, not an agent")
    k = verdict.k or 0
    infra = verdict.infrastructure_errors
    lines.append(
        f"{_count(verdict.tasks, 'task')} x k={k or '?'}: {_count(verdict.attempts, 'attempt')}, "
        f"{verdict.successes} passed, {verdict.failures} failed, {infra} infra error{'s' if infra != 1 else ''}"
    )
    figures = {f.metric: f for f in verdict.metrics}
    level = f"{verdict.confidence:.0%}" if verdict.confidence is not None else "95%"
    if k and any(name.startswith("pass") for name in figures):
        heading = f"{level} interval"
        lines.append(f"{'j':>3}  {'pass^j':<6}  {heading:<16}  {'pass@j':<6}  {heading}")
        for j in _table_js(k):
            hat, at = figures.get(f"pass^{j}"), figures.get(f"pass@{j}")
            lines.append(
                f"{j:>3}  {_fmt(hat.estimate if hat else None):<6}  {_interval(hat):<16}  "
                f"{_fmt(at.estimate if at else None):<6}  {_interval(at)}"
            )
    pooled = figures.get("pooled")
    if pooled is not None:
        lines.append(f"pooled success rate {_fmt(pooled.estimate)} {_interval(pooled)} ({level} interval)")
    about = [level]
    if verdict.interval_target:
        about.append(f"about {verdict.interval_target.replace('_', ' ')}")
    if verdict.interval_method:
        about.append(f"method {verdict.interval_method}")
    lines += _wrap("intervals:", [*about, "see docs/metrics.md"])
    lines += [f"caveat: {w}" for w in verdict.warnings]
    kinds = sorted(verdict.failure_breakdown.items(), key=lambda item: (-item[1], item[0]))
    named = [f"{name} x{count}" for name, count in kinds[:MAX_FAILURE_KINDS]]
    rest = sum(count for _, count in kinds[MAX_FAILURE_KINDS:])
    if rest:
        others = len(kinds) - MAX_FAILURE_KINDS
        named.append(f"{rest} more ({others} other categor{'ies' if others != 1 else 'y'})")
    lines += _wrap("failures:", named or ["none"])
    if infra:
        lines.append(f"infrastructure errors: {infra} (excluded from n; not the agent's fault)")
    lines += [_gate_line(g) for g in verdict.gates]
    lines.append(_headline(verdict))
    if verdict.battle_url:
        lines.append(f"battle: {verdict.battle_url}")
    lines.append(f"details per task and attempt: {verdict.summary_md}")
    seconds = f"  ({verdict.duration_s:.1f} s)" if verdict.duration_s is not None else ""
    lines.append(f"summary: {verdict.summary_json}{seconds}")
    return lines


def one_line(verdict: RunVerdict) -> str:
    """``-q``: the verdict in one line (battle, pass^k with its interval, pooled rate, gate, exit, summary path)."""
    figures = {f.metric: f for f in verdict.metrics}
    parts = [verdict.outcome.replace("_", " ").upper(), str(verdict.battle_id)]
    if verdict.k:
        top = figures.get(f"pass^{verdict.k}")
        parts.append(f"pass^{verdict.k} {_fmt(top.estimate if top else None)} {_interval(top)}")
    pooled = figures.get("pooled")
    if pooled is not None:
        parts.append(f"pooled {_fmt(pooled.estimate)} {_interval(pooled)}")
    parts.append(f"{verdict.attempts} attempts, {verdict.infrastructure_errors} infra")
    failed = [g for g in verdict.gates if not g.passed]
    if verdict.gates:
        parts.append("gate failed: " + ", ".join(g.metric for g in failed) if failed else "gates passed")
    parts.append(f"exit {verdict.exit_code}")
    if verdict.battle_url:
        parts.append(f"battle: {verdict.battle_url}")
    parts.append(str(verdict.summary_json))
    return "; ".join(parts)

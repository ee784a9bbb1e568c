"""``arena export``: a finished battle as an AgentBeats leaderboard ``results.json``, or as CSV (one row per attempt).

Why: AgentBeats-style leaderboards collect ``{"participants": {role: agentbeats id}, "results": [...]}``, where each
result is the JSON data part of the green agent's "Result" artifact; for Arena that data part is the
:class:`~green_agent.engine.results.BattleResult`. ``results-json`` writes exactly that shape (the same result JSON
the AgentBeats client would collect from the artifact), so a run made locally, with ``arena run`` or through a
backend, can be submitted like one made on the platform. ``csv`` is for spreadsheets and ad-hoc analysis: one row
per attempt, with the failure category, fault author and reward breakdown. ``tau2`` writes tau2's own results file
(``tau2.data_model.simulation.Results``) so ``tau2 view`` and tau2's metrics open the run
(:mod:`launcher.cli.tau2_export`: one battle, conversations read from the run directory's trajectories,
infrastructure errors left out).

Sources: a run directory (``runs/<battle id>/``, its ``summary.json``), a ``summary.json``, a backend battle record
(the JSON of ``GET /battles/{id}``, whose result detail is the BattleResult; its opponents' agent ids become the
default participants), or a ``results.json`` written by this command (to turn it into CSV).

Every source is read into the typed :class:`BattleResult` (a JSON without the ``"schema": "arena.battle-result/1"``
key, written before it existed, reads as that version); rows are built from its attributes.

Exit codes: 0 written; 2 the source is missing, unreadable or not a finished Arena battle (named in the message).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from green_agent.engine.config import format_validation_error
from green_agent.engine.results import AttemptResult, BattleResult
from green_agent.run_files import MAX_SUMMARY_BYTES, open_regular_file, read_run_file, run_file_exists
from launcher.errors import ExportError as ExportError  # re-exported: it was defined here

EXIT_OK = 0
EXIT_BAD_INPUT = 2
SUMMARY_FILE = "summary.json"

CSV_COLUMNS: tuple[str, ...] = (
    "battle_id",
    "white_agent_url",
    "battle_status",
    "calibration",
    "k",
    "domain",
    "split",
    "task_index",
    "task_id",
    "attempt",
    "context_id",
    "outcome",
    "counted",
    "reward",
    "steps",
    "duration_s",
    "termination_reason",
    "failure_category",
    "fault_author",
    "failure_detail",
    "db_match",
    "action_met",
    "action_total",
    "communicate_met",
    "communicate_total",
    "env_assertions_met",
    "env_assertions_total",
    "trajectory_file",
    "tau2",
    "task_hash",
)
"""One row per attempt. ``counted`` is false for infrastructure errors (excluded from n in pass^k). ``tau2`` and
``task_hash`` come from the battle's fingerprint (the tau2 distribution and version it was scored on, the sha256 of
the task as that tau2 loaded it); empty for results written before fingerprints existed."""

_FREE_TEXT = frozenset(
    {"battle_id", "white_agent_url", "task_id", "context_id", "termination_reason", "failure_detail", "trajectory_file"}
)
"""Columns that may carry text from outside the harness (agent replies end up in failure details)."""
_FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


class ExportFormat(StrEnum):
    """What ``--format`` accepts."""

    RESULTS_JSON = "results-json"
    CSV = "csv"
    TAU2 = "tau2"


class LoadedBattles:
    """Battle results read from one source, plus the participants the source itself names (if any)."""

    def __init__(self, results: list[BattleResult], participants: dict[str, str] | None = None) -> None:
        self.results = results
        self.participants = dict(participants or {})


def _validate_result(data: Any, where: str) -> BattleResult:
    try:
        return BattleResult.model_validate(data)
    except ValidationError as error:
        raise ExportError(f"{where}: not an Arena battle result ({format_validation_error(error)})") from None


def from_backend_record(record: dict[str, Any], where: str) -> LoadedBattles:
    """``GET /battles/{id}``: the result detail is the BattleResult; opponents name the participants."""
    result = record.get("result")
    detail = result.get("detail") if isinstance(result, dict) else None
    if not isinstance(detail, dict) or "attempts" not in detail:
        state = record.get("state")
        reason = record.get("error") or (detail.get("error") if isinstance(detail, dict) else None)
        raise ExportError(
            f"{where}: battle {record.get('battle_id')} (state {state}) holds no Arena battle result"
            + (f": {reason}" if reason else "")
        )
    participants: dict[str, str] = {}
    for opponent in record.get("opponents") or []:
        if isinstance(opponent, dict) and opponent.get("name") and opponent.get("agent_id"):
            participants[str(opponent["name"])] = str(opponent["agent_id"])
    return LoadedBattles([_validate_result(detail, f"{where} (result.detail)")], participants)


def read_source(source: Path) -> bytes:
    """The bytes of a source: a run directory's summary.json as run-directory input (:mod:`green_agent.run_files`:
    a regular file inside the directory, no symlink out, no FIFO or device), a file named directly as a regular file
    (its symlinks are the user's choice); both at most :data:`~green_agent.run_files.MAX_SUMMARY_BYTES`, checked
    before anything is parsed. OSError (``RunFileRefused``) otherwise."""
    if source.is_dir():
        return read_run_file(source, SUMMARY_FILE, max_bytes=MAX_SUMMARY_BYTES)
    with open_regular_file(source, max_bytes=MAX_SUMMARY_BYTES) as handle:
        return handle.read()


def load_battles(source: Path) -> LoadedBattles:
    """Read ``source`` (run directory, summary.json, backend battle record or results.json); :class:`ExportError`."""
    path = source / SUMMARY_FILE if source.is_dir() else source
    if source.is_dir() and not run_file_exists(source, SUMMARY_FILE):
        raise ExportError(f"{source}: no {SUMMARY_FILE} in this directory (is the battle finished?)")
    if not source.is_dir() and not source.exists():
        raise ExportError(f"{source}: no such file or directory")
    try:
        data = json.loads(read_source(source).decode("utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise ExportError(f"{path}: cannot be read ({error})") from None
    except json.JSONDecodeError as error:
        raise ExportError(f"{path}: not JSON ({error})") from None
    except RecursionError:
        raise ExportError(f"{path}: not JSON (nested too deeply)") from None
    if not isinstance(data, dict):
        raise ExportError(f"{path}: expected a JSON object")
    if "attempts" in data and "battle_id" in data:
        return LoadedBattles([_validate_result(data, str(path))])
    if isinstance(data.get("results"), list) and isinstance(data.get("participants"), dict):
        results = [_validate_result(item, f"{path} (results[{i}])") for i, item in enumerate(data["results"])]
        if not results:
            raise ExportError(f"{path}: results is empty")
        return LoadedBattles(results, {str(k): str(v) for k, v in data["participants"].items()})
    if "state" in data and "battle_id" in data:
        return from_backend_record(data, str(path))
    raise ExportError(
        f"{path}: neither a summary.json, a backend battle record nor a results.json "
        f"(keys: {', '.join(sorted(data)[:12])})"
    )


def parse_participant_ids(items: Sequence[str]) -> dict[str, str]:
    """``["white_agent=abc", ...]`` -> ``{"white_agent": "abc"}``; :class:`ExportError` naming the bad item."""
    mapping: dict[str, str] = {}
    for item in items:
        role, sep, agent_id = item.partition("=")
        if not sep or not role.strip() or not agent_id.strip():
            raise ExportError(f"--participant-id: expected ROLE=ID, got {item!r}")
        mapping[role.strip()] = agent_id.strip()
    return mapping


def check_complete(results: Iterable[BattleResult]) -> None:
    """Refuse battles that did not complete: a leaderboard must not rank a cancelled or broken run."""
    for result in results:
        if result.status != "completed":
            raise ExportError(
                f"battle {result.battle_id} ended with status {result.status}"
                + (f" ({result.error})" if result.error else "")
                + "; use --allow-incomplete to export it anyway"
            )


def results_document(results: Sequence[BattleResult], participants: dict[str, str]) -> dict[str, Any]:
    """The leaderboard shape: ``{"participants": {role: id}, "results": [BattleResult JSON, ...]}``."""
    return {"participants": dict(participants), "results": [r.model_dump(mode="json") for r in results]}


def _cell(column: str, value: Any) -> str | int | float:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return value
    text = str(value)
    if column in _FREE_TEXT and text.startswith(_FORMULA_PREFIXES):
        return "'" + text  # a spreadsheet must show it, not evaluate it
    return text


def attempt_row(result: BattleResult, attempt: AttemptResult) -> dict[str, str | int | float]:
    """One CSV row (see :data:`CSV_COLUMNS`)."""
    failure = attempt.failure
    breakdown = attempt.breakdown
    fingerprint = result.fingerprint
    raw: dict[str, Any] = {
        "battle_id": result.battle_id,
        "white_agent_url": result.white_agent_url,
        "battle_status": result.status,
        "calibration": result.calibration,
        "k": result.config.k,
        "domain": attempt.domain,
        "split": attempt.split,
        "task_index": attempt.task_index,
        "task_id": attempt.task_id,
        "attempt": attempt.attempt,
        "context_id": attempt.context_id,
        "outcome": attempt.outcome,
        "counted": attempt.trial_outcome is not None,
        "reward": attempt.reward,
        "steps": attempt.steps,
        "duration_s": attempt.duration_s,
        "termination_reason": attempt.termination_reason,
        "failure_category": failure.category.value if failure else None,
        "fault_author": failure.fault_author.value if failure else None,
        "failure_detail": failure.detail if failure else None,
        "db_match": breakdown.db_match if breakdown else None,
        "action_met": breakdown.action_met if breakdown else None,
        "action_total": breakdown.action_total if breakdown else None,
        "communicate_met": breakdown.communicate_met if breakdown else None,
        "communicate_total": breakdown.communicate_total if breakdown else None,
        "env_assertions_met": breakdown.env_assertions_met if breakdown else None,
        "env_assertions_total": breakdown.env_assertions_total if breakdown else None,
        "trajectory_file": attempt.trajectory_file,
        "tau2": f"{fingerprint.tau2.distribution} {fingerprint.tau2.version}" if fingerprint else None,
        "task_hash": fingerprint.tasks.get(attempt.task_key) if fingerprint else None,
    }
    return {column: _cell(column, raw[column]) for column in CSV_COLUMNS}


def render_csv(results: Sequence[BattleResult]) -> str:
    """All attempts of all ``results``, in the battle's order, as CSV text with a header line."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(CSV_COLUMNS), lineterminator="\n")
    writer.writeheader()
    for result in results:
        for attempt in result.attempts:
            writer.writerow(attempt_row(result, attempt))
    return buffer.getvalue()


@dataclass(frozen=True)
class Export:
    """An exported document and the participants it names (results-json only)."""

    text: str
    participants: dict[str, str] | None = None
    warnings: tuple[str, ...] = ()
    """What the export left out or could not read (tau2 format), printed to stderr."""


def export_battles(
    source: Path, fmt: ExportFormat, participant_ids: Sequence[str] = (), *, allow_incomplete: bool = False
) -> Export:
    """The exported document; :class:`ExportError` for anything that cannot be exported.

    Participants: those the source names (a backend record's opponents, a results.json's mapping), overridden and
    extended by ``participant_ids`` (``ROLE=ID``).
    """
    explicit = parse_participant_ids(participant_ids)
    loaded = load_battles(source)
    if not allow_incomplete:
        check_complete(loaded.results)
    if fmt is ExportFormat.CSV:
        return Export(render_csv(loaded.results))
    if fmt is ExportFormat.TAU2:
        from launcher.cli.tau2_export import build_results  # imports tau2: only for this format

        if len(loaded.results) != 1:
            raise ExportError(f"{source}: holds {len(loaded.results)} battles; the tau2 format takes one")
        tau2 = build_results(loaded.results[0], source if source.is_dir() else source.parent)
        return Export(tau2.text, warnings=tau2.warnings)
    participants = {**loaded.participants, **explicit}
    document = results_document(loaded.results, participants)
    return Export(json.dumps(document, indent=2, ensure_ascii=False) + "\n", participants)


def export_command(
    source: Annotated[
        Path,
        typer.Argument(
            help="run directory (runs/<battle id>/), its summary.json, a backend battle record (GET /battles/{id}) "
            "or a results.json",
            show_default=False,
        ),
    ],
    fmt: Annotated[
        ExportFormat,
        typer.Option(
            "--format",
            help="results-json: the leaderboard shape; csv: one row per attempt; tau2: tau2's results file "
            "(for tau2 view / tau2's metrics)",
        ),
    ] = ExportFormat.RESULTS_JSON,
    out: Annotated[Path | None, typer.Option("--out", help="file to write (default: standard output)")] = None,
    participant_id: Annotated[
        list[str] | None,
        typer.Option(
            "--participant-id",
            help="ROLE=ID: the participant's AgentBeats id under its role (repeatable), e.g. white_agent=<id>",
            show_default=False,
        ),
    ] = None,
    allow_incomplete: Annotated[
        bool, typer.Option("--allow-incomplete", help="also export a battle that was cancelled or ended in error")
    ] = False,
) -> None:
    """Export a finished battle as a leaderboard results.json ({"participants": {role: id}, "results": [...]}) or
    CSV."""
    try:
        export = export_battles(source, fmt, participant_id or [], allow_incomplete=allow_incomplete)
    except ExportError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    text = export.text
    for warning in export.warnings:
        typer.echo(f"warning: {warning}", err=True)
    if export.participants == {}:
        typer.echo(
            "note: participants is empty; leaderboards match results by agent id: add "
            "--participant-id white_agent=<AgentBeats id>",
            err=True,
        )
    if out is None:
        typer.echo(text, nl=False)
        return
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8", newline="")
    except OSError as error:
        typer.echo(f"error: cannot write {out}: {error}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    typer.echo(f"wrote {out}", err=True)

"""A run directory as the battle backend's import file (``"schema": "arena.battle-import/1"``), for ``arena view``.

Why: ``arena view RUN_DIR`` shows a battle that ran without a backend (``arena run`` in direct mode, or a green
agent's ``runs/``) on the same pages as a live one. Rather than a second renderer, the run is loaded into a
throwaway backend (``python -m battle_backend --import FILE``) exactly as the green agent would have reported it:
every event of ``events.jsonl`` becomes the progress body the live sink posts (the ``attempt_finished`` ones with
the attempt's trajectory), and the summary the result body, both built by
:mod:`green_agent.wire.backend_posts`, the module the green agent posts with. So the imported page equals the
live one.

A run that did not complete:

* interrupted (``summary.json`` with status ``interrupted``): its events (the last one says it was interrupted) and
  no result (``"result": null``), as the live page showed it: an interrupted battle posts no result until a
  resume finishes it;
* stopped without a summary (killed, or still running): the events of ``events.jsonl`` if an earlier run of the
  battle left one, an ``attempt_finished`` event rebuilt from ``attempts.jsonl`` for every attempt no event reports
  (with its trajectory), a note saying so, and no result.

What a directory needs: ``run.json`` (the manifest) or ``summary.json`` (older runs have only that). Anything else
is optional. Reading is blocking (call it in a worker thread from async code).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError

from green_agent.engine.config import BattleConfig, remote_config_dict
from green_agent.engine.events import AttemptFinished, BattleEvent, BattleStarted, LogNote
from green_agent.engine.results import AttemptResult, BattleResult
from green_agent.engine.run_store import (
    ATTEMPTS_FILE,
    RUN_FILE,
    SUMMARY_FILE,
    RunFileError,
    read_attempts,
    read_events,
    read_manifest,
)
from green_agent.run_files import (
    MAX_MARKDOWN_BYTES,
    MAX_RECORD_BYTES,
    MAX_SUMMARY_BYTES,
    read_run_file,
    run_file_exists,
)
from green_agent.wire.backend_posts import progress_post_from_run, result_post

log = logging.getLogger(__name__)

IMPORT_SCHEMA: Final = "arena.battle-import/1"
GREEN_ALIAS: Final = "arena green agent (run directory)"
GREEN_URL: Final = "http://127.0.0.1:0"
"""The green agent is not running: a URL that answers nothing (the imported battle is never scheduled)."""
WHITE_NAME: Final = "white_agent"
"""The participant name our green agent requires; winners are reported by it."""
EVENTS_FILE: Final = "events.jsonl"
SCENARIO_FILE: Final = "scenario.json"


class RunDirError(ValueError):
    """The directory is not a run directory Arena can show (the message names what is missing or wrong)."""


@dataclass
class RunImport:
    """The import document of one run directory and what it holds (for the command's summary line)."""

    battle_id: str
    document: dict[str, Any]
    status: str
    """``completed``, ``cancelled``, ``error`` (the summary's), ``interrupted``, or ``unfinished`` (no summary)."""
    events: int
    attempts: int
    trajectories: int
    """``attempt_finished`` events that carry a trajectory."""
    warnings: list[str] = field(default_factory=list)
    result: BattleResult | None = None
    """summary.json as read (None: absent or unreadable, see :attr:`warnings`)."""
    attempt_results: list[AttemptResult] = field(default_factory=list)
    """The attempts as read (attempts.jsonl, else the summary's)."""
    config: BattleConfig | None = None
    created_at: str = ""
    planned_tasks: int = 0
    """Tasks the run selected (run.json), 0 when unknown."""


def _read_summary(run_dir: Path, warnings: list[str]) -> BattleResult | None:
    path = run_dir / SUMMARY_FILE
    if not run_file_exists(run_dir, SUMMARY_FILE):
        return None
    try:
        return BattleResult.model_validate_json(read_run_file(run_dir, SUMMARY_FILE, max_bytes=MAX_SUMMARY_BYTES))
    except (OSError, ValidationError, ValueError) as error:
        first = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
        warnings.append(f"{path} cannot be read as a battle result ({first}){_WITHOUT_RESULT}")
        return None


_WITHOUT_RESULT: Final = "; the battle is shown without a result"


def _white_alias(run_dir: Path) -> str:
    """``white agent (flaky)`` when the run's scenario names the kind of white agent, else ``white agent``."""
    try:
        scenario = json.loads(read_run_file(run_dir, SCENARIO_FILE, max_bytes=MAX_RECORD_BYTES))
        kind = scenario["white_agent"]["kind"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return "white agent"
    return f"white agent ({kind})" if isinstance(kind, str) and kind.isidentifier() else "white agent"


def _event(raw: Mapping[str, Any]) -> BattleEvent | None:
    """An events.jsonl line as an event; an unknown type (a newer engine's) is kept as it is."""
    try:
        return BattleEvent.model_validate(raw)
    except ValidationError:
        if isinstance(raw.get("type"), str) and isinstance(raw.get("text"), str) and isinstance(raw.get("data"), dict):
            timestamp = raw.get("timestamp")
            return BattleEvent.model_construct(
                type=raw["type"], text=raw["text"], data=raw["data"], timestamp=str(timestamp or "")
            )
        return None


def _started_event(battle_id: str, config: BattleConfig, tasks: list[str], timestamp: str) -> BattleEvent:
    """A ``battle_started`` event for a run that kept no events (built as the engine builds it)."""
    started = BattleStarted(
        battle_id=battle_id,
        attempts_total=len(tasks) * config.k,
        tasks=tasks,
        k=config.k,
        calibration=config.calibration,
        seed=config.seed,
        mode=config.mode,
    )
    return started.event(started.text(), timestamp=timestamp)


def _attempt_event(attempt: AttemptResult, k: int, done: int, total: int, timestamp: str) -> BattleEvent:
    """An ``attempt_finished`` event rebuilt from attempts.jsonl (built as the engine builds it)."""
    finished = AttemptFinished.from_result(attempt, done=done, total=total)
    return finished.event(finished.text(k), timestamp=timestamp)


def _reported(events: list[BattleEvent]) -> set[tuple[str, int]]:
    """(task key, attempt) of every attempt an ``attempt_finished`` event reports."""
    return {(typed.task_key, typed.attempt) for event in events if isinstance(typed := event.typed(), AttemptFinished)}


def build_import(run_dir: Path) -> RunImport:
    """The import document of ``run_dir``; :class:`RunDirError` naming what is missing when it is not a run."""
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir}: no such directory")
    warnings: list[str] = []
    try:
        manifest = read_manifest(run_dir)
    except (RunFileError, OSError) as error:
        raise RunDirError(str(error)) from None
    result = _read_summary(run_dir, warnings)
    if manifest is None and result is None:
        if run_file_exists(run_dir, SUMMARY_FILE):  # say why it cannot be read (a warning of _read_summary)
            why = warnings[-1].removesuffix(_WITHOUT_RESULT) if warnings else f"{SUMMARY_FILE} is unreadable"
            raise RunDirError(f"{run_dir} is not an Arena run directory: it has no {RUN_FILE} and {why}")
        raise RunDirError(f"{run_dir} is not an Arena run directory: it has no {RUN_FILE} nor {SUMMARY_FILE}")
    if manifest is not None:
        battle_id, white_url, config = manifest.battle_id, manifest.white_agent_url, manifest.config
        created, planned = manifest.created_at, len(manifest.tasks) * manifest.config.k
    else:
        assert result is not None  # refused above otherwise
        battle_id, white_url, config = result.battle_id, result.white_agent_url, result.config
        created, planned = result.started_at, 0
    if result is not None and result.battle_id != battle_id:
        raise RunDirError(f"{run_dir}: {RUN_FILE} is battle {battle_id} but {SUMMARY_FILE} is {result.battle_id}")
    try:
        attempts = read_attempts(run_dir / ATTEMPTS_FILE).attempts
    except (RunFileError, OSError) as error:
        raise RunDirError(str(error)) from None
    if not attempts and result is not None:  # an older run without attempts.jsonl
        attempts = {(a.task_key, a.attempt): a for a in result.attempts}
    has_events = run_file_exists(run_dir, EVENTS_FILE)
    try:
        events = [event for raw in read_events(run_dir) if (event := _event(raw)) is not None]
    except (RunFileError, OSError) as error:
        raise RunDirError(str(error)) from None
    if not has_events or not events:  # no events.jsonl, or an empty one
        tasks = manifest.tasks if manifest is not None and manifest.tasks else sorted({key for key, _ in attempts})
        events.append(_started_event(battle_id, config, tasks, created))
    reported = _reported(events)
    missing = [attempt for key, attempt in sorted(attempts.items()) if key not in reported]
    if missing:
        total = max(planned, len(attempts))
        for done, attempt in enumerate(missing, start=len(reported) + 1):
            events.append(_attempt_event(attempt, config.k, done, total, events[-1].timestamp or created))
        note = f"{len(missing)} attempts shown from {ATTEMPTS_FILE}: the run stopped before it wrote its events"
        events.append(LogNote(battle_id=battle_id).event(note, timestamp=events[-1].timestamp))
        warnings.append(note)

    bodies = [progress_post_from_run(event, run_dir).body(event.timestamp) for event in events]
    status = result.status if result is not None else "unfinished"
    result_body = None
    if result is not None and result.status != "interrupted":
        markdown = _read_text(run_dir, "summary.md", warnings)
        result_body = result_post(result, markdown, WHITE_NAME).body(result.finished_at or events[-1].timestamp)
    document = {
        "schema": IMPORT_SCHEMA,
        "battle": {
            "battle_id": battle_id,
            "green_agent": {"alias": GREEN_ALIAS, "agent_url": GREEN_URL},
            "opponents": [{"name": WHITE_NAME, "alias": _white_alias(run_dir), "agent_url": white_url}],
            "config": {"pass_k_config": remote_config_dict(config)},
        },
        "events": bodies,
        "result": result_body,
    }
    trajectories = sum(1 for body in bodies if "trajectory" in body["detail"])
    run = RunImport(battle_id, document, status, len(bodies), len(attempts), trajectories, warnings, result)
    run.attempt_results, run.config, run.created_at = list(attempts.values()), config, created
    run.planned_tasks = len(manifest.tasks) if manifest is not None else 0
    return run


def _read_text(run_dir: Path, name: str, warnings: list[str]) -> str | None:
    if not run_file_exists(run_dir, name):
        return None
    try:
        return read_run_file(run_dir, name, max_bytes=MAX_MARKDOWN_BYTES).decode("utf-8", errors="replace")
    except OSError as error:
        warnings.append(f"{error}; the result is shown with a summary rendered from {SUMMARY_FILE}")
        return None


def write_import(document: Mapping[str, Any], path: Path) -> int:
    """Write the import document as UTF-8 JSON; its size in bytes."""
    data = json.dumps(document, ensure_ascii=False).encode("utf-8", "replace")
    path.write_bytes(data)
    return len(data)

"""A run directory as durable data: the battle's manifest, its attempts as they finish, atomic summary files.

Why: a battle against a real agent and an LLM user takes tens of minutes to hours and costs money; a crash or a
Ctrl-C at attempt 12 of 20 must not throw away the 12 (tau2's ``--save-to`` and inspect's ``eval-retry`` keep them
too). So a run directory holds, besides the views written at the end:

* ``run.json`` — the :class:`RunManifest`: the battle's configuration and its :func:`config_hash`, written
  atomically before the first attempt starts;
* ``attempts.jsonl`` — one :class:`~green_agent.engine.results.AttemptResult` JSON per line, appended as each
  attempt finishes, flushed and fsync'd before the attempt counts as done. A line cut short by a crash (the last
  one) is dropped on reading; a bad line anywhere else is corruption and refused, naming the line. When an attempt
  was run again (``--retry-infra``) the later line wins;
* ``summary.json``, ``summary.md`` and ``events.jsonl`` — replaced atomically (write to a temporary file, fsync,
  rename), so a reader sees the old file or the new one, never half of one.

Resuming (:func:`load_run`) takes the finished attempts back and the battle runs only the missing ones. The config
hash covers everything that can change an attempt's outcome or its figures; it leaves out
:data:`RESUME_NEUTRAL_FIELDS` (how many attempts run at once), so a resumed battle may use a different concurrency.
The stored config is hashed again when compared, so a field added by an upgrade (with its default) does not by itself
make an unfinished run unresumable. Outcomes do not depend on run
order (the flaky agent draws its fault from (seed, task, attempt), the scripted user is deterministic, the bootstrap
is seeded), so a resumed battle ends with exactly the numbers of an uninterrupted one.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from green_agent.engine.config import BattleConfig, ConfigError
from green_agent.engine.results import AttemptResult, BattleResult
from green_agent.run_files import (
    MAX_ATTEMPTS_FILE_BYTES,
    MAX_EVENTS_FILE_BYTES,
    MAX_MANIFEST_BYTES,
    MAX_SUMMARY_BYTES,
    RunFileRefused,
    open_run_file,
    read_run_file,
)
from green_agent.statistics.certification import task_value
from green_agent.statistics.certify_stop import stopped_pass_hat, stops_within_task
from green_agent.text_safety import clean_json, clean_text

RUN_FILE: Final = "run.json"
ATTEMPTS_FILE: Final = "attempts.jsonl"
SUMMARY_FILE: Final = "summary.json"
RUN_SCHEMA_ID: Final = "arena.run/1"
RESUME_NEUTRAL_FIELDS: Final = frozenset({"concurrency", "max_cost_usd", "max_wall_s", "provider_max_concurrency"})
"""Config fields that cannot change an attempt's outcome or figure: left out of the hash, free to differ on resume.
(``prices`` stays in: each attempt's cost is computed when it runs, so one summary must not mix two price tables.)"""
MAX_ATTEMPT_LINE_BYTES: Final = 64 * 1024 * 1024
"""A longer line in attempts.jsonl is corruption (an attempt's result is kilobytes; its trajectory is elsewhere)."""

AttemptKey = tuple[str, int]
"""(task key ``domain/split/index``, attempt number)."""


class RunFileError(ConfigError):
    """A run directory's files cannot be used (not a run, corrupt, or a different configuration)."""


class RunManifest(BaseModel):
    """run.json: what the battle is, so a resume can check it is the same battle."""

    model_config = ConfigDict(serialize_by_alias=True, validate_by_name=True, validate_by_alias=True)

    schema_id: Literal["arena.run/1"] = Field(default=RUN_SCHEMA_ID, alias="schema")
    battle_id: str
    white_agent_url: str
    config: BattleConfig
    config_hash: str
    """:func:`config_hash` of ``config``: sha256 of its canonical JSON without the resume-neutral fields."""
    created_at: str
    tasks: list[str] = Field(default_factory=list)
    """The task keys the battle selected, in order (shown when a resume finds a different task set)."""
    certify_order: list[str] | None = Field(default=None, exclude_if=lambda order: order is None)
    """Battles with ``certify``: the seeded order the confidence sequence visits the tasks in (a resume continues
    it; it is a function of the tasks and the seed, recorded so a reader can audit it)."""


def config_fingerprint(config: BattleConfig) -> dict[str, Any]:
    """The configuration as the hash sees it (JSON types, resume-neutral fields removed)."""
    data = config.model_dump(mode="json")
    return {name: value for name, value in data.items() if name not in RESUME_NEUTRAL_FIELDS}


def config_hash(config: BattleConfig) -> str:
    """A stable hash of everything in the config that can change an outcome (sorted keys, compact JSON)."""
    canonical = json.dumps(config_fingerprint(config), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out or {prefix: {}}
    return {prefix: value}


def json_differences(stored: Mapping[str, Any], requested: Mapping[str, Any], prefix: str = "") -> list[str]:
    """``path: stored -> requested`` for each leaf that differs between two JSON objects (dotted paths)."""
    old, new = _flatten(stored, prefix), _flatten(requested, prefix)
    missing = object()
    lines = []
    for name in sorted(old.keys() | new.keys()):
        before, after = old.get(name, missing), new.get(name, missing)
        if before != after:
            shown = [("(absent)" if v is missing else json.dumps(v)) for v in (before, after)]
            lines.append(f"{name}: {shown[0]} -> {shown[1]}")
    return lines


def config_differences(stored: BattleConfig, requested: BattleConfig) -> list[str]:
    """The outcome-relevant fields that differ (dotted paths); empty when a resume may combine the two."""
    if config_hash(stored) == config_hash(requested):
        return []
    differences = json_differences(config_fingerprint(stored), config_fingerprint(requested))
    return differences or ["(the config hash differs)"]


def fsync_dir(directory: Path) -> None:
    """Make a rename or a new file in ``directory`` durable (best effort where directories cannot be opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that readers and crashes see the old content or the new, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes the file private (0600); keep the mode the replaced file had, else the usual 0644, so a run
        # directory written in a container stays readable by the host's user.
        try:
            mode = path.stat().st_mode & 0o777
        except OSError:
            mode = 0o644
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    fsync_dir(path.parent)


def write_run_dir(run_dir: Path, result: BattleResult, markdown: str, events: Iterable[Mapping[str, Any]]) -> None:
    """runs/<battle id>/: summary.json, summary.md, events.jsonl, each replaced atomically (trajectories/ and
    attempts.jsonl are written by the attempts as they finish)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    events_text = "".join(json.dumps(clean_json(dict(event)), ensure_ascii=False) + "\n" for event in events)
    write_atomic(run_dir / "events.jsonl", events_text)
    write_atomic(run_dir / "summary.md", clean_text(markdown))
    # summary.json last: its presence (with status "completed") is what marks the battle as finished.
    summary = json.dumps(clean_json(result.model_dump(mode="json")), indent=2, ensure_ascii=False)
    write_atomic(run_dir / SUMMARY_FILE, summary)


@dataclass
class AttemptsFile:
    """attempts.jsonl as read: the attempts by key (later lines win) and where the last good line ends."""

    attempts: dict[AttemptKey, AttemptResult] = field(default_factory=dict)
    lines: int = 0
    good_bytes: int = 0
    torn: bool = False
    """True when the last line was cut short (dropped; :class:`AttemptJournal` truncates it before appending)."""


def read_attempts(path: Path) -> AttemptsFile:
    """Read attempts.jsonl; a torn last line is dropped, a bad line elsewhere raises :class:`RunFileError`.

    The file is opened as run-directory input (:mod:`green_agent.run_files`): a regular file inside its directory
    of at most :data:`~green_agent.run_files.MAX_ATTEMPTS_FILE_BYTES`, else :class:`RunFileError` naming why."""
    out = AttemptsFile()
    if not os.path.lexists(path):
        return out
    try:
        return _read_attempts(path, out)
    except RunFileRefused as error:
        raise RunFileError(str(error)) from None


def _read_attempts(path: Path, out: AttemptsFile) -> AttemptsFile:
    with open_run_file(path.parent, path.name, max_bytes=MAX_ATTEMPTS_FILE_BYTES) as handle:
        number = 0
        while True:
            raw = handle.readline(MAX_ATTEMPT_LINE_BYTES + 1)
            if not raw:
                break
            number += 1
            complete = raw.endswith(b"\n")
            try:
                if len(raw) > MAX_ATTEMPT_LINE_BYTES:
                    raise ValueError(f"longer than {MAX_ATTEMPT_LINE_BYTES} bytes")
                attempt = AttemptResult.model_validate_json(raw)
            except (ValidationError, ValueError) as error:
                if not complete and not handle.read(1):  # the last line, cut short by a crash: drop it
                    out.torn = True
                    break
                raise RunFileError(f"{path}: line {number} is not an attempt result: {_short(error)}") from None
            if not complete:  # a whole JSON object without its newline: the crash hit between the two writes
                out.torn = True
                break
            out.attempts[(attempt.task_key, attempt.attempt)] = attempt
            out.lines = number
            out.good_bytes += len(raw)
    return out


def _short(error: Exception) -> str:
    text = str(error).splitlines()
    return text[0][:200] if text else type(error).__name__


@dataclass
class StoredRun:
    """What a run directory holds for a resume."""

    run_dir: Path
    manifest: RunManifest
    attempts: AttemptsFile
    summary_status: str | None
    """The ``status`` of summary.json (``completed``, ``interrupted``, ...); None when there is none."""

    @property
    def finished(self) -> bool:
        """Completed with every attempt present: nothing to resume."""
        return self.summary_status == "completed"


def read_manifest(run_dir: Path) -> RunManifest | None:
    """run.json, or None when the directory has none (not a resumable run); :class:`RunFileError` when it is not a
    manifest, not a regular file inside the run directory, or too large (:mod:`green_agent.run_files`)."""
    path = run_dir / RUN_FILE
    if not os.path.lexists(path):
        return None
    try:
        return RunManifest.model_validate_json(read_run_file(run_dir, RUN_FILE, max_bytes=MAX_MANIFEST_BYTES))
    except RunFileRefused as error:
        raise RunFileError(str(error)) from None
    except ValidationError as error:
        raise RunFileError(f"{path}: not an Arena run manifest: {_short(error)}") from None


def summary_status(run_dir: Path) -> str | None:
    """The status recorded in summary.json (None when absent or unreadable: the battle never wrote one)."""
    try:
        data = json.loads(read_run_file(run_dir, SUMMARY_FILE, max_bytes=MAX_SUMMARY_BYTES))
    except (OSError, ValueError):
        return None
    status = data.get("status", "completed") if isinstance(data, dict) else None
    if status == "completed" and isinstance(data, dict) and data.get("budget_stop"):
        return "budget_stopped"  # its budget stopped it before every attempt ran: unfinished, resumable
    return status if isinstance(status, str) else None


def read_events(run_dir: Path) -> list[dict[str, Any]]:
    """events.jsonl of an earlier run of the battle (kept ahead of a resumed run's own events); lines that are not
    JSON objects are skipped (the file is a log for people, not an input of any number). A file that is not a
    regular file inside the run directory, or too large (:mod:`green_agent.run_files`), raises :class:`RunFileError`."""
    path = run_dir / "events.jsonl"
    events: list[dict[str, Any]] = []
    if not os.path.lexists(path):
        return events
    try:
        with open_run_file(run_dir, path.name, max_bytes=MAX_EVENTS_FILE_BYTES) as handle:
            for raw in handle:
                try:
                    event = json.loads(raw)
                except (ValueError, RecursionError):
                    continue
                if isinstance(event, dict):
                    events.append(event)
    except RunFileRefused as error:
        raise RunFileError(str(error)) from None
    return events


def load_run(run_dir: Path) -> StoredRun | None:
    """The stored battle in ``run_dir`` (None when there is none). Blocking: call it in a worker thread."""
    manifest = read_manifest(run_dir)
    if manifest is None:
        return None
    return StoredRun(run_dir, manifest, read_attempts(run_dir / ATTEMPTS_FILE), summary_status(run_dir))


def check_resumable(stored: StoredRun, config: BattleConfig, tasks: list[str]) -> None:
    """Refuse a resume whose configuration or task set differs from the stored battle's, naming the difference."""
    if differences := config_differences(stored.manifest.config, config):
        raise RunFileError(
            f"battle {stored.manifest.battle_id}: the configuration differs from the stored run's, so it cannot be "
            f"resumed ({'; '.join(differences)}); run it as a new battle instead"
        )
    if stored.manifest.tasks and stored.manifest.tasks != tasks:
        raise RunFileError(
            f"battle {stored.manifest.battle_id}: the task set differs from the stored run's "
            f"({len(stored.manifest.tasks)} stored, {len(tasks)} now; the installed tau2 data changed?)"
        )


class AttemptJournal:
    """Appends finished attempts to attempts.jsonl, one fsync'd line each, in completion order.

    The file I/O runs in a worker thread; a lock keeps concurrent attempts' lines whole and in order."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / ATTEMPTS_FILE
        self._lock = asyncio.Lock()

    async def start(self, manifest: RunManifest | None, keep_bytes: int | None) -> None:
        """Write run.json (a new battle) and cut a torn last line (``keep_bytes``: where the good lines end)."""

        def prepare() -> None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if manifest is not None:
                write_atomic(self.path.parent / RUN_FILE, manifest.model_dump_json(indent=2) + "\n")
            if keep_bytes is not None and self.path.exists() and self.path.stat().st_size > keep_bytes:
                with self.path.open("r+b") as handle:
                    handle.truncate(keep_bytes)
                    handle.flush()
                    os.fsync(handle.fileno())

        await asyncio.to_thread(prepare)

    async def append(self, result: AttemptResult) -> None:
        """Make ``result`` durable (returns once it is on disk)."""
        line = (json.dumps(clean_json(result.model_dump(mode="json")), ensure_ascii=False) + "\n").encode()

        def write() -> None:
            with self.path.open("ab") as handle:
                handle.write(line)
                handle.flush()
                os.fsync(handle.fileno())

        async with self._lock:
            await asyncio.to_thread(write)


def baseline_values(run_dir: Path, j: int) -> dict[str, float]:
    """A baseline run's per-task unbiased pass^j (tasks with at least j scored attempts; a pass^k certify run's
    tasks, stopped at their first failure, from their leading passes), for a ``certify`` comparison. RunFileError
    (a ConfigError) naming ``certify.baseline`` when it is not a run directory. Blocking."""
    stored = load_run(run_dir)
    if stored is None:
        raise RunFileError(f"certify.baseline: {run_dir} is not an Arena run directory (no run.json)")
    outcomes: dict[str, list[bool | None]] = {}
    for (key, _), attempt in sorted(stored.attempts.attempts.items()):
        outcomes.setdefault(key, []).append(attempt.trial_outcome)
    config, certify = stored.manifest.config, stored.manifest.config.certify
    if certify is not None and stops_within_task(config.k, certify.j, certify.compare is not None):
        # Its tasks stopped at their first failure: pass^j from the leading passes (the mean over the attempts run
        # is biased under that stop, and a stopped task would be left out of pass^j above its attempts).
        values = {key: stopped_pass_hat(got, j) for key, got in outcomes.items()}
    else:
        values = {key: task_value(got, j) for key, got in outcomes.items()}
    return {key: value for key, value in values.items() if value is not None}

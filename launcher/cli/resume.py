"""``arena run SCENARIO --resume``: decide, before any process starts, whether and what to resume.

Why in the launcher and not only in the green agent: a resume that cannot work (no such run, a finished battle, a
changed scenario) must be refused in a second with a message naming the difference, not after starting two agents.
The green agent checks again (the config hash in run.json), because a restarted green agent can be asked to resume
by others too.

What is compared: the battle configuration through its hash (run_store: everything that can change an outcome or a
figure, prices included; ``concurrency`` may differ), and the white agent's part of the scenario, which ``arena run``
records in ``runs/<battle id>/scenario.json`` when the battle starts (the reference agent's kind, seed and fault
rates decide its replies, so a resume against a different agent would mix two agents' attempts in one summary).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from green_agent.engine.config import ConfigError
from green_agent.engine.run_store import (
    ATTEMPTS_FILE,
    RunFileError,
    StoredRun,
    config_differences,
    json_differences,
    load_run,
    read_manifest,
    summary_status,
    write_atomic,
)
from green_agent.run_files import MAX_RECORD_BYTES, read_run_file
from launcher.cli.scenario import Scenario

SCENARIO_RECORD: Final = "scenario.json"
"""The scenario as ``arena run`` started the battle (no secrets: only the names of key variables)."""

ResumeAction = Literal["resume", "finished"]


@dataclass(frozen=True)
class ResumePlan:
    """What ``--resume`` will do: continue ``battle_id`` (``done`` of ``total`` attempts on disk), or nothing."""

    action: ResumeAction
    battle_id: str
    run_dir: Path
    done: int
    infra_errors: int


def write_scenario_record(run_dir: Path, scenario: Scenario, overrides: Mapping[str, Any] | None = None) -> None:
    """Record the scenario a battle started with (kept as it is on a resume), with ``overrides``: the command-line
    flags that changed it (``{"--k": 8}``; an empty object when none)."""
    path = run_dir / SCENARIO_RECORD
    if not path.exists():
        record = {**scenario.model_dump(mode="json"), "overrides": dict(overrides or {})}
        write_atomic(path, json.dumps(record, indent=2) + "\n")


def _scenario_differences(run_dir: Path, scenario: Scenario) -> list[str]:
    stored = _read_json(run_dir / SCENARIO_RECORD)
    stored_white = stored.get("white_agent") if isinstance(stored, dict) else None
    if not isinstance(stored_white, dict):
        return []  # started by something other than arena run (a green agent alone): nothing to compare
    return json_differences(stored_white, scenario.white_agent.model_dump(mode="json"), "white_agent")


def _newest_unfinished(runs_dir: Path, scenario: Scenario) -> str | None:
    """The most recently started unfinished run of this scenario (by its name) in ``runs_dir``."""
    candidates: list[tuple[str, str]] = []
    if not runs_dir.is_dir():
        return None
    for child in runs_dir.iterdir():
        try:  # the manifest and the summary's status only: attempts are read for the one run resumed
            manifest = read_manifest(child) if child.is_dir() else None
        except ConfigError:
            continue
        if manifest is None or summary_status(child) == "completed":
            continue
        record = _read_json(child / SCENARIO_RECORD)
        if isinstance(record, dict) and record.get("name") == scenario.name:
            candidates.append((manifest.created_at, child.name))
    return max(candidates)[1] if candidates else None


def _read_json(path: Path) -> Any:
    try:  # run-directory input: a regular file inside the run, bounded (green_agent.run_files)
        return json.loads(read_run_file(path.parent, path.name, max_bytes=MAX_RECORD_BYTES))
    except (OSError, ValueError, RecursionError):
        return None


def plan_resume(runs_dir: Path, scenario: Scenario, battle_id: str | None, *, retry_infra: bool) -> ResumePlan:
    """Check that ``--resume`` can work; :class:`ConfigError` (exit 2) naming why not. Blocking file reads."""
    if battle_id is None:
        battle_id = _newest_unfinished(runs_dir, scenario)
        if battle_id is None:
            raise ConfigError(
                f"--resume: no unfinished run of scenario {scenario.name!r} in {runs_dir}/ (name one with --battle-id)"
            )
    run_dir = runs_dir / battle_id
    if not run_dir.is_dir():
        raise ConfigError(f"--resume: {run_dir} does not exist")
    stored = load_run(run_dir)
    if stored is None:
        hint = " (it has attempts but no run.json)" if (run_dir / ATTEMPTS_FILE).exists() else ""
        raise ConfigError(f"--resume: {run_dir} is not an Arena run directory: no run.json{hint}")
    _check_same_battle(stored, scenario)
    infra = sum(1 for a in stored.attempts.attempts.values() if a.outcome == "infra_error")
    done = len(stored.attempts.attempts)
    finished = stored.finished and not (retry_infra and infra)
    return ResumePlan("finished" if finished else "resume", battle_id, run_dir, done, infra)


def _check_same_battle(stored: StoredRun, scenario: Scenario) -> None:
    differences = config_differences(stored.manifest.config, scenario.pass_k_config)
    differences += _scenario_differences(stored.run_dir, scenario)
    if differences:
        raise RunFileError(
            f"--resume: the scenario differs from the one battle {stored.manifest.battle_id} started with, so its "
            f"attempts cannot be combined: {'; '.join(differences)}. Run it as a new battle (without --resume)."
        )


def refuse_existing(runs_dir: Path, battle_id: str) -> None:
    """Without --resume a battle id whose run directory holds a battle is refused (nothing is overwritten)."""
    run_dir = runs_dir / battle_id
    try:
        stored = load_run(run_dir) if run_dir.is_dir() else None
    except ConfigError:
        stored = None
    if stored is not None or (run_dir / "summary.json").exists():
        finished = stored is None or stored.finished
        what = "a finished battle;" if finished else "an unfinished battle; pass --resume to continue it, or"
        raise ConfigError(f"--battle-id: {run_dir} already holds {what} choose another id")

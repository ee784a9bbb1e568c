"""``runs/<battle id>/backend_run.json``: which backend a battle of ``arena run --backend`` runs on.

Written by ``arena run --backend`` as soon as the backend has created the battle (the green agent's run directory
is named after the backend's battle id), together with ``scenario.json``; read by ``arena run --resume --backend``
to find the backend again: its URL, or for ``local`` the SQLite file (and port) of the backend that ``arena run``
started. No secret is in it (the battle token stays with the green agent, see
:mod:`green_agent.service.backend_target`). Read as hostile input: a regular file, bounded, validated.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from green_agent.engine.config import ConfigError
from green_agent.engine.run_store import write_atomic
from launcher.cli.resume import write_scenario_record
from launcher.cli.run_overrides import write_effective_scenario
from launcher.cli.scenario import Scenario

RECORD_FILE: Final = "backend_run.json"
MAX_RECORD_BYTES: Final = 64 * 1024


class BackendRunRecord(BaseModel):
    """Where the battle runs."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    format: Literal["arena.backend-run/1"] = Field(default="arena.backend-run/1", alias="schema")
    backend: str = Field(min_length=1, max_length=2048)
    """``local`` or the backend's URL, as given to ``--backend``."""
    backend_url: str = Field(min_length=1, max_length=2048)
    """The URL the battle was created on (for ``local``, the loopback port of that run)."""
    database: str | None = Field(default=None, max_length=4096)
    """``local`` only: the backend's SQLite file."""
    battle_timeout_s: float = Field(gt=0, le=10**8)
    white_alias: str = Field(default="white_agent", max_length=512)


def record_battle(
    run_dir: Path, scenario: Scenario, record: BackendRunRecord, overrides: Mapping[str, Any] | None = None
) -> None:
    """scenario.json and backend_run.json in the battle's run directory (the green agent claims the directory
    without looking at other files). Blocking: call it in a worker thread."""
    run_dir.mkdir(parents=True, exist_ok=True)
    write_scenario_record(run_dir, scenario, overrides)
    if overrides:
        write_effective_scenario(run_dir, scenario)
    write_atomic(run_dir / RECORD_FILE, record.model_dump_json(by_alias=True, indent=2) + "\n")


def read_record(run_dir: Path) -> BackendRunRecord | None:
    """The record, or None when there is none; ConfigError naming the file when it is unusable. Blocking."""
    path = run_dir / RECORD_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise ConfigError(f"{path}: cannot be read ({error.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_RECORD_BYTES:
            raise ConfigError(f"{path}: not a regular file of at most {MAX_RECORD_BYTES} bytes")
        data = os.read(fd, MAX_RECORD_BYTES + 1)
    finally:
        os.close(fd)
    try:
        return BackendRunRecord.model_validate_json(data)
    except ValidationError as error:
        first = error.errors(include_url=False, include_input=False)[0]
        field = ".".join(str(part) for part in first["loc"]) or "record"
        raise ConfigError(f"{path}: {field}: {first['msg']}") from None


def resume_command(scenario: Path | None, backend: str, runs_dir: Path, battle_id: str | None) -> str | None:
    """The command that continues a backend battle, when its run directory holds a run (blocking: a stat)."""
    if battle_id is None or not (runs_dir / battle_id / "run.json").is_file():
        return None
    extra = f" --runs-dir {runs_dir}" if runs_dir != Path("runs") else ""
    return f"arena run {scenario} --resume --backend {backend} --battle-id {battle_id}{extra}"

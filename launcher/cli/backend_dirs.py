"""One run directory per battle with ``arena run --backend``: the launcher's files join the green agent's run.

Why: the backend names the battle (its id names ``runs/<id>/``, where the green agent writes the run), but ``arena
run`` has to start the backend and the agents before that id exists, so their logs and a ``local`` backend's SQLite
file start in a directory of their own (``runs/<--battle-id or generated id>/``). Left there, a run would be split
across two directories, and ``arena view``, ``compare`` and ``export`` refuse the one without a run. Once every
child has stopped (a SQLite file is only moved closed), :func:`merge_into_run` moves them into the battle's run
directory, points ``backend_run.json`` at the moved database and removes the emptied directory.

Moves are renames inside the runs directory (no copy); symbolic links are moved as links, never followed; a name
the run directory already holds is kept and the launcher's file is moved beside it with a ``launcher-`` prefix.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Final

from green_agent.engine.config import ConfigError
from green_agent.engine.run_store import write_atomic
from launcher.cli.backend_record import RECORD_FILE, read_record

logger = logging.getLogger(__name__)

DATABASE_FILE: Final = "backend.sqlite3"
"""A ``local`` backend's SQLite file (its ``-wal`` and ``-shm`` companions move with it)."""
_DUPLICATES: Final = ("scenario.json", "scenario.toml")
"""Written to both directories (the same content): the run directory's copy is kept."""


def _move(source: Path, target: Path) -> None:
    if target.exists() or target.is_symlink():
        target = target.with_name(f"launcher-{target.name}")
    if not (target.exists() or target.is_symlink()):
        os.replace(source, target)


def merge_into_run(staging: Path, run_dir: Path) -> Path | None:
    """Move ``staging``'s files into ``run_dir`` (both inside the same runs directory); the database's new path, or
    None when there was nothing to move. Blocking: call it in a worker thread, after every child stopped."""
    if staging.resolve() == run_dir.resolve() or not staging.is_dir() or staging.is_symlink():
        return None
    if not run_dir.is_dir() or run_dir.is_symlink():
        return None
    database: Path | None = None
    for entry in sorted(staging.iterdir()):
        target = run_dir / entry.name
        if entry.name in _DUPLICATES and target.is_file():
            entry.unlink()
        elif entry.name == "logs" and entry.is_dir() and not entry.is_symlink():
            (run_dir / "logs").mkdir(exist_ok=True)
            for log in sorted(entry.iterdir()):
                _move(log, run_dir / "logs" / log.name)
            with contextlib.suppress(OSError):
                entry.rmdir()
        else:
            _move(entry, target)
            if entry.name == DATABASE_FILE:
                database = target
    _repoint_record(run_dir, staging / DATABASE_FILE, database)
    try:
        staging.rmdir()
    except OSError as error:  # something we did not expect is left: leave it, say where
        logger.warning("%s is not empty after moving its files into %s: %s", staging, run_dir, error)
    return database


def _repoint_record(run_dir: Path, old: Path, new: Path | None) -> None:
    """backend_run.json's ``database`` follows the moved file (a resume starts the backend on it)."""
    if new is None:
        return
    try:
        record = read_record(run_dir)
    except ConfigError:
        return
    if record is None or record.database is None or Path(record.database).resolve() != old.resolve():
        return
    updated = record.model_copy(update={"database": str(new)})
    write_atomic(run_dir / RECORD_FILE, updated.model_dump_json(by_alias=True, indent=2) + "\n")

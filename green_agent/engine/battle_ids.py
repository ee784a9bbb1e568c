"""Battle ids: one validator for every entry point, and run directories that cannot escape ``--runs-dir``.

Why: a battle id arrives from remote parties (an A2A assessment request, an AgentBeats ``battle_start``, an MCP
client) and becomes a directory name. ``../x`` or an absolute path would write outside the runs directory, and a
reused id would mix two runs' files in one directory. Ids are therefore restricted to a conservative charset and
length, and the run directory is resolved and checked to lie inside the runs directory before anything is
written. Ids the green agent makes itself are random (128 bits), so they cannot be guessed.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from green_agent.engine.config import ConfigError

MAX_BATTLE_ID_LENGTH = 128
_BATTLE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class BattleIdError(ConfigError):
    """A battle id that cannot be used (the message names ``battle_id`` and the rule)."""


def validate_battle_id(value: object) -> str:
    """Return ``value`` if it is a usable battle id, else raise :class:`BattleIdError` saying why."""
    if not isinstance(value, str):
        raise BattleIdError(f"battle_id: expected a string, got {type(value).__name__}")
    if not value:
        raise BattleIdError("battle_id: must not be empty")
    if len(value) > MAX_BATTLE_ID_LENGTH:
        raise BattleIdError(f"battle_id: at most {MAX_BATTLE_ID_LENGTH} characters (got {len(value)})")
    if not _BATTLE_ID.fullmatch(value) or ".." in value:
        raise BattleIdError(
            "battle_id: only letters, digits, '.', '_' and '-' are allowed, starting with a letter or digit, "
            "and no '..'"
        )
    return value


def new_battle_id() -> str:
    """A fresh, unguessable battle id (a random UUID's 32 hex digits)."""
    return uuid.uuid4().hex


def run_dir_for(runs_dir: Path, battle_id: str) -> Path:
    """The run directory of ``battle_id``, guaranteed to be a direct child of ``runs_dir`` (BattleIdError if not)."""
    validate_battle_id(battle_id)
    root = runs_dir.resolve()
    candidate = (root / battle_id).resolve()
    if candidate.parent != root:
        raise BattleIdError(f"battle_id: {battle_id!r} does not name a directory inside the runs directory")
    return candidate


CLAIM_FILE = ".battle"
"""Created exclusively in a run directory by the battle that owns it (the directory may already hold the
launcher's logs for that same battle; a second battle with the id finds the claim and is refused)."""


def claim_run_dir(runs_dir: Path, battle_id: str, *, resume: bool = False, retry_infra: bool = False) -> Path:
    """Create (or adopt) the run directory of a new battle; :class:`BattleIdError` when a battle already used it.

    With ``resume`` the directory of an earlier, unfinished run of the same battle is taken over (its summary, if
    any, must not say ``completed`` unless ``retry_infra``: a finished battle's infrastructure errors may be
    re-run); the battle then checks that it is the same battle and that something is left to run (run_store)."""
    path = run_dir_for(runs_dir, battle_id)
    path.mkdir(parents=True, exist_ok=True)
    if resume:
        from green_agent.engine.run_store import summary_status  # run_store needs the results models; lazily

        if summary_status(path) == "completed" and not retry_infra:
            raise BattleIdError(f"battle_id: battle {battle_id!r} already finished; nothing to resume")
        (path / CLAIM_FILE).write_text(battle_id + "\n", encoding="utf-8")
        return path
    if (path / "summary.json").exists():
        raise BattleIdError(f"battle_id: a run for {battle_id!r} already exists; choose another id")
    try:
        with (path / CLAIM_FILE).open("x", encoding="utf-8") as claim:
            claim.write(battle_id + "\n")
    except FileExistsError:
        raise BattleIdError(f"battle_id: a run for {battle_id!r} already exists; choose another id") from None
    return path

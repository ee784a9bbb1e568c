"""Where a battle reports, kept in its run directory so that a resumed battle reports there again.

Why: a battle run for a backend (AgentBeats ``battle_start``, ``arena run --backend``) gets its battle token only
once, in battle_start. A green agent killed in the middle of it lost the token, so a resume could post progress
(tokenless progress is accepted by default) but never the result (a result always needs the token): the backend
battle ended as a draw by timeout. The target (backend URL, the white agent's name for the winner, the token) is
therefore written to ``runs/<battle id>/backend_target.json`` when the battle starts, private to the green agent's
user (mode 0600, like an SSH key), and read back when the battle is resumed or its outbox replayed.

Who may use a stored token: the backend it was issued by (same URL), or the operator (an assessment request with
the operator token may name the same backend under a new address, e.g. ``arena run --resume --backend local``
restarting its backend on another port). Anyone else naming another URL gets no token: a stranger could otherwise
resume a battle towards its own server and learn the token. The token only lets its holder post to that one battle,
and a backend refuses every post once the battle is over.

The file is hostile input like the rest of a run directory: a regular file only (no symlink, FIFO or device),
at most :data:`MAX_TARGET_BYTES`, validated; anything else counts as absent.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from green_agent.run_files import read_run_file

log = logging.getLogger(__name__)

TARGET_FILE: Final = "backend_target.json"
TARGET_FORMAT: Final = "arena.backend-target/1"
MAX_TARGET_BYTES: Final = 16 * 1024


@dataclass(frozen=True)
class BackendTarget:
    """Where a battle reports in the AgentBeats shapes (and as whom the white agent is named for the winner)."""

    url: str
    token: str | None = None
    white_name: str = "white_agent"

    def __repr__(self) -> str:  # the token never appears in a log line or a traceback
        return f"BackendTarget(url={self.url!r}, token={'set' if self.token else 'none'}, white={self.white_name!r})"


class StoredTarget(BaseModel):
    """``backend_target.json``."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    format: Literal["arena.backend-target/1"] = Field(default=TARGET_FORMAT, alias="schema")
    url: str = Field(min_length=1, max_length=2048)
    white_name: str = Field(default="white_agent", max_length=512)
    token: str | None = Field(default=None, max_length=1024)

    def target(self) -> BackendTarget:
        return BackendTarget(self.url, self.token, self.white_name)


def _same_backend(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


def write_target(run_dir: Path, target: BackendTarget) -> None:
    """Write the battle's target, private to this user (0600), atomically. Blocking: call it in a worker thread."""
    stored = StoredTarget(url=target.url, white_name=target.white_name, token=target.token)
    text = stored.model_dump_json(by_alias=True) + "\n"
    run_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{TARGET_FILE}.", suffix=".tmp", dir=run_dir)  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, run_dir / TARGET_FILE)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise


def read_target(run_dir: Path) -> StoredTarget | None:
    """The stored target of the battle in ``run_dir``, or None (absent, not a regular file, too large, invalid).
    Blocking: call it in a worker thread."""
    path = run_dir / TARGET_FILE
    try:
        data = read_run_file(run_dir, TARGET_FILE, max_bytes=MAX_TARGET_BYTES)
    except FileNotFoundError:
        return None
    except OSError as error:  # RunFileRefused: a link out, not a regular file, too large
        log.warning("%s: %s; ignored", path, error)
        return None
    try:
        return StoredTarget.model_validate_json(data)
    except ValidationError as error:
        log.warning("%s: unusable (%s); ignored", path, error.errors(include_input=False)[0]["msg"])
        return None


def resumed_target(
    requested: BackendTarget | None, stored: StoredTarget | None, *, operator: bool
) -> BackendTarget | None:
    """Where a resumed battle reports: the request's backend, else the stored one. The stored token (and white
    agent name) come along when the request names the same backend, or when the operator asked; a token the
    request carries always wins."""
    if stored is None:
        return requested
    if requested is None:
        return stored.target()
    if not (operator or _same_backend(requested.url, stored.url)):
        return requested
    return BackendTarget(
        requested.url,
        requested.token or stored.token,
        stored.white_name if requested.white_name == "white_agent" else requested.white_name,
    )


def replay_token(stored: StoredTarget | None, outbox_url: str | None) -> str | None:
    """The token an outbox replay may use: the stored one, only towards the backend that issued it."""
    if stored is None or stored.token is None or not outbox_url or not _same_backend(stored.url, outbox_url):
        return None
    return stored.token

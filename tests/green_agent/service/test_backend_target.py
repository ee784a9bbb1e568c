"""Where a battle reports, kept in its run directory for a resume (green_agent/service/backend_target.py): the file
is private, read as hostile input, and a stored token goes only to the backend that issued it (or where the operator
says)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from green_agent.service.backend_target import (
    MAX_TARGET_BYTES,
    TARGET_FILE,
    BackendTarget,
    StoredTarget,
    read_target,
    replay_token,
    resumed_target,
    write_target,
)

STORED = StoredTarget(url="http://backend:9000", white_name="arena-flaky-white-1a2b", token="secret-token")


def test_the_target_is_written_private_and_read_back(tmp_path: Path) -> None:
    write_target(tmp_path, BackendTarget("http://backend:9000", "secret-token", "arena-flaky-white-1a2b"))
    assert stat.S_IMODE((tmp_path / TARGET_FILE).stat().st_mode) == 0o600
    assert read_target(tmp_path) == STORED
    assert "secret-token" not in repr(STORED.target())


def test_a_hostile_target_file_counts_as_absent(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.json"
    outside.write_text(STORED.model_dump_json(by_alias=True))
    run = tmp_path / "run"
    run.mkdir()
    (run / TARGET_FILE).symlink_to(outside)
    assert read_target(run) is None  # a symlink is not followed
    (run / TARGET_FILE).unlink()
    os.mkfifo(run / TARGET_FILE)
    assert read_target(run) is None  # a FIFO does not block the reader
    (run / TARGET_FILE).unlink()
    (run / TARGET_FILE).write_text(" " * (MAX_TARGET_BYTES + 1) + "{}")
    assert read_target(run) is None  # too large: not parsed
    (run / TARGET_FILE).write_text('{"schema": "arena.backend-target/1", "url": ""}')
    assert read_target(run) is None  # invalid
    assert read_target(tmp_path / "missing") is None


def test_a_stored_token_goes_only_to_its_backend_or_where_the_operator_says() -> None:
    same = BackendTarget("http://backend:9000/")
    assert resumed_target(same, STORED, operator=False) == BackendTarget(
        "http://backend:9000/", "secret-token", "arena-flaky-white-1a2b"
    )
    elsewhere = BackendTarget("http://attacker:1")
    assert resumed_target(elsewhere, STORED, operator=False) == elsewhere  # no token for a stranger's server
    moved = BackendTarget("http://127.0.0.1:4242")  # arena run restarted its local backend on another port
    assert resumed_target(moved, STORED, operator=True) == BackendTarget(
        "http://127.0.0.1:4242", "secret-token", "arena-flaky-white-1a2b"
    )
    assert resumed_target(None, STORED, operator=False) == STORED.target()  # a resume reports where it did
    target = resumed_target(BackendTarget("http://b", "fresh"), STORED, operator=True)
    assert target is not None and target.token == "fresh"
    assert resumed_target(same, None, operator=True) == same
    assert replay_token(STORED, "http://backend:9000") == "secret-token"
    assert replay_token(STORED, "http://attacker:1") is None
    assert replay_token(None, "http://backend:9000") is None

"""The outbox a restarted green agent replays is a run-directory file: read as hostile input (green_agent/run_files)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from green_agent.service.outbox import OUTBOX_FILE, load_outbox


@pytest.mark.timeout(30)
def test_an_outbox_linked_to_dev_zero_is_refused_not_read_forever(tmp_path: Path) -> None:
    (tmp_path / OUTBOX_FILE).symlink_to("/dev/zero")
    state = load_outbox(tmp_path / OUTBOX_FILE)
    assert state.pending == [] and state.next_seq == 1


@pytest.mark.timeout(30)
def test_an_outbox_that_is_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / OUTBOX_FILE)
    state = load_outbox(tmp_path / OUTBOX_FILE)
    assert state.pending == [] and state.next_seq == 1


def test_an_outbox_linked_out_of_its_run_is_not_replayed(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_text('{"type": "event", "seq": 1, "at": 0, "result": false, "body": {}}\n', encoding="utf-8")
    (run / OUTBOX_FILE).symlink_to(outside)
    assert load_outbox(run / OUTBOX_FILE).pending == []


def test_a_missing_outbox_is_an_empty_one(tmp_path: Path) -> None:
    assert load_outbox(tmp_path / OUTBOX_FILE).pending == []

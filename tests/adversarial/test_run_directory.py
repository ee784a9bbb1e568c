"""The run directory as hostile input: ``arena view``, ``arena export`` and the resume readers open only regular
files inside the directory, of bounded size, checked before anything is parsed (green_agent/run_files.py).

A hostile directory here is one somebody hands over ("look at my run"): a trajectory that is a symlink to
``/dev/zero`` (endless), a FIFO (blocks the reader), a symlink to a file elsewhere (its content would be put on the
page), a summary.json far larger than any battle writes. Before the fix the first two hung ``arena view`` (the
pytest timeout is the hang guard), the third showed the outside file, the fourth was parsed whole.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from green_agent.engine.config import BattleConfig
from green_agent.engine.results import AttemptResult, BattleResult
from green_agent.engine.run_store import (
    RunFileError,
    read_attempts,
    read_events,
    read_manifest,
    summary_status,
)
from green_agent.run_files import (
    MAX_SUMMARY_BYTES,
    RunFileRefused,
    open_run_file,
    read_run_file,
)
from green_agent.statistics import summarize_trials
from green_agent.wire.trajectory import trajectory_for_event
from launcher.cli.app import app
from launcher.cli.export_command import ExportError, load_battles
from launcher.cli.view_import import RunDirError, build_import

pytestmark = pytest.mark.timeout(60)  # a reader that hangs fails here instead of hanging CI

SECRET = "OUTSIDE-THE-RUN-7f3a"
TRAJECTORY = "trajectories/mock-base-0000-attempt01.jsonl"


def _attempt(number: int) -> AttemptResult:
    return AttemptResult(
        battle_id="hostile-run",
        domain="mock",
        split="base",
        task_index=0,
        task_id="create_task_1",
        attempt=number,
        context_id=f"ctx-{number}",
        outcome="success",
        reward=1.0,
        steps=2,
        duration_s=1.0,
        termination_reason="user_stop",
        trajectory_file=f"trajectories/mock-base-0000-attempt{number:02d}.jsonl",
    )


def _result() -> BattleResult:
    attempts = [_attempt(1), _attempt(2)]
    config = BattleConfig(mode="manual", k=2, domain="mock", split="base", task_index=0)
    return BattleResult(
        battle_id="hostile-run",
        white_agent_url="http://127.0.0.1:9009",
        config=config,
        started_at="2026-11-27T10:00:00Z",
        finished_at="2026-11-27T10:01:00Z",
        duration_s=60.0,
        attempts=attempts,
        summary=summarize_trials({"mock/base/0": [True, True]}, k_max=2, seed=0, n_bootstrap=0),
        failure_breakdown={},
        infrastructure_errors=0,
    )


def _conversation(attempt: AttemptResult, text: str) -> str:
    header = {"attempt": attempt.model_dump(mode="json", exclude={"trajectory_file"})}
    lines = [header, {"role": "user", "content": text}, {"role": "assistant", "content": "done"}]
    return "".join(json.dumps(line) + "\n" for line in lines)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A finished run (summary.json only, as older runs are) with one good trajectory per attempt."""
    run = tmp_path / "runs" / "hostile-run"
    (run / "trajectories").mkdir(parents=True)
    result = _result()
    (run / "summary.json").write_text(result.model_dump_json(), encoding="utf-8")
    for attempt in result.attempts:
        (run / str(attempt.trajectory_file)).write_text(_conversation(attempt, "hello"), encoding="utf-8")
    return run


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file outside the run directory that looks like a trajectory (it must never reach a page)."""
    path = tmp_path / "elsewhere.jsonl"
    path.write_text(_conversation(_attempt(1), SECRET), encoding="utf-8")
    return path


def _replace(path: Path, make: str, target: Path | None = None) -> None:
    path.unlink()
    if make == "fifo":
        os.mkfifo(path)
    else:
        assert target is not None
        path.symlink_to(target)


def _shown_conversations(document: dict[str, object]) -> str:
    return json.dumps(document["events"])


def test_the_fixture_shows_its_conversations(run_dir: Path) -> None:
    run = build_import(run_dir)  # the control: the good directory is shown with both conversations
    assert run.trajectories == 2 and "hello" in _shown_conversations(run.document)


def test_view_of_a_trajectory_symlinked_to_dev_zero_ends(run_dir: Path) -> None:
    _replace(run_dir / TRAJECTORY, "symlink", Path("/dev/zero"))
    run = build_import(run_dir)  # before: read /dev/zero forever
    assert run.trajectories == 1  # the other attempt keeps its conversation
    assert run.attempts == 2


def test_view_of_a_trajectory_that_is_a_fifo_ends(run_dir: Path) -> None:
    _replace(run_dir / TRAJECTORY, "fifo")
    run = build_import(run_dir)  # before: open() of a FIFO without a writer blocked forever
    assert run.trajectories == 1


def test_view_does_not_show_a_file_outside_the_run(run_dir: Path, outside: Path) -> None:
    _replace(run_dir / TRAJECTORY, "symlink", outside)
    run = build_import(run_dir)
    assert SECRET not in json.dumps(run.document)  # before: the outside file was the attempt's conversation
    assert run.trajectories == 1


def test_view_does_not_follow_a_trajectories_directory_out_of_the_run(run_dir: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    (elsewhere / Path(TRAJECTORY).name).write_text(_conversation(_attempt(1), SECRET), encoding="utf-8")
    (elsewhere / "mock-base-0000-attempt02.jsonl").write_text(_conversation(_attempt(2), SECRET), encoding="utf-8")
    for child in (run_dir / "trajectories").iterdir():
        child.unlink()
    (run_dir / "trajectories").rmdir()
    (run_dir / "trajectories").symlink_to(elsewhere, target_is_directory=True)
    run = build_import(run_dir)
    assert SECRET not in json.dumps(run.document)
    assert run.trajectories == 0


def test_an_oversized_summary_is_refused_before_it_is_parsed(run_dir: Path) -> None:
    summary = run_dir / "summary.json"
    text = summary.read_bytes()
    with summary.open("ab") as handle:  # valid JSON (trailing whitespace), just far larger than any battle's
        handle.truncate(0)
        handle.write(text)
        handle.write(b" " * (MAX_SUMMARY_BYTES + 1 - len(text)))
    with pytest.raises(RunDirError, match="not an Arena run directory"):  # before: parsed, shown as finished
        build_import(run_dir)
    code = CliRunner().invoke(app, ["view", str(run_dir), "--no-wait"])
    assert code.exit_code == 2  # refused before a backend starts
    with pytest.raises(ExportError, match="over the limit"):
        load_battles(run_dir)
    assert summary_status(run_dir) is None


def test_a_summary_that_is_a_fifo_or_a_link_out_is_refused_by_view_and_export(run_dir: Path, tmp_path: Path) -> None:
    good = (run_dir / "summary.json").read_bytes()
    _replace(run_dir / "summary.json", "fifo")
    with pytest.raises(RunDirError):
        build_import(run_dir)
    with pytest.raises(ExportError, match="FIFO"):
        load_battles(run_dir)
    (run_dir / "summary.json").unlink()
    copy = tmp_path / "summary-elsewhere.json"
    copy.write_bytes(good)
    (run_dir / "summary.json").symlink_to(copy)
    with pytest.raises(ExportError, match="outside the run directory"):
        load_battles(run_dir)
    assert load_battles(copy).results[0].battle_id == "hostile-run"  # a file named directly is the user's choice


def test_export_of_a_named_fifo_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "summary.json"
    os.mkfifo(fifo)
    with pytest.raises(ExportError, match="FIFO"):
        load_battles(fifo)


def test_resume_readers_refuse_special_files(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / "run.json")
    os.mkfifo(run / "attempts.jsonl")
    (run / "events.jsonl").symlink_to("/dev/zero")
    with pytest.raises(RunFileError, match="FIFO"):
        read_manifest(run)
    with pytest.raises(RunFileError, match="FIFO"):
        read_attempts(run / "attempts.jsonl")
    with pytest.raises(RunFileError, match="outside the run directory"):
        read_events(run)


def test_the_green_agent_posts_no_trajectory_from_a_special_file(run_dir: Path, outside: Path) -> None:
    data = {"task_key": "mock/base/0", "attempt": 1, "trajectory_file": TRAJECTORY}
    assert trajectory_for_event(run_dir, data) is not None
    _replace(run_dir / TRAJECTORY, "symlink", outside)
    assert trajectory_for_event(run_dir, data) is None
    _replace(run_dir / TRAJECTORY, "fifo")
    assert trajectory_for_event(run_dir, data) is None


def test_open_run_file_rules(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "sub").mkdir(parents=True)
    (run / "sub" / "a.txt").write_bytes(b"abc")
    (run / "inner-link").symlink_to("sub/a.txt")  # a symlink that stays inside is followed
    assert read_run_file(run, "sub/a.txt", max_bytes=3) == b"abc"
    assert read_run_file(run, "inner-link", max_bytes=3) == b"abc"
    linked_run = tmp_path / "latest"
    linked_run.symlink_to(run, target_is_directory=True)  # the run directory itself may be reached by a link
    assert read_run_file(linked_run, "sub/a.txt", max_bytes=3) == b"abc"
    for bad in ("../run/sub/a.txt", "/etc/passwd", "", "."):
        with pytest.raises(RunFileRefused, match="outside the run directory"):
            read_run_file(run, bad, max_bytes=10)
    with pytest.raises(RunFileRefused, match="over the limit of 2"):
        read_run_file(run, "sub/a.txt", max_bytes=2)
    with pytest.raises(RunFileRefused, match="directory"):
        read_run_file(run, "sub", max_bytes=10)
    with pytest.raises(FileNotFoundError):
        read_run_file(run, "missing.json", max_bytes=10)
    with open_run_file(run, "sub/a.txt", max_bytes=3) as handle, (run / "sub" / "a.txt").open("ab") as grow:
        grow.write(b"more")  # grows after the check: reading stops at the limit
        grow.flush()
        with pytest.raises(RunFileRefused, match="grew past"):
            handle.read()

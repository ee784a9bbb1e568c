"""``arena run --resume`` end to end: kill -9 of ``arena run`` (its agents go down with it) or of the green agent in
the middle of the seeded flaky demo, then resume: the final summary equals an uninterrupted run's, attempt by
attempt. And the refusals a resume makes before starting anything (exit 2, nothing overwritten; a finished battle
exits 0)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from launcher_test_helpers import REPO, attempts_on_disk, ours, subprocess_environment, wait_for

DEMO = REPO / "scenarios" / "offline_demo.toml"
KILL_AFTER = 8
"""Attempts on disk before the kill (of the demo's 20)."""


def arena(*args: str, runs: Path) -> list[str]:
    return [sys.executable, "-m", "launcher", "run", *args, "--runs-dir", str(runs), "-q"]


def run_to_end(argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**subprocess_environment(), "COLUMNS": "200"}
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)


def outcome_view(summary: dict[str, Any]) -> dict[str, Any]:
    """Everything a reader takes from a summary, minus times, ports and context ids."""
    return {
        "summary": summary["summary"],
        "failure_breakdown": summary["failure_breakdown"],
        "infrastructure_errors": summary["infrastructure_errors"],
        "status": summary["status"],
        "attempts": [
            (
                a["task_index"],
                a["attempt"],
                a["outcome"],
                a["reward"],
                a["steps"],
                a["termination_reason"],
                (a["failure"] or {}).get("category"),
            )
            for a in summary["attempts"]
        ],
    }


def read_summary(run_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    return data


@pytest.fixture(scope="module")
def reference_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run directory of the demo run without interruption."""
    runs = tmp_path_factory.mktemp("reference")
    done = run_to_end(arena(str(DEMO), "--battle-id", "whole", runs=runs))
    assert done.returncode == 0, done.stdout + done.stderr
    return runs / "whole"


@pytest.fixture(scope="module")
def reference(reference_dir: Path) -> dict[str, Any]:
    """The demo's summary without interruption."""
    return read_summary(reference_dir)


def start_and_kill(runs: Path, battle_id: str, victim: str) -> tuple[int, str]:
    """Start the demo, wait for KILL_AFTER attempts on disk, kill -9 ``victim`` (``arena`` or ``green``)."""
    env = {**subprocess_environment(), "COLUMNS": "200"}
    proc = subprocess.Popen(
        arena(str(DEMO), "--battle-id", battle_id, runs=runs),
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    run_dir = runs / battle_id
    try:
        wait_for(lambda: attempts_on_disk(run_dir) >= KILL_AFTER, 300, f"{KILL_AFTER} attempts")
        if victim == "arena":
            proc.send_signal(signal.SIGKILL)
        else:
            # The green agent itself, not its scoring workers (forked: same command line, the green agent as parent).
            greens = [p for p in ours(runs) if "green_agent" in " ".join(p.cmdline()) and p.ppid() == proc.pid]
            assert len(greens) == 1, greens
            greens[0].send_signal(signal.SIGKILL)
        output, _ = proc.communicate(timeout=120)
        wait_for(lambda: not ours(runs), 60, "the run's agents to exit")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for child in ours(runs):
            child.kill()
    return proc.returncode, output


@pytest.mark.slow
def test_kill_9_of_arena_run_then_resume_ends_with_the_uninterrupted_summary(
    reference: dict[str, Any], reference_dir: Path, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    start_and_kill(runs, "cut", "arena")
    run_dir = runs / "cut"
    # The agents got SIGTERM when arena run died: the green agent abandoned its attempts in flight and wrote a
    # partial summary of exactly what is on disk.
    partial = read_summary(run_dir)
    assert partial["status"] == "interrupted"
    on_disk = attempts_on_disk(run_dir)
    assert len(partial["attempts"]) == on_disk >= KILL_AFTER

    resumed = run_to_end(arena(str(DEMO), "--resume", runs=runs))  # the newest unfinished run of the scenario
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"resuming battle cut: {on_disk} attempt(s) on disk" in resumed.stdout
    final = read_summary(run_dir)
    assert final["resumed_attempts"] == on_disk
    assert outcome_view(final) == outcome_view(reference)
    assert len(list((run_dir / "trajectories").glob("*.jsonl"))) == 20
    assert attempts_on_disk(run_dir) == 20

    # arena compare of the resumed run against the uninterrupted one: the same numbers, task by task.
    env = {**subprocess_environment(), "COLUMNS": "200"}
    argv = [sys.executable, "-m", "launcher", "compare", str(run_dir), str(reference_dir), "--json"]
    compared = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert compared.returncode == 0, compared.stderr
    report = json.loads(compared.stdout)
    assert report["verdict"]["outcome"] == "no_difference"
    # Five tasks: the exact sign-flip test has 32 patterns and cannot reject at 95% two-sided, so its interval is the
    # whole range; what must hold is a zero difference inside it and no task that flipped.
    verdict = report["verdict"]
    assert verdict["diff"] == 0.0
    assert verdict["ci_low"] <= 0.0 <= verdict["ci_high"]
    assert report["flips"] == {"better_in_a": [], "better_in_b": []}
    assert report["unmatched"] == {"only_in_a": [], "only_in_b": []}


@pytest.mark.slow
def test_kill_9_of_the_green_agent_then_resume_ends_with_the_uninterrupted_summary(
    reference: dict[str, Any], tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    returncode, output = start_and_kill(runs, "green-died", "green")
    assert returncode == 3, output  # a harness error
    assert "resume with: arena run" in output and "--resume --battle-id green-died" in output
    run_dir = runs / "green-died"
    assert not (run_dir / "summary.json").exists()  # killed -9: no summary, only the durable attempts
    on_disk = attempts_on_disk(run_dir)

    resumed = run_to_end(arena(str(DEMO), "--resume", "--battle-id", "green-died", runs=runs))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    final = read_summary(run_dir)
    assert final["resumed_attempts"] == on_disk >= KILL_AFTER
    assert outcome_view(final) == outcome_view(reference)


@pytest.mark.slow
def test_resume_refusals_start_nothing_and_overwrite_nothing(reference: dict[str, Any], tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    # A directory with a summary but no run.json (e.g. written by an older version).
    finished = runs / "done"
    finished.mkdir(parents=True)
    (finished / "summary.json").write_text(json.dumps(reference), encoding="utf-8")
    before = (finished / "summary.json").read_bytes()

    no_manifest = run_to_end(arena(str(DEMO), "--resume", "--battle-id", "done", runs=runs))
    assert no_manifest.returncode == 2
    assert "is not an Arena run directory: no run.json" in no_manifest.stdout

    assert run_to_end(arena(str(DEMO), "--resume", "--battle-id", "absent", runs=runs)).returncode == 2
    nothing = run_to_end(arena(str(DEMO), "--resume", runs=runs))
    assert nothing.returncode == 2 and "no unfinished run of scenario 'offline-demo'" in nothing.stdout
    retry_alone = run_to_end(arena(str(DEMO), "--retry-infra", runs=runs))
    assert retry_alone.returncode == 2 and "--retry-infra: only with --resume" in retry_alone.stdout
    taken = run_to_end(arena(str(DEMO), "--battle-id", "done", runs=runs))
    assert taken.returncode == 2 and "already holds a finished battle" in taken.stdout
    assert (finished / "summary.json").read_bytes() == before
    assert not ours(runs)


@pytest.fixture
def finished_run(reference_dir: Path, tmp_path: Path) -> Path:
    """A runs directory holding a copy of the real finished demo run (manifest, attempts, summary, scenario)."""
    runs = tmp_path / "runs"
    shutil.copytree(reference_dir, runs / "copy", ignore=shutil.ignore_patterns("logs"))
    return runs


@pytest.mark.slow
def test_resume_of_a_finished_battle_says_so_and_a_changed_scenario_is_refused_naming_the_fields(
    finished_run: Path, tmp_path: Path
) -> None:
    runs = finished_run
    summary = (runs / "copy" / "summary.json").read_bytes()
    again = run_to_end(arena(str(DEMO), "--resume", "--battle-id", "copy", runs=runs))
    assert again.returncode == 0, again.stdout
    assert "battle copy already finished (20 attempts); nothing to resume" in again.stdout
    assert (runs / "copy" / "summary.json").read_bytes() == summary

    changed = tmp_path / "changed.toml"
    text = DEMO.read_text(encoding="utf-8").replace("seed = 199", "seed = 7").replace("k = 4", "k = 2")
    changed.write_text(text, encoding="utf-8")
    # Make the stored battle unfinished, so the scenario check is what refuses it.
    (runs / "copy" / "summary.json").unlink()
    refused = run_to_end(arena(str(changed), "--resume", "--battle-id", "copy", runs=runs))
    assert refused.returncode == 2, refused.stdout
    assert "k: 4 -> 2" in refused.stdout and "white_agent.seed: 199 -> 7" in refused.stdout
    assert not (runs / "copy" / "summary.json").exists()

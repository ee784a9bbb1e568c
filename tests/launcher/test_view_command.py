"""``arena view RUN_DIR``: the import file built from a real run equals what the green agent posts live, the backend
accepts it, and the command serves the battle and attempt pages and leaves nothing behind.

One real battle per module (``arena run``, flaky white agent with faults, scripted user: offline, ~30-60 s); the
interrupted and crashed variants are copies of it with files removed or rewritten.
"""

from __future__ import annotations

import html
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import typer
from launcher_test_helpers import REPO, subprocess_environment, wait_gone
from typer.testing import CliRunner

from battle_backend.battles.imports import load_import_file
from battle_backend.settings import BackendSettings
from green_agent.engine.events import BattleEvent
from green_agent.engine.results import BattleResult
from green_agent.engine.run_store import read_events
from green_agent.service.running_battles import backend_sink
from green_agent.wire.backend_posts import ProgressPost, result_post
from green_agent.wire.trajectory import read_trajectory
from launcher.cli.view_command import EXIT_NOT_A_RUN, view_command
from launcher.cli.view_import import IMPORT_SCHEMA, RunDirError, build_import, write_import
from launcher.ports import free_port

BATTLE = "view-e2e"
SCENARIO = """
name = "view e2e"

[pass_k_config]
mode = "manual"
k = 2
domain = "retail"
task_index = [10, 12]
split = "test"
seed = 0
concurrency = 4
calibration = true

[user_simulator]
kind = "scripted"

[white_agent]
kind = "flaky"
seed = 199

[white_agent.fault_rates]
skip_action = 0.3
wrong_argument = 0.3
"""
VIEW_APP = (
    "import typer; from launcher.cli.view_command import view_command; "
    "app = typer.Typer(); app.command()(view_command); app()"
)
"""``arena view`` as its own program (the lead registers the command in launcher.cli.app)."""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished battle's run directory, made by ``arena run``."""
    root = tmp_path_factory.mktemp("view")
    scenario = root / "scenario.toml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    argv = [sys.executable, "-m", "launcher", "run", str(scenario), "--runs-dir", str(root / "runs")]
    done = subprocess.run(
        [*argv, "--battle-id", BATTLE, "--quiet"],
        cwd=REPO,
        env=subprocess_environment(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return root / "runs" / BATTLE


def local_app() -> typer.Typer:
    app = typer.Typer()
    app.command()(view_command)
    return app


def copy_run(run_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / BATTLE
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("logs"))
    return copy


def accepted_by_the_backend(document: dict[str, Any], tmp_path: Path) -> tuple[list[dict[str, Any]], Any]:
    """The backend's own loader reads the file (it refuses what the API would refuse)."""
    path = tmp_path / "import.json"
    write_import(document, path)
    _, events, result = load_import_file(path, BackendSettings())
    return events, result


async def test_the_import_file_holds_the_bodies_the_green_agent_posts_live(run_dir: Path, tmp_path: Path) -> None:
    run = build_import(run_dir)
    document = run.document
    assert document["schema"] == IMPORT_SCHEMA and run.status == "completed" and not run.warnings
    battle = document["battle"]
    assert battle["battle_id"] == BATTLE
    assert battle["opponents"][0]["name"] == "white_agent" and battle["opponents"][0]["alias"] == "white agent (flaky)"
    # What the live sink posts for the same events (the backend sink of the registry, trajectories included).
    live: list[ProgressPost] = []

    class Reporter:
        def progress(self, message: str, *, detail: dict[str, Any], markdown_content: str | None = None) -> None:
            live.append(ProgressPost(message, detail, markdown_content))

    sink = backend_sink(Reporter(), run_dir)  # type: ignore[arg-type]
    raw_events = read_events(run_dir)
    for raw in raw_events:
        await sink(BattleEvent.model_validate(raw))
    assert len(document["events"]) == len(raw_events) == run.events
    for body, post, raw in zip(document["events"], live, raw_events, strict=True):
        assert body == post.body(raw["timestamp"])
    finished = [body for body in document["events"] if body["detail"]["type"] == "attempt_finished"]
    assert len(finished) == run.attempts == run.trajectories == 4
    for body in finished:
        detail = body["detail"]
        name = f"retail-test-{int(detail['task_key'].rsplit('/', 1)[1]):04d}-attempt{detail['attempt']:02d}.jsonl"
        assert detail["trajectory"] == read_trajectory(run_dir / "trajectories" / name)
    summary = BattleResult.model_validate_json((run_dir / "summary.json").read_bytes())
    markdown = (run_dir / "summary.md").read_text(encoding="utf-8")
    expected = result_post(summary, markdown, "white_agent").body(summary.finished_at)
    assert document["result"] == expected
    events, result = accepted_by_the_backend(document, tmp_path)
    assert len(events) == run.events and result is not None and result["winner"] == expected["winner"]


def test_an_interrupted_run_shows_its_events_without_a_result(run_dir: Path, tmp_path: Path) -> None:
    copy = copy_run(run_dir, tmp_path)
    summary = json.loads((copy / "summary.json").read_text(encoding="utf-8"))
    (copy / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}), encoding="utf-8")
    run = build_import(copy)
    assert run.status == "interrupted" and run.document["result"] is None
    assert run.events == len(read_events(copy)) and run.trajectories == 4
    events, result = accepted_by_the_backend(run.document, tmp_path)
    assert result is None and len(events) == run.events


def test_a_run_stopped_before_its_summary_is_rebuilt_from_its_attempts(run_dir: Path, tmp_path: Path) -> None:
    copy = copy_run(run_dir, tmp_path)
    for name in ("summary.json", "summary.md", "events.jsonl"):
        (copy / name).unlink()
    run = build_import(copy)
    types = [body["detail"]["type"] for body in run.document["events"]]
    assert types == ["battle_started", *["attempt_finished"] * 4, "log"]
    assert run.status == "unfinished" and run.document["result"] is None
    assert run.trajectories == 4 and run.warnings
    first = run.document["events"][1]["detail"]
    assert {"task_key", "attempt", "outcome", "reward", "category", "done", "total", "trajectory_file"} <= set(first)
    accepted_by_the_backend(run.document, tmp_path)


def test_a_directory_that_is_not_a_run_is_refused_naming_what_is_missing(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(RunDirError, match=r"no run\.json nor summary\.json"):
        build_import(empty)
    runner = CliRunner()
    outcome = runner.invoke(local_app(), [str(empty)])
    assert outcome.exit_code == EXIT_NOT_A_RUN
    assert "run.json" in outcome.output and "summary.json" in outcome.output
    outcome = runner.invoke(local_app(), [str(tmp_path / "absent")])
    assert outcome.exit_code == EXIT_NOT_A_RUN and "no such directory" in outcome.output
    (empty / "run.json").write_text("{}", encoding="utf-8")
    outcome = runner.invoke(local_app(), [str(empty)])
    assert outcome.exit_code == EXIT_NOT_A_RUN and "run.json" in outcome.output


def wait_for_line(proc: subprocess.Popen[str], prefix: str, timeout_s: float) -> str:
    """The first stdout line starting with ``prefix`` (the command's own output; fails with what it printed)."""
    deadline = time.monotonic() + timeout_s
    seen: list[str] = []
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if line.startswith(prefix):
            return line.strip()
    raise AssertionError(f"no {prefix!r} line; output: {''.join(seen)}")


def test_arena_view_serves_the_battle_and_an_attempt_until_ctrl_c(run_dir: Path) -> None:
    port = free_port()
    argv = [sys.executable, "-c", VIEW_APP, str(run_dir), "--port", str(port)]
    with subprocess.Popen(
        argv, cwd=REPO, env={**subprocess_environment(), "COLUMNS": "200"}, stdout=subprocess.PIPE, text=True
    ) as proc:
        children: list[int] = []
        try:
            check_view(proc, port, run_dir, children)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for pid in wait_gone(children, timeout_s=5):
                psutil.Process(pid).kill()


def check_view(proc: subprocess.Popen[str], port: int, run_dir: Path, children: list[int]) -> None:
    """The page and an attempt answer while it serves; Ctrl-C stops it, its backend and its temporary files."""
    line = wait_for_line(proc, "battle page: ", timeout_s=120)
    url = line.removeprefix("battle page: ")
    assert url == f"http://127.0.0.1:{port}/ui/battles/{BATTLE}"
    children.extend(child.pid for child in psutil.Process(proc.pid).children(recursive=True))
    workdirs = {
        Path(part).parent for pid in children for part in psutil.Process(pid).cmdline() if part.endswith("view.sqlite3")
    }
    assert len(children) >= 1 and len(workdirs) == 1
    with httpx.Client(timeout=30, trust_env=False) as client:
        page = client.get(url)
        assert page.status_code == 200 and BATTLE in page.text
        failed = next(
            body["detail"]
            for body in build_import(run_dir).document["events"]
            if body["detail"]["type"] == "attempt_finished" and body["detail"]["outcome"] != "success"
        )
        attempt = client.get(f"{url}/attempts/{failed['task_key']}/{failed['attempt']}")
        assert attempt.status_code == 200
        said = next(m["content"] for m in failed["trajectory"]["messages"] if m["role"] == "user")
        assert said[:40] in html.unescape(attempt.text)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 0
    assert proc.stdout is not None and "stopped" in proc.stdout.read()
    assert wait_gone(children) == []
    assert not any(workdir.exists() for workdir in workdirs)


async def test_a_folder_holding_the_run_is_a_runs_home_the_backend_accepts(run_dir: Path, tmp_path: Path) -> None:
    """A real run (trajectories, events, run.json) in a folder beside a run stopped before its summary."""
    from battle_backend.__main__ import import_into_store
    from launcher.cli.runs_home import build_home

    folder = tmp_path / "runs"
    copy_run(run_dir, folder)
    stopped = folder / "stopped"
    shutil.copytree(run_dir, stopped, ignore=shutil.ignore_patterns("logs", "summary.*", "events.jsonl"))
    manifest = json.loads((stopped / "run.json").read_text(encoding="utf-8"))
    (stopped / "run.json").write_text(json.dumps({**manifest, "battle_id": "view-e2e-stopped"}), encoding="utf-8")
    workdir = tmp_path / "work"
    workdir.mkdir()
    built = build_home(folder, workdir)
    assert built.runs == 2 and built.skipped == [] and built.refusals == 1
    settings = BackendSettings(db_path=tmp_path / "db.sqlite3")
    reports = await import_into_store(settings, built.files)
    home = next(report.runs_home for report in reports if report.runs_home is not None)
    rows = {run.battle_id: run for run in home.runs}
    finished, running = rows[BATTLE], rows["view-e2e-stopped"]
    summary = BattleResult.model_validate_json((run_dir / "summary.json").read_bytes())
    assert finished.status == "finished" and finished.k == 2 and finished.tasks == 2 and finished.calibration
    assert finished.pass_hat == summary.summary.macro[1].pass_hat_mean and finished.fingerprint
    assert running.status == "running" and running.pass_hat is None and running.attempts == 4
    assert sorted(report.state for report in reports) == ["error", "finished", "home"]
    (refusal,) = [c.refusal for c in home.comparisons]
    assert refusal is not None and "summary.json" in refusal

"""``arena run`` overrides (``--k``, ``--tasks``, ``--num-tasks``, ``--domain``, ``--concurrency``, ``--seed``,
``--split``, ``--agent``) and the scenario-less form, through the CLI.

- each flag lands in the battle's configuration (the options ``arena run`` parses, prepared as the run would be);
- each flag's bad value is refused with exit 2, naming the flag and the field, before anything starts;
- a real battle with overrides records them (scenario.json ``overrides``, scenario.toml), a ``--resume`` with other
  overrides is refused like a changed scenario and with the same ones it resumes;
- ``arena run --domain retail --agent URL`` runs without a scenario file (scripted user, mode all unless --tasks).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

import launcher.cli.run_command as run_command
from launcher.cli.app import app
from launcher.cli.run_command import PreparedRun, RunOptions, RunReport, prepare_run
from launcher.cli.run_overrides import RunOverrides, load_run_scenario, parse_task_spec, scenario_toml
from launcher.cli.scenario import load_scenario
from launcher.ports import free_port, loopback_url

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "scenarios" / "offline_demo.toml"
runner = CliRunner()

needs_agents = pytest.mark.skipif(
    importlib.util.find_spec("green_agent.service.a2a_server") is None
    or importlib.util.find_spec("white_agent") is None,
    reason="needs the green agent and the white agents",
)


def prepared_by_cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *args: str) -> PreparedRun:
    """Parse ``arena run ARGS`` as the CLI does and prepare the run (no process starts)."""
    seen: list[PreparedRun] = []

    async def fake_execute(options: RunOptions, console: object) -> RunReport:
        seen.append(prepare_run(options))
        return RunReport(0)

    monkeypatch.setattr(run_command, "execute_run", fake_execute)
    done = runner.invoke(app, ["run", *args, "--runs-dir", str(tmp_path / "runs")])
    assert done.exit_code == 0, done.output
    return seen[0]


@pytest.mark.parametrize(
    ("flags", "field", "expected"),
    [
        (["--k", "8"], "k", 8),
        (["--num-trials", "6"], "k", 6),
        (["--tasks", "0-3,12"], "task_index", [0, 1, 2, 3, 12]),
        (["--num-tasks", "5"], "num_tasks", 5),
        (["--domain", "airline"], "domain", "airline"),
        (["--concurrency", "2"], "concurrency", 2),
        (["--seed", "42"], "seed", 42),
        (["--split", "train"], "split", "train"),
    ],
)
def test_each_override_sets_its_field(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, flags: list[str], field: str, expected: Any
) -> None:
    prepared = prepared_by_cli(monkeypatch, tmp_path, str(DEMO), *flags)
    config = prepared.scenario.pass_k_config
    assert getattr(config, field) == expected
    demo = load_scenario(DEMO).pass_k_config
    assert getattr(demo, field) != expected  # the override changed something
    assert list(prepared.overrides) == ["--k" if flags[0] == "--num-trials" else flags[0]]  # what scenario.json keeps
    assert prepared.scenario_file == prepared.run_dir / "scenario.toml"
    mode = {"task_index": "manual", "num_tasks": "random"}.get(field, demo.mode)
    assert config.mode == mode


def test_no_override_keeps_the_scenario_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    prepared = prepared_by_cli(monkeypatch, tmp_path, str(DEMO))
    assert prepared.scenario == load_scenario(DEMO) and prepared.overrides == {}
    assert prepared.scenario_file == DEMO


def test_agent_makes_the_white_agent_external_and_the_scenario_optional(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = "http://127.0.0.1:9004"
    prepared = prepared_by_cli(monkeypatch, tmp_path, "--domain", "airline", "--agent", url, "--k", "2")
    scenario = prepared.scenario
    assert (scenario.white_agent.kind, scenario.white_agent.url) == ("external", url)
    config = scenario.pass_k_config
    assert (config.mode, config.domain, config.k, config.user_simulator.kind) == ("all", "airline", 2, "scripted")
    assert scenario.name == "airline" and prepared.battle_id.startswith("airline-")
    with_file = prepared_by_cli(monkeypatch, tmp_path, str(DEMO), "--agent", url)
    assert with_file.scenario.white_agent.kind == "external" and with_file.scenario.pass_k_config.k == 4


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--k", "3"], "--k: pass_k_config.k: k must be even"),
        (["--num-trials", "0"], "--k: pass_k_config.k: k must be even"),
        (["--tasks", "0-2,x"], "--tasks: 'x' is not a task index"),
        (["--tasks", "0-99"], "--tasks: pass_k_config.task_index: task_index 40 is out of range"),
        (["--tasks", "2,2"], "--tasks: task 2 is listed more than once"),
        (["--tasks", "5-1"], "--tasks: the range '5-1' ends before it starts"),
        (["--tasks", "0-999999999"], "--tasks: at most 10000 tasks"),
        (["--num-tasks", "0"], "--num-tasks: pass_k_config.num_tasks:"),
        (["--num-tasks", "1000"], "--num-tasks: pass_k_config.num_tasks: num_tasks 1000 is more than"),
        (["--num-tasks", "2", "--tasks", "1"], "--tasks, --num-tasks: give one"),
        (["--domain", "nowhere"], "--domain: pass_k_config.domain: unknown domain 'nowhere'"),
        (["--concurrency", "0"], "--concurrency: pass_k_config.concurrency:"),
        (["--concurrency", "100000"], "--concurrency: pass_k_config.concurrency:"),
        (["--seed", "-1"], "--seed: pass_k_config.seed:"),
        (["--split", "nope"], "--split: pass_k_config.split: split 'nope' is unknown for retail"),
        (["--agent", "ftp://x"], "--agent: white_agent.url:"),
    ],
)
def test_a_bad_override_exits_2_naming_the_flag_and_the_field(tmp_path: Path, flags: list[str], expected: str) -> None:
    done = runner.invoke(app, ["run", str(DEMO), *flags, "--runs-dir", str(tmp_path / "runs")])
    assert done.exit_code == 2, done.output
    assert expected in " ".join(done.output.split()), done.output
    assert not (tmp_path / "runs").exists()  # refused before anything starts


def test_without_a_scenario_the_agent_is_required(tmp_path: Path) -> None:
    done = runner.invoke(app, ["run", "--k", "2", "--runs-dir", str(tmp_path / "runs")])
    assert done.exit_code == 2
    assert "SCENARIO: give a scenario file, or --agent URL" in " ".join(done.output.split())


def test_task_specs() -> None:
    assert parse_task_spec("0-9,12") == [*range(10), 12]
    assert parse_task_spec(" 3 , 1 ") == [3, 1]
    assert parse_task_spec("7-7") == [7]


def test_the_written_scenario_reads_back_as_the_same_scenario(tmp_path: Path) -> None:
    overrides = RunOverrides(k=2, tasks="1,3", seed=5)
    scenario = load_run_scenario(DEMO, overrides)
    path = tmp_path / "scenario.toml"
    path.write_text(scenario_toml(scenario), encoding="utf-8")
    assert load_scenario(path) == scenario
    assert tomllib.loads(path.read_text(encoding="utf-8"))["pass_k_config"]["task_index"] == [1, 3]


# ------------------------------------------------------------------------------------------- real battles


def arena_run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "launcher", "run", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@needs_agents
@pytest.mark.slow
def test_overrides_are_recorded_and_checked_by_resume(tmp_path: Path) -> None:
    flags = ["--k", "2", "--tasks", "7,9", "--concurrency", "2", "-q"]
    done = arena_run(tmp_path, str(DEMO), *flags, "--seed", "3", "--battle-id", "ov")
    assert done.returncode == 0, done.stdout + done.stderr
    run_dir = tmp_path / "runs" / "ov"
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert (summary["config"]["k"], summary["config"]["task_index"], summary["config"]["seed"]) == (2, [7, 9], 3)
    record = json.loads((run_dir / "scenario.json").read_text(encoding="utf-8"))
    assert record["overrides"] == {"--k": 2, "--tasks": "7,9", "--concurrency": 2, "--seed": 3}
    assert load_scenario(run_dir / "scenario.toml").pass_k_config.task_index == [7, 9]

    other = arena_run(tmp_path, str(DEMO), *flags, "--seed", "4", "--resume", "--battle-id", "ov")
    assert other.returncode == 2, other.stdout + other.stderr
    assert "seed: 3 -> 4" in " ".join(other.stdout.split())
    same = arena_run(tmp_path, str(DEMO), *flags, "--seed", "3", "--resume", "--battle-id", "ov")
    assert same.returncode == 0 and "already finished" in same.stdout, same.stdout + same.stderr


@pytest.fixture
def replay_agent(tmp_path: Path) -> Iterator[str]:
    """A reference white agent (replay) served on a free loopback port: an external agent under test."""
    port = free_port()
    url = loopback_url(port)
    argv = [sys.executable, "-m", "white_agent", "--kind", "replay", "--host", "127.0.0.1", "--port", str(port)]
    log = (tmp_path / "white.log").open("w")
    proc = subprocess.Popen([*argv, "--card-url", url], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(url + "/.well-known/agent-card.json", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "the white agent did not start"
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


@needs_agents
@pytest.mark.slow
def test_a_battle_without_a_scenario_file(tmp_path: Path, replay_agent: str) -> None:
    done = arena_run(tmp_path, "--domain", "retail", "--agent", replay_agent, "--k", "2", "--tasks", "0", "-q")
    assert done.returncode in (0, 1), done.stdout + done.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert run_dir.name.startswith("retail-")
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert summary["config"]["user_simulator"]["kind"] == "scripted" and summary["config"]["k"] == 2
    assert summary["status"] == "completed"
    record = json.loads((run_dir / "scenario.json").read_text(encoding="utf-8"))
    assert record["overrides"]["--agent"] == replay_agent

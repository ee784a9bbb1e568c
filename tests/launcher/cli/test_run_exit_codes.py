"""``arena run``'s exit codes and endings through the CLI, as a user or a CI job meets them.

- 4: an external agent under test nobody serves is found before the battle (the green agent never starts), named;
- 5: an LLM user whose endpoint answers 500 makes every attempt an infrastructure error: nothing was measured;
- 1 / 0: ``--fail-under`` (point estimate) and ``--fail-under-lower`` (the interval's lower bound) on the offline
  demo, checked against the figures its summary.json holds;
- the demo's verdict fits one 80x25 screen; ``-q`` prints one line; ``--json`` prints one parseable object;
- ``--backend local`` ends the same way (4 before anything starts; the gates, with the battle page in the verdict).

(2 and 3 are in tests/launcher/test_cli_run.py and tests/launcher/cli/test_run_verdict.py; 130 in test_cli_run.py.)
The battles are real (green and white agents as subprocesses, scripted user, offline) except the unreachable one.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from launcher.ports import free_port, loopback_url
from tests.support.fake_openai import error_reply, fake_state, make_fake_openai
from tests.support.servers import serve_app

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "scenarios" / "offline_demo.toml"
FAKE_AGENTS = REPO / "tests" / "launcher"

needs_agents = pytest.mark.skipif(
    importlib.util.find_spec("green_agent.service.a2a_server") is None
    or importlib.util.find_spec("white_agent") is None,
    reason="needs the green agent and the white agents",
)


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"COLUMNS", "LINES"}}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(FAKE_AGENTS), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**env, **extra}


def arena_run(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``arena run ARGS`` in ``cwd`` (so run directories are relative, as a user's are); output captured apart."""
    return subprocess.run(
        [sys.executable, "-m", "launcher", "run", *args],
        cwd=cwd,
        env=env or environment(COLUMNS="80"),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def figures(run_dir: Path) -> dict[str, Any]:
    """The demo's figures straight from its summary.json (what the gates must agree with)."""
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    rows = {row["j"]: row for row in summary["summary"]["macro"]}
    return {"pass^1": rows[1], "pass^4": rows[4], "pooled": summary["summary"]["micro"], "summary": summary}


def only_run_dir(runs: Path) -> Path:
    (run_dir,) = [p for p in runs.iterdir() if p.is_dir()]
    return run_dir


# ------------------------------------------------------------------------------------------- 4: agent unreachable


def test_an_agent_nobody_serves_exits_4_naming_it_before_the_green_agent_starts(tmp_path: Path) -> None:
    url = loopback_url(free_port())  # nobody listens here
    scenario = tmp_path / "external.toml"
    scenario.write_text(f'[white_agent]\nkind = "external"\nurl = "{url}"\n', encoding="utf-8")
    pidfile = tmp_path / "green.pid"
    done = arena_run(
        tmp_path,
        str(scenario),
        "--green-module",
        "arena_fake_green",
        env=environment(FAKE_GREEN_PIDFILE=str(pidfile), COLUMNS="200"),
    )
    assert done.returncode == 4, done.stdout + done.stderr
    assert f"the agent under test at {url}" in done.stdout and "unreachable" in done.stdout
    assert not pidfile.exists()  # the green agent was never started
    assert not (tmp_path / "runs").exists()  # no battle, no run directory, no "resume with" hint
    assert "resume" not in done.stdout


# ------------------------------------------------------------------------------------------- 5: nothing measured


@needs_agents
async def test_every_attempt_an_infrastructure_error_exits_5(tmp_path: Path) -> None:
    fake = make_fake_openai(lambda _request: error_reply(500, "the model provider is down"))
    async with serve_app(fake) as llm:
        scenario = tmp_path / "llm-user-down.toml"
        scenario.write_text(
            f"""
name = "llm user down"
[pass_k_config]
mode = "manual"
k = 2
domain = "retail"
task_index = 9
concurrency = 2

[user_simulator]
kind = "llm"
model = "user-model"
base_url = "{llm}/v1"
api_key_env = "ARENA_TEST_USER_KEY"
max_retries = 0

[white_agent]
kind = "replay"
""",
            encoding="utf-8",
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "launcher",
            "run",
            str(scenario),
            "--json",
            cwd=tmp_path,
            env=environment(ARENA_TEST_USER_KEY="sk-test-not-a-real-key", COLUMNS="80"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout=600)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert fake_state(fake).requests, "the user simulator never called its endpoint"
    output = stdout.decode() + stderr.decode()
    assert proc.returncode == 5, output
    verdict = json.loads(stdout)
    assert (verdict["outcome"], verdict["exit_code"]) == ("nothing_measured", 5)
    assert verdict["attempts"] == verdict["infrastructure_errors"] == 2
    assert "infrastructure errors" in verdict["error"]
    summary = json.loads((only_run_dir(tmp_path / "runs") / "summary.json").read_text(encoding="utf-8"))
    assert [a["outcome"] for a in summary["attempts"]] == ["infra_error", "infra_error"]


# ------------------------------------------------------------------------------------- the demo: gates, -q, --json


def screen_rows(lines: list[str], width: int = 80) -> int:
    """Rows these lines take on a terminal ``width`` columns wide (a longer line wraps)."""
    return sum(max(1, math.ceil(len(line) / width)) for line in lines)


@needs_agents
def test_the_demo_ends_with_a_verdict_that_fits_one_80x25_screen_and_a_failed_gate_exits_1(tmp_path: Path) -> None:
    done = arena_run(tmp_path, str(DEMO), "--fail-under", "pass^4=0.5")
    run_dir = only_run_dir(tmp_path / "runs")
    pass4 = figures(run_dir)["pass^4"]["pass_hat_mean"]
    assert done.returncode == (1 if pass4 < 0.5 else 0), done.stdout + done.stderr
    assert done.returncode == 1  # the demo's flaky agent never passes a task 4 times out of 4
    lines = done.stdout.splitlines()
    (start,) = [i for i, line in enumerate(lines) if line.startswith("Arena pass^k evaluation: ")]
    verdict = lines[start:]
    assert screen_rows(verdict) <= 25, "\n".join(verdict)
    assert f"gate pass^4 estimate {pass4:.3f} >= 0.5: FAILED" in verdict
    assert "verdict: GATE FAILED (exit 1): pass^4" in verdict
    assert verdict[-1].startswith(f"summary: {Path('runs') / run_dir.name / 'summary.json'}  (")
    # The per-attempt detail is in summary.md, not on the terminal.
    assert "Attempt details" not in done.stdout and "Attempt details" in (run_dir / "summary.md").read_text()


@needs_agents
def test_quiet_prints_one_line_and_a_passed_gate_exits_0(tmp_path: Path) -> None:
    done = arena_run(tmp_path, str(DEMO), "-q", "--fail-under", "pass^1=0.3")
    run_dir = only_run_dir(tmp_path / "runs")
    pass1 = figures(run_dir)["pass^1"]["pass_hat_mean"]
    assert done.returncode == (0 if pass1 >= 0.3 else 1), done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    assert lines[0].startswith(f"{'COMPLETED' if done.returncode == 0 else 'GATE FAILED'}; {run_dir.name}; pass^4 ")
    assert lines[0].endswith(f"exit {done.returncode}; {Path('runs') / run_dir.name / 'summary.json'}")


@needs_agents
def test_json_prints_the_verdict_and_the_lower_bound_decides_its_gate(tmp_path: Path) -> None:
    done = arena_run(tmp_path, str(DEMO), "--json", "--fail-under", "pass^1=0.3", "--fail-under-lower", "pass^1=0.5")
    run_dir = only_run_dir(tmp_path / "runs")
    row = figures(run_dir)["pass^1"]
    verdict = json.loads(done.stdout)  # standard output holds the JSON and nothing else
    point, lower = verdict["gates"]
    assert (point["decided_by"], point["value"]) == ("estimate", row["pass_hat_mean"])
    assert (lower["decided_by"], lower["value"]) == ("lower", row["pass_hat_ci_low"])
    assert point["passed"] == (row["pass_hat_mean"] >= 0.3) and lower["passed"] == (row["pass_hat_ci_low"] >= 0.5)
    expected = 0 if point["passed"] and lower["passed"] else 1
    assert done.returncode == verdict["exit_code"] == expected, done.stderr
    # On the demo the point estimate (0.55) clears 0.5 while the interval's lower bound does not.
    assert row["pass_hat_ci_low"] < 0.5 <= row["pass_hat_mean"] and done.returncode == 1
    assert verdict["schema"] == "arena.run-verdict/1" and verdict["battle_id"] == run_dir.name
    assert {m["metric"] for m in verdict["metrics"]} >= {"pass^1", "pass^4", "pass@4", "pooled"}
    assert "Arena pass^k evaluation" not in done.stdout + done.stderr  # no text verdict with --json


# ------------------------------------------------------------------------------------------------ --backend runs


def test_backend_mode_checks_the_agent_under_test_first_too(tmp_path: Path) -> None:
    url = loopback_url(free_port())
    scenario = tmp_path / "external.toml"
    scenario.write_text(f'[white_agent]\nkind = "external"\nurl = "{url}"\n', encoding="utf-8")
    done = arena_run(tmp_path, str(scenario), "--backend", "local", "--json")
    assert done.returncode == 4, done.stdout + done.stderr
    verdict = json.loads(done.stdout)
    assert verdict["outcome"] == "agent_unreachable" and url in verdict["error"]
    assert not (tmp_path / "runs").exists()  # no backend, no agents, no run directory


@needs_agents
@pytest.mark.slow
def test_backend_mode_gates_and_reports_the_battle_page(tmp_path: Path) -> None:
    scenario = tmp_path / "replay.toml"
    scenario.write_text(
        '[pass_k_config]\nmode = "manual"\nk = 2\ndomain = "retail"\ntask_index = 0\ncalibration = true\n'
        '[white_agent]\nkind = "replay"\n',
        encoding="utf-8",
    )
    done = arena_run(
        tmp_path,
        str(scenario),
        "--backend",
        "local",
        "--json",
        "--fail-under",
        "pass^2=1",
        "--fail-under-lower",
        "pass^2=1",
    )
    verdict = json.loads(done.stdout)
    run_dir = Path(tmp_path / verdict["run_dir"])
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    (row,) = [row for row in summary["summary"]["macro"] if row["j"] == 2]
    point, lower = verdict["gates"]
    assert (point["value"], lower["value"]) == (row["pass_hat_mean"], row["pass_hat_ci_low"])
    # The replay agent passes every attempt: the point estimate is 1, an interval's lower bound is below 1.
    assert point["passed"] and not lower["passed"]
    assert done.returncode == verdict["exit_code"] == 1, done.stderr
    assert verdict["battle_url"].startswith("http://127.0.0.1:") and "/ui/battles/" in verdict["battle_url"]

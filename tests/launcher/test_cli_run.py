"""``arena run``: exit codes (0 / 2 / 3 / 130 / 143; the others in tests/launcher/cli/test_run_exit_codes.py),
summary path, and no process left behind.

The agents are fakes (tests/launcher/arena_fake_green.py, arena_fake_white.py) selected with the hidden
``--green-module`` / ``--white-module`` options, so these tests do not need tau2 or the real agents.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from launcher_test_helpers import REPO, http_server_argv, pid_alive, wait_gone, write_card_dir
from typer.testing import CliRunner

from launcher.cli.app import app
from launcher.cli.run_command import generate_battle_id, white_agent_argv
from launcher.ports import free_port, loopback_url

runner = CliRunner()

EXTERNAL_WHITE = f"""
[white_agent]
kind = "external"
url = "{loopback_url(9)}"
"""


@pytest.fixture
def static_agent(tmp_path: Path) -> Iterator[str]:
    """An external agent under test that serves a card (``arena run`` checks it before the battle); its URL."""
    port = free_port()
    url = loopback_url(port)
    directory = write_card_dir(tmp_path / "static-agent", url)
    proc = subprocess.Popen(http_server_argv(directory, port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/.well-known/agent-card.json", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "the static agent did not start"
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def external_white(url: str) -> str:
    return f'[white_agent]\nkind = "external"\nurl = "{url}"\n'


def write_scenario(tmp_path: Path, body: str, name: str = "scenario.toml") -> Path:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    return path


def run_in_process(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["run", *args])
    return result.exit_code, result.output


# ---------------------------------------------------------------------------------------------- configuration errors


def test_odd_k_exits_2_naming_the_field(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path, "[pass_k_config]\nk = 3\n")
    code, output = run_in_process(str(scenario), "--runs-dir", str(tmp_path / "runs"))
    assert code == 2
    assert "k must be even" in output
    assert "pass_k_config.k" in output
    assert not (tmp_path / "runs").exists()  # nothing started, nothing written


def test_unknown_domain_and_missing_file_exit_2(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path, '[pass_k_config]\ndomain = "shoes"\n')
    code, output = run_in_process(str(scenario))
    assert code == 2
    assert "unknown domain" in output and "retail" in output
    code, output = run_in_process(str(tmp_path / "nope.toml"))
    assert code == 2
    assert "no such scenario file" in output


def test_bad_battle_id_exits_2(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path, EXTERNAL_WHITE)
    code, output = run_in_process(str(scenario), "--battle-id", "../escape")
    assert code == 2
    assert "--battle-id" in output


def test_llm_user_without_key_is_refused_before_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ARENA_TEST_MISSING_KEY", raising=False)
    scenario = write_scenario(
        tmp_path, EXTERNAL_WHITE + '\n[user_simulator]\nkind = "llm"\napi_key_env = "ARENA_TEST_MISSING_KEY"\n'
    )
    code, output = run_in_process(str(scenario), "--runs-dir", str(tmp_path / "runs"))
    assert code == 2
    assert "ARENA_TEST_MISSING_KEY" in output
    assert not (tmp_path / "runs").exists()


def test_llm_white_agent_without_key_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ARENA_TEST_MISSING_KEY", raising=False)
    scenario = write_scenario(tmp_path, '[white_agent]\nkind = "llm"\napi_key_env = "ARENA_TEST_MISSING_KEY"\n')
    code, output = run_in_process(str(scenario))
    assert code == 2
    assert "white_agent.api_key_env" in output


# --------------------------------------------------------------------------------------------------- pure helpers


def test_white_argv_carries_settings_but_never_key_values() -> None:
    from launcher.cli.scenario import WhiteAgentConfig

    white = WhiteAgentConfig(kind="flaky", seed=7, fault_rates={"crash": 0.1, "skip_action": 0.25})
    argv = white_agent_argv(white, 5555, python="py")
    assert argv[:3] == ["py", "-m", "white_agent"]
    assert argv[argv.index("--kind") + 1] == "flaky"
    assert argv[argv.index("--seed") + 1] == "7"
    assert argv[argv.index("--card-url") + 1] == "http://127.0.0.1:5555"
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--fault-rate"] == ["crash=0.1", "skip_action=0.25"]
    llm = white_agent_argv(
        WhiteAgentConfig(kind="llm", model="m1", base_url="http://llm", api_key_env="K"), 1, python="py"
    )
    assert llm[llm.index("--api-key-env") + 1] == "K"
    assert llm[llm.index("--base-url") + 1] == "http://llm"


def test_generated_battle_ids_are_unique_and_path_safe() -> None:
    ids = {generate_battle_id("Retail: task 5!") for _ in range(20)}
    assert len(ids) == 20
    assert all(i.startswith("retail-task-5-") and "/" not in i for i in ids)


# ------------------------------------------------------------------------------------------- full runs (subprocess)


class ArenaRun:
    """``python -m launcher run`` in a subprocess with the fake agents on the path."""

    def __init__(self, tmp_path: Path, env: dict[str, str], mode: str = "ok") -> None:
        self.tmp_path = tmp_path
        self.runs = tmp_path / "runs"
        self.record = tmp_path / "green_request.json"
        self.green_pidfile = tmp_path / "green.pid"
        self.white_record = tmp_path / "white.json"
        self.env = {
            **env,
            "FAKE_GREEN_MODE": mode,
            "FAKE_GREEN_RECORD": str(self.record),
            "FAKE_GREEN_PIDFILE": str(self.green_pidfile),
            "FAKE_WHITE_RECORD": str(self.white_record),
            "COLUMNS": "200",
        }

    def argv(self, scenario: Path, *extra: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "launcher",
            "run",
            str(scenario),
            "--runs-dir",
            str(self.runs),
            "--green-module",
            "arena_fake_green",
            "--white-module",
            "arena_fake_white",
            *extra,
        ]

    def run(self, scenario: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(scenario, *extra),
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )

    def start(self, scenario: Path, *extra: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv(scenario, *extra),
            cwd=REPO,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def green_pid(self) -> int:
        return int(self.green_pidfile.read_text())


def test_completed_battle_exits_0_and_prints_summary_path(tmp_path: Path, subprocess_env: dict[str, str]) -> None:
    arena = ArenaRun(tmp_path, subprocess_env)
    scenario = write_scenario(
        tmp_path,
        '[pass_k_config]\nk = 4\ndomain = "retail"\ntask_id = 5\n'
        '[white_agent]\nkind = "flaky"\nseed = 3\nfault_rates = { crash = 0.5 }\n',
    )
    os.environ.setdefault("OPENAI_API_KEY", "")  # (not needed: scripted user, flaky white)
    done = arena.run(scenario, "--battle-id", "b-ok")
    assert done.returncode == 0, done.stdout + done.stderr
    summary = arena.runs / "b-ok" / "summary.json"
    assert summary.is_file()
    assert f"summary: {summary}" in done.stdout.replace("\n", "")
    # The verdict, not the markdown summary (per-task detail stays in summary.md): neither raw nor rendered.
    assert "Arena pass^k evaluation: b-ok" in done.stdout
    assert "Battle b-ok" not in done.stdout
    assert "Starting attempt 1/4" in done.stdout  # live progress lines

    request = json.loads(arena.record.read_text())
    white = json.loads(arena.white_record.read_text())
    assert request["battle_id"] == "b-ok"
    assert request["config"]["k"] == 4 and request["config"]["task_index"] == 5  # task_id in the scenario
    assert request["config"]["user_simulator"]["kind"] == "scripted"
    assert "backend_url" not in request
    assert request["participants"]["white_agent"] == white["argv"][white["argv"].index("--card-url") + 1]
    assert white["argv"][white["argv"].index("--kind") + 1] == "flaky"
    assert "crash=0.5" in white["argv"]
    # Child logs went to the run directory, and every child is gone.
    assert (arena.runs / "b-ok" / "logs" / "green_agent.stderr.log").exists()
    assert wait_gone([arena.green_pid(), white["pid"]], timeout_s=10) == []


def test_quiet_run_and_generated_battle_id(tmp_path: Path, subprocess_env: dict[str, str], static_agent: str) -> None:
    arena = ArenaRun(tmp_path, subprocess_env)
    scenario = write_scenario(tmp_path, 'name = "Quiet One"\n' + external_white(static_agent))
    done = arena.run(scenario, "--quiet", "--backend-url", "http://127.0.0.1:1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Starting attempt" not in done.stdout
    request = json.loads(arena.record.read_text())
    assert request["battle_id"].startswith("quiet-one-")
    assert request["backend_url"] == "http://127.0.0.1:1"
    assert request["participants"]["white_agent"] == static_agent
    assert (arena.runs / request["battle_id"] / "summary.json").is_file()


def test_green_agent_rejecting_the_config_exits_2(
    tmp_path: Path, subprocess_env: dict[str, str], static_agent: str
) -> None:
    arena = ArenaRun(tmp_path, subprocess_env, mode="reject")
    done = arena.run(write_scenario(tmp_path, external_white(static_agent)))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "k must be even" in done.stdout
    assert wait_gone([arena.green_pid()], timeout_s=10) == []


def test_green_agent_dying_exits_3_with_its_exit_code(tmp_path: Path, subprocess_env: dict[str, str]) -> None:
    arena = ArenaRun(tmp_path, subprocess_env, mode="die")
    scenario = write_scenario(tmp_path, '[white_agent]\nkind = "replay"\n')
    done = arena.run(scenario, "--battle-id", "b-die")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "green_agent exited with code 7" in done.stdout
    white = json.loads(arena.white_record.read_text())
    assert wait_gone([arena.green_pid(), white["pid"]], timeout_s=10) == []


def test_green_agent_failing_to_start_exits_3(
    tmp_path: Path, subprocess_env: dict[str, str], static_agent: str
) -> None:
    arena = ArenaRun(tmp_path, subprocess_env)
    argv = arena.argv(write_scenario(tmp_path, external_white(static_agent)))
    argv[argv.index("arena_fake_green")] = "arena_no_such_module"
    done = subprocess.run(argv, cwd=REPO, env=arena.env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 3
    assert "green_agent exited with code 1 before it was ready" in done.stdout
    assert "No module named arena_no_such_module" in done.stdout


def test_white_agent_failing_to_start_stops_the_green_agent_starting_beside_it(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    # Both agents start at once: the white agent's failure must be the one reported, and the green agent that was
    # starting (or already up) beside it must not be left behind.
    arena = ArenaRun(tmp_path, subprocess_env)
    argv = arena.argv(write_scenario(tmp_path, '[white_agent]\nkind = "replay"\n'))
    argv[argv.index("arena_fake_white")] = "arena_no_such_white_module"
    done = subprocess.run(argv, cwd=REPO, env=arena.env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "white_agent exited with code 1 before it was ready" in done.stdout
    assert "No module named arena_no_such_white_module" in done.stdout
    if arena.green_pidfile.exists():
        assert wait_gone([arena.green_pid()], timeout_s=10) == []


def test_with_launchers(tmp_path: Path, subprocess_env: dict[str, str]) -> None:
    arena = ArenaRun(tmp_path, subprocess_env)
    scenario = write_scenario(tmp_path, '[white_agent]\nkind = "replay"\n')
    done = arena.run(scenario, "--with-launchers", "--battle-id", "b-launch")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "green_agent launcher: http://127.0.0.1:" in done.stdout
    assert (arena.runs / "b-launch" / "summary.json").is_file()
    white = json.loads(arena.white_record.read_text())
    assert wait_gone([arena.green_pid(), white["pid"]], timeout_s=10) == []


def test_agent_failing_behind_a_launcher_fails_fast(
    tmp_path: Path, subprocess_env: dict[str, str], static_agent: str
) -> None:
    arena = ArenaRun(tmp_path, subprocess_env)
    argv = arena.argv(
        write_scenario(tmp_path, external_white(static_agent)), "--with-launchers", "--startup-timeout", "600"
    )
    argv[argv.index("arena_fake_green")] = "arena_no_such_module"
    done = subprocess.run(argv, cwd=REPO, env=arena.env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 3
    assert "the green_agent behind the launcher" in done.stdout
    assert "No module named arena_no_such_module" in done.stdout  # the launcher's report, not a 600 s timeout


@pytest.mark.parametrize(("sig", "expected"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_leaves_no_process(
    tmp_path: Path, subprocess_env: dict[str, str], sig: signal.Signals, expected: int
) -> None:
    arena = ArenaRun(tmp_path, subprocess_env, mode="hang")
    scenario = write_scenario(tmp_path, '[white_agent]\nkind = "replay"\n')
    proc = arena.start(scenario)
    try:
        deadline = time.monotonic() + 120
        while not arena.record.exists():  # the battle request reached the (hanging) green agent
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "the battle never started"
            time.sleep(0.1)
        green_pid = arena.green_pid()
        white_pid = json.loads(arena.white_record.read_text())["pid"]
        assert pid_alive(green_pid) and pid_alive(white_pid)
        proc.send_signal(sig)
        output, _ = proc.communicate(timeout=60)
        assert proc.returncode == expected, output
        assert wait_gone([green_pid, white_pid], timeout_s=10) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_unused_port_helper_sanity() -> None:
    assert free_port() > 0

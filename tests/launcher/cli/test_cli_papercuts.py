"""What a user meets on the command line, through the CLI:

- every server says when it is ready, with its URL (``arena backend``, ``arena launcher``, ``arena-white``,
  ``arena-green``) on standard error;
- ``arena backend|green|white --help`` look like every other ``arena`` command's help (typer's panels) and list
  every flag the module's own parser has;
- ``arena --show-completion`` produces a completion script, and completing works;
- ``arena score`` and ``arena eval-csv`` say why a conversation or a case did not pass.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from launcher.cli.app import app
from launcher.cli.eval_reasons import case_reason, conversation_reason
from launcher.ports import free_port

REPO = Path(__file__).resolve().parents[3]
runner = CliRunner()


def wait_for_ready_line(argv: list[str], name: str, port: int, tmp_path: Path) -> str:
    """Start ``argv``, wait for its ready line on standard error (or its exit: a failure), stop it; the line."""
    log = tmp_path / f"{name}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=out, cwd=tmp_path)
        try:
            deadline = time.monotonic() + 180  # a hang guard, not a speed goal
            pattern = re.compile(rf"^{re.escape(name)} ready: http://127\.0\.0\.1:{port}\b.*$", re.M)
            while True:
                found = pattern.search(log.read_text(encoding="utf-8", errors="replace"))
                if found:
                    return found.group(0)
                assert proc.poll() is None, f"{name} exited: {log.read_text()}"
                assert time.monotonic() < deadline, f"no ready line from {name}: {log.read_text()}"
                time.sleep(0.1)
        finally:
            proc.terminate()
            proc.wait(timeout=30)


@pytest.mark.parametrize("server", ["backend", "launcher", "white", "green"])
def test_every_server_prints_a_ready_line_with_its_url(tmp_path: Path, server: str) -> None:
    port = free_port()
    arena = [sys.executable, "-m", "launcher"]
    logs = ["--log-dir", str(tmp_path / "logs"), "--", sys.executable, "-c", "pass"]
    argv, name = {
        "backend": ([*arena, "backend", "--port", str(port), "--db", str(tmp_path / "b.sqlite3")], "arena backend"),
        "launcher": (
            [*arena, "launcher", "--port", str(port), "--agent-url", "http://127.0.0.1:9", "--no-autostart", *logs],
            "arena launcher",
        ),
        "white": ([sys.executable, "-m", "white_agent", "--kind", "replay", "--port", str(port)], "arena-white"),
        "green": ([sys.executable, "-m", "green_agent", "--port", str(port), "--runs-dir", "runs"], "arena-green"),
    }[server]
    line = wait_for_ready_line(argv, name, port, tmp_path)
    if server == "backend":
        assert f"battle pages: http://127.0.0.1:{port}/ui/battles" in line


def module_flags(module: str) -> set[str]:
    """The flags ``python -m module --help`` (argparse) lists."""
    done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, check=True)
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", done.stdout)) - {"--help"}


@pytest.mark.parametrize(
    ("command", "module"), [("backend", "battle_backend"), ("green", "green_agent"), ("white", "white_agent")]
)
def test_the_pass_through_commands_have_the_same_help_style(command: str, module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "launcher", command, "--help"],
        capture_output=True,
        text=True,
        check=False,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr
    assert f"Usage: arena {command} [OPTIONS]" in done.stdout
    assert "╭─ Options ─" in done.stdout  # typer's panels, as `arena run --help`
    listed = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", done.stdout))
    assert module_flags(module) <= listed, module_flags(module) - listed
    typer_style = subprocess.run(
        [sys.executable, "-m", "launcher", "plan", "--help"], capture_output=True, text=True, check=True
    )
    assert "╭─ Options ─" in typer_style.stdout


def test_shell_completion_script_and_completions() -> None:
    # As a user runs it: from bash (typer detects the shell from the parent process).
    command = f"{shlex.quote(sys.executable)} -m launcher --show-completion"
    done = subprocess.run(
        ["bash", "-c", command],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "_ARENA_COMPLETE=complete_bash" in done.stdout
    assert "complete -o default -F _arena_completion arena" in done.stdout
    completed = subprocess.run(
        [sys.executable, "-m", "launcher"],
        capture_output=True,
        text=True,
        check=False,
        env={"_ARENA_COMPLETE": "complete_bash", "COMP_WORDS": "arena run --num", "COMP_CWORD": "2"}
        | {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
    )
    assert set(completed.stdout.split()) == {"--num-trials", "--num-tasks"}, completed.stderr


def test_score_says_why_a_conversation_is_incorrect() -> None:
    done = runner.invoke(
        app,
        ["score", str(REPO / "scenarios" / "agentic_conversations.json"), "--judge", "lexical"],
        env={"COLUMNS": "250"},
    )
    assert done.exit_code == 0, done.output
    (row,) = [line for line in done.output.splitlines() if "calc-005" in line]
    assert "qa q1: answer 0.00 < 0.70" in row


def test_eval_csv_says_why_a_case_failed(tmp_path: Path) -> None:
    args = ["eval-csv", str(REPO / "scenarios" / "finance_suite.csv"), "--agent", "finance-demo", "-q"]
    done = runner.invoke(
        app, [*args, "--out", str(tmp_path / "out.json"), "--log-dir", str(tmp_path / "logs")], env={"COLUMNS": "250"}
    )
    assert done.exit_code == 0, done.output
    (row,) = [line for line in done.output.splitlines() if "fin-011" in line]
    assert "not called: calculate_financial_ratios" in row and "overall 0.00 < 0.70" in row


def test_reasons_of_each_kind() -> None:
    assert conversation_reason({"status": "correct"}) == ""
    assert conversation_reason({"status": "unscored", "unscored_reason": "1 interaction(s) could not be judged"}) == (
        "1 interaction(s) could not be judged"
    )
    assert case_reason({"status": "errored", "error": "connection refused", "notes": ["n"]}) == (
        "connection refused; n"
    )
    assert case_reason({"status": "passed", "notes": []}) == ""
    assert case_reason({"status": "passed", "notes": "abc"}) == ""  # not a list: no notes (not one per letter)
    long = case_reason({"status": "failed", "judge_explanation": "x" * 1000})
    assert len(long) == 160 and long.endswith("…")
    hostile = {"status": "incorrect", "interactions": "nope", "tool_correctness_scores": [None, 3]}
    assert conversation_reason(hostile) == ""

"""``arena run``: every check the scenario and tau2's task lists allow is made at load, before any process starts.

Each case runs ``arena run`` in process with agent modules that do not exist: a scenario the loader lets through
would start them (and fail with exit 1, leaving a logs directory), so exit 2 with nothing under ``--runs-dir`` shows
the check came first. Before these checks, the task cases were found by the green agent after both agents started
(9-13 s), ``num_tasks = 100000`` was reported under ``k``, a non-UTF-8 file gave a traceback, fault rates summing to
3 made the white agent exit (exit 1), and ``file://`` / ``javascript:`` URLs were accepted.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from green_agent.engine.config import (
    DEFAULT_MAX_ATTEMPTS_PER_BATTLE,
    DEFAULT_MAX_REMOTE_CONCURRENCY,
    ConfigError,
)
from green_agent.engine.tau.tasks import check_task_selection, select_tasks
from launcher.cli.app import app
from launcher.cli.scenario import load_scenario

EXTERNAL = '[white_agent]\nkind = "external"\nurl = "http://127.0.0.1:9"\n'


def arena_run(tmp_path: Path, body: bytes | str) -> tuple[int, str]:
    scenario = tmp_path / "scenario.toml"
    scenario.write_bytes(body.encode() if isinstance(body, str) else body)
    runs = tmp_path / "runs"
    argv = ["run", str(scenario), "--runs-dir", str(runs), "--green-module", "arena_no_such_green_module"]
    result = CliRunner().invoke(app, [*argv, "--white-module", "arena_no_such_white_module"])
    assert not runs.exists(), "a process was started (its logs directory exists)"
    return result.exit_code, " ".join(result.output.split())  # rich wraps long lines


CASES: dict[str, tuple[str, str]] = {
    "task index out of range": (
        '[pass_k_config]\ndomain = "retail"\nsplit = "test"\ntask_index = 400\n',
        "pass_k_config.task_index: task_index 400 is out of range for retail/test: valid 0..39",
    ),
    "task listed twice": (
        "[pass_k_config]\ntask_index = [3, 5, 3]\n",
        "pass_k_config.task_index: task_index lists task 3 more than once",
    ),
    "unknown split": (
        '[pass_k_config]\nsplit = "tset"\n',
        "pass_k_config.split: split 'tset' is unknown for retail; known splits: base, test, train",
    ),
    "mock with split test": (
        '[pass_k_config]\ndomain = "mock"\nsplit = "test"\n',
        "pass_k_config.split: split 'test' is unknown for mock; known splits: base",
    ),
    "unknown split in one of several domains": (
        '[pass_k_config]\nmode = "random"\ndomain = ["retail", "mock"]\nsplit = "test"\n',
        "pass_k_config.split: split 'test' is unknown for mock",
    ),
    "more tasks than the split holds": (
        '[pass_k_config]\nmode = "random"\nnum_tasks = 41\nsplit = "test"\n',
        "pass_k_config.num_tasks: num_tasks 41 is more than the 40 distinct tasks available in retail/test (40)",
    ),
    "num_tasks 100000 is named as num_tasks": (
        '[pass_k_config]\nmode = "random"\nnum_tasks = 100000\n',
        "pass_k_config.num_tasks: Input should be less than or equal to 10000",
    ),
    "more attempts than the green agent takes": (
        '[pass_k_config]\nmode = "all"\ndomain = "telecom"\nsplit = "full"\nk = 2\n',
        "pass_k_config.split: 2285 tasks x k=2 = 4570 attempts exceed the green agent's limit of 2000 per battle",
    ),
    "concurrency above the documented limit": (
        "[pass_k_config]\nconcurrency = 1025\n",
        "pass_k_config.concurrency: Input should be less than or equal to 1024",
    ),
    "fault rates summing to 3": (
        '[white_agent]\nkind = "flaky"\nfault_rates = { crash = 1.0, skip_action = 1.0, no_reply = 1.0 }\n',
        "white_agent.fault_rates: the fault rates must sum to at most 1 (they sum to 3)",
    ),
    "file URL": (
        '[white_agent]\nkind = "external"\nurl = "file:///etc/passwd"\n',
        "white_agent.url: the white agent's URL must be http:// or https:// with a host",
    ),
    "javascript URL": (
        '[white_agent]\nkind = "external"\nurl = "javascript:alert(1)"\n',
        "white_agent.url: the white agent's URL must be http:// or https:// with a host",
    ),
    "URL without a host": (
        '[white_agent]\nkind = "external"\nurl = "http:///path"\n',
        "white_agent.url: the white agent's URL must be http:// or https:// with a host",
    ),
    "URL with a bad port": (
        '[white_agent]\nkind = "external"\nurl = "http://127.0.0.1:99999/"\n',
        "white_agent.url: not a valid URL",
    ),
    "a time limit of 1e12": ("[pass_k_config]\nturn_timeout_s = 1e12\n", "pass_k_config.turn_timeout_s"),
}


@pytest.mark.parametrize(("body", "message"), list(CASES.values()), ids=list(CASES))
def test_arena_run_refuses_at_load_naming_the_field(tmp_path: Path, body: str, message: str) -> None:
    code, output = arena_run(tmp_path, body if "white_agent" in body else body + EXTERNAL)
    assert code == 2, output
    assert message in output, output


def test_a_scenario_that_is_not_utf8_exits_2_naming_the_file(tmp_path: Path) -> None:
    code, output = arena_run(tmp_path, b'name = "caf\xe9"\n' + EXTERNAL.encode())
    assert code == 2, output
    assert "scenario.toml: not UTF-8 text (line 1" in output
    assert "Traceback" not in output


def test_good_scenarios_still_load(tmp_path: Path) -> None:
    for name in ("offline_demo", "calibration_retail", "random_mode", "retail_manual", "airline"):
        load_scenario(Path(__file__).resolve().parents[2] / "scenarios" / f"{name}.toml")
    https = tmp_path / "https.toml"
    https.write_text('[white_agent]\nkind = "external"\nurl = "HTTPS://agent.example:8443/a2a"\n', encoding="utf-8")
    assert load_scenario(https).white_agent.url == "HTTPS://agent.example:8443/a2a"
    rates = tmp_path / "rates.toml"
    rates.write_text('[white_agent]\nkind = "flaky"\nfault_rates = { crash = 0.5, no_reply = 0.5 }\n', encoding="utf-8")
    assert sum(load_scenario(rates).white_agent.fault_rates.values()) == 1.0


def test_the_fast_check_agrees_with_the_selection(tmp_path: Path) -> None:
    """check_task_selection (split sizes only) refuses exactly what select_tasks (the tasks themselves) refuses."""
    from green_agent.engine.config import BattleConfig

    configs = [
        BattleConfig(task_index=[0, 39]),
        BattleConfig(task_index=40),
        BattleConfig(domain="mock", split="base", task_index=8),
        BattleConfig(domain="mock", split="base", task_index=9),
        BattleConfig(mode="random", domain=["retail", "airline"], num_tasks=60),
        BattleConfig(mode="random", domain=["retail", "airline"], num_tasks=61),
        BattleConfig(mode="all", domain="airline", split="test"),
        BattleConfig(mode="all", domain="airline", split=""),
    ]
    for config in configs:
        try:
            expected: int | str = len(select_tasks(config))
        except ConfigError as error:
            expected = str(error)
        try:
            got: int | str = check_task_selection(config, max_attempts=None)
        except ConfigError as error:
            got = str(error)
        assert got == expected, config


def test_the_launcher_limits_are_the_green_agents_defaults() -> None:
    from green_agent.service.running_battles import ServiceLimits

    assert ServiceLimits().max_attempts_per_battle == DEFAULT_MAX_ATTEMPTS_PER_BATTLE
    assert ServiceLimits().max_concurrency == DEFAULT_MAX_REMOTE_CONCURRENCY

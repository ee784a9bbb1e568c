"""``arena --version`` / ``-V``, and did-you-mean for unknown keys in a scenario file (every section, nested tables
too) instead of pydantic's "Extra inputs are not permitted"."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from green_agent.engine.config import BattleConfig, ConfigError, ModelPrice, UserSimulatorConfig
from green_agent.engine.field_hints import field_names, model_at
from launcher.cli.app import DISTRIBUTION, app
from launcher.cli.scenario import BackendConfig, Scenario, WhiteAgentConfig, load_scenario

REPO = Path(__file__).resolve().parents[3]
runner = CliRunner()


# --------------------------------------------------------------------------------------------------------- version


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_flag_prints_the_distribution_version(flag: str) -> None:
    result = runner.invoke(app, [flag])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"arena {importlib.metadata.version(DISTRIBUTION)}"


def test_version_as_a_command_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "launcher", "--version"], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"arena {importlib.metadata.version('arena')}\n"


def test_distribution_name_is_the_one_in_pyproject() -> None:
    import tomllib

    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["name"] == DISTRIBUTION


# ---------------------------------------------------------------------------------------------- did you mean


def problems_of(tmp_path: Path, body: str) -> str:
    path = tmp_path / "scenario.toml"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_scenario(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    assert "Extra inputs are not permitted" not in message
    return message.removeprefix(f"{path}: ")


def test_arena_run_suggests_the_field_and_exits_2(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.toml"
    scenario.write_text("[pass_k_config]\nk = 2\ntasks_index = 3\n", encoding="utf-8")
    result = runner.invoke(app, ["run", str(scenario), "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 2, result.output
    assert "pass_k_config.tasks_index: unknown field; did you mean 'task_index'?" in result.output
    assert not (tmp_path / "runs").exists()  # refused before anything started


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("[pass_k_config]\ntasks_index = 3\n", "pass_k_config.tasks_index: unknown field; did you mean 'task_index'?"),
        ("[pass_k_config]\nconcurency = 2\n", "pass_k_config.concurency: unknown field; did you mean 'concurrency'?"),
        ('[user_simulator]\nmodle = "m"\n', "user_simulator.modle: unknown field; did you mean 'model'?"),
        (
            "[pass_k_config.user_simulator]\ntemprature = 0.5\n",
            "pass_k_config.user_simulator.temprature: unknown field; did you mean 'temperature'?",
        ),
        ('[white_agent]\nkind = "flaky"\nsede = 1\n', "white_agent.sede: unknown field; did you mean 'seed'?"),
        ('[backend]\nulr = "http://x"\n', "backend.ulr: unknown field; did you mean 'url'?"),
        ("[pass_k_confg]\nk = 2\n", "pass_k_confg: unknown field; did you mean 'pass_k_config'?"),
        ("[user_simulatr]\n", "user_simulatr: unknown field; did you mean 'user_simulator'?"),
        (
            "[pass_k_config.prices.my-model]\ninput_usd_per_million_tokens = 1\noutput_usd_per_milion_tokens = 2\n",
            "pass_k_config.prices.my-model.output_usd_per_milion_tokens: unknown field; "
            "did you mean 'output_usd_per_million_tokens'?",
        ),
    ],
)
def test_unknown_field_gets_a_suggestion(tmp_path: Path, body: str, expected: str) -> None:
    assert expected in problems_of(tmp_path, body)


def test_nothing_close_lists_the_valid_fields(tmp_path: Path) -> None:
    message = problems_of(tmp_path, '[white_agent]\nkind = "flaky"\nzzz = 1\n')
    valid = ", ".join(WhiteAgentConfig.model_fields)
    assert message == f"white_agent.zzz: unknown field (valid fields: {valid})"


def test_every_problem_is_reported_with_its_own_path(tmp_path: Path) -> None:
    message = problems_of(tmp_path, "[pass_k_config]\nk = 3\ntask_indx = 1\n[white_agent]\nsed = 1\n")
    assert "pass_k_config.k: k must be even" in message
    assert "pass_k_config.task_indx: unknown field; did you mean 'task_index'?" in message
    assert "white_agent.sed: unknown field; did you mean 'seed'?" in message


def test_old_field_names_are_still_valid_and_suggested(tmp_path: Path) -> None:
    path = tmp_path / "ok.toml"
    path.write_text("[pass_k_config]\ntask_id = 2\nnum_battles = 1\n", encoding="utf-8")
    assert load_scenario(path).pass_k_config.task_index == 2  # aliases are accepted, so never "unknown"
    assert "task_id" in field_names(BattleConfig) and "num_battles" in field_names(BattleConfig)


def test_models_are_found_by_walking_the_error_location() -> None:
    assert model_at(Scenario, ()) is Scenario
    assert model_at(Scenario, ("pass_k_config",)) is BattleConfig
    assert model_at(Scenario, ("pass_k_config", "user_simulator")) is UserSimulatorConfig
    assert model_at(Scenario, ("pass_k_config", "prices", "any-model")) is ModelPrice
    assert model_at(Scenario, ("white_agent",)) is WhiteAgentConfig
    assert model_at(Scenario, ("backend",)) is BackendConfig
    assert model_at(Scenario, ("pass_k_config", "k")) is None  # not a model
    assert model_at(Scenario, ("nowhere", "at_all")) is None

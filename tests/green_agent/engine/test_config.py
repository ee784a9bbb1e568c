"""Battle configuration: valid scenarios load, invalid ones fail naming the field and the allowed values."""

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from green_agent.engine.config import (
    BattleConfig,
    ConfigError,
    parse_battle_config,
    parse_remote_battle_config,
    remote_config_dict,
)
from launcher.cli.scenario import Scenario, load_scenario

SCENARIOS = sorted(Path(__file__).parents[3].joinpath("scenarios").glob("*.toml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_shipped_scenarios_validate(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.pass_k_config.k % 2 == 0


def test_seed_fields_and_defaults() -> None:
    config = parse_battle_config({"mode": "manual", "k": 4, "domain": "retail", "task_id": 5})
    assert (config.mode, config.k, config.domain, config.task_indices, config.split) == (
        "manual",
        4,
        "retail",
        [5],
        "test",
    )
    assert config.concurrency == 4
    assert config.user_simulator.kind == "scripted"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"k": 3}, "k must be even"),
        ({"k": 0}, "k must be even"),
        ({"domain": "banking"}, "known domains: retail, airline, telecom, mock"),
        ({"task_id": -1}, "task_id"),
        ({"task_index": []}, "task_index: task_index (task_id) must name at least one task index"),
        ({"task_id": 1, "task_index": 2}, "task_index and task_id (its old name) are both given"),
        ({"num_tasks": 0}, "num_tasks"),
        ({"mode": "sometimes"}, "mode"),
        ({"concurrency": 0}, "concurrency"),
        ({"mode": "manual", "domain": ["retail", "airline"]}, "manual mode takes one domain"),
        ({"user_simulator": {"kind": "oracle"}}, "user_simulator.kind"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_bad_config_names_the_field(data: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_battle_config(data)
    assert expected in str(error.value)


def test_nested_pass_k_config_is_accepted() -> None:
    config = parse_battle_config({"pass_k_config": {"k": 2}, "user_simulator": {"kind": "scripted"}})
    assert config.k == 2


def test_scenario_lifts_user_simulator_table(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('[pass_k_config]\nk = 2\n[user_simulator]\nkind = "llm"\napi_key_env = "MY_KEY"\n')
    scenario = load_scenario(path)
    assert scenario.pass_k_config.user_simulator.api_key_env == "MY_KEY"


def test_scenario_errors_name_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[pass_k_config]\nk = 5\n")
    with pytest.raises(ConfigError, match=r"bad\.toml: pass_k_config\.k: k must be even"):
        load_scenario(path)
    path.write_text("[pass_k_config\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_scenario(path)
    with pytest.raises(ConfigError, match="no such scenario file"):
        load_scenario(tmp_path / "missing.toml")


def test_external_white_agent_needs_url() -> None:
    with pytest.raises(ValueError, match="url is required"):
        Scenario.model_validate({"white_agent": {"kind": "external"}})


def test_config_is_immutable() -> None:
    config = BattleConfig()
    with pytest.raises(ValidationError):
        config.k = 6  # type: ignore[misc]


def test_old_field_names_are_accepted_and_the_new_ones_written() -> None:
    old = parse_battle_config({"mode": "random", "num_battles": 3, "task_id": [1, 2]})
    new = parse_battle_config({"mode": "random", "num_tasks": 3, "task_index": [1, 2]})
    assert old == new and (new.num_tasks, new.task_indices) == (3, [1, 2])
    dumped = new.model_dump(mode="json")
    assert (dumped["num_tasks"], dumped["task_index"]) == (3, [1, 2])
    assert "num_battles" not in dumped and "task_id" not in dumped
    assert parse_battle_config(dumped) == new  # what summary.json and remote configs say reads back


def test_remote_config_under_an_old_name_replaces_the_default() -> None:
    default = BattleConfig(task_index=4, num_tasks=2)
    assert parse_remote_battle_config({"task_id": 7}, default).task_indices == [7]
    assert parse_remote_battle_config({"pass_k_config": {"num_battles": 5}}, default).num_tasks == 5
    assert parse_remote_battle_config(remote_config_dict(default), BattleConfig()) == default
    with pytest.raises(ConfigError, match="both given"):
        parse_remote_battle_config({"task_id": 7, "task_index": 8}, default)


def test_the_green_agent_reads_the_battle_part_of_a_scenario_and_refuses_misspelt_tables(tmp_path: Path) -> None:
    from green_agent.engine.config import SCENARIO_TABLES, load_battle_config

    good = tmp_path / "good.toml"
    good.write_text(
        '[pass_k_config]\nk = 2\ntask_id = 3\n[user_simulator]\ntemperature = 0.5\n[white_agent]\nkind = "flaky"\n'
    )
    config = load_battle_config(good)
    assert (config.k, config.task_index, config.user_simulator.temperature) == (2, 3, 0.5)
    misspelt = tmp_path / "misspelt.toml"
    misspelt.write_text("[pass_k_confg]\nk = 2\n")
    with pytest.raises(ConfigError, match="pass_k_confg: not a scenario table"):
        load_battle_config(misspelt)
    not_a_table = tmp_path / "scalar.toml"
    not_a_table.write_text("pass_k_config = 5\n")
    with pytest.raises(ConfigError, match="pass_k_config: expected a table"):
        load_battle_config(not_a_table)
    # The launcher's schema and the green agent's list of tables name the same keys.
    assert set(Scenario.model_fields) | {"user_simulator"} == SCENARIO_TABLES

"""Battle configuration: valid scenarios load, invalid ones fail naming the field and the allowed values."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from green_agent.engine.config import BattleConfig, ConfigError, parse_battle_config
from launcher.cli.scenario import Scenario, load_scenario

SCENARIOS = sorted(Path(__file__).parents[2].joinpath("scenarios").glob("*.toml"))


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
        ({"mode": "sometimes"}, "mode"),
        ({"concurrency": 0}, "concurrency"),
        ({"mode": "manual", "domain": ["retail", "airline"]}, "manual mode takes one domain"),
        ({"user_simulator": {"kind": "oracle"}}, "user_simulator.kind"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_bad_config_names_the_field(data: dict, expected: str) -> None:
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

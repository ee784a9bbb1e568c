"""--certify and [pass_k_config] certify: parsing, refusals naming the field, exit codes (issue 28)."""

from __future__ import annotations

import pytest

from green_agent.engine.config import BattleConfig, ConfigError, parse_battle_config, parse_remote_battle_config
from launcher.cli.run_command import EXIT_INCONCLUSIVE, certify_exit_code, certify_line, with_certify
from launcher.cli.run_verdict import outcome_for_exit
from launcher.cli.scenario import Scenario


def test_string_and_table_forms_are_the_same_config() -> None:
    text = BattleConfig.model_validate({"k": 4, "certify": "pass^4 >= 0.8"})
    table = BattleConfig.model_validate({"k": 4, "certify": {"metric": "pass^4", "threshold": 0.8}})
    assert text == table
    assert text.certify is not None and text.certify.j == 4 and text.certify.confidence == 0.95
    assert "certify" not in BattleConfig().model_dump()  # absent: configs and hashes as before


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("pass^5>=0.8", "certify.metric"),
        ({"metric": "pass@4", "threshold": 0.8}, "certify.metric"),
        ({"metric": "pass^2", "threshold": 1.0}, "certify.threshold"),
        ("pass^2 > 0.8", "certify"),
    ],
)
def test_bad_claims_name_the_field(value: object, field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        parse_battle_config({"k": 4, "certify": value})


def test_a_remote_config_may_ask_to_certify() -> None:
    config = parse_remote_battle_config({"k": 2, "certify": "pass^1>=0.5"}, BattleConfig())
    assert config.certify is not None and config.certify.threshold == 0.5


def test_flag_sets_the_scenario_config_and_refuses_bad_claims() -> None:
    scenario = Scenario()
    assert with_certify(scenario, "pass^2>=0.5").pass_k_config.certify is not None
    with pytest.raises(ConfigError, match="--certify"):
        with_certify(scenario, "pass^9>=0.5")


def test_exit_codes_follow_the_decision() -> None:
    def summary(decision: str) -> dict[str, object]:
        return {"certification": {"decision": decision, "claim": "pass^1 >= 0.5", "confidence": 0.95}}

    assert certify_exit_code(summary("certified")) == 0
    assert certify_exit_code(summary("refuted")) == 1
    assert certify_exit_code(summary("inconclusive")) == EXIT_INCONCLUSIVE == 6
    assert certify_exit_code({}) is None and certify_line({}) is None
    assert outcome_for_exit(6) == "inconclusive"
    line = certify_line(summary("refuted"))
    assert line is not None and "REFUTED" in line and "exit 1" in line


def test_comparison_claims_parse_and_their_baseline_values_are_bounded() -> None:
    worse = BattleConfig.model_validate({"k": 2, "certify": "pass^1 >= baseline - 0.05"}).certify
    assert worse is not None and worse.compare == "no_worse" and worse.decision_threshold == pytest.approx(0.475)
    better = BattleConfig.model_validate({"k": 2, "certify": "pass^2>baseline"}).certify
    assert better is not None and better.compare == "better" and better.decision_threshold == 0.5
    remote = parse_remote_battle_config(
        {"k": 2, "certify": {"metric": "pass^1", "compare": "better", "baseline_values": {"retail/test/1": 0.5}}},
        BattleConfig(),
    )
    assert remote.certify is not None and remote.certify.baseline_values == {"retail/test/1": 0.5}
    with pytest.raises(ConfigError, match=r"certify\.baseline_values"):
        parse_battle_config(
            {"k": 2, "certify": {"metric": "pass^1", "compare": "better", "baseline_values": {"t": 1.5}}}
        )
    with pytest.raises(ConfigError, match=r"certify: threshold: not with compare"):
        parse_battle_config({"k": 2, "certify": {"metric": "pass^1", "compare": "better", "threshold": 0.5}})

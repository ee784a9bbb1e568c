"""Remote configs and budgets (issue 27): a remote request (A2A, MCP start_battle, AgentBeats battle_start: all go
through ``BattleRegistry.remote_config``) may lower the operator's ``max_cost_usd``, ``max_wall_s`` and
``provider_max_concurrency``, set one the operator did not, but never raise or remove one."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from green_agent.engine.battle_limits import remote_limit_problem
from green_agent.engine.config import BattleConfig, ConfigError
from green_agent.engine.tau.scoring import ScoringPool
from green_agent.service.running_battles import BattleRegistry

OPERATOR = BattleConfig(max_cost_usd=5.0, max_wall_s=600.0, provider_max_concurrency=8)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"max_cost_usd": 6.0}, "max_cost_usd: at most 5"),
        ({"pass_k_config": {"max_wall_s": 601}}, "max_wall_s: at most 600"),
        ({"provider_max_concurrency": 9}, "provider_max_concurrency: at most 8"),
        ({"max_cost_usd": None}, "max_cost_usd: this green agent's operator set 5; .* not remove it"),
    ],
)
def test_a_remote_config_may_not_raise_or_remove_the_operators_budget(data: dict[str, Any], problem: str) -> None:
    found = remote_limit_problem(data, OPERATOR)
    assert found is not None and re.match(problem, found), found
    registry = BattleRegistry(scoring=ScoringPool(max_workers=1, warm=False), runs_dir=Path(), default_config=OPERATOR)
    with pytest.raises(ConfigError, match=problem.split(":")[0]):
        registry.remote_config(data)


def test_a_remote_config_may_lower_a_budget_or_set_one_the_operator_did_not() -> None:
    assert remote_limit_problem({"max_cost_usd": 1.0, "max_wall_s": 10.0}, OPERATOR) is None
    assert remote_limit_problem({"max_cost_usd": 1e5}, BattleConfig()) is None
    registry = BattleRegistry(scoring=ScoringPool(max_workers=1, warm=False), runs_dir=Path(), default_config=OPERATOR)
    config = registry.remote_config({"max_cost_usd": 1.0})
    assert (config.max_cost_usd, config.max_wall_s) == (1.0, 600.0)  # absent: the operator's value stays

"""Every time limit has an upper bound, and a remote config cannot spend more of the operator's money or resources
than the operator chose (issue 24, item 4: ``turn_timeout_s = 1e12`` was accepted, a stranger could switch the user
simulator to ``kind = "llm"``).

Remote configs come from an A2A request, MCP ``start_battle`` or an AgentBeats ``battle_start``; all three go through
:func:`parse_remote_battle_config` on top of the operator's default config.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from green_agent.engine.battle_limits import LIMIT_FIELDS, MAX_BUDGET_WALL_S
from green_agent.engine.config import (
    MAX_ATTEMPT_TIMEOUT_S,
    MAX_TOOL_TIMEOUT_S,
    MAX_TURN_TIMEOUT_S,
    MAX_USER_REQUEST_TIMEOUT_S,
    OPERATOR_CAPPED_FIELDS,
    OPERATOR_CAPPED_USER_FIELDS,
    OPERATOR_ONLY_USER_FIELDS,
    BattleConfig,
    ConfigError,
    UserSimulatorConfig,
    parse_battle_config,
    parse_remote_battle_config,
    remote_config_dict,
)

TIME_LIMITS: dict[str, float] = {
    "turn_timeout_s": MAX_TURN_TIMEOUT_S,
    "attempt_timeout_s": MAX_ATTEMPT_TIMEOUT_S,
    "tool_timeout_s": MAX_TOOL_TIMEOUT_S,
    "user_simulator.request_timeout_s": MAX_USER_REQUEST_TIMEOUT_S,
    "max_wall_s": MAX_BUDGET_WALL_S,
}


def _config(field: str, value: Any) -> dict[str, Any]:
    if field.startswith("user_simulator."):
        return {"user_simulator": {field.split(".", 1)[1]: value}}
    return {field: value}


def _every_float_seconds_field() -> set[str]:
    names = {name for name, info in BattleConfig.model_fields.items() if name.endswith("_s")}
    users = {f"user_simulator.{name}" for name in UserSimulatorConfig.model_fields if name.endswith("_s")}
    return names | users


def test_every_time_limit_is_listed_here() -> None:
    # A new ``*_s`` field must get a bound (and a row in docs/security.md) before this passes.
    assert _every_float_seconds_field() == set(TIME_LIMITS)


@pytest.mark.parametrize("field", sorted(TIME_LIMITS))
@pytest.mark.parametrize("value", [1e12, math.inf, math.nan, 0, -1])
def test_time_limits_are_bounded(field: str, value: float) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        parse_battle_config(_config(field, value))
    # a bound the operator could not set is not something a remote request can set either
    operator = BattleConfig(user_simulator=UserSimulatorConfig(request_timeout_s=MAX_USER_REQUEST_TIMEOUT_S))
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        parse_remote_battle_config(_config(field, value), operator)


@pytest.mark.parametrize("field", sorted(TIME_LIMITS))
def test_the_bound_itself_is_accepted(field: str) -> None:
    config = parse_battle_config(_config(field, TIME_LIMITS[field]))
    head, _, tail = field.partition(".")
    value = getattr(config.user_simulator, tail) if tail else getattr(config, head)
    assert value == TIME_LIMITS[field]


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"num_tasks": 100_000}, "num_tasks"),
        ({"seed": 2**64}, "seed"),
        ({"user_simulator": {"seed": 2**64}}, "user_simulator.seed"),
        ({"task_index": list(range(10_001))}, "task_index"),
        ({"split": "x" * 65}, "split"),
    ],
)
def test_counts_and_names_are_bounded(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        parse_battle_config(data)


# --------------------------------------------------------------------------------------------------- remote configs

SCRIPTED = BattleConfig()
LLM_OPERATOR = BattleConfig(user_simulator=UserSimulatorConfig(kind="llm", max_user_turns=20, max_retries=2))


@pytest.mark.parametrize("nested", [False, True], ids=["flat", "pass_k_config"])
def test_a_remote_config_cannot_switch_the_user_simulator_to_llm(nested: bool) -> None:
    user = {"user_simulator": {"kind": "llm"}}
    data = {"pass_k_config": {"k": 2}, **user} if nested else {"k": 2, **user}
    with pytest.raises(ConfigError, match=r"user_simulator\.kind: .*'scripted'.*cannot switch it to 'llm'"):
        parse_remote_battle_config(data, SCRIPTED)


def test_a_remote_config_cannot_switch_an_llm_operator_to_scripted_either() -> None:
    # the kind is the operator's choice both ways (an LLM user is what the operator's numbers are about)
    with pytest.raises(ConfigError, match=r"user_simulator\.kind"):
        parse_remote_battle_config({"user_simulator": {"kind": "scripted"}}, LLM_OPERATOR)


def test_a_remote_config_may_repeat_the_operators_kind() -> None:
    assert parse_remote_battle_config({"user_simulator": {"kind": "llm"}}, LLM_OPERATOR).user_simulator.kind == "llm"
    # what arena run sends (remote_config_dict of its own scenario, also the green agent's default) is accepted
    assert parse_remote_battle_config(remote_config_dict(LLM_OPERATOR), LLM_OPERATOR) == LLM_OPERATOR


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"user_simulator": {"max_user_turns": 21}}, "user_simulator.max_user_turns"),
        ({"user_simulator": {"max_retries": 3}}, "user_simulator.max_retries"),
        ({"user_simulator": {"request_timeout_s": 61.0}}, "user_simulator.request_timeout_s"),
        ({"max_reply_bytes": 2 * 1_048_576}, "max_reply_bytes"),
        ({"pass_k_config": {"max_reply_bytes": 2 * 1_048_576}}, "max_reply_bytes"),
    ],
)
def test_a_remote_config_cannot_raise_what_spends_the_operators_money(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{field.replace('.', '[.]')}: at most .* operator's setting"):
        parse_remote_battle_config(data, LLM_OPERATOR)


def test_a_remote_config_may_lower_them() -> None:
    data = {"max_reply_bytes": 4096, "user_simulator": {"max_user_turns": 3, "max_retries": 0, "request_timeout_s": 5}}
    config = parse_remote_battle_config(data, LLM_OPERATOR)
    assert (config.max_reply_bytes, config.user_simulator.max_user_turns) == (4096, 3)
    assert (config.user_simulator.max_retries, config.user_simulator.request_timeout_s) == (0, 5.0)


REMOTE_FREE = {
    "mode",
    "k",
    "domain",
    "task_index",
    "num_tasks",
    "split",
    "seed",
    "max_steps",
    "turn_timeout_s",
    "attempt_timeout_s",
    "concurrency",
    "calibration",
    "tool_mode",
    "tool_timeout_s",
    "prices",
    "user_simulator",
    "certify",
    "retrieval",
}
"""Battle fields a remote config may set freely within their bounds (attempts are capped by the green agent's
--max-attempts, concurrency by --max-concurrency, time limits by the bounds above; prices only price the report;
certify only stops a battle earlier, and a comparison must carry its baseline_values: certify.baseline is a label
the green agent never opens)."""
REMOTE_FREE_USER = {"temperature", "seed"}
"""User-simulator fields a remote config may set freely (they change no cost)."""


def test_every_field_a_remote_config_may_set_has_a_decision() -> None:
    # A new config field must be classified here (free, capped by the operator, or the operator's only).
    # budgets and the provider cap: lowered, never raised or removed (tests/green_agent/engine/test_budget.py)
    assert set(BattleConfig.model_fields) == REMOTE_FREE | set(OPERATOR_CAPPED_FIELDS) | set(LIMIT_FIELDS)
    assert set(UserSimulatorConfig.model_fields) == (
        REMOTE_FREE_USER | set(OPERATOR_CAPPED_USER_FIELDS) | set(OPERATOR_ONLY_USER_FIELDS) | {"kind"}
    )

"""The AgentBeats battle messages as the green agent reads them: what each version of the platform sends is
accepted, what a battle cannot run without is refused with an error naming the field, and the reason codes a
refusal carries."""

from __future__ import annotations

import json
from typing import Any

import pytest

from green_agent.engine.battle_ids import BattleIdError
from green_agent.engine.config import ConfigError
from green_agent.wire.agentbeats import (
    REFUSALS,
    AgentBeatsMessageError,
    ResultReason,
    parse_battle_info,
    parse_battle_start,
    refusal_reason,
)

WHITE = "http://127.0.0.1:9004"


def start(**fields: Any) -> dict[str, Any]:
    return {"type": "battle_start", "battle_id": "b-1", **fields}


def test_agentbeats_1_2_6_battle_start() -> None:
    message = parse_battle_start(
        start(
            green_battle_context={
                "battle_id": "b-1",
                "backend_url": "http://backend",
                "agent_name": "green",
                "task_config": 'Task description: {"k": 2, "domain": "mock"}',
            },
            red_battle_contexts={WHITE: {"battle_id": "b-1", "agent_name": "white"}},
            opponent_infos=[{"name": "blue", "agent_url": WHITE}],
        )
    )
    assert (message.battle_id, message.report_url, message.token) == ("b-1", "http://backend", None)
    assert (message.white_url(), message.white_name) == (WHITE, "blue")
    assert message.config_overrides() == {"k": 2, "domain": "mock"}


def test_our_backend_passes_the_config_and_token_and_the_red_contexts_name_the_white_agent() -> None:
    message = parse_battle_start(
        start(
            backend_url="http://top",
            battle_token="tok",
            green_battle_context={"config": {"k": 4}, "task_config": {"k": 2}},
            red_battle_contexts={WHITE: {}},
        )
    )
    assert (message.report_url, message.token) == ("http://top", "tok")  # top level when the context has none
    assert (message.white_url(), message.white_name) == (WHITE, "white_agent")
    assert message.config_overrides() == {"k": 4}  # the battle's own config wins over the registered one


@pytest.mark.parametrize("task_config", [None, "", {}, "Task description:", "  Task description:  "])
def test_an_empty_task_config_means_the_green_agents_default(task_config: Any) -> None:
    assert parse_battle_start(start(green_battle_context={"task_config": task_config})).config_overrides() is None


@pytest.mark.parametrize(
    "fields",
    [
        {"backend_url": 5, "battle_token": {"x": 1}, "opponent_infos": "\ud800", "red_battle_contexts": [WHITE]},
        {
            "green_battle_context": {"backend_url": ["x"], "battle_token": 7},
            "opponent_infos": [3, {"agent_url": WHITE}],
        },
        {"green_battle_context": None, "opponent_infos": [{"agent_url": 12, "name": None}], "extra": {"any": "thing"}},
    ],
)
def test_optional_values_of_another_type_count_as_absent(fields: dict[str, Any]) -> None:
    message = parse_battle_start(start(**fields))
    assert (message.report_url, message.token, message.white_name) == (None, None, "white_agent")
    with pytest.raises(AgentBeatsMessageError) as refused:
        message.white_url()  # only the first opponent counts, and it has no URL
    assert str(refused.value) == "opponent_infos: no white agent URL in battle_start"
    assert refusal_reason(refused.value) is ResultReason.REQUEST_INVALID


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"battle_id": 10**400}, "battle_id: expected a string, got int"),
        ({"battle_id": "../x"}, "battle_id: only letters, digits"),
        ({"battle_id": None}, "battle_id: expected a string, got NoneType"),
        ({"green_battle_context": [1, 2]}, "green_battle_context: expected a JSON object"),
        ({"green_battle_context": "x"}, "green_battle_context: expected a JSON object"),
    ],
)
def test_what_a_battle_cannot_run_without_is_refused_naming_the_field(fields: dict[str, Any], error: str) -> None:
    with pytest.raises(AgentBeatsMessageError) as refused:
        parse_battle_start(start(**fields))
    assert str(refused.value).startswith(error)
    assert refused.value.field == error.split(":")[0]
    assert "10000000000" not in str(refused.value)  # the offending value is never echoed


@pytest.mark.parametrize(
    ("task_config", "error"),
    [
        ("Task description: {bad", "task_config: not a JSON object"),
        ("[]", "task_config: expected a JSON object"),
        # JSON text inside the message's JSON: too deep for the parser (RecursionError) unless checked first.
        ("Task description: " + "[" * 100_000 + "]" * 100_000, "task_config: JSON nested 100000 levels deep"),
        ('{"k": ' + "9" * 10_000 + "}", "task_config: a number in the body has more than"),
    ],
)
def test_a_task_config_that_is_no_object_is_a_config_error(task_config: str, error: str) -> None:
    message = parse_battle_start(start(green_battle_context={"task_config": task_config}))
    with pytest.raises(AgentBeatsMessageError) as refused:
        message.config_overrides()
    assert str(refused.value).startswith(error)
    assert refusal_reason(refused.value) is ResultReason.CONFIG_INVALID


def test_battle_info_shows_only_a_valid_id() -> None:
    assert parse_battle_info({"type": "battle_info", "battle_id": "b-1", "agent_id": "g"}).shown_id == "b-1"
    assert parse_battle_info({"type": "battle_info", "battle_id": "\ud800" * 50}).shown_id == "(invalid id)"
    assert parse_battle_info({"type": "battle_info"}).shown_id == "(invalid id)"


def test_reason_codes() -> None:
    assert refusal_reason(ConfigError("k: must be even")) is ResultReason.CONFIG_INVALID
    assert refusal_reason(BattleIdError("battle_id: a run for 'x' already exists")) is ResultReason.REQUEST_INVALID
    assert set(REFUSALS) == {ResultReason.CONFIG_INVALID, ResultReason.REQUEST_INVALID}
    assert json.dumps({"reason": ResultReason.HARNESS_ERROR}) == '{"reason": "harness_error"}'

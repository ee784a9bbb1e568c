"""The control tools treat what they receive as remote input: configs are remote configs (the user simulator's
endpoint, key variable and model stay the operator's), battle ids are validated by the shared validator and made
unguessable by the server, errors name no other battle, and cancel_battle ends a battle "cancelled" with the partial
result of the attempts that finished."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest

from tests.green_agent.service.mcp.conftest import GreenServer, control, error_text, structured, white_agent

pytestmark = pytest.mark.asyncio(loop_scope="session")

CALIBRATION = {"domain": "airline", "task_id": [0, 1], "k": 2, "calibration": True}
NOWHERE = "http://127.0.0.1:9"
"""A white agent URL nothing answers: configs and ids are checked before the white agent is probed."""


@pytest.mark.parametrize("field", ["base_url", "api_key_env", "model"])
@pytest.mark.parametrize("nested", [False, True], ids=["flat", "pass_k_config"])
async def test_operator_only_user_simulator_fields_are_refused(green: GreenServer, field: str, nested: bool) -> None:
    user = {"kind": "llm", field: "http://attacker.example/v1" if field == "base_url" else "ATTACKER_VALUE"}
    config: dict[str, Any] = {**CALIBRATION, "user_simulator": user}
    if nested:
        config = {"pass_k_config": CALIBRATION, "user_simulator": user}
    async with control(green) as client:
        result = await client.call_tool("start_battle", {"white_agent_url": NOWHERE, "config": config})
    text = error_text(result)
    assert f"user_simulator.{field}" in text and "operator" in text
    assert "does not answer" not in text  # refused before anything was contacted


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"user_simulator": {"temperature": 0.5, "max_user_turns": 3}}, "does not answer"),  # allowed: reaches probe
        ({"concurrency": 17}, "concurrency: at most 16"),
        ({"k": 66}, "k: Input should be less than or equal to 64"),
        ({"user_simulator": "llm"}, "user_simulator: expected a JSON object"),
    ],
)
async def test_configs_are_validated_as_remote_configs(
    green: GreenServer, config: dict[str, Any], message: str
) -> None:
    async with control(green) as client:
        result = await client.call_tool("start_battle", {"white_agent_url": NOWHERE, "config": config})
    assert message in error_text(result)


BAD_IDS = ["../etc", "a" * 129, "", "-leading-dash", "a/b", "a..b", "tab\there", "é-unicode"]


@pytest.mark.parametrize("battle_id", BAD_IDS)
async def test_invalid_battle_ids_are_refused_by_every_tool_without_echo(green: GreenServer, battle_id: str) -> None:
    async with control(green) as client:
        answers = [
            await client.call_tool("start_battle", {"white_agent_url": NOWHERE, "battle_id": battle_id}),
            await client.call_tool("get_battle", {"battle_id": battle_id}),
            await client.call_tool("get_results", {"battle_id": battle_id}),
            await client.call_tool("cancel_battle", {"battle_id": battle_id}),
        ]
        compared = await client.call_tool("compare_runs", {"a": battle_id, "b": {"t": [True]}})
    for answer in answers:
        text = error_text(answer)
        assert text.count("battle_id:") == 1 and "does not answer" not in text
        if len(battle_id) > 2:
            assert battle_id not in text  # the rejected value is not reflected back
    assert "a: " in error_text(compared)


async def test_server_made_battle_ids_are_random_and_long(green: GreenServer) -> None:
    async with white_agent("replay") as white, control(green) as client:
        ids = [
            structured(
                await client.call_tool("start_battle", {"white_agent_url": white, "config": CALIBRATION, "wait": True})
            )["battle_id"]
            for _ in range(2)
        ]
    assert all(re.fullmatch(r"[0-9a-f]{32}", battle_id) for battle_id in ids)  # 128 random bits
    assert ids[0] != ids[1]


async def test_errors_never_name_other_battles(green: GreenServer) -> None:
    async with white_agent("replay") as white, control(green) as client:
        mine = structured(
            await client.call_tool(
                "start_battle",
                {"white_agent_url": white, "config": CALIBRATION, "battle_id": "someone-elses-run", "wait": True},
            )
        )
        assert mine["state"] == "finished"
        answers = [
            await client.call_tool("get_battle", {"battle_id": "no-such-battle"}),
            await client.call_tool("get_results", {"battle_id": "no-such-battle"}),
            await client.call_tool("cancel_battle", {"battle_id": "no-such-battle"}),
            await client.call_tool("compare_runs", {"a": "no-such-battle", "b": "someone-elses-run"}),
            await client.call_tool("compare_runs", {"a": "someone-elses-run", "b": "no-such-battle"}),
        ]
    # Every battle this green agent has run has a run directory named by its id.
    known = {path.name for path in green.runs_dir.iterdir() if path.is_dir()}
    assert "someone-elses-run" in known
    for answer in answers:
        text = error_text(answer)
        assert "no battle 'no-such-battle'" in text and "known" not in text
        assert not [battle_id for battle_id in known if battle_id in text]


async def test_a_run_directory_left_on_disk_is_not_reused(green: GreenServer) -> None:
    # A run from an earlier process of this green agent: not in the registry, but its directory has a summary.
    (green.runs_dir / "earlier-process-run").mkdir()
    (green.runs_dir / "earlier-process-run" / "summary.json").write_text("{}")
    async with white_agent("replay") as white, control(green) as client:
        result = await client.call_tool(
            "start_battle", {"white_agent_url": white, "config": CALIBRATION, "battle_id": "earlier-process-run"}
        )
    assert "battle_id" in error_text(result) and "already exists" in error_text(result)
    assert (green.runs_dir / "earlier-process-run" / "summary.json").read_text() == "{}"


async def test_cancel_keeps_the_attempts_that_finished_as_a_cancelled_result(green: GreenServer) -> None:
    # Seed 5 makes attempt 1 of both tasks hang (no reply) and attempt 2 of both succeed: after two attempts are
    # done, the battle can only be waiting on the two that hang.
    config = {**CALIBRATION, "turn_timeout_s": 600, "concurrency": 4}
    async with (
        white_agent("flaky", seed=5, fault_rates={"no_reply": 0.5}, no_reply_s=600) as white,
        control(green) as client,
    ):
        battle_id = structured(await client.call_tool("start_battle", {"white_agent_url": white, "config": config}))[
            "battle_id"
        ]
        for _ in range(600):  # bounded polling: the two good attempts finish in about a second
            status = structured(await client.call_tool("get_battle", {"battle_id": battle_id}))
            if status["attempts_done"] >= 2:
                break
            await asyncio.sleep(0.05)
        assert (status["state"], status["attempts_done"], status["attempts_total"]) == ("running", 2, 4)
        cancelled = structured(await client.call_tool("cancel_battle", {"battle_id": battle_id}))
        results = structured(await client.call_tool("get_results", {"battle_id": battle_id}))
        compared = await client.call_tool("compare_runs", {"a": battle_id, "b": {"t": [True]}})
    assert cancelled["state"] == "cancelled" and cancelled["was_running"] is True
    assert (cancelled["attempts_finished"], cancelled["attempts_total"]) == (2, 4)
    assert cancelled["message"] == (
        f"battle {battle_id} ended cancelled: 2 of 4 attempts finished; get_results has the partial summary"
    )
    assert results["state"] == results["status"] == "cancelled"
    assert [(a["attempt"], a["outcome"]) for a in results["attempts"]] == [(2, "success"), (2, "success")]
    summary = json.loads((green.runs_dir / battle_id / "summary.json").read_text())
    assert summary["status"] == "cancelled" and len(summary["attempts"]) == 2
    # A partial result is not compared as if it were a whole run (its missing attempts are the slow ones).
    assert "has not finished (state cancelled)" in error_text(compared)

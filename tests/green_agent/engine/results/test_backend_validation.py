"""The battle backend and Arena results: a result that declares ``"schema": "arena.battle-result/1"`` must match the
backend's copy of the published schema (422 naming the JSON path of the problem otherwise, and the battle stays
open); results without it are taken as posted. Stored Arena results are read through the backend's typed models."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from battle_backend.battles.arena_results import arena_schema_problem, parse_arena_result
from battle_backend.views.results import build_result_view, generic_result_view
from tests.battle_backend.conftest import Arena, result
from tests.battle_backend.sample_result import battle_result as foreign_result
from tests.green_agent.engine.results.builders import battle_result
from tests.green_agent.engine.results.conftest import RealRun


def arena_json() -> dict[str, Any]:
    """An Arena result exactly as the green agent posts it (its JSON dump)."""
    return battle_result().model_dump(mode="json")


async def running_battle(arena: Arena) -> str:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    return battle_id


def only_error(response: Any) -> dict[str, Any]:
    body = response.json()
    assert isinstance(body["detail"], list) and len(body["detail"]) == 1, body
    return body["detail"][0]  # type: ignore[no-any-return]


async def test_a_tampered_arena_result_is_refused_naming_the_path_and_the_battle_stays_open(arena: Arena) -> None:
    battle_id = await running_battle(arena)
    tampered = arena_json()
    tampered["summary"]["macro"][0]["pass_hat_mean"] = "0.75"
    response = await arena.post(battle_id, result("white_agent", tampered))
    assert response.status_code == 422, response.text
    error = only_error(response)
    assert error["loc"] == ["body", "detail", "summary", "macro", 0, "pass_hat_mean"]
    assert error["msg"].startswith("$.detail.summary.macro[0].pass_hat_mean: '0.75' is not of type 'number'")
    assert "arena.battle-result/1" in error["msg"]
    assert (await arena.get(battle_id))["state"] == "running"
    # The green agent's real result still counts.
    accepted = await arena.post(battle_id, result("white_agent", arena_json()))
    assert accepted.status_code == 204, accepted.text
    assert (await arena.get(battle_id))["state"] == "finished"


@pytest.mark.parametrize(
    ("tamper", "path"),
    [
        (lambda d: d["attempts"][2].update(outcome="won"), "$.detail.attempts[2].outcome"),
        (lambda d: d.pop("summary"), "$.detail"),
        (lambda d: d["config"].update(k="four"), "$.detail.config.k"),
        (lambda d: d["failure_breakdown"].update({"odd key": 1.5}), '$.detail.failure_breakdown["odd key"]'),
        (lambda d: d["summary"]["tasks"][1]["pass_hat"].append("x"), "$.detail.summary.tasks[1].pass_hat[4]"),
    ],
)
def test_the_problem_is_located_by_its_json_path(tamper: Any, path: str) -> None:
    data = arena_json()
    assert arena_schema_problem(data) is None
    tamper(data)
    problem = arena_schema_problem(data)
    assert problem is not None and problem.path == path, problem


def test_a_result_one_level_down_is_checked_too() -> None:
    data = arena_json()
    data["status"] = "lost"
    problem = arena_schema_problem({"battle_result": data})
    assert problem is not None and problem.path == "$.detail.battle_result.status"


async def test_foreign_results_are_accepted_as_before(arena: Arena) -> None:
    battle_id = await running_battle(arena)
    foreign = foreign_result(battle_id)  # Arena-like, but declares no schema: shown through the tolerant view
    assert "schema" not in foreign and arena_schema_problem(foreign) is None
    response = await arena.post(battle_id, result("white_agent", foreign))
    assert response.status_code == 204, response.text
    page = (await arena.client.get(f"/ui/battles/{battle_id}")).text
    assert 'id="pass-table"' in page and "[0.300, 0.900]" in page


@pytest.mark.parametrize(
    "detail",
    [
        {"score": "0.5", "summary": "text"},  # AgentBeats-style free-form detail
        {"schema": "someone-else/7", "summary": {"macro": "x"}},  # another schema: not ours to check
        {"schema": "arena.battle-result/2", "attempts": []},  # a later Arena version: unknown here, not refused
    ],
)
async def test_results_that_do_not_declare_arena_schema_1_are_not_checked(arena: Arena, detail: Any) -> None:
    battle_id = await running_battle(arena)
    response = await arena.post(battle_id, result("white_agent", detail))
    assert response.status_code == 204, response.text


async def test_a_result_without_the_battle_token_is_refused_before_any_schema_check(arena: Arena) -> None:
    battle_id = await running_battle(arena)
    tampered = arena_json()
    tampered["summary"] = "x"
    response = await arena.post(battle_id, result("white_agent", tampered), headers={})
    assert response.status_code == 401, response.text


async def test_a_real_battle_result_is_accepted_and_shown_through_the_typed_view(
    arena: Arena, real_run: RealRun
) -> None:
    detail = json.loads(real_run.summary_path.read_text(encoding="utf-8"))
    assert arena_schema_problem(detail) is None
    battle_id = await running_battle(arena)
    response = await arena.post(battle_id, result("white_agent", detail, markdown_content="# Arena"))
    assert response.status_code == 204, response.text
    page = (await arena.client.get(f"/ui/battles/{battle_id}")).text
    assert 'id="pass-table"' in page and 'id="attempt-grid"' in page
    assert "mock/base/0" in page


def test_the_typed_view_reads_what_the_tolerant_one_read() -> None:
    data = arena_json()
    typed = parse_arena_result(data)
    assert typed is not None and typed.summary.macro[0].j == 1
    assert build_result_view(data) == generic_result_view(data)
    view = build_result_view(data)
    assert [row.j for row in view.rows] == [1, 2, 3, 4]
    assert [row.task_key for row in view.grid] == ["retail/test/3", "retail/test/5"]
    assert view.outcome_counts == {"success": 5, "failure": 2, "infra_error": 1}
    assert view.rows[0].coverage_text == "2 / 2"


def test_an_unchecked_invalid_arena_result_falls_back_to_the_tolerant_view() -> None:
    data = arena_json()
    broken = copy.deepcopy(data)
    broken["attempts"][0]["task_index"] = "three"
    assert parse_arena_result(broken) is None
    view = build_result_view(broken)
    assert view.grid[0].task_key == "retail/test/three"


async def test_the_platform_mcp_tool_checks_arena_results_like_the_http_path(arena: Arena) -> None:
    from mcp import Client

    from tests.battle_backend.http.test_mcp_platform import error_text, mcp_url
    from tests.battle_backend.http.test_mcp_platform import running_battle as started_battle

    battle_id, token, *_ = await started_battle(arena)
    tampered = arena_json()
    tampered["summary"]["macro"][0]["pass_hat_mean"] = "0.75"
    end = {"battle_id": battle_id, "message": "done", "winner": "white_agent", "reported_by": "green_agent"}
    async with Client(mcp_url(arena)) as client:
        refused = await client.call_tool("report_on_battle_end", {**end, "detail": tampered, "battle_token": token})
        assert "$.detail.summary.macro[0].pass_hat_mean" in error_text(refused)
        assert (await arena.get(battle_id))["state"] == "running"
        accepted = await client.call_tool(
            "report_on_battle_end", {**end, "detail": arena_json(), "battle_token": token}
        )
        assert not accepted.is_error, accepted
    assert (await arena.get(battle_id))["state"] == "finished"

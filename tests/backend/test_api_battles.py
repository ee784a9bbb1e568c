"""The /battles endpoints and the battle flow as agents see it: creation checks, the messages agents receive,
events, the result, ELO and unlocking."""

from __future__ import annotations

import pytest

from tests.backend.conftest import Arena, RunningBackend, progress, result


async def test_create_battle_is_queued_then_runs(arena: Arena) -> None:
    green, white = await arena.pair()
    response = await arena.client.post(
        "/battles",
        json={"green_agent_id": green.agent_id, "opponents": [{"name": "white_agent", "agent_id": white.agent_id}]},
    )
    assert response.status_code == 201
    created = response.json()
    assert created["state"] == "queued"
    assert created["interact_history"] == []
    assert created["opponents"] == [{"name": "white_agent", "agent_id": white.agent_id, "role": "blue_agent"}]
    running = await arena.wait_state(created["battle_id"], "running")
    assert running["green_agent_id"] == green.agent_id
    assert "battle_token" not in running and "battle_token" not in str(running)


async def test_unknown_green_agent_is_404(backend: RunningBackend) -> None:
    response = await backend.client.post("/battles", json={"green_agent_id": "nope", "opponents": []})
    assert response.status_code == 404


async def test_unknown_opponent_is_404(arena: Arena) -> None:
    green = await arena.agent("green", green=True)
    response = await arena.client.post(
        "/battles", json={"green_agent_id": green.agent_id, "opponents": [{"name": "white_agent", "agent_id": "nope"}]}
    )
    assert response.status_code == 404


async def test_opponent_name_not_in_requirements_is_400_listing_expected_names(arena: Arena) -> None:
    requirements = [
        {"role": "blue_agent", "name": "white_agent", "required": True},
        {"role": "red_agent", "name": "attacker", "required": False},
    ]
    green = await arena.agent("green", green=True, requirements=requirements)
    white = await arena.agent("white")
    response = await arena.client.post(
        "/battles",
        json={"green_agent_id": green.agent_id, "opponents": [{"name": "defender", "agent_id": white.agent_id}]},
    )
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert "defender" in detail and "white_agent" in detail and "attacker" in detail


async def test_missing_required_participant_is_400(arena: Arena) -> None:
    green = await arena.agent("green", green=True)
    response = await arena.client.post("/battles", json={"green_agent_id": green.agent_id, "opponents": []})
    assert response.status_code == 400
    assert "white_agent" in response.json()["detail"]


async def test_a_participant_cannot_be_the_green_agent_slot(arena: Arena) -> None:
    white = await arena.agent("white")
    response = await arena.client.post("/battles", json={"green_agent_id": white.agent_id, "opponents": []})
    assert response.status_code == 400
    assert "not a green agent" in response.json()["detail"]


async def test_missing_opponents_field_is_422(backend: RunningBackend) -> None:
    response = await backend.client.post("/battles", json={"green_agent_id": "g"})
    assert response.status_code == 422
    assert ["body", "opponents"] in [e["loc"] for e in response.json()["detail"]]


async def test_opponent_without_agent_id_is_422_with_location(backend: RunningBackend) -> None:
    response = await backend.client.post("/battles", json={"green_agent_id": "g", "opponents": [{"name": "w"}]})
    assert response.status_code == 422
    assert ["body", "opponents", 0, "agent_id"] in [e["loc"] for e in response.json()["detail"]]


async def test_unknown_battle_is_404(backend: RunningBackend) -> None:
    assert (await backend.client.get("/battles/nope")).status_code == 404
    assert (await backend.client.post("/battles/nope", json=progress("x"))).status_code == 404


async def test_event_without_is_result_is_422(arena: Arena) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    response = await arena.post(battle_id, {"message": "no flag"})
    assert response.status_code == 422
    assert ["body", "is_result"] in [e["loc"] for e in response.json()["detail"]]


async def test_launchers_receive_the_agentbeats_reset_body(arena: Arena) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    for agent in (green, white):
        assert agent.launcher is not None
        assert agent.launcher.resets == [
            {"signal": "reset", "agent_id": agent.agent_id, "backend_url": arena.backend.url, "extra_args": {}}
        ]


async def test_every_agent_gets_battle_info_and_green_gets_battle_start(arena: Arena) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white), config={"k": 3})
    start = await arena.started(green, battle_id)
    assert green.fake.methods[-1] == "message/stream"
    for agent, name in ((green, "green_agent"), (white, "white_agent")):
        (info,) = agent.fake.messages_of_type("battle_info")
        assert {k: info[k] for k in ("type", "battle_id", "agent_name", "agent_id", "backend_url")} == {
            "type": "battle_info",
            "battle_id": battle_id,
            "agent_name": name,
            "agent_id": agent.agent_id,
            "backend_url": arena.backend.url,
        }
    context = start["green_battle_context"]
    assert context["battle_id"] == battle_id
    assert context["backend_url"] == arena.backend.url
    assert context["agent_name"] == "green"
    assert context["task_config"].startswith("Task description:")
    assert context["config"] == {"k": 3}
    assert start["opponent_infos"][0]["agent_url"] == white.url
    assert start["opponent_infos"][0]["name"] == "white"
    assert start["red_battle_contexts"] == {
        white.url: {"battle_id": battle_id, "backend_url": arena.backend.url, "agent_name": "white"}
    }
    assert white.fake.messages_of_type("battle_start") == []


async def test_progress_and_result_finish_the_battle_and_update_elo(arena: Arena) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    assert (
        await arena.post(battle_id, progress("turn 1", detail={"step": 1}, markdown_content="**one**"))
    ).status_code == 204
    response = await arena.post(battle_id, result("white_agent", {"score": 0.5}))
    assert response.status_code == 204
    battle = await arena.get(battle_id)
    assert battle["state"] == "finished"
    assert battle["result"] == {
        "winner": "white_agent",
        "detail": {"score": 0.5},
        "finish_time": "2026-11-22T00:00:01Z",
    }
    posted = [e for e in battle["interact_history"] if e.get("reported_by") == "green"]
    assert posted == [
        progress("turn 1", detail={"step": 1}, markdown_content="**one**"),
        result("white_agent", {"score": 0.5}),
    ]
    white_record = (await arena.client.get(f"/agents/{white.agent_id}")).json()
    green_record = (await arena.client.get(f"/agents/{green.agent_id}")).json()
    assert white_record["elo"]["rating"] == 1015
    assert white_record["elo"]["battle_history"][0]["result"] == "win"
    assert green_record["elo"]["rating"] is None
    assert green_record["elo"]["battle_history"][0]["result"] == "loss"
    assert white_record["status"] == green_record["status"] == "unlocked"


async def test_losing_opponent_loses_15(arena: Arena) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    assert (await arena.post(battle_id, result("green_agent"))).status_code == 204
    white_record = (await arena.client.get(f"/agents/{white.agent_id}")).json()
    assert white_record["elo"]["rating"] == 985
    assert white_record["elo"]["stats"]["losses"] == 1


async def test_winner_matched_by_alias(arena: Arena) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    assert (await arena.post(battle_id, result("white"))).status_code == 204
    assert (await arena.client.get(f"/agents/{white.agent_id}")).json()["elo"]["rating"] == 1015


async def test_events_for_a_finished_battle_are_400(arena: Arena) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    assert (await arena.post(battle_id, result("draw"))).status_code == 204
    late = await arena.post(battle_id, progress("too late"))
    assert late.status_code == 400
    assert "finished" in late.json()["detail"]
    assert (await arena.post(battle_id, result("white_agent"))).status_code == 400
    battle = await arena.get(battle_id)
    assert battle["result"]["winner"] == "draw"
    assert (await arena.client.get(f"/agents/{white.agent_id}")).json()["elo"]["rating"] == 1000


async def test_locked_agents_refuse_new_battles_and_deletion(arena: Arena) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    assert (await arena.client.get(f"/agents/{white.agent_id}")).json()["status"] == "locked"
    response = await arena.client.post(
        "/battles",
        json={"green_agent_id": green.agent_id, "opponents": [{"name": "white_agent", "agent_id": white.agent_id}]},
    )
    assert response.status_code == 400 and "not unlocked" in response.json()["detail"]
    assert (await arena.client.delete(f"/agents/{white.agent_id}")).status_code == 409
    await arena.post(battle_id, result("draw"))
    assert (await arena.client.get(f"/agents/{white.agent_id}")).json()["status"] == "unlocked"


async def test_list_battles_with_and_without_history(arena: Arena) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.wait_message(battle_id, "acknowledged battle_start")
    await arena.post(battle_id, progress("hello"))
    full = (await arena.client.get("/battles")).json()
    assert [b["battle_id"] for b in full] == [battle_id]
    assert any(e.get("message") == "hello" for e in full[0]["interact_history"])
    light = (await arena.client.get("/battles", params={"history": "false"})).json()
    assert "interact_history" not in light[0]
    assert light[0]["event_count"] == full[0]["event_count"] >= 1
    assert (await arena.client.get("/battles", params={"history": "maybe"})).status_code == 422


async def test_agent_without_launcher_needs_no_reset(arena: Arena) -> None:
    green = await arena.agent("green", green=True, launcher=None)
    white = await arena.agent("white", launcher=None)
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    assert (await arena.get(battle_id))["state"] == "running"


@pytest.mark.parametrize(
    ("timestamp", "status"),
    [(1763769600, 204), (1763769600.25, 204), ("2026-11-22T00:00:00Z", 204), (True, 422), ({"t": 1}, 422)],
)
async def test_progress_timestamps_are_iso_text_or_unix_numbers(arena: Arena, timestamp: object, status: int) -> None:
    """AgentBeats 1.2.6 takes a numeric timestamp (204); so do we, storing it as posted. Other types name the field."""
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    response = await arena.post(battle_id, progress("numbered", timestamp=timestamp))
    assert response.status_code == status, response.text
    if status == 422:
        assert ["body", "timestamp"] in [e["loc"][:2] for e in response.json()["detail"]]
        return
    events = [e for e in (await arena.get(battle_id))["interact_history"] if e.get("message") == "numbered"]
    assert [e["timestamp"] for e in events] == [timestamp]

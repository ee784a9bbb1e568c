"""The /agents endpoints: registration (card fetched), listing, ready flag, deletion, launcher check, bad input."""

from __future__ import annotations

import socket

from tests.battle_backend.conftest import WHITE_REQUIREMENT, Arena, RunningBackend


def closed_port_url() -> str:
    """A loopback URL where nothing listens (the port was free a moment ago)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


async def test_register_stores_the_agent_card_and_agentbeats_fields(arena: Arena) -> None:
    green, white = await arena.pair(battle_timeout=42)
    response = await arena.client.get(f"/agents/{green.agent_id}")
    assert response.status_code == 200
    record = response.json()
    assert record["agent_id"] == green.agent_id
    assert record["agent_card"]["name"] == "green"
    assert record["register_info"]["is_green"] is True
    assert record["register_info"]["participant_requirements"] == WHITE_REQUIREMENT
    assert record["register_info"]["battle_timeout"] == 42
    assert record["status"] == "unlocked" and record["ready"] is False
    assert record["elo"]["rating"] is None  # green agents are never rated
    white_record = (await arena.client.get(f"/agents/{white.agent_id}")).json()
    assert white_record["elo"]["rating"] == 1000
    assert white_record["elo"]["stats"]["total_battles"] == 0


async def test_list_agents_returns_every_agent_in_registration_order(arena: Arena) -> None:
    green, white = await arena.pair()
    listed = (await arena.client.get("/agents")).json()
    assert [a["agent_id"] for a in listed] == [green.agent_id, white.agent_id]


async def test_empty_alias_takes_the_card_name(arena: Arena) -> None:
    agent = await arena.agent("named-by-card")
    response = await arena.client.post(
        "/agents", json={"alias": " ", "agent_url": agent.url, "launcher_url": "", "is_green": False}
    )
    assert response.status_code == 201
    assert response.json()["register_info"]["alias"] == "named-by-card"


async def test_unreachable_agent_card_is_a_400_naming_the_url(backend: RunningBackend) -> None:
    url = closed_port_url()
    response = await backend.client.post(
        "/agents", json={"alias": "ghost", "agent_url": url, "launcher_url": "", "is_green": False}
    )
    assert response.status_code == 400
    assert "Failed to get agent card" in response.json()["detail"]
    assert url in response.json()["detail"]
    assert (await backend.client.get("/agents")).json() == []


async def test_missing_field_is_a_422_naming_it(backend: RunningBackend) -> None:
    response = await backend.client.post("/agents", json={"alias": "x", "launcher_url": "", "is_green": False})
    assert response.status_code == 422
    assert ["body", "agent_url"] in [error["loc"] for error in response.json()["detail"]]


async def test_green_agent_without_requirements_is_a_422(backend: RunningBackend) -> None:
    response = await backend.client.post(
        "/agents", json={"alias": "g", "agent_url": "http://127.0.0.1:1", "launcher_url": "", "is_green": True}
    )
    assert response.status_code == 422
    assert "participant_requirements" in response.text


async def test_bad_requirement_role_is_a_422_with_its_location(backend: RunningBackend) -> None:
    body = {
        "alias": "g",
        "agent_url": "http://127.0.0.1:1",
        "launcher_url": "",
        "is_green": True,
        "participant_requirements": [{"role": "purple_agent", "name": "w", "required": True}],
    }
    response = await backend.client.post("/agents", json=body)
    assert response.status_code == 422
    assert ["body", "participant_requirements", 0, "role"] in [e["loc"] for e in response.json()["detail"]]


async def test_is_green_must_be_a_boolean(backend: RunningBackend) -> None:
    body = {"alias": "g", "agent_url": "http://127.0.0.1:1", "launcher_url": "", "is_green": "yes"}
    response = await backend.client.post("/agents", json=body)
    assert response.status_code == 422
    assert ["body", "is_green"] in [e["loc"] for e in response.json()["detail"]]


async def test_malformed_json_is_a_422(backend: RunningBackend) -> None:
    response = await backend.client.post("/agents", content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body"]


async def test_unknown_agent_is_404_for_get_put_delete(backend: RunningBackend) -> None:
    assert (await backend.client.get("/agents/nope")).status_code == 404
    assert (await backend.client.put("/agents/nope", json={"ready": True})).status_code == 404
    assert (await backend.client.delete("/agents/nope")).status_code == 404


async def test_put_ready_sets_the_flag(arena: Arena) -> None:
    agent = await arena.agent("w")
    response = await arena.client.put(f"/agents/{agent.agent_id}", json={"ready": True})
    assert response.status_code == 204
    assert (await arena.client.get(f"/agents/{agent.agent_id}")).json()["ready"] is True
    response = await arena.client.put(f"/agents/{agent.agent_id}", json={"ready": False})
    assert response.status_code == 204
    assert (await arena.client.get(f"/agents/{agent.agent_id}")).json()["ready"] is False


async def test_put_without_ready_is_a_422(arena: Arena) -> None:
    agent = await arena.agent("w")
    response = await arena.client.put(f"/agents/{agent.agent_id}", json={"alias": "other"})
    assert response.status_code == 422
    assert ["body", "ready"] in [e["loc"] for e in response.json()["detail"]]


async def test_delete_removes_the_agent(arena: Arena) -> None:
    agent = await arena.agent("w")
    assert (await arena.client.delete(f"/agents/{agent.agent_id}")).status_code == 204
    assert (await arena.client.get(f"/agents/{agent.agent_id}")).status_code == 404


async def test_check_launcher_reports_online_and_offline(arena: Arena) -> None:
    agent = await arena.agent("w")
    online = (await arena.client.post("/agents/check_launcher", json={"launcher_url": agent.launcher_url})).json()
    assert online["online"] is True and online["status_code"] == 200
    offline = (await arena.client.post("/agents/check_launcher", json={"launcher_url": closed_port_url()})).json()
    assert offline["online"] is False and "error" in offline
    not_a_launcher = (await arena.client.post("/agents/check_launcher", json={"launcher_url": agent.url})).json()
    assert not_a_launcher["online"] is False


async def test_check_launcher_needs_a_url(backend: RunningBackend) -> None:
    response = await backend.client.post("/agents/check_launcher", json={})
    assert response.status_code == 422
    assert ["body", "launcher_url"] in [e["loc"] for e in response.json()["detail"]]


async def test_health(backend: RunningBackend) -> None:
    response = await backend.client.get("/health")
    assert response.status_code == 200
    assert response.json()["status"] == "ok"
    assert response.json()["store"] == "sqlite" and response.json()["replica_id"].startswith("sqlite-")

"""The /battles endpoints and the battle flow as agents see it: creation checks, the messages agents receive,
events, the result, ELO and unlocking."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from websockets.asyncio.client import connect

from battle_backend.store.records import EventRecord, utc_now_iso
from battle_backend.store.timestamps import display_timestamp, result_finish_time
from battle_backend.views.rendering import event_context
from tests.battle_backend.conftest import Arena, RunningBackend, progress, result
from tests.battle_backend.views.test_live_updates import Sse, next_update, read_sse


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
    [(1763769600, 204), (1763769600.25, 204), (0, 204), ("2026-11-22T00:00:00Z", 204), (True, 422), ({"t": 1}, 422)],
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


# --- numeric timestamps: stored as posted, shown as ISO 8601 UTC text ---------------------------------------------
ISO_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")
"""The backend's one ISO format (utc_now_iso): microseconds, ``Z``."""


@pytest.mark.parametrize(
    ("posted", "shown"),
    [
        (1763769600, "2025-11-22T00:00:00.000000Z"),
        (1763769600.25, "2025-11-22T00:00:00.250000Z"),
        (1763769600.0000004, "2025-11-22T00:00:00.000000Z"),  # rounded to microseconds
        (0, "1970-01-01T00:00:00.000000Z"),
        (-1, "1969-12-31T23:59:59.000000Z"),  # before 1970 is still a time
        (253402300799, "9999-12-31T23:59:59.000000Z"),
        (-62135596800, "0001-01-01T00:00:00.000000Z"),
        (253402300800, "253402300800"),  # past year 9999: no date holds it, shown as posted
        (-62135596801, "-62135596801"),  # before year 1
        (10**40, str(10**40)),
        (1e300, "1e+300"),
        (float("nan"), "nan"),  # refused at the API (400); never crashes a page either
        ("2026-11-22T00:00:00Z", "2026-11-22T00:00:00Z"),  # text: as posted
        ("yesterday", "yesterday"),
        (None, ""),
    ],
)
def test_display_timestamp(posted: object, shown: str) -> None:
    assert display_timestamp(posted) == shown


def test_iso_text_has_the_format_of_utc_now_iso() -> None:
    assert ISO_UTC.match(utc_now_iso())
    assert ISO_UTC.match(display_timestamp(1763769600.5))
    assert ISO_UTC.match(result_finish_time(1e300))  # no date holds it: the time of receipt
    assert result_finish_time(1763769601.5) == "2025-11-22T00:00:01.500000Z"
    assert result_finish_time("2026-11-22T00:00:01Z") == "2026-11-22T00:00:01Z"


def test_timeline_entry_shows_zero_as_1970_and_a_missing_timestamp_as_the_receipt_time() -> None:
    def shown(payload: dict[str, Any]) -> str:
        event = EventRecord(battle_id="b", seq=1, payload=payload, received_at="2026-11-22T01:02:03.000000Z")
        return str(event_context(event)["timestamp"])

    assert shown({"is_result": False, "timestamp": 0}) == "1970-01-01T00:00:00.000000Z"
    assert shown({"is_result": False, "timestamp": 0.0}) == "1970-01-01T00:00:00.000000Z"
    assert shown({"is_result": False}) == shown({"is_result": False, "timestamp": ""}) == "2026-11-22T01:02:03.000000Z"


async def test_numeric_timestamps_are_iso_on_the_page_and_in_live_updates_and_stored_as_posted(arena: Arena) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    collected: list[Sse] = []

    async def listen() -> None:
        async with arena.client.stream("GET", f"/battles/{battle_id}/events", params={"since": 0}) as response:
            async for sse in read_sse(response):
                collected.append(sse)
                if sse.event == "end":
                    return

    listener = asyncio.create_task(listen())
    async with connect(arena.backend.url.replace("http://", "ws://") + "/ws/battles") as ws:
        assert (await arena.post(battle_id, progress("int", timestamp=1763769600))).status_code == 204
        assert (await arena.post(battle_id, progress("float", timestamp=1763769600.25))).status_code == 204
        assert (await arena.post(battle_id, result("white_agent", timestamp=1763769601.5))).status_code == 204
        pushed = await next_update(ws, battle_id, lambda b: b["state"] == "finished")
    async with asyncio.timeout(30):
        await listener

    # Stored and served by the API exactly as posted (type included); finish_time is ISO text.
    battle = await arena.get(battle_id)
    for record in (battle, pushed):  # GET /battles/{id} and the WebSocket's AgentBeats record alike
        posted = [e for e in record["interact_history"] if e.get("reported_by") == "green"]
        assert [(e["timestamp"], type(e["timestamp"])) for e in posted] == [
            (1763769600, int),
            (1763769600.25, float),
            (1763769601.5, float),
        ]
        assert record["result"]["finish_time"] == "2025-11-22T00:00:01.500000Z"

    # The battle page shows ISO text in the timeline and the result line.
    page = (await arena.client.get(f"/ui/battles/{battle_id}")).text
    for iso in ("2025-11-22T00:00:00.000000Z", "2025-11-22T00:00:00.250000Z", "2025-11-22T00:00:01.500000Z"):
        assert f"<time>{iso}</time>" in page
    assert "finished <time>2025-11-22T00:00:01.500000Z</time>" in page
    assert "1763769600" not in page and "1763769601" not in page

    # The live channel the page uses (SSE): fragments with ISO text; the raw event beside them as posted.
    live = {p["event"]["message"]: p for p in (json.loads(s.data) for s in collected if s.event == "battle_event")}
    assert "<time>2025-11-22T00:00:00.000000Z</time>" in live["int"]["html"]
    assert "<time>2025-11-22T00:00:00.250000Z</time>" in live["float"]["html"]
    assert "<time>2025-11-22T00:00:01.500000Z</time>" in live["done"]["html"]
    assert [live[m]["event"]["timestamp"] for m in ("int", "float", "done")] == [
        1763769600,
        1763769600.25,
        1763769601.5,
    ]
    states = [json.loads(s.data) for s in collected if s.event == "battle_state"]
    assert "finished <time>2025-11-22T00:00:01.500000Z</time>" in states[-1]["result_html"]


async def test_timestamp_numbers_no_date_can_hold_are_accepted_and_shown_as_posted(arena: Arena) -> None:
    """Decision: AgentBeats 1.2.6 stores any timestamp (204), so do we; a finite number outside years 1-9999 is
    shown as its own text, and a result's finish_time falls back to the time the backend received it."""
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    hostile: list[tuple[object, str]] = [
        (253402300800, "253402300800"),
        (-62135596801, "-62135596801"),
        (10**40, str(10**40)),
        (-1e300, "-1e+300"),
        (-1, "1969-12-31T23:59:59.000000Z"),
    ]
    for number, _ in hostile:
        response = await arena.post(battle_id, progress(f"at {number}", timestamp=number))
        assert response.status_code == 204, response.text
    before = utc_now_iso()
    assert (await arena.post(battle_id, result("white_agent", timestamp=1e300))).status_code == 204
    after = utc_now_iso()

    battle = await arena.get(battle_id)
    posted = [e for e in battle["interact_history"] if e.get("reported_by") == "green"]
    assert [e["timestamp"] for e in posted] == [number for number, _ in hostile] + [1e300]
    finish_time = battle["result"]["finish_time"]
    assert ISO_UTC.match(finish_time) and before <= finish_time <= after, finish_time

    response = await arena.client.get(f"/ui/battles/{battle_id}")
    assert response.status_code == 200
    for _, shown in [*hostile, (1e300, "1e+300")]:
        assert f"<time>{shown}</time>" in response.text
    assert f"finished <time>{finish_time}</time>" in response.text


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
async def test_non_finite_timestamps_are_refused_naming_timestamp(arena: Arena, number: str) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    body = '{"is_result": false, "message": "x", "reported_by": "green", "timestamp": ' + number + "}"
    response = await arena.client.post(
        f"/battles/{battle_id}", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400, response.text
    assert [e["loc"] for e in response.json()["detail"]] == [["body", "timestamp"]]
    assert [e for e in (await arena.get(battle_id))["interact_history"] if e.get("message") == "x"] == []

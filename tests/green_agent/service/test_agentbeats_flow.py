"""The AgentBeats battle protocol: battle_start is acknowledged at once, the battle runs in the background, progress
and exactly one result reach the backend in the AgentBeats shapes; a repeated battle_start is ignored."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
import pytest

from tests.green_agent.service.conftest import white_agent
from tests.green_agent.service.recording_backend import Recorded, make_recording_backend
from tests.support.servers import serve_app

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def send_v03(url: str, payload: dict[str, Any]) -> str:
    """Send one AgentBeats-style message (A2A 0.3 JSON-RPC message/send, as the AgentBeats backend does)."""
    body = {
        "jsonrpc": "2.0",
        "id": uuid.uuid4().hex,
        "method": "message/send",
        "params": {
            "message": {
                "kind": "message",
                "role": "user",
                "messageId": uuid.uuid4().hex,
                "parts": [{"kind": "text", "text": json.dumps(payload)}],
            }
        },
    }
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.post(url + "/", json=body)
    response.raise_for_status()
    result = response.json()["result"]
    return " ".join(part.get("text", "") for part in result.get("parts", []))


def battle_start(battle_id: str, backend: str, white: str, task_config: Any = None) -> dict[str, Any]:
    return {
        "type": "battle_start",
        "battle_id": battle_id,
        "green_battle_context": {
            "battle_id": battle_id,
            "backend_url": backend,
            "agent_name": "green",
            "task_config": task_config,
        },
        "red_battle_contexts": {white: {"battle_id": battle_id, "backend_url": backend, "agent_name": "white"}},
        "opponent_infos": [{"name": "white_agent", "agent_url": white}],
    }


async def test_battle_start_runs_in_background_and_reports_once(green_url: str) -> None:
    record = Recorded()
    battle_id = "ab-" + uuid.uuid4().hex[:8]
    config = {"domain": "retail", "task_id": [0, 1], "k": 2, "calibration": True}
    async with serve_app(make_recording_backend(record, fail_first=2)) as backend, white_agent("replay") as white:
        info = await send_v03(
            green_url,
            {
                "type": "battle_info",
                "battle_id": battle_id,
                "agent_name": "green",
                "agent_id": "g1",
                "backend_url": backend,
            },
        )
        assert battle_id in info
        ack = await send_v03(green_url, battle_start(battle_id, backend, white, json.dumps(config)))
        # Acknowledged at once: before the battle could finish (no result posted yet), not after it.
        assert not record.result_seen.is_set(), "battle_start must be acknowledged before the battle ends"
        assert "accepted" in ack
        again = await send_v03(green_url, battle_start(battle_id, backend, white, json.dumps(config)))
        assert "already running" in again
        await asyncio.wait_for(record.result_seen.wait(), timeout=120)
        await asyncio.sleep(0.3)  # anything posted after the result would show up here

    progress = [e for e in record.events if not e["is_result"]]
    assert len(record.results) == 1, "the result is delivered exactly once"
    assert record.events[-1]["is_result"], "the result comes after every progress event"
    messages = [e["message"] for e in progress]
    assert messages[0].startswith("🎯 Starting pass@2 evaluation")
    assert sum("🔄 Starting attempt" in m for m in messages) == 4, "one battle only: the repeat was ignored"
    assert sum("✅ Attempt" in m for m in messages) == 4
    for event in record.events:
        assert event["reported_by"] and event["timestamp"]
    result = record.results[0]
    assert result["winner"] == "white_agent"
    assert "pass^j" in result["markdown_content"]
    assert len(result["detail"]["attempts"]) == 4
    assert next(e["detail"]["type"] for e in progress) == "battle_started"


async def test_bad_task_config_is_refused_and_reported(green_url: str) -> None:
    record = Recorded()
    battle_id = "ab-" + uuid.uuid4().hex[:8]
    async with serve_app(make_recording_backend(record)) as backend:
        ack = await send_v03(green_url, battle_start(battle_id, backend, "http://127.0.0.1:9", {"k": 3}))
        assert "refused" in ack and "k must be even" in ack
        await asyncio.wait_for(record.result_seen.wait(), timeout=30)
    assert "k must be even" in record.results[0]["message"]
    # The refusal says why as a code (what `arena run --backend` decides its exit code on), the text for humans.
    detail = record.results[0]["detail"]
    assert detail["reason"] == "config_invalid" and "k must be even" in detail["error"]


async def test_a_battle_start_without_a_white_agent_is_refused_as_a_bad_request(green_url: str) -> None:
    record = Recorded()
    battle_id = "ab-" + uuid.uuid4().hex[:8]
    async with serve_app(make_recording_backend(record)) as backend:
        message = battle_start(battle_id, backend, "http://127.0.0.1:9")
        message["opponent_infos"], message["red_battle_contexts"] = [{"name": "white_agent"}], {}
        ack = await send_v03(green_url, message)
        assert ack == f"battle {battle_id} refused: opponent_infos: no white agent URL in battle_start"
        await asyncio.wait_for(record.result_seen.wait(), timeout=30)
    assert record.results[0]["detail"] == {
        "error": "opponent_infos: no white agent URL in battle_start",
        "reason": "request_invalid",
    }


async def test_a_battle_start_with_unusable_fields_is_refused_naming_the_field(green_url: str) -> None:
    bad_id = await send_v03(green_url, {"type": "battle_start", "battle_id": "../x"})
    assert bad_id.startswith("battle_start refused: battle_id: only letters")
    context = {"type": "battle_start", "battle_id": "ab-" + uuid.uuid4().hex[:8], "green_battle_context": [1, 2]}
    bad_context = await send_v03(green_url, context)
    assert bad_context == "battle_start refused: green_battle_context: expected a JSON object"


async def test_unknown_messages_get_the_accepted_formats(green_url: str) -> None:
    reply = await send_v03(green_url, {"hello": "there"})
    assert "battle_start" in reply and "participants" in reply

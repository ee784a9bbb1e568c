"""Replay of what the AgentBeats SDK (agentbeats==1.2.6) posts to a battle backend, against ours.

The fixture (fixtures/agentbeats_sdk_posts.json) was recorded by scripts/record_agentbeats_sdk_posts.py inside the
AgentBeats venv: the SDK's own reporting functions (update_battle_process, record_battle_event, record_agent_action,
the legacy log_* helpers, record_battle_result) posted to a recording server that forwarded each request to the REAL
AgentBeats backend and kept its status. Each post is replayed here, in order, onto a battle of our backend (the
recorded battle id in the path replaced by ours) and must get the status AgentBeats gave it; what was accepted must be
stored exactly as posted. One difference is by design and asserted as such: a result is accepted only with the
battle's token (the SDK's record_battle_result sends none; AgentBeats has no tokens).

The SDK stamps its posts with ISO text only. The fixture's ``numeric_timestamp_variants`` are the SDK's bodies with a
Unix-time number instead (re-posted by the recorder, not sent by the SDK), with the real backend's answers: they show
that a number is stored as posted and displayed as ISO 8601 UTC text.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.battle_backend.conftest import Arena

FIXTURE = Path(__file__).parents[1] / "fixtures" / "agentbeats_sdk_posts.json"
REPLAYED_HEADERS = ("accept", "content-type", "user-agent")
"""Recorded request headers sent again (connection and encoding are the client's own business)."""
ISO_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$")


@pytest.fixture(scope="module")
def recording() -> dict[str, Any]:
    """The recorded SDK posts."""
    data: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))
    assert data["format"] == "arena.agentbeats-sdk-posts/1"
    assert data["produced_by"]["versions"]["agentbeats"] == "1.2.6"
    return data


async def running_battle(arena: Arena) -> str:
    """A battle of our backend in the state the recorded one was in: running, battle_start sent."""
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    return battle_id


async def replay(arena: Arena, post: dict[str, Any], recorded_id: str, battle_id: str, *, token: bool) -> Any:
    """Send one recorded request to our backend (same method, body bytes as the SDK's ``requests`` encodes them,
    path moved to ``battle_id``); ``token`` adds the battle token the green agent received."""
    prefix = f"/battles/{recorded_id}"
    assert post["path"].startswith(prefix), post["path"]
    headers = {name: value for name, value in post["headers"].items() if name in REPLAYED_HEADERS}
    if token:
        headers["X-Battle-Token"] = arena.green_token(battle_id) or ""
    return await arena.client.request(
        post["method"],
        f"/battles/{battle_id}{post['path'][len(prefix) :]}",
        content=json.dumps(post["body"]).encode(),
        headers=headers,
    )


def posted_events(battle: dict[str, Any]) -> list[dict[str, Any]]:
    """interact_history without the backend's own system entries."""
    return [event for event in battle["interact_history"] if event.get("reported_by") != "system"]


def mapped(value: Any, recorded_id: str, battle_id: str) -> Any:
    """A recorded response body with the recorded battle id replaced by ours."""
    return json.loads(json.dumps(value).replace(recorded_id, battle_id))


async def test_every_recorded_sdk_post_gets_agentbeats_status_and_is_stored_as_posted(
    arena: Arena, recording: dict[str, Any]
) -> None:
    recorded_id = recording["produced_by"]["battle_id"]
    battle_id = await running_battle(arena)
    posts = recording["posts"]
    assert {p["sdk_call"] for p in posts} >= {"update_battle_process(minimal)", "record_battle_result"}
    accepted = []
    for post in posts:
        is_result = isinstance(post["body"], dict) and post["body"].get("is_result") is True
        response = await replay(arena, post, recorded_id, battle_id, token=is_result)
        assert response.status_code == post["agentbeats_status"], (post["sdk_call"], response.text)
        if 200 <= response.status_code < 300:
            # shown as posted; a post without the battle's token (all but the result) is marked unverified
            accepted.append(post["body"] if is_result else {**post["body"], "unverified": True})
        elif isinstance(post.get("agentbeats_response", {}).get("detail"), str):
            # e.g. "Battle <id> is not in a valid state for updates: finished", word for word
            assert response.json() == mapped(post["agentbeats_response"], recorded_id, battle_id), post["sdk_call"]

    battle = await arena.get(battle_id)
    assert posted_events(battle) == accepted  # every key, every value (timestamps included) exactly as posted
    after = recording["agentbeats_battle_after"]
    assert len(accepted) == after["interact_history_length"]
    assert battle["state"] == after["state"] == "finished"
    assert battle["result"]["winner"] == after["result"]["winner"]
    assert battle["result"]["detail"] == after["result"]["detail"]
    assert battle["result"]["finish_time"] == after["result"]["finish_time"]  # ISO text, kept as posted

    # The SDK's ISO text is shown as posted, on the page's timeline and in the result line.
    page = (await arena.client.get(f"/ui/battles/{battle_id}")).text
    for body in accepted:
        assert ISO_UTC.match(body["timestamp"]), body["timestamp"]
        assert f"<time>{body['timestamp']}</time>" in page
    assert f"finished <time>{after['result']['finish_time']}</time>" in page


async def test_the_sdk_result_without_a_battle_token_is_refused_by_design(
    arena: Arena, recording: dict[str, Any]
) -> None:
    """AgentBeats has no battle tokens and took record_battle_result's post (204); ours requires the token for a
    result (only the green agent received it), so the post exactly as the SDK sends it is a 401 and changes nothing."""
    recorded_id = recording["produced_by"]["battle_id"]
    battle_id = await running_battle(arena)
    [post] = [p for p in recording["posts"] if p["sdk_call"] == "record_battle_result"]
    assert post["agentbeats_status"] == 204
    response = await replay(arena, post, recorded_id, battle_id, token=False)
    assert response.status_code == 401, response.text
    battle = await arena.get(battle_id)
    assert battle["state"] == "running" and posted_events(battle) == []


async def test_numeric_timestamps_are_stored_as_posted_and_shown_as_iso(
    arena: Arena, recording: dict[str, Any]
) -> None:
    variants = recording["numeric_timestamp_variants"]
    assert "NOT sent by the SDK" in variants["note"]
    battle_id = await running_battle(arena)
    for post in variants["posts"]:
        response = await replay(arena, post, variants["battle_id"], battle_id, token=post["body"]["is_result"])
        assert response.status_code == post["agentbeats_status"] == 204, (post["sdk_call"], response.text)

    battle = await arena.get(battle_id)
    posted = [
        post["body"] if post["body"]["is_result"] else {**post["body"], "unverified": True}
        for post in variants["posts"]
    ]
    stored = posted_events(battle)
    assert stored == posted
    assert [type(e["timestamp"]) for e in stored] == [int, float, float]  # 1763769600 stays an int, etc.

    # AgentBeats copies the number into result.finish_time; ours is ISO text (the number stays in the event).
    assert variants["agentbeats_battle_after"]["result"]["finish_time"] == 1763769601.5
    assert battle["result"]["finish_time"] == "2025-11-22T00:00:01.500000Z"

    page = (await arena.client.get(f"/ui/battles/{battle_id}")).text
    assert "<time>2025-11-22T00:00:00.000000Z</time>" in page  # int
    assert "<time>2025-11-22T00:00:00.250000Z</time>" in page  # float
    assert "<time>2025-11-22T00:00:01.500000Z</time>" in page  # the result event
    assert "finished <time>2025-11-22T00:00:01.500000Z</time>" in page
    assert "<time>1763769600" not in page

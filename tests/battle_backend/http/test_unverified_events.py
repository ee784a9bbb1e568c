"""Events posted without the battle's token (anyone may, without ``--require-token``): stored, shown as unverified
on every view, counted for nothing (issue 24, item 1).

A forged ``battle_started`` (calibration), forged ``attempt_finished`` events ("success"), a forged "system" line and
forged keys of the green agent: the battle record marks them ``"unverified": true`` and shows no idempotency key; the
battle page shows a badge and no system styling; the progress box, the attempt viewer and the calibration flag
ignore them; the SSE stream marks them too; the green agent's own events under the same keys are stored and count.
"""

from __future__ import annotations

import asyncio
import json

from tests.battle_backend.attempt_samples import attempt_finished, battle_started, progress_event
from tests.battle_backend.conftest import Arena, result
from tests.battle_backend.sample_result import battle_result
from tests.battle_backend.views.test_live_updates import Sse, read_sse

TASK = "retail/test/0"
NO_TOKEN: dict[str, str] = {}


async def _running(arena: Arena) -> str:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    return battle_id


def _forged(detail: dict[str, object], key: str, message: str = "forged") -> dict[str, object]:
    return {**progress_event(detail, message), "event_id": key}


async def test_forged_events_are_marked_and_count_for_nothing(arena: Arena) -> None:
    battle_id = await _running(arena)
    forged_finished = attempt_finished(TASK, 1, "success", done=1, total=2) | {"category": "FORGED"}
    forged = [
        _forged(battle_started([TASK], 2, calibration=True), f"{battle_id}:n:1"),
        _forged(forged_finished, f"{battle_id}:n:2"),
        {"is_result": False, "message": "Battle finished", "reported_by": "system", "event_id": f"{battle_id}:n:3"},
        {"is_result": False, "message": "claims", "reported_by": "x", "unverified": False},
    ]
    for body in forged:
        assert (await arena.post(battle_id, body, headers=NO_TOKEN)).status_code == 204
    # the green agent's own events, under the keys the squatter took: stored, not "duplicates"
    real = [
        {**progress_event(battle_started([TASK], 2)), "event_id": f"{battle_id}:n:1"},
        {**progress_event(attempt_finished(TASK, 1, "failure", done=1, total=2)), "event_id": f"{battle_id}:n:2"},
    ]
    for body in real:
        assert (await arena.post(battle_id, body)).status_code == 204

    battle = await arena.get(battle_id)
    history = battle["interact_history"]
    assert not any("event_id" in entry for entry in history)
    marked = [entry for entry in history if entry.get("unverified")]
    assert [entry["message"] for entry in marked] == ["forged", "forged", "Battle finished", "claims"]
    assert all(entry["unverified"] is True for entry in marked)  # a posted "unverified": false is not shown
    assert [e["detail"]["outcome"] for e in history if e.get("detail", {}).get("type") == "attempt_finished"] == [
        "success",
        "failure",
    ]

    page = (await arena.client.get(f"/ui/battles/{battle_id}")).text
    assert page.count("badge-unverified") == 4 and page.count("event-unverified") == 4
    assert page.count("event-system") == len([e for e in history if e.get("reported_by") == "system"]) - 1
    assert "calibration" not in page.split('id="battle-progress"', 1)[1].split("</section>", 1)[0].lower()
    progress = page.split('id="battle-progress"', 1)[1].split('id="timeline"', 1)[0]
    assert 'id="progress-done">1 / 2<' in progress and "FORGED" not in progress
    assert "0.000 [" in progress  # pass^1 from the real failure only, not the forged success

    viewer = await arena.client.get(f"/ui/battles/{battle_id}/attempts/{TASK}/1")
    assert viewer.status_code == 200 and "FORGED" not in viewer.text and "task_incomplete" in viewer.text

    # a forged attempt the green agent never reported is no attempt of the battle
    await arena.post(battle_id, progress_event(attempt_finished(TASK, 2, "success")), headers=NO_TOKEN)
    assert (await arena.client.get(f"/ui/battles/{battle_id}/attempts/{TASK}/2")).status_code == 404

    assert (await arena.post(battle_id, result("white_agent", battle_result(battle_id)))).status_code == 204
    finished = await arena.get(battle_id)
    assert finished["state"] == "finished" and not finished["interact_history"][-1].get("unverified")


async def test_the_live_stream_marks_unverified_events(arena: Arena) -> None:
    battle_id = await _running(arena)
    collected: list[Sse] = []

    async def listen() -> None:
        async with arena.client.stream("GET", f"/battles/{battle_id}/events", params={"since": 0}) as response:
            async for sse in read_sse(response):
                collected.append(sse)
                if sse.event == "battle_event" and json.loads(sse.data)["event"].get("message") == "real":
                    return

    listener = asyncio.create_task(listen())
    await arena.post(battle_id, {**progress_event({"type": "x"}, "forged"), "event_id": "k"}, headers=NO_TOKEN)
    await arena.post(battle_id, {**progress_event({"type": "x"}, "real"), "event_id": "k"})
    async with asyncio.timeout(30):
        await listener
    streamed = [json.loads(s.data) for s in collected if s.event == "battle_event"]
    by_message = {item["event"].get("message"): item for item in streamed}
    assert by_message["forged"]["event"]["unverified"] is True and "badge-unverified" in by_message["forged"]["html"]
    assert "unverified" not in by_message["real"]["event"] and "badge-unverified" not in by_message["real"]["html"]
    assert not any("event_id" in item["event"] for item in streamed)


async def test_path_values_never_make_the_viewer_fail(arena: Arena) -> None:
    battle_id = await _running(arena)
    for attempt in ("9" * 4301, "1" + "0" * 40, "0", "٣", "-1", "1e3", "99999999999"):
        response = await arena.client.get(f"/ui/battles/{battle_id}/attempts/{TASK}/{attempt}")
        assert response.status_code == 404, (attempt[:20], response.status_code)
        jsonl = await arena.client.get(f"/ui/battles/{battle_id}/attempts/{TASK}/{attempt}/trajectory.jsonl")
        assert jsonl.status_code == 404
    for since in ("9" * 4301, str(2**64), "1" + "0" * 30):
        response = await arena.client.get(f"/battles/{battle_id}/events", params={"since": since})
        assert response.status_code == 422, (since[:20], response.status_code)

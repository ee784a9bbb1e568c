"""A CALIBRATION battle is flagged in the status and the result and moves no ELO rating; the winner's rule is stated
next to the winner; a battle appearing in the list over the WebSocket shows the agents' aliases."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from websockets.asyncio.client import connect

from battle_backend.battles.facts import CALIBRATION_TEXT
from tests.battle_backend.attempt_samples import attempt_finished, battle_started, progress_event
from tests.battle_backend.conftest import Arena, result
from tests.battle_backend.sample_result import battle_result

RULE = "the white agent wins when macro pass^4 >= 0.5; this battle: 0.000 (green agent wins) <b>bold</b>"


def calibration_result(battle_id: str, *, calibration: bool = True, rule: str | None = RULE) -> dict[str, Any]:
    detail = battle_result(battle_id)
    detail["calibration"] = calibration
    if rule is not None:
        detail["winner_rule"] = rule
    return detail


async def elo_of(arena: Arena, agent_id: str) -> dict[str, Any]:
    response = await arena.client.get(f"/agents/{agent_id}")
    assert response.status_code == 200
    return response.json()["elo"]  # type: ignore[no-any-return]


async def test_calibration_battle_is_flagged_and_moves_no_rating(arena: Arena) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    await arena.post(battle_id, progress_event(battle_started(["retail/test/0"], 2, calibration=True)))
    running = (await arena.client.get(f"/ui/battles/{battle_id}")).text
    assert 'id="status-calibration"' in running and CALIBRATION_TEXT in running  # flagged while it runs

    response = await arena.post(battle_id, result("green_agent", calibration_result(battle_id)))
    assert response.status_code == 204
    elo = await elo_of(arena, white.agent_id)
    assert elo["rating"] == 1000
    [entry] = elo["battle_history"]
    assert entry["battle_id"] == battle_id and entry["elo_change"] == 0 and entry["final_rating"] == 1000

    page = (await arena.client.get(f"/ui/battles/{battle_id}")).text
    assert 'id="status-calibration"' in page and 'id="result-calibration"' in page
    assert page.count(CALIBRATION_TEXT) >= 2


async def test_an_ordinary_battle_still_moves_the_rating_whatever_its_progress_events_claim(arena: Arena) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    # anyone may post progress events (no token needed by default): a forged battle_started spares nobody
    forged = await arena.post(battle_id, progress_event(battle_started(["retail/test/0"], 2, calibration=True)), {})
    assert forged.status_code == 204
    assert (
        await arena.post(battle_id, result("green_agent", calibration_result(battle_id, calibration=False)))
    ).status_code == 204
    elo = await elo_of(arena, white.agent_id)
    assert elo["rating"] == 985 and elo["battle_history"][0]["elo_change"] == -15
    page = (await arena.client.get(f"/ui/battles/{battle_id}")).text
    assert CALIBRATION_TEXT not in page  # the result decides once it is in


async def test_winner_rule_is_stated_next_to_the_winner(arena: Arena) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    await arena.post(battle_id, result("green_agent", calibration_result(battle_id, calibration=False)))
    page = (await arena.client.get(f"/ui/battles/{battle_id}")).text
    assert 'id="winner-rule"' in page and 'id="status-winner-rule"' in page
    escaped = "macro pass^4 &gt;= 0.5; this battle: 0.000 (green agent wins) &lt;b&gt;bold&lt;/b&gt;"
    status = page.split('id="battle-status"', 1)[1].split("</section>", 1)[0]
    result_section = page.split('id="battle-result"', 1)[1].split("</section>", 1)[0]
    assert escaped in status and escaped in result_section  # as text, next to the winner in both
    assert "<b>bold</b>" not in page


async def test_older_results_show_no_rule(arena: Arena) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    await arena.post(battle_id, result("white_agent", battle_result(battle_id)))
    page = (await arena.client.get(f"/ui/battles/{battle_id}")).text
    assert 'id="winner-rule"' not in page and 'id="status-winner-rule"' not in page
    assert CALIBRATION_TEXT not in page
    assert (await elo_of(arena, white.agent_id))["rating"] == 1015


async def test_a_new_battle_in_the_list_shows_aliases_not_ids(arena: Arena) -> None:
    green, white = await arena.pair()
    url = arena.backend.url.replace("http://", "ws://") + "/ws/battles"
    async with connect(url) as socket:
        first = json.loads(await asyncio.wait_for(socket.recv(), 30))
        assert first["type"] == "battles_update"
        battle_id = await arena.battle(green, ("white_agent", white))
        async with asyncio.timeout(30):
            while True:
                update = json.loads(await socket.recv())
                if update["type"] == "battle_update" and update["battle"]["battle_id"] == battle_id:
                    break
    assert update["battle"]["green_agent_id"] == green.agent_id  # the AgentBeats shape is unchanged
    row = update["row_html"]
    assert f'<tr data-battle-id="{battle_id}">' in row
    assert "<td>green</td>" in row and "white_agent: white" in row
    assert green.agent_id not in row and white.agent_id not in row


async def test_the_list_socket_sends_attempt_trajectories_as_stubs(arena: Arena) -> None:
    """The list page gets every battle with its history on each change: posted trajectories (up to 256 KB each, for
    the attempt viewer) go as a stub, or one update of a big battle would be megabytes per open tab."""
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    url = arena.backend.url.replace("http://", "ws://") + "/ws/battles"
    async with connect(url) as socket:
        await asyncio.wait_for(socket.recv(), 30)
        posted = progress_event(attempt_finished("retail/test/0", 1, "failure"))
        assert (await arena.post(battle_id, posted)).status_code == 204
        async with asyncio.timeout(30):
            while True:
                update = json.loads(await socket.recv())
                history = update.get("battle", {}).get("interact_history", [])
                if update["type"] == "battle_update" and any(
                    (e.get("detail") or {}).get("type") == "attempt_finished" for e in history
                ):
                    break
    [entry] = [e for e in history if (e.get("detail") or {}).get("type") == "attempt_finished"]
    stub = entry["detail"]["trajectory"]
    assert "messages" not in stub or isinstance(stub["messages"], int)
    assert stub["messages"] == len(posted["detail"]["trajectory"]["messages"]) > 0
    stored = (await arena.client.get(f"/battles/{battle_id}")).json()["interact_history"]
    assert any(isinstance((e.get("detail") or {}).get("trajectory", {}).get("messages"), list) for e in stored)

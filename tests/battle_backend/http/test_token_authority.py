"""The battle token is the green agent's alone: opponents never receive it, and results or progress posted without
it (or with a wrong one) are refused without using up the battle's one result.

The incident these guard against: the token was in every agent's battle_info, a white agent posted
``{"is_result": true, "winner": "white_agent"}`` with it (204), and the green agent's real result was then refused
(400, the battle being finished).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client
from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from battle_backend.store.protocol import TokenRejected
from battle_backend.store.records import BattleState, FinishSpec
from battle_backend.store.sqlite.store import SQLiteStore
from battle_backend.store.tokens import tokens_match
from tests.battle_backend.conftest import Arena, Registered, arena_on, progress, result, run_backend

TWO_OPPONENTS = [
    {"role": "blue_agent", "name": "white_agent", "required": True},
    {"role": "red_agent", "name": "red_agent", "required": True},
]


def everything_sent_to(agent: Registered) -> str:
    """Every message the fake agent and its launcher received, as one text to search."""
    launcher = agent.launcher.resets if agent.launcher is not None else []
    return json.dumps({"a2a": agent.fake.received, "methods": agent.fake.methods, "launcher": launcher})


async def history_messages(arena: Arena, battle_id: str) -> list[str]:
    return [str(e.get("message")) for e in (await arena.get(battle_id))["interact_history"]]


async def test_opponents_never_receive_the_token(arena: Arena) -> None:
    green = await arena.agent("green", green=True, requirements=TWO_OPPONENTS)
    white = await arena.agent("white")
    red = await arena.agent("red")
    battle_id = await arena.battle(green, ("white_agent", white), ("red_agent", red))
    start = await arena.started(green, battle_id)
    token = str(start["battle_token"])
    assert len(token) >= 24
    # the green agent has it, in battle_info and battle_start
    assert green.fake.messages_of_type("battle_info")[0]["battle_token"] == token
    assert start["green_battle_context"]["battle_token"] == token
    # the opponents got their battle_info (and a reset) but nothing carrying the token
    for opponent in (white, red):
        assert opponent.fake.messages_of_type("battle_info"), "the opponent was never contacted"
        assert opponent.launcher is not None and opponent.launcher.resets
        assert token not in everything_sent_to(opponent)
        assert "battle_token" not in everything_sent_to(opponent)
    # what the green agent is meant to forward to the opponents carries no token either
    forwarded = json.dumps({"red": start["red_battle_contexts"], "infos": start["opponent_infos"]})
    assert token not in forwarded and "battle_token" not in forwarded
    # nor does anything an opponent can read from the backend
    for path in (f"/battles/{battle_id}", "/battles", f"/ui/battles/{battle_id}", "/"):
        assert token not in (await arena.client.get(path)).text


async def test_forged_result_is_refused_and_the_green_result_still_counts(db_path: Path) -> None:
    async with run_backend(db_path, require_token=True) as backend, arena_on(backend) as arena:
        green, white = await arena.pair()
        battle_id = await arena.battle(green, ("white_agent", white))
        token = str((await arena.started(green, battle_id))["battle_token"])
        forged = result("white_agent", {"forged": True}, reported_by="white_agent")
        refusals = [
            await arena.post(battle_id, forged, headers={}),
            await arena.post(battle_id, forged, headers={"X-Battle-Token": "guess"}),
            await arena.post(battle_id, forged, headers={"Authorization": "Bearer guess"}),
            await arena.post(battle_id, forged, headers={"X-Battle-Token": token[:-1]}),
            await arena.post(battle_id, forged, headers={"X-Battle-Token": token + "x"}),
            await arena.post(battle_id, progress("forged progress"), headers={"X-Battle-Token": "guess"}),
        ]
        for response in refusals:
            assert response.status_code == 401, response.text
            assert response.headers["www-authenticate"] == "Bearer"
            assert "battle_token" in response.json()["detail"]
        battle = await arena.get(battle_id)
        assert battle["state"] == "running" and "result" not in battle
        assert [e for e in battle["interact_history"] if e.get("reported_by") != "system"] == []  # nothing written
        # the real result, with the green agent's token, is accepted once
        real = await arena.post(battle_id, result("green_agent", {"real": True}), headers={"X-Battle-Token": token})
        assert real.status_code == 204, real.text
        battle = await arena.get(battle_id)
        assert battle["state"] == "finished"
        assert battle["result"]["winner"] == "green_agent" and battle["result"]["detail"] == {"real": True}
        white_record = (await arena.client.get(f"/agents/{white.agent_id}")).json()
        assert white_record["elo"]["battle_history"][-1]["result"] == "loss"
        again = await arena.post(battle_id, result("white_agent"), headers={"X-Battle-Token": token})
        assert again.status_code == 400


async def test_without_required_tokens_a_wrong_token_is_still_refused(arena: Arena) -> None:
    """Token protection off (AgentBeats agents send none): a tokenless event is accepted, but a presented token
    must be right, so a stale or guessed one cannot finish the battle."""
    green, white = await arena.pair()
    first = await arena.battle(green, ("white_agent", white))
    first_token = str((await arena.started(green, first))["battle_token"])
    assert (await arena.post(first, result("draw"), headers={"X-Battle-Token": first_token})).status_code == 204
    second = await arena.battle(green, ("white_agent", white))
    second_token = str((await arena.started(green, second))["battle_token"])
    stale = await arena.post(second, result("white_agent"), headers={"X-Battle-Token": first_token})
    assert stale.status_code == 401
    assert (await arena.get(second))["state"] == "running"
    real = await arena.post(second, result("green_agent"), headers={"Authorization": f"Bearer {second_token}"})
    assert real.status_code == 204
    assert (await arena.get(second))["result"]["winner"] == "green_agent"


@pytest.mark.parametrize("header", [b"\xc3\xa9t\xc3\xa9", b"\xff\xfe", b"caf\xe9"])
async def test_non_ascii_token_headers_are_refused_not_crashed(db_path: Path, header: bytes) -> None:
    """hmac.compare_digest raises TypeError on non-ASCII str: the comparison must be on bytes."""
    async with run_backend(db_path, require_token=True) as backend, arena_on(backend) as arena:
        green, white = await arena.pair()
        battle_id = await arena.battle(green, ("white_agent", white))
        await arena.started(green, battle_id)
        for name in (b"x-battle-token", b"authorization"):
            value = header if name == b"x-battle-token" else b"Bearer " + header
            response = await arena.client.post(
                f"/battles/{battle_id}",
                content=json.dumps(result("white_agent")).encode(),
                headers=[(b"content-type", b"application/json"), (name, value)],
            )
            assert response.status_code == 401, response.text
        assert (await arena.get(battle_id))["state"] == "running"


async def test_mcp_report_with_a_wrong_token_leaves_the_battle_open(arena: Arena) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    token = str((await arena.started(green, battle_id))["battle_token"])
    base = {"battle_id": battle_id, "reported_by": "white_agent", "message": "forged", "winner": "white_agent"}
    async with Client(arena.backend.url + "/mcp/") as client:
        for wrong in ("guess", "\u00e9t\u00e9"):
            refused = await client.call_tool("report_on_battle_end", {**base, "battle_token": wrong})
            assert refused.is_error and "401" in refused.content[0].text  # type: ignore[union-attr]
        assert (await arena.get(battle_id))["state"] == "running"
        accepted = await client.call_tool(
            "report_on_battle_end", {**base, "reported_by": "green", "winner": "green_agent", "battle_token": token}
        )
        assert not accepted.is_error, accepted
    assert (await arena.get(battle_id))["result"]["winner"] == "green_agent"


def echoing_agent(name: str) -> Starlette:
    """An A2A 0.3 agent that answers every message with the very text it received (token included)."""

    async def card(request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "name": name,
                "description": "echoes",
                "url": str(request.url).split("/.well-known/")[0] + "/",
                "version": "1.0.0",
                "protocolVersion": "0.3.0",
                "capabilities": {"streaming": True},
                "defaultInputModes": ["text/plain"],
                "defaultOutputModes": ["text/plain"],
                "skills": [],
            }
        )

    async def rpc(request: Request) -> Response:
        body = await request.json()
        text = "".join(p.get("text", "") for p in body["params"]["message"]["parts"])
        reply = {
            "jsonrpc": "2.0",
            "id": body.get("id"),
            "result": {"kind": "message", "messageId": "m", "role": "agent", "parts": [{"kind": "text", "text": text}]},
        }
        if body.get("method") == "message/stream":

            async def events() -> AsyncIterator[dict[str, str]]:
                yield {"data": json.dumps(reply)}

            return EventSourceResponse(events(), ping=0)
        return JSONResponse(reply)

    return Starlette(
        routes=[Route("/.well-known/agent-card.json", card, methods=["GET"]), Route("/", rpc, methods=["POST"])]
    )


async def test_an_acknowledgement_echoing_the_token_is_logged_without_it(arena: Arena) -> None:
    url = await arena.mount("echo-green", echoing_agent("echo-green"))
    body = {
        "alias": "echo-green",
        "agent_url": url,
        "launcher_url": "",
        "is_green": True,
        "participant_requirements": [{"role": "blue_agent", "name": "white_agent", "required": True}],
    }
    response = await arena.client.post("/agents", json=body)
    assert response.status_code == 201, response.text
    green_id = response.json()["agent_id"]
    white = await arena.agent("white")
    created = await arena.client.post(
        "/battles",
        json={"green_agent_id": green_id, "opponents": [{"name": "white_agent", "agent_id": white.agent_id}]},
    )
    battle_id = created.json()["battle_id"]
    battle = await arena.wait_message(battle_id, "Green agent acknowledged battle_start")
    ack = next(e for e in battle["interact_history"] if e["message"] == "Green agent acknowledged battle_start")
    assert '"type": "battle_start"' in ack["detail"]["text"]  # the echo is there...
    assert "[battle_token]" in ack["detail"]["text"]  # ...with the token blanked out
    token = (await arena.backend.ctx.store.get_battle(battle_id, include_events=False)).battle_token  # type: ignore[union-attr]
    assert token and token not in json.dumps(battle)


async def test_store_token_rule_and_refused_result_keeps_the_slot(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.sqlite3")
    await store.open()
    try:
        green = await store.create_agent({"alias": "g", "is_green": True}, {})
        white = await store.create_agent({"alias": "w", "is_green": False}, {})
        battle = await store.create_battle(
            green.agent_id, [{"name": "white_agent", "agent_id": white.agent_id, "role": "blue_agent"}], {}, None
        )
        finish = FinishSpec(winner="white_agent", detail={}, finish_time="t")
        # no token issued yet (queued): a presented one cannot match
        with pytest.raises(TokenRejected):
            await store.append_event(battle.battle_id, {"is_result": True}, finish=finish, presented_token="x")
        await store.start_battle(battle.battle_id, "secret-token")
        started = await store.get_battle(battle.battle_id, include_events=False)
        assert started is not None
        for presented, enforce in (("wrong", False), ("wrong", True), (None, True), ("", False), ("\ud800", False)):
            with pytest.raises(TokenRejected):
                await store.append_event(
                    battle.battle_id,
                    {"is_result": True},
                    finish=finish,
                    presented_token=presented,
                    enforce_token=enforce,
                )
        stored = await store.get_battle(battle.battle_id)
        assert stored is not None and stored.state is BattleState.RUNNING
        assert stored.last_seq == started.last_seq  # nothing was appended
        record = await store.append_event(
            battle.battle_id, {"is_result": True}, finish=finish, presented_token="secret-token", enforce_token=True
        )
        assert record.seq == started.last_seq + 1
        stored = await store.get_battle(battle.battle_id)
        assert stored is not None and stored.state is BattleState.FINISHED
    finally:
        await store.close()


def test_tokens_match_is_total() -> None:
    assert tokens_match("abc", "abc")
    assert not tokens_match("abc", "abd")
    assert not tokens_match("abc", None) and not tokens_match(None, "abc") and not tokens_match("", "")
    assert not tokens_match("abc", "\u00e9") and not tokens_match("abc", "\ud800")


async def test_results_need_the_token_even_when_require_token_is_off(db_path: Path) -> None:
    """The default backend (AgentBeats-compatible: progress events may come without a token) still takes a result
    only from the holder of the battle's token, so an opponent that knows the public battle id cannot decide it."""
    async with run_backend(db_path) as backend, arena_on(backend) as arena:
        green, white = await arena.pair()
        battle_id = await arena.battle(green, ("white_agent", white))
        token = str((await arena.started(green, battle_id))["battle_token"])
        assert (await arena.post(battle_id, progress("tokenless progress"), headers={})).status_code == 204
        forged = await arena.post(battle_id, result("white_agent", reported_by="white_agent"), headers={})
        assert forged.status_code == 401
        assert (await arena.get(battle_id))["state"] == "running"
        real = await arena.post(battle_id, result("green_agent"), headers={"X-Battle-Token": token})
        assert real.status_code == 204
        battle = await arena.get(battle_id)
        assert battle["state"] == "finished" and battle["result"]["winner"] == "green_agent"

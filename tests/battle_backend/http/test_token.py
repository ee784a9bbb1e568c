"""Optional write protection: a per-battle token, sent to the green agent only (battle_info and battle_start),
required on events when on. See test_token_authority.py for the opponents' side and forged results."""

from __future__ import annotations

from pathlib import Path

from tests.battle_backend.conftest import Arena, arena_on, progress, result, run_backend


async def test_token_is_sent_to_the_green_agent_only_and_never_exposed(arena: Arena) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    start = await arena.started(green, battle_id)
    token = start["battle_token"]
    assert token and start["green_battle_context"]["battle_token"] == token
    assert green.fake.messages_of_type("battle_info")[0]["battle_token"] == token
    assert "battle_token" not in white.fake.messages_of_type("battle_info")[0]
    assert token not in (await arena.client.get(f"/battles/{battle_id}")).text
    assert token not in (await arena.client.get("/battles")).text


async def test_without_protection_events_need_no_token(arena: Arena) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    assert (await arena.post(battle_id, progress("no token"), headers={})).status_code == 204


async def test_protection_requires_the_right_token(db_path: Path) -> None:
    async with run_backend(db_path, require_token=True) as backend, arena_on(backend) as arena:
        green, white = await arena.pair()
        battle_id = await arena.battle(green, ("white_agent", white))
        token = (await arena.started(green, battle_id))["battle_token"]
        missing = await arena.post(battle_id, progress("no token"), headers={})
        assert missing.status_code == 401
        assert "X-Battle-Token" in missing.json()["detail"]
        assert missing.headers["www-authenticate"] == "Bearer"
        assert (await arena.post(battle_id, progress("wrong"), headers={"X-Battle-Token": "nope"})).status_code == 401
        assert (
            await arena.post(battle_id, progress("bearer wrong"), headers={"Authorization": "Bearer x"})
        ).status_code == 401
        assert (await arena.post(battle_id, progress("header"), headers={"X-Battle-Token": token})).status_code == 204
        assert (
            await arena.post(battle_id, progress("bearer"), headers={"Authorization": f"Bearer {token}"})
        ).status_code == 204
        messages = [e.get("message") for e in (await arena.get(battle_id))["interact_history"]]
        assert "header" in messages and "bearer" in messages
        assert "no token" not in messages and "wrong" not in messages
        assert (await arena.post(battle_id, result("draw"), headers={"X-Battle-Token": token})).status_code == 204


async def test_tokens_are_per_battle(db_path: Path) -> None:
    async with run_backend(db_path, require_token=True) as backend, arena_on(backend) as arena:
        first_pair = await arena.pair()
        second_pair = await arena.pair()
        first = await arena.battle(first_pair[0], ("white_agent", first_pair[1]))
        second = await arena.battle(second_pair[0], ("white_agent", second_pair[1]))
        first_token = (await arena.started(first_pair[0], first))["battle_token"]
        second_token = (await arena.started(second_pair[0], second))["battle_token"]
        assert first_token != second_token
        assert (await arena.post(second, progress("x"), headers={"X-Battle-Token": first_token})).status_code == 401

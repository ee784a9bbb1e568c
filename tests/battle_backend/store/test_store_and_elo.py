"""The store's transitions in isolation (compare-and-set, atomic finish) and the ELO matching rules, on both stores
(the ``store`` fixture of conftest runs each test on SQLite and on PostgreSQL)."""

from __future__ import annotations

import pytest

from battle_backend.store.elo import Participant, outcome_for, resolve_winner
from battle_backend.store.protocol import BattleClosed, BattleNotFound, BattleStore, StartOutcome, TokenRejected
from battle_backend.store.records import BattleState, FinishSpec, system_event


async def _battle(store: BattleStore) -> tuple[str, str, str]:
    green = await store.create_agent({"alias": "g", "is_green": True, "participant_requirements": []}, {"name": "G"})
    white = await store.create_agent({"alias": "w", "is_green": False}, {"name": "W"})
    battle = await store.create_battle(
        green.agent_id, [{"name": "white_agent", "agent_id": white.agent_id, "role": "blue_agent"}], {}, None
    )
    return battle.battle_id, green.agent_id, white.agent_id


async def test_start_locks_agents_and_a_second_start_is_refused(store: BattleStore) -> None:
    battle_id, green_id, white_id = await _battle(store)
    assert await store.start_battle(battle_id, "t") is StartOutcome.STARTED
    assert await store.start_battle(battle_id, "t") is StartOutcome.NOT_QUEUED
    assert (await store.get_agent(white_id)).status == "locked"  # type: ignore[union-attr]
    other = await store.create_battle(green_id, [], {}, None)
    assert await store.start_battle(other.battle_id, "t") is StartOutcome.AGENTS_BUSY


async def test_terminal_battles_refuse_events_and_transitions(store: BattleStore) -> None:
    battle_id, _, white_id = await _battle(store)
    await store.start_battle(battle_id, "secret")
    assert await store.fail_battle(battle_id, "boom")
    assert not await store.fail_battle(battle_id, "again")
    assert not await store.finish_battle(battle_id, FinishSpec("draw", {}, "t"), system_event("x"))
    with pytest.raises(BattleClosed):
        await store.append_event(battle_id, {"is_result": False})
    assert await store.add_system_event(battle_id, system_event("late")) is None
    battle = await store.get_battle(battle_id)
    assert battle is not None and battle.state is BattleState.ERROR and battle.error == "boom"
    assert (await store.get_agent(white_id)).status == "unlocked"  # type: ignore[union-attr]


async def test_token_check_and_unknown_battle(store: BattleStore) -> None:
    battle_id, _, _ = await _battle(store)
    with pytest.raises(TokenRejected):  # no token issued before the start
        await store.append_event(battle_id, {"is_result": False}, presented_token="x", enforce_token=True)
    await store.start_battle(battle_id, "secret")
    with pytest.raises(TokenRejected):
        await store.append_event(battle_id, {"is_result": False}, presented_token="wrong", enforce_token=True)
    record = await store.append_event(battle_id, {"is_result": False}, presented_token="secret", enforce_token=True)
    assert record.seq == 3  # after "Battle started" and "Agents locked"
    with pytest.raises(BattleNotFound):
        await store.append_event("nope", {"is_result": False})


async def test_finishing_a_queued_battle_leaves_other_locks_alone(store: BattleStore) -> None:
    battle_id, green_id, white_id = await _battle(store)
    await store.start_battle(battle_id, "t")
    queued = await store.create_battle(green_id, [{"name": "white_agent", "agent_id": white_id}], {}, None)
    await store.append_event(queued.battle_id, {"is_result": True}, finish=FinishSpec("draw", {}, "t"))
    assert (await store.get_agent(white_id)).status == "locked"  # type: ignore[union-attr]


def test_winner_resolution_order() -> None:
    participants = [
        Participant("g", "green alias", "Green Card", True),
        Participant("w1", "alpha", "Alpha Card", False),
        Participant("w2", "beta", "Beta Card", False),
    ]
    opponents = [
        {"name": "white_agent", "role": "blue_agent", "agent_id": "w1"},
        {"name": "attacker", "role": "red_agent", "agent_id": "w2"},
    ]
    assert resolve_winner("draw", "g", opponents, participants) is None
    assert resolve_winner("green_agent", "g", opponents, participants) == "g"
    assert resolve_winner("attacker", "g", opponents, participants) == "w2"
    assert resolve_winner("blue_agent", "g", opponents, participants) == "w1"
    assert resolve_winner("w2", "g", opponents, participants) == "w2"
    assert resolve_winner("alpha", "g", opponents, participants) == "w1"
    assert resolve_winner("Beta Card", "g", opponents, participants) == "w2"
    assert resolve_winner("nobody", "g", opponents, participants) is None


def test_outcomes() -> None:
    assert outcome_for("a", "draw", None) == ("draw", 0)
    assert outcome_for("a", "x", "a") == ("win", 15)
    assert outcome_for("b", "x", "a") == ("loss", -15)
    assert outcome_for("b", "nobody", None) == ("loss", -15)  # AgentBeats: an unmatched winner makes everyone lose

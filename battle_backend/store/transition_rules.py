"""What a battle's state transitions decide, as pure functions that every store applies inside its own transaction.

Why a module of its own: the SQLite and the PostgreSQL stores write different SQL, but who takes part in a battle,
which pool member a battle starts on, who wins and how ratings move must be decided the same way by both, or the
same battle would end differently depending on the database. The stores read the rows, call these, and write what
they return; nothing here touches a database.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from battle_backend.store.elo import INITIAL_RATING, Participant, outcome_for, resolve_winner
from battle_backend.store.json_text import dumps
from battle_backend.store.protocol import BattleClosed, DuplicateEvent, StoreError, TokenRejected
from battle_backend.store.records import AgentRecord, BattleRecord, BattleState, EventRecord, FinishSpec, utc_now_iso
from battle_backend.store.tokens import tokens_match


def new_agent(register_info: dict[str, Any], agent_card: dict[str, Any]) -> AgentRecord:
    """A new agent as every store writes it: a fresh id, unlocked, not ready, rated 1000 unless green (its pool,
    ``AgentRecord.pool``, comes from the registration)."""
    return AgentRecord(
        agent_id=str(uuid.uuid4()),
        register_info=dict(register_info),
        agent_card=dict(agent_card),
        status="unlocked",
        ready=False,
        elo_rating=None if register_info.get("is_green") else INITIAL_RATING,
        created_at=utc_now_iso(),
    )


def new_battle(
    green_agent_id: str,
    opponents: list[dict[str, Any]],
    config: dict[str, Any],
    backend_url: str | None,
    *,
    battle_id: str | None,
    green_pool: str | None,
    owner: str | None,
) -> BattleRecord:
    """A new queued battle as every store writes it (a fresh id unless one is given)."""
    return BattleRecord(
        battle_id=battle_id or str(uuid.uuid4()),
        green_agent_id=green_agent_id,
        opponents=[dict(op) for op in opponents],
        config=dict(config),
        state=BattleState.QUEUED,
        created_at=utc_now_iso(),
        last_seq=0,
        backend_url=backend_url,
        green_pool=green_pool,
        owner=owner,
    )


def append_refusal(
    battle_id: str,
    state: str,
    battle_token: str | None,
    *,
    presented_token: str | None,
    enforce_token: bool,
    event_id: str | None,
    stored: EventRecord | None,
) -> StoreError | None:
    """Why an event may not be appended to an existing battle, in the contract's order (token, idempotency key,
    closed battle), or None. ``stored`` is the event the battle already holds under ``event_id``, if any."""
    if presented_token is not None:
        if not tokens_match(battle_token, presented_token):
            return TokenRejected(battle_id, "the presented battle token is not this battle's")
    elif enforce_token:
        return TokenRejected(battle_id, "no battle token was presented")
    if event_id is not None and stored is not None:
        return DuplicateEvent(stored, event_id)
    if BattleState(state).is_terminal:
        return BattleClosed(battle_id, BattleState(state))
    return None


def participant_ids(green_agent_id: str, opponents: Sequence[Mapping[str, Any]]) -> list[str]:
    """The green agent, then the opponents, each once."""
    return list(dict.fromkeys([green_agent_id, *[str(op["agent_id"]) for op in opponents]]))


@dataclass(frozen=True)
class PoolMember:
    """A green agent of a pool as ``start_battle`` sees it: free or locked, in registration order."""

    agent_id: str
    locked: bool


def choose_green(requested: str, members: Sequence[PoolMember]) -> str | None:
    """The member a pool battle starts on: the green agent it was created for when that one is free (so a battle
    created for a specific member runs there whenever possible), else the oldest free member; None when every member
    is busy. ``members`` are in registration order."""
    free = [member.agent_id for member in members if not member.locked]
    if requested in free:
        return requested
    return free[0] if free else None


@dataclass(frozen=True)
class AgentFacts:
    """The columns of an agent that finishing a battle needs."""

    agent_id: str
    register_info: dict[str, Any]
    agent_card: dict[str, Any]
    elo_rating: int | None

    @property
    def is_green(self) -> bool:
        """Green agents are never rated."""
        return bool(self.register_info.get("is_green"))


@dataclass(frozen=True)
class OutcomeRow:
    """One participant's history entry (the columns of ``agent_battle_history``) and its rating after the battle
    (None: not rated)."""

    agent_id: str
    battle_id: str
    result: str
    elo_change: int
    final_rating: int | None
    opponents: str
    """JSON list of the opponents' agent ids."""
    green_agent_id: str
    timestamp: str

    def history_values(self) -> tuple[Any, ...]:
        """The values of :data:`HISTORY_COLUMNS`, in that order."""
        return (
            self.agent_id,
            self.battle_id,
            self.result,
            self.elo_change,
            self.final_rating,
            self.opponents,
            self.green_agent_id,
            self.timestamp,
        )


HISTORY_COLUMNS = "agent_id, battle_id, result, elo_change, final_rating, opponents, green_agent_id, timestamp"


def plan_outcomes(
    battle_id: str,
    green_agent_id: str,
    opponents: Sequence[Mapping[str, Any]],
    agents: Mapping[str, AgentFacts],
    outcome: Callable[[str], tuple[str, int]],
) -> list[OutcomeRow]:
    """Each existing participant's result, rating change and new rating (green agents and unrated agents keep
    None), in participant order; an agent deleted meanwhile gets no entry."""
    opponent_ids = dumps([str(op["agent_id"]) for op in opponents])
    now = utc_now_iso()
    rows: list[OutcomeRow] = []
    for agent_id in participant_ids(green_agent_id, opponents):
        agent = agents.get(agent_id)
        if agent is None:
            continue
        result, change = outcome(agent_id)
        rating = agent.elo_rating + change if not agent.is_green and agent.elo_rating is not None else None
        rows.append(
            OutcomeRow(
                agent_id=agent_id,
                battle_id=battle_id,
                result=result,
                elo_change=change,
                final_rating=rating,
                opponents=opponent_ids,
                green_agent_id=green_agent_id,
                timestamp=now,
            )
        )
    return rows


def error_outcome(_agent_id: str) -> tuple[str, int]:
    """A failed battle: an ``error`` entry for everyone, no rating change."""
    return "error", 0


def finish_outcome(
    spec: FinishSpec, green_agent_id: str, opponents: Sequence[Mapping[str, Any]], agents: Mapping[str, AgentFacts]
) -> Callable[[str], tuple[str, int]]:
    """The outcome function of a finished battle: the reported winner matched as AgentBeats does (`elo`), no rating
    change at all when ``spec.rated`` is False."""
    participants = [
        Participant(
            agent_id=agent_id,
            alias=agents[agent_id].register_info.get("alias"),
            card_name=agents[agent_id].agent_card.get("name"),
            is_green=agents[agent_id].is_green,
        )
        for agent_id in participant_ids(green_agent_id, opponents)
        if agent_id in agents
    ]
    winner_id = resolve_winner(spec.winner, green_agent_id, opponents, participants)

    def outcome(agent_id: str) -> tuple[str, int]:
        result, change = outcome_for(agent_id, spec.winner, winner_id)
        return result, change if spec.rated else 0

    return outcome

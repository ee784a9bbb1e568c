"""What a battle's state transitions decide, as pure functions that every store applies inside its own transaction.

Why a module of its own: the SQLite and the PostgreSQL stores write different SQL, but who takes part in a battle,
which pool member a battle starts on, who wins and how ratings move must be decided the same way by both, or the
same battle would end differently depending on the database. The stores read the rows, call these, and write what
they return; nothing here touches a database.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from battle_backend.elo import Participant, outcome_for, resolve_winner
from battle_backend.records import FinishSpec


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
    """One participant's history entry and its rating after the battle (None: not rated)."""

    agent_id: str
    result: str
    elo_change: int
    final_rating: int | None


def plan_outcomes(
    green_agent_id: str,
    opponents: Sequence[Mapping[str, Any]],
    agents: Mapping[str, AgentFacts],
    outcome: Callable[[str], tuple[str, int]],
) -> list[OutcomeRow]:
    """Each existing participant's result, rating change and new rating (green agents and unrated agents keep
    None), in participant order; an agent deleted meanwhile gets no entry."""
    rows: list[OutcomeRow] = []
    for agent_id in participant_ids(green_agent_id, opponents):
        agent = agents.get(agent_id)
        if agent is None:
            continue
        result, change = outcome(agent_id)
        rating = agent.elo_rating + change if not agent.is_green and agent.elo_rating is not None else None
        rows.append(OutcomeRow(agent_id=agent_id, result=result, elo_change=change, final_rating=rating))
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

"""ELO bookkeeping exactly as AgentBeats does it, as pure functions (the store applies them in its transaction).

AgentBeats rules: the winner gains 15, every other participant loses 15, a draw changes nothing, green agents are
never rated (their history is still kept). ``winner`` is matched in this order: "draw"; "green_agent"; an
opponent's battle name or role; an agent id; an alias or agent-card name. When nothing matches, nobody wins and
every rated participant loses 15 (AgentBeats does the same; we keep it for comparable ratings).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ELO_STEP = 15
INITIAL_RATING = 1000


@dataclass(frozen=True)
class Participant:
    """What the winner matching needs to know about one agent of the battle."""

    agent_id: str
    alias: str | None
    card_name: str | None
    is_green: bool


def resolve_winner(
    winner: str, green_agent_id: str, opponents: Sequence[Mapping[str, Any]], participants: Sequence[Participant]
) -> str | None:
    """The agent id the reported winner names, or None for a draw or an unknown name."""
    if winner == "draw":
        return None
    if winner == "green_agent":
        return green_agent_id
    for opponent in opponents:
        if winner in (opponent.get("name"), opponent.get("role")):
            return str(opponent.get("agent_id"))
    ids = {p.agent_id for p in participants}
    if winner in ids:
        return winner
    for participant in participants:
        if winner in (participant.alias, participant.card_name):
            return participant.agent_id
    return None


def outcome_for(agent_id: str, winner: str, winner_agent_id: str | None) -> tuple[str, int]:
    """(result, elo_change) for one participant."""
    if winner == "draw":
        return "draw", 0
    if agent_id == winner_agent_id:
        return "win", ELO_STEP
    return "loss", -ELO_STEP

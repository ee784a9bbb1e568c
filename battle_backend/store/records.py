"""What the store holds, as plain immutable records, and how each one looks on the wire (AgentBeats shapes).

Keeping the wire shape in one place means the JSON API, the WebSocket pushes and the web page all agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from battle_backend.store.timestamps import format_utc


class BattleState(StrEnum):
    """A battle's life: queued -> running -> finished | error (queued -> error and queued -> finished also exist)."""

    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    ERROR = "error"

    @property
    def is_terminal(self) -> bool:
        """Terminal battles accept no more events."""
        return self in (BattleState.FINISHED, BattleState.ERROR)


OPEN_STATES: tuple[BattleState, ...] = (BattleState.QUEUED, BattleState.RUNNING)


def utc_now_iso() -> str:
    """Timestamps in the AgentBeats format: ISO 8601, UTC, ``Z`` suffix (see `battle_backend.store.timestamps`)."""
    return format_utc(datetime.now(UTC))


@dataclass(frozen=True)
class BattleHistoryEntry:
    """One battle in an agent's ELO history."""

    battle_id: str
    result: str
    """win | loss | draw | error"""
    elo_change: int
    final_rating: int | None
    opponents: list[str]
    green_agent_id: str
    timestamp: str

    def to_api(self) -> dict[str, Any]:
        """AgentBeats' ``elo.battle_history`` item."""
        return {
            "battle_id": self.battle_id,
            "timestamp": self.timestamp,
            "result": self.result,
            "elo_change": self.elo_change,
            "final_rating": self.final_rating,
            "opponents": list(self.opponents),
            "green_agent_id": self.green_agent_id,
        }


@dataclass(frozen=True)
class AgentRecord:
    """A registered agent."""

    agent_id: str
    register_info: dict[str, Any]
    agent_card: dict[str, Any]
    status: str
    """locked | unlocked"""
    ready: bool
    elo_rating: int | None
    """None for green agents (they are never rated)."""
    created_at: str
    history: list[BattleHistoryEntry] = field(default_factory=list)

    @property
    def is_green(self) -> bool:
        """Whether the agent registered as an assessor."""
        return bool(self.register_info.get("is_green"))

    @property
    def pool(self) -> str | None:
        """The green-agent pool it joined at registration (``pool``), or None: members of one pool take the pool's
        queued battles in parallel, each battle on whichever member is free."""
        value = self.register_info.get("pool") if self.is_green else None
        return str(value) if value else None

    @property
    def alias(self) -> str:
        """The registered alias (falls back to the card name)."""
        return str(self.register_info.get("alias") or self.agent_card.get("name") or self.agent_id)

    @property
    def agent_url(self) -> str:
        """The URL it was registered with."""
        return str(self.register_info.get("agent_url", ""))

    @property
    def launcher_url(self) -> str:
        """Empty when the agent has no launcher (then no reset is sent and it counts as ready)."""
        return str(self.register_info.get("launcher_url") or "")

    def stats(self) -> dict[str, Any]:
        """Win/loss/draw/error counts and rates derived from the history (never stored twice)."""
        counts = {"wins": 0, "losses": 0, "draws": 0, "errors": 0}
        key = {"win": "wins", "loss": "losses", "draw": "draws", "error": "errors"}
        for entry in self.history:
            if entry.result in key:
                counts[key[entry.result]] += 1
        total = len(self.history)

        def rate(n: int) -> float:
            return n / total if total else 0.0

        return {
            **counts,
            "total_battles": total,
            "win_rate": rate(counts["wins"]),
            "loss_rate": rate(counts["losses"]),
            "draw_rate": rate(counts["draws"]),
            "error_rate": rate(counts["errors"]),
        }

    def to_api(self) -> dict[str, Any]:
        """The AgentBeats agent record."""
        return {
            "agent_id": self.agent_id,
            "register_info": dict(self.register_info),
            "agent_card": dict(self.agent_card),
            "status": self.status,
            "ready": self.ready,
            "elo": {
                "rating": self.elo_rating,
                "battle_history": [entry.to_api() for entry in self.history],
                "stats": self.stats(),
            },
            "created_at": self.created_at,
        }


@dataclass(frozen=True)
class EventRecord:
    """One entry of a battle's interact_history, with its per-battle sequence number (1, 2, 3, ...)."""

    battle_id: str
    seq: int
    payload: dict[str, Any]
    received_at: str
    verified: bool = True
    """True for what the battle's token holder posted (the green agent), what the backend wrote itself and what an
    operator imported; False for an event posted without the battle's token (anyone may post those unless
    ``--require-token``): shown as unverified, never counted as the battle's (attempts, progress, calibration)."""

    def public_payload(self) -> dict[str, Any]:
        """The event as the API, the pages and the live feeds show it: the payload as posted, without the poster's
        idempotency key (``event_id``: private to the poster, so nobody learns the keys it will use next), and for
        an unverified event with ``"unverified": true`` (a posted ``unverified`` key is never shown as ours)."""
        if "event_id" not in self.payload and "unverified" not in self.payload and self.verified:
            return self.payload
        shown = {key: value for key, value in self.payload.items() if key not in ("event_id", "unverified")}
        if not self.verified:
            shown["unverified"] = True
        return shown


@dataclass(frozen=True)
class BattleRecord:
    """A battle. ``events`` is empty unless the caller asked for them."""

    battle_id: str
    green_agent_id: str
    opponents: list[dict[str, Any]]
    config: dict[str, Any]
    state: BattleState
    created_at: str
    last_seq: int
    started_at: str | None = None
    finished_at: str | None = None
    deadline_at: float | None = None
    """Epoch seconds at which the battle times out (set when battle_start is sent)."""
    battle_timeout: float | None = None
    result: dict[str, Any] | None = None
    error: str | None = None
    backend_url: str | None = None
    battle_token: str | None = None
    """Secret: never part of ``to_api``."""
    green_pool: str | None = None
    """The green-agent pool the battle was queued for: it runs on whichever member is free when it starts, and
    ``green_agent_id`` then names that member."""
    owner: str | None = None
    """The backend replica that started the battle and runs its tasks (setup, timeout, green stream); another
    replica takes it over when this one stops renewing its lease."""
    events: list[EventRecord] = field(default_factory=list)

    @property
    def participant_ids(self) -> list[str]:
        """Green agent first, then the opponents in the order given."""
        return [self.green_agent_id, *[str(op["agent_id"]) for op in self.opponents]]

    def to_api(self, *, queue_position: int | None = None, include_history: bool = True) -> dict[str, Any]:
        """The AgentBeats battle record (the token is left out on purpose)."""
        body: dict[str, Any] = {
            "battle_id": self.battle_id,
            "green_agent_id": self.green_agent_id,
            "opponents": [dict(op) for op in self.opponents],
            "config": dict(self.config),
            "state": self.state.value,
            "created_at": self.created_at,
            "event_count": self.last_seq,
        }
        if include_history:
            body["interact_history"] = [event.public_payload() for event in self.events]
        if self.started_at:
            body["started_at"] = self.started_at
        if self.battle_timeout is not None:
            body["battle_timeout"] = self.battle_timeout
        if self.result is not None:
            body["result"] = dict(self.result)
        if self.error is not None:
            body["error"] = self.error
        if queue_position is not None:
            body["queue_position"] = queue_position
        if self.green_pool is not None:
            body["green_pool"] = self.green_pool
        return body


@dataclass(frozen=True)
class FinishSpec:
    """How a battle finishes: the reported winner (``draw`` on timeout), its detail and when."""

    winner: str
    detail: Any
    finish_time: str
    extra: dict[str, Any] = field(default_factory=dict)
    """Additional keys for ``result`` (e.g. the timeout reason)."""
    rated: bool = True
    """False: the battle moves no rating (a calibration battle checks the harness, not an agent); the history
    entries still say win/loss/draw, with an ``elo_change`` of 0."""

    def result_body(self) -> dict[str, Any]:
        """The ``result`` object of the battle record."""
        return {"winner": self.winner, "detail": self.detail, "finish_time": self.finish_time, **self.extra}


def system_event(message: str, detail: Any = None) -> dict[str, Any]:
    """An interact_history entry written by the backend itself (AgentBeats' ``add_system_log`` shape)."""
    event: dict[str, Any] = {
        "is_result": False,
        "message": message,
        "reported_by": "system",
        "timestamp": utc_now_iso(),
    }
    if detail is not None:
        event["detail"] = detail
    return event

"""What the green agent's A2A endpoint reads from a message: its JSON object, and an assessment request's fields.

Anyone may send these messages, so reading is bounded (:func:`green_agent.body_limits.json_shape_problem` before any
parse) and every refusal is a :class:`~green_agent.engine.config.ConfigError` naming the field.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from a2a.helpers import get_data_parts, get_text_parts
from a2a.types import Message

from green_agent.body_limits import json_shape_problem
from green_agent.engine.config import BattleConfig, ConfigError

if TYPE_CHECKING:
    from green_agent.service.running_battles import BattleRegistry

ACCEPTED_FORMATS = """This is the Arena green agent (tau-bench reliability assessor). Send one of:
1. an AgentBeats battle message: {"type": "battle_info", ...} or
   {"type": "battle_start", "battle_id": ..., "green_battle_context": {"backend_url": ..., "task_config": ...},
   "opponent_infos": [{"name": ..., "agent_url": ...}]}
2. an assessment request: {"participants": {"white_agent": "<A2A URL of the agent under test>"},
   "config": {"mode": "manual", "k": 4, "domain": "retail", "task_index": 5, ...}}
   answered as a Task that streams progress and ends with a "Result" artifact (markdown + JSON).
   Optional "battle_id"; "resume": true continues an interrupted run of that battle id (only missing attempts run),
   "retry_infra": true also re-runs its attempts that ended as infrastructure errors.
Both as JSON text (or a JSON data part)."""


def message_payload(message: Message | None) -> dict[str, Any] | None:
    """A message's JSON object (data part first, else the text), or None. Bounded: anyone may send these."""
    if message is None:
        return None
    for data in get_data_parts(message.parts):
        if isinstance(data, dict) and ("type" in data or "participants" in data):
            return data
    text = "\n".join(get_text_parts(message.parts)).strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    if not text.startswith("{") or json_shape_problem(text.encode("utf-8", "replace")) is not None:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def request_flag(payload: dict[str, Any], name: str) -> bool:
    """An optional boolean of the assessment request (``resume``, ``retry_infra``); anything else is refused."""
    value = payload.get(name, False)
    if not isinstance(value, bool):
        raise ConfigError(f"{name}: expected true or false")
    return value


def assessment_request(payload: dict[str, Any], registry: BattleRegistry) -> tuple[str, BattleConfig]:
    """The white agent URL and the validated config of an assessment request; ConfigError naming the field."""
    participants = payload.get("participants") or {}
    if not isinstance(participants, dict) or not participants:
        raise ConfigError('participants: expected {"white_agent": "<url>"}')
    white_url = participants.get("white_agent") or (
        next(iter(participants.values())) if len(participants) == 1 else None
    )
    if not isinstance(white_url, str) or not white_url:
        raise ConfigError(f"participants.white_agent: required (got roles {sorted(map(str, participants))[:8]})")
    raw_config = payload.get("config") or {}
    if not isinstance(raw_config, dict):
        raise ConfigError("config: expected a JSON object")
    return white_url, registry.remote_config(raw_config)

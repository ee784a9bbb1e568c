"""What the green agent's A2A endpoint reads from a message: its JSON object, and an assessment request's fields.

Anyone may send these messages, so reading is bounded (:func:`green_agent.body_limits.json_shape_problem` before any
parse) and every refusal is a :class:`~green_agent.engine.config.ConfigError` naming the field. The request's model
is :class:`green_agent.wire.assessment.AssessmentRequest`, shared with the launcher that sends it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from a2a.helpers import get_data_parts, get_text_parts
from a2a.types import Message

from green_agent.body_limits import json_shape_problem
from green_agent.engine.config import BattleConfig
from green_agent.wire.assessment import AssessmentRequest

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


def assessment_request(payload: dict[str, Any], registry: BattleRegistry) -> tuple[AssessmentRequest, BattleConfig]:
    """The parsed assessment request and its validated config; ConfigError naming the field.

    The request's shape (participants, config object, battle_id, flags) is checked by
    :meth:`AssessmentRequest.from_payload`, then the config against the operator's limits.
    """
    request = AssessmentRequest.from_payload(payload)
    return request, registry.remote_config(request.config)

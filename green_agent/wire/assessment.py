"""The assessment request and its "Result" artifact: what ``arena run`` sends the green agent and what it reads back.

Why a module of its own: the launcher builds the request and reads the artifact, the service parses the request and
builds the artifact; with one model on both sides the two cannot drift. The wire form is the one AgentBeats-style
clients already send (unchanged)::

    {"participants": {"white_agent": "<A2A URL>"}, "config": {...}, "battle_id": "...",
     "backend_url": "...", "battle_token": "...", "resume": true, "retry_infra": false}

Only ``participants`` is required; every other key is optional and keys the green agent does not know are ignored
(a sender may add its own). The artifact named :data:`RESULT_ARTIFACT_NAME` carries the battle's markdown as a text
part and its :class:`~green_agent.engine.results.BattleResult` JSON as a data part.

Parsing is for hostile input (anyone allowed to send the green agent a message): every refusal is a
:class:`~green_agent.engine.config.ConfigError` naming the field, and the config's own validation stays with the
service (it applies the operator's limits).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from pydantic import BaseModel, ConfigDict

from green_agent.engine.battle_ids import validate_battle_id
from green_agent.engine.config import ConfigError

RESULT_ARTIFACT_NAME: Final = "Result"


class AssessmentRequest(BaseModel):
    """One assessment request: the agent under test, the battle's config and how to run it.

    ``white_agent`` travels as ``participants.white_agent``; the other fields keep their names on the wire. Extra
    keyword fields given to the constructor are sent too (at top level), as ``arena run`` always allowed.
    """

    model_config = ConfigDict(frozen=True, extra="allow")

    white_agent: str
    config: dict[str, Any] = {}
    battle_id: str | None = None
    backend_url: str | None = None
    battle_token: str | None = None
    resume: bool = False
    retry_infra: bool = False

    def wire(self) -> dict[str, Any]:
        """The JSON object sent: the fields given (None left out), ``white_agent`` inside ``participants``."""
        fields = self.model_dump(mode="json", exclude_unset=True, exclude_none=True, exclude={"white_agent"})
        return {"participants": {"white_agent": self.white_agent}, **fields}

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> AssessmentRequest:
        """Parse the JSON object a message carried; ConfigError naming the field for anything malformed.

        ``participants`` may name the agent under test ``white_agent`` or hold a single role of any name;
        ``backend_url`` / ``battle_token`` that are not non-empty strings are ignored (no backend), as always.
        """
        participants = payload.get("participants") or {}
        if not isinstance(participants, dict) or not participants:
            raise ConfigError('participants: expected {"white_agent": "<url>"}')
        white_url = participants.get("white_agent") or (
            next(iter(participants.values())) if len(participants) == 1 else None
        )
        if not isinstance(white_url, str) or not white_url:
            raise ConfigError(f"participants.white_agent: required (got roles {sorted(map(str, participants))[:8]})")
        config = payload.get("config") or {}
        if not isinstance(config, dict):
            raise ConfigError("config: expected a JSON object")
        raw_battle_id = payload.get("battle_id")
        backend_url = payload.get("backend_url")
        battle_token = payload.get("battle_token")
        return cls(
            white_agent=white_url,
            config=config,
            battle_id=validate_battle_id(raw_battle_id) if raw_battle_id else None,
            backend_url=backend_url if isinstance(backend_url, str) and backend_url else None,
            battle_token=battle_token if isinstance(battle_token, str) else None,
            resume=_flag(payload, "resume"),
            retry_infra=_flag(payload, "retry_infra"),
        )


def _flag(payload: dict[str, Any], name: str) -> bool:
    """An optional boolean of the request (``resume``, ``retry_infra``); anything else is refused."""
    value = payload.get(name, False)
    if not isinstance(value, bool):
        raise ConfigError(f"{name}: expected true or false")
    return value


class ResultArtifact(BaseModel):
    """The "Result" artifact's content: the battle's markdown and its result JSON (``BattleResult`` for Arena).

    ``result`` stays a JSON object here: the launcher also reads other green agents' artifacts and validates the
    data where it uses it (summary.json's schema); the green agent builds it from a ``BattleResult``.
    """

    model_config = ConfigDict(frozen=True)

    markdown: str | None = None
    result: dict[str, Any] | None = None

    @classmethod
    def read(cls, texts: Iterable[str], data: Iterable[object]) -> ResultArtifact:
        """What an artifact's parts hold: the text parts joined by newlines, the first JSON object of its data parts."""
        texts = list(texts)
        result = next((item for item in data if isinstance(item, dict)), None)
        return cls(markdown="\n".join(texts) if texts else None, result=result)

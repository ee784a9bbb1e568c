"""The AgentBeats battle protocol as the green agent receives it: ``battle_info`` and ``battle_start`` messages.

AgentBeats (1.2.6) and our battle backend send them as A2A messages whose text (or data part) is a JSON object::

    {"type": "battle_info", "battle_id": ..., "agent_name": ..., "agent_id": ..., "backend_url": ...}
    {"type": "battle_start", "battle_id": ...,
     "green_battle_context": {"backend_url": ..., "battle_token": ..., "task_config": ... | "config": ...},
     "opponent_infos": [{"name": ..., "agent_url": ...}], "red_battle_contexts": {"<agent url>": {...}}}

A tolerant reader: unknown keys are ignored and optional values of another type count as absent, because the
platform's versions differ (``backend_url`` / ``battle_token`` at the top level or in the green context; our backend
passes the battle's config as ``config``, AgentBeats its registered ``task_config``, possibly as the text
``"Task description: {...}"``). What a battle cannot run without is refused with an :class:`AgentBeatsMessageError`
that names the field: the battle id, a green context that is not an object, the white agent's URL, a task config
that is not a JSON object.

The other direction: when a battle ends without attempts, the result the green agent posts to the backend says why
in ``detail["reason"]`` (:class:`ResultReason`), next to the text for humans in ``detail["error"]``; ``arena run
--backend`` decides its exit code on that code.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from green_agent.body_limits import json_shape_problem
from green_agent.engine.battle_ids import BattleIdError, validate_battle_id
from green_agent.engine.config import ConfigError


class ResultReason(StrEnum):
    """Why a battle's result holds no attempts (``detail["reason"]`` of the result posted to a backend)."""

    CONFIG_INVALID = "config_invalid"
    """The battle could not start: its config was refused (a field is invalid or exceeds this green agent's
    limits)."""
    REQUEST_INVALID = "request_invalid"
    """The battle could not start: the battle_start message lacks what a battle needs (the white agent's URL) or its
    battle id cannot be used."""
    HARNESS_ERROR = "harness_error"
    """The battle started and failed in the harness (not the agent's fault, not the config's)."""
    BUSY = "busy"
    """The battle could not start: this green agent runs as many battles and attempts as its operator allows and
    its queue is full (``arena-green --max-running-battles``, ``--max-attempts-in-flight``,
    ``--max-queued-battles``); sending it again later may work."""


REFUSALS = frozenset({ResultReason.CONFIG_INVALID, ResultReason.REQUEST_INVALID})
"""The reasons that mean "the battle could not start" (a configuration error for whoever asked for it)."""


class CapacityError(ConfigError):
    """A battle refused because this green agent is at capacity (running and queue full); try again later (reason
    ``busy``; raised by :mod:`green_agent.service.admission`)."""


class AgentBeatsMessageError(ConfigError):
    """A battle message the green agent cannot run; the text is ``"<field>: <problem>"``."""

    def __init__(self, field: str, problem: str, *, reason: ResultReason = ResultReason.REQUEST_INVALID) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.reason = reason


def refusal_reason(error: ConfigError) -> ResultReason:
    """The reason code of a battle that could not start because of ``error``."""
    if isinstance(error, CapacityError):
        return ResultReason.BUSY
    if isinstance(error, AgentBeatsMessageError):
        return error.reason
    if isinstance(error, BattleIdError):
        return ResultReason.REQUEST_INVALID
    return ResultReason.CONFIG_INVALID


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


OptionalText = Annotated[str | None, BeforeValidator(_text_or_none)]
"""A non-empty string, or None for anything else (absent, null, another type)."""


def _battle_id(value: object) -> str:
    try:
        return validate_battle_id(value)
    except BattleIdError as error:
        raise ValueError(str(error).removeprefix("battle_id: ")) from None


def _object_or_empty(value: object) -> object:
    if not value:
        return {}
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object")
    return value


def _first_opponent(value: object) -> object:
    first = value[0] if isinstance(value, list) and value else None
    return first if isinstance(first, dict) else None


def _red_agent_urls(value: object) -> list[str]:
    return [key for key in value if isinstance(key, str)] if isinstance(value, dict) else []


class OpponentInfo(BaseModel):
    """One entry of ``opponent_infos``: the white agent's name (for the winner) and URL."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: Any = None
    agent_url: OptionalText = None


class GreenBattleContext(BaseModel):
    """``green_battle_context``: where to report, with which token, and the battle's config."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    backend_url: OptionalText = None
    battle_token: OptionalText = None
    config: Any = None
    """Our backend: the battle's own config (an object)."""
    task_config: Any = None
    """AgentBeats: the green agent's registered task config (an object, JSON text, or "Task description: ...")."""


class BattleInfo(BaseModel):
    """``battle_info``: acknowledged, nothing stored."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    type: Literal["battle_info"]
    battle_id: Any = None

    @property
    def shown_id(self) -> str:
        """The battle id for an acknowledgement: the id if it is valid, else a neutral word (never echo junk)."""
        try:
            return validate_battle_id(self.battle_id)
        except BattleIdError:
            return "(invalid id)"


class BattleStart(BaseModel):
    """``battle_start``: run a battle against the first opponent and report to the backend."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    type: Literal["battle_start"]
    battle_id: Annotated[str, BeforeValidator(_battle_id)]
    green_battle_context: Annotated[GreenBattleContext, BeforeValidator(_object_or_empty)] = Field(
        default_factory=GreenBattleContext
    )
    opponent_infos: Annotated[OpponentInfo | None, BeforeValidator(_first_opponent)] = None
    """The first opponent (the others are ignored: a pass^k battle has one white agent)."""
    red_battle_contexts: Annotated[list[str], BeforeValidator(_red_agent_urls)] = Field(default_factory=list)
    """The opponents' URLs (the keys of AgentBeats' red contexts): the white agent's URL when no opponent info has
    one."""
    backend_url: OptionalText = None
    battle_token: OptionalText = None

    @property
    def report_url(self) -> str | None:
        """The backend to report to: the green context's, else the message's."""
        return self.green_battle_context.backend_url or self.backend_url

    @property
    def token(self) -> str | None:
        """The battle token the backend expects on reports."""
        return self.green_battle_context.battle_token or self.battle_token

    @property
    def white_name(self) -> str:
        """The white agent's name (the winner is reported by it)."""
        name = self.opponent_infos.name if self.opponent_infos is not None else None
        return str(name or "white_agent")

    def white_url(self) -> str:
        """The white agent's URL: the first opponent's, else the first red context's. AgentBeatsMessageError if none."""
        url = self.opponent_infos.agent_url if self.opponent_infos is not None else None
        url = url or next(iter(self.red_battle_contexts), None)
        if not url:
            raise AgentBeatsMessageError("opponent_infos", "no white agent URL in battle_start")
        return url

    def config_overrides(self) -> dict[str, Any] | None:
        """The battle's config as sent (None: use the green agent's default). AgentBeatsMessageError naming
        ``task_config`` when it is not a JSON object."""
        raw = self.green_battle_context.config or self.green_battle_context.task_config
        if isinstance(raw, str):  # AgentBeats 1.2.6 sends f"Task description: {registered task_config}"
            raw = raw.strip().removeprefix("Task description:").strip()
        if raw in (None, "", {}):
            return None
        if isinstance(raw, str):
            # JSON inside a JSON string: the body's shape check never saw it, so it is checked here before parsing.
            problem = json_shape_problem(raw.encode("utf-8", "replace"))
            if problem is not None:
                raise AgentBeatsMessageError("task_config", problem, reason=ResultReason.CONFIG_INVALID)
            try:
                raw = json.loads(raw)
            except ValueError:
                raise AgentBeatsMessageError(
                    "task_config", "not a JSON object", reason=ResultReason.CONFIG_INVALID
                ) from None
        if not isinstance(raw, dict):
            raise AgentBeatsMessageError("task_config", "expected a JSON object", reason=ResultReason.CONFIG_INVALID)
        return raw


def parse_battle_start(payload: dict[str, Any]) -> BattleStart:
    """The battle_start message in ``payload``; AgentBeatsMessageError naming the first field that is unusable."""
    try:
        return BattleStart.model_validate(payload)
    except ValidationError as error:
        raise _named(error) from None


def parse_battle_info(payload: dict[str, Any]) -> BattleInfo:
    """The battle_info message in ``payload``; AgentBeatsMessageError when it is not one."""
    try:
        return BattleInfo.model_validate(payload)
    except ValidationError as error:
        raise _named(error) from None


def _named(error: ValidationError) -> AgentBeatsMessageError:
    """The first problem of ``error`` as "<field>: <problem>" (the offending value is never repeated)."""
    first = error.errors(include_url=False, include_input=False)[0]
    field = ".".join(str(part) for part in first["loc"]) or "message"
    cause = first.get("ctx", {}).get("error")
    problem = str(cause) if isinstance(cause, Exception) else first["msg"]
    return AgentBeatsMessageError(field, problem)

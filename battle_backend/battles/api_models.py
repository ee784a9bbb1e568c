"""Pydantic models of every request body, and the error bodies (FastAPI's shapes, which AgentBeats clients know).

Bodies keep unknown keys (AgentBeats stores the registration and the events exactly as posted), but every key the
backend relies on is typed and bounded, so a wrong, missing or oversized one is a 422 that names it. Reading and
parsing the raw body (byte caps, nesting, numbers, surrogates) is `body_limits`' job; these models see only JSON
that passed it. A result whose detail declares Arena's schema is also checked against that schema
(:func:`check_arena_result`, after the battle's token was checked).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from battle_backend.battles.arena_results import ARENA_SCHEMA_ID, SchemaProblem, arena_schema_problem

MAX_NAME_CHARS = 256
"""Names, aliases, ids and roles: far more than any real one, small enough to show in a page or an error."""
MAX_URL_CHARS = 2048
"""URLs the backend will call (agent, launcher)."""
MAX_PARTICIPANTS = 64
"""Participant requirements of a green agent, opponents of a battle."""
MAX_EVENT_ID_CHARS = 256
"""An event's idempotency key."""


def _no_control_characters(value: str | None, field: str) -> str | None:
    """Names the backend stores as they are (an event's key, a pool's name) hold no control characters: a database
    text column cannot hold NUL, and a name shown on a page has no use for the others."""
    if value is not None and any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError(f"{field} must not contain control characters")
    return value


class ApiError(Exception):
    """An HTTP error with FastAPI's ``{"detail": ...}`` body."""

    def __init__(self, status_code: int, detail: Any, headers: dict[str, str] | None = None) -> None:
        super().__init__(str(detail))
        self.status_code = status_code
        self.detail = detail
        self.headers = headers or {}


def _http_url(value: str, field: str) -> str:
    value = value.strip()
    if not value.startswith(("http://", "https://")):
        raise ValueError(f"{field} must be an http:// or https:// URL")
    return value.rstrip("/")


class ParticipantRequirement(BaseModel):
    """One opponent slot a green agent needs."""

    model_config = ConfigDict(extra="allow")

    role: Literal["red_agent", "blue_agent"]
    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    required: bool


class AgentRegistration(BaseModel):
    """``POST /agents``."""

    model_config = ConfigDict(extra="allow")

    alias: str = Field(max_length=MAX_NAME_CHARS)
    agent_url: str = Field(max_length=MAX_URL_CHARS)
    launcher_url: str = Field(max_length=MAX_URL_CHARS)
    """May be empty: the agent has no launcher, gets no reset and counts as ready (handy when `arena run` starts
    the agents itself)."""
    is_green: bool = Field(strict=True)
    participant_requirements: list[ParticipantRequirement] | None = Field(default=None, max_length=MAX_PARTICIPANTS)
    battle_timeout: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    pool: Annotated[StrictStr, Field(min_length=1, max_length=MAX_NAME_CHARS)] | None = None
    """Green agents only: the pool this agent joins. Every member of a pool declares the same participant
    requirements; a battle created for any member (or for the pool) runs on whichever member is free."""

    @field_validator("pool")
    @classmethod
    def _pool_name(cls, value: str | None) -> str | None:
        return _no_control_characters(value, "pool")

    @field_validator("agent_url")
    @classmethod
    def _agent_url(cls, value: str) -> str:
        return _http_url(value, "agent_url")

    @field_validator("launcher_url")
    @classmethod
    def _launcher_url(cls, value: str) -> str:
        return _http_url(value, "launcher_url") if value.strip() else ""

    @model_validator(mode="after")
    def _green_needs_requirements(self) -> AgentRegistration:
        if self.is_green and self.participant_requirements is None:
            raise ValueError("participant_requirements is required when is_green is true")
        if self.pool is not None and not self.is_green:
            raise ValueError("pool: only green agents join a pool (is_green is false)")
        if self.pool is not None and not self.pool.strip():
            raise ValueError("pool: a pool name must not be blank")
        return self


class AgentUpdate(BaseModel):
    """``PUT /agents/{id}``: what launchers send."""

    model_config = ConfigDict(extra="ignore")

    ready: bool


class LauncherCheck(BaseModel):
    """``POST /agents/check_launcher``."""

    launcher_url: str = Field(min_length=1, max_length=MAX_URL_CHARS)

    @field_validator("launcher_url")
    @classmethod
    def _url(cls, value: str) -> str:
        return _http_url(value, "launcher_url")


class Opponent(BaseModel):
    """One opponent of a battle: the participant-requirement name it fills and the agent filling it."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    agent_id: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    role: str | None = Field(default=None, max_length=MAX_NAME_CHARS)


class BattleCreate(BaseModel):
    """``POST /battles``."""

    model_config = ConfigDict(extra="allow")

    green_agent_id: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_CHARS)
    """The green agent (AgentBeats' field). When it belongs to a pool, the battle may run on any free member."""
    green_pool: Annotated[StrictStr, Field(min_length=1, max_length=MAX_NAME_CHARS)] | None = None
    """Instead of (or with) green_agent_id: the green-agent pool to run the battle on."""
    opponents: list[Opponent] = Field(max_length=MAX_PARTICIPANTS)
    config: dict[str, Any] = Field(default_factory=dict)

    @field_validator("green_pool")
    @classmethod
    def _pool_name(cls, value: str | None) -> str | None:
        return _no_control_characters(value, "green_pool")

    @model_validator(mode="after")
    def _names_a_green_agent(self) -> BattleCreate:
        if self.green_agent_id is None and self.green_pool is None:
            raise ValueError("green_agent_id: give the green agent's id (or green_pool, a green-agent pool's name)")
        return self


class BattleEvent(BaseModel):
    """``POST /battles/{id}``: a progress event (is_result false) or the result (is_result true)."""

    model_config = ConfigDict(extra="allow")

    is_result: bool
    message: str | None = None
    reported_by: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    timestamp: Annotated[StrictStr, Field(max_length=64)] | StrictInt | StrictFloat | None = None
    """ISO 8601 text or a Unix time number (AgentBeats 1.2.6 accepts both); stored as posted."""
    detail: Any = None
    markdown_content: str | None = None
    winner: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    event_id: Annotated[StrictStr, Field(min_length=1, max_length=MAX_EVENT_ID_CHARS)] | None = None
    """The poster's idempotency key (Arena's green agent sends ``"<battle id>:<reporter nonce>:<seq>"``): an event
    whose key the battle already holds is acknowledged (204) and not stored again, so a retry after a lost answer is
    harmless. Optional; AgentBeats' own poster sends none (and AgentBeats 1.2.6 stores the key as an unknown field)."""

    @field_validator("event_id")
    @classmethod
    def _event_key(cls, value: str | None) -> str | None:
        return _no_control_characters(value, "event_id")


def arena_result_error(problem: SchemaProblem) -> ApiError:
    """422 for a result that declares Arena's schema and does not match it: FastAPI's shape, the location from the
    body's root, and a message that starts with the JSON path of the (first) problem."""
    return ApiError(
        422,
        [
            {
                "type": "arena_result_schema",
                "loc": ["body", *problem.loc],
                "msg": f"{problem.path}: {problem.message} (the result declares schema {ARENA_SCHEMA_ID!r} and "
                "does not match it; see docs/summary.schema.json)",
            }
        ],
    )


def check_arena_result(event: BattleEvent) -> None:
    """Refuse (422 naming the JSON path) a result whose detail declares Arena's schema without matching it. Results
    that do not declare it (other green agents, AgentBeats-style ones) pass unchecked. CPU-bound for large results:
    run it in a worker thread."""
    if not event.is_result:
        return
    problem = arena_schema_problem(event.detail)
    if problem is not None:
        raise arena_result_error(problem)


def validation_error(exc: ValidationError) -> ApiError:
    """422 listing every bad field with its location (``["body", "opponents", 0, "agent_id"]``)."""
    errors = []
    for error in exc.errors(include_url=False, include_input=False, include_context=False):
        loc = ["body", *error["loc"]]
        errors.append({"type": error["type"], "loc": loc, "msg": error["msg"]})
    return ApiError(422, errors)


def validate_data(model: type[BaseModel], data: Any) -> Any:
    """Validate parsed JSON (see `body_limits.read_json`): ApiError 422 naming the field."""
    if not isinstance(data, dict):
        raise ApiError(422, [{"type": "model_type", "loc": ["body"], "msg": "The body must be a JSON object"}])
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from exc

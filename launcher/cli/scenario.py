"""Scenario files: the TOML a user hands to ``arena run`` (``[pass_k_config]``, ``[user_simulator]``,
``[white_agent]``, ``[backend]``).

Why here: the scenario says how the launcher starts agents (which reference agent, which URL, which backend); only its
battle part travels to the green agent, validated by :class:`green_agent.engine.config.BattleConfig`, the same model a
remote request's ``config`` is validated with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, field_validator, model_validator

from green_agent.engine.config import (
    DEFAULT_MAX_ATTEMPTS_PER_BATTLE,
    MAX_CONCURRENCY,
    BattleConfig,
    ConfigError,
    StrictModel,
    read_toml,
)
from green_agent.engine.field_hints import format_model_error

MAX_URL_CHARS = 2048
"""Longest white-agent URL."""

FlakyFault = Literal[
    "skip_action",  # leave out the last write action -> task_incomplete
    "wrong_argument",  # corrupt an argument of a write action -> task_incomplete
    "malformed_reply",  # a reply that is no action at all -> format_error
    "no_reply",  # never answer one turn -> timeout (turn time limit)
    "crash",  # the agent's handler raises -> communication_error (JSON-RPC error)
    "report_failure",  # answer with a failed A2A Task -> white_agent_error
    "task_reply",  # answer with an A2A Task instead of a Message (must still succeed)
    "drop_final",  # never tell the user the required information -> missing_outputs
    "partial_final",  # tell only part of it -> incomplete_outputs
]


class WhiteAgentConfig(StrictModel):
    """The agent under test: a reference agent ``arena run`` starts, or an external A2A URL."""

    kind: Literal["llm", "replay", "flaky", "external"] = "replay"
    url: str | None = None
    model: str = "gpt-4.1-mini"
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    seed: int = 0
    fault_rates: dict[FlakyFault, Annotated[float, Field(ge=0.0, le=1.0)]] = Field(default_factory=dict)

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is None:
            return url
        if len(url) > MAX_URL_CHARS:
            raise ValueError(f"at most {MAX_URL_CHARS} characters")
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018  (raises ValueError for a port that is not a number or out of range)
        except ValueError:
            raise ValueError(f"not a valid URL: {url[:200]!r}") from None
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            raise ValueError(f"the white agent's URL must be http:// or https:// with a host (got {url[:200]!r})")
        return url

    @field_validator("fault_rates")
    @classmethod
    def _rates_sum_to_one(cls, rates: dict[str, float]) -> dict[str, float]:
        total = sum(rates.values())
        if total > 1.0 + 1e-9:
            raise ValueError(f"the fault rates must sum to at most 1 (they sum to {total:g})")
        return rates

    @model_validator(mode="after")
    def _external_needs_url(self) -> WhiteAgentConfig:
        if self.kind == "external" and not self.url:
            raise ValueError("url is required when kind = 'external'")
        return self


class BackendConfig(StrictModel):
    """Where progress goes: nowhere, an existing AgentBeats-compatible URL."""

    url: str | None = None


class Scenario(StrictModel):
    """A scenario TOML file: ``[pass_k_config]``, ``[user_simulator]``, ``[white_agent]``, ``[backend]``."""

    name: str = "battle"
    pass_k_config: BattleConfig = BattleConfig()
    white_agent: WhiteAgentConfig = WhiteAgentConfig()
    backend: BackendConfig = BackendConfig()

    @model_validator(mode="before")
    @classmethod
    def _lift_user_simulator(cls, data: Any) -> Any:
        # The user simulator is written as its own table in TOML but belongs to the battle config.
        if isinstance(data, dict) and "user_simulator" in data:
            data = dict(data)
            user = data.pop("user_simulator")
            battle = dict(data.get("pass_k_config") or {})
            battle["user_simulator"] = user
            data["pass_k_config"] = battle
        return data


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario TOML file; raise :class:`ConfigError` naming the file and the field.

    Everything that can be checked from the scenario and tau2's task lists is checked here, before any process
    starts (:func:`check_battle`): the tasks exist, none is listed twice, the split exists for every domain, the
    attempts and the concurrency fit the green agent ``arena run`` starts."""
    path = Path(path)
    data = read_toml(path)
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as error:
        raise ConfigError(f"{path}: {describe_scenario_error(error, data)}") from None
    check_battle(scenario.pass_k_config, where=f"{path}: ")
    return scenario


def check_battle(
    config: BattleConfig,
    *,
    where: str = "",
    max_attempts: int = DEFAULT_MAX_ATTEMPTS_PER_BATTLE,
    max_concurrency: int = MAX_CONCURRENCY,
) -> None:
    """The battle's checks that need the task lists (read from tau2's split files: fast, no agent) or the limits of
    the green agent ``arena run`` starts (its defaults); :class:`ConfigError` ``pass_k_config.<field>: ...``."""
    from green_agent.engine.tau.tasks import TaskSelectionError, check_task_selection  # imports tau2 (~0.5 s)

    if config.concurrency > max_concurrency:
        raise ConfigError(
            f"{where}pass_k_config.concurrency: at most {max_concurrency} attempts in flight on the green agent "
            f"arena run starts (got {config.concurrency})"
        )
    try:
        check_task_selection(config, max_attempts=max_attempts)
    except TaskSelectionError as error:
        raise ConfigError(f"{where}pass_k_config.{error.field}: {error}") from None


def describe_scenario_error(error: ValidationError, data: Any) -> str:
    """The problems of a scenario as ``path: message``, unknown keys with a did-you-mean (``[user_simulator]`` is
    named where it was written: the model moves it into ``pass_k_config``)."""
    written_apart = isinstance(data, dict) and "user_simulator" in data
    return format_model_error(
        error,
        Scenario,
        extra_names={(): ["user_simulator"]},
        rename={("pass_k_config", "user_simulator"): ("user_simulator",)} if written_apart else None,
    )

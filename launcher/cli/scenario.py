"""Scenario files: the TOML a user hands to ``arena run`` (``[pass_k_config]``, ``[user_simulator]``,
``[white_agent]``, ``[backend]``).

Why here: the scenario says how the launcher starts agents (which reference agent, which URL, which backend); only its
battle part travels to the green agent, validated by :class:`green_agent.engine.config.BattleConfig`, the same model a
remote request's ``config`` is validated with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, model_validator

from green_agent.engine.config import BattleConfig, ConfigError, StrictModel, read_toml
from green_agent.engine.field_hints import format_model_error

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
    """Read and validate a scenario TOML file; raise :class:`ConfigError` naming the file and the field."""
    path = Path(path)
    data = read_toml(path)
    try:
        return Scenario.model_validate(data)
    except ValidationError as error:
        raise ConfigError(f"{path}: {describe_scenario_error(error, data)}") from None


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

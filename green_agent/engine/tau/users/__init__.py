"""Simulated users: who plays the customer in an attempt.

* :class:`ScriptedUser` (``kind = "scripted"``): deterministic rules over the task's structured user instructions,
  no network (rules in :mod:`green_agent.engine.tau.users.scripted`);
* :class:`LLMUser` (``kind = "llm"``): an LLM over any OpenAI-compatible endpoint with tau2's own user-simulation
  prompt (:mod:`green_agent.engine.tau.users.llm`).

Both follow :class:`SimulatedUser`; the attempt loop records their text, their tool calls record themselves.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from green_agent.engine.config import ConfigError, UserSimulatorConfig
from green_agent.engine.tau.tasks import TaskRef
from green_agent.engine.tau.users.base import (
    STOP_TOKENS,
    SimulatedUser,
    UserSimulatorError,
    UserTurn,
)
from green_agent.engine.tau.users.scripted import ScriptedUser, first_person

if TYPE_CHECKING:
    from green_agent.engine.tau.environment import AttemptEnvironment
    from green_agent.engine.tau.users.llm import LLMUser, user_system_prompt
    from green_agent.llm_retry import CallLimiter

_LAZY = frozenset({"LLMUser", "user_system_prompt"})
"""Names of the LLM user's module, imported on first use: it pulls in ``openai`` (~0.7 s), which a battle with the
scripted user never needs, and the green agent's start-up should not pay."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from green_agent.engine.tau.users import llm

        return getattr(llm, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def user_api_key(config: UserSimulatorConfig) -> str | None:
    """The LLM user's API key from the environment variable the config names; ``None`` for the scripted user or
    when the variable is unset or empty."""
    if config.kind != "llm":
        return None
    return os.environ.get(config.api_key_env) or None


def check_user_config(config: UserSimulatorConfig) -> None:
    """Refuse, before a battle starts, an LLM user whose key is missing (the scripted user needs nothing)."""
    if config.kind == "llm" and user_api_key(config) is None:
        raise ConfigError(
            f"user_simulator.api_key_env: environment variable {config.api_key_env} is not set "
            "(needed by the llm user simulator)"
        )


def make_user(
    ref: TaskRef,
    config: UserSimulatorConfig,
    environment: AttemptEnvironment | None,
    *,
    api_key: str | None = None,
    limiter: CallLimiter | None = None,
) -> SimulatedUser:
    """A fresh simulated user for one attempt of ``ref``.

    ``environment``: the attempt's environment (the LLM user runs telecom device tools on it; the scripted user
    runs the device tools the agent names). ``api_key``: the LLM user's key; read from ``config.api_key_env``
    when omitted. ``limiter``: the LLM user's provider limiter (green_agent/provider_limits.py; the battle passes
    its own). Raises :class:`ConfigError` for an LLM user without a key.
    """
    if config.kind == "scripted":
        return ScriptedUser(ref, max_user_turns=config.max_user_turns, environment=environment)
    key = api_key or user_api_key(config)
    if key is None:
        check_user_config(config)
        raise AssertionError("unreachable")
    from green_agent.engine.tau.users.llm import LLMUser

    return LLMUser(ref, config, api_key=key, environment=environment, limiter=limiter)


__all__ = [
    "STOP_TOKENS",
    "LLMUser",
    "ScriptedUser",
    "SimulatedUser",
    "UserSimulatorError",
    "UserTurn",
    "check_user_config",
    "first_person",
    "make_user",
    "user_api_key",
    "user_system_prompt",
]

"""The backend battle as data for ``arena run --backend``: what ``--backend`` names, how long a battle may take,
and what a finished battle means (its exit code and message). Pure: no I/O.
"""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import urlsplit

from green_agent.engine.config import BattleConfig, ConfigError
from green_agent.wire.agentbeats import REFUSALS
from launcher.cli.run_verdict import EXIT_CONFIG_ERROR, EXIT_HARNESS_ERROR, EXIT_OK

LOCAL = "local"
_UPPER_BOUND_TASKS_PER_DOMAIN = 200
"""Mode "all" runs a whole split; no tau2 split is larger, so the timeout estimate stays an upper bound."""


def parse_backend(value: str) -> str:
    """``local`` or an http(s) URL without a trailing slash; ConfigError naming ``--backend`` otherwise."""
    value = value.strip()
    if value == LOCAL:
        return LOCAL
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(
            f"--backend: expected 'local' or an http(s) URL of an AgentBeats-compatible backend, got {value!r}"
        )
    return value.rstrip("/")


def estimate_battle_timeout(config: BattleConfig) -> float:
    """A ``battle_timeout`` no honest run of ``config`` exceeds: every wave of attempts at its time limit, plus slack.

    The backend turns an expired timeout into a draw and refuses the late result, so this errs on the large side.
    """
    if config.mode == "manual":
        tasks = len(config.task_indices)
    elif config.mode == "random":
        tasks = config.num_tasks
    else:
        tasks = _UPPER_BOUND_TASKS_PER_DOMAIN * len(config.domains)
    waves = math.ceil(tasks * config.k / config.concurrency)
    return float(max(600.0, waves * config.attempt_timeout_s + 300.0))


def result_event(battle: dict[str, Any]) -> dict[str, Any] | None:
    """The last ``is_result`` entry of the battle's history (it carries the markdown summary)."""
    for event in reversed(battle.get("interact_history") or []):
        if isinstance(event, dict) and event.get("is_result"):
            return event
    return None


def judge_battle(battle: dict[str, Any]) -> tuple[int, str | None]:
    """The exit code and error message for a battle the backend reports as over."""
    state = battle.get("state")
    if state == "error":
        return EXIT_HARNESS_ERROR, f"the backend stopped the battle: {battle.get('error') or 'no reason given'}"
    result: dict[str, Any] = battle.get("result") or {}
    detail: dict[str, Any] = result["detail"] if isinstance(result.get("detail"), dict) else {}
    score: dict[str, Any] = result["score"] if isinstance(result.get("score"), dict) else {}
    if "timeout" in (result.get("reason"), score.get("reason")):
        return EXIT_HARNESS_ERROR, "the battle timed out on the backend (a draw); later results are refused"
    if isinstance(detail.get("attempts"), list):
        return EXIT_OK, None
    event = result_event(battle) or {}
    message = str(event.get("message") or detail.get("error") or "the result holds no attempts")
    # Our green agent says why a result holds no attempts in detail["reason"]; a refusal is a configuration error.
    return (EXIT_CONFIG_ERROR if str(detail.get("reason")) in REFUSALS else EXIT_HARNESS_ERROR), message

"""Fixtures for the deployment tests: the Compose project as written, substituted with .env.example's values
(the default deployment) and with the offline values .env.example documents in its comments."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.deploy.deploy_support import BYO_FILE, COMPOSE_FILE, ENV_EXAMPLE, load_yaml, read_env_file

OFFLINE_KEYS = ("WHITE_AGENT_KIND", "ARENA_SCENARIO", "WHITE_AGENT_ARGS")


def documented_offline_env() -> dict[str, str]:
    """The offline settings .env.example shows in its comments (``#   KEY=VALUE`` lines), applied to its values."""
    env = read_env_file(ENV_EXAMPLE)
    text = ENV_EXAMPLE.read_text(encoding="utf-8")
    for key in OFFLINE_KEYS:
        match = re.search(rf"(?m)^#\s+{key}=(.*)$", text)
        assert match, f".env.example documents no offline {key}"
        env[key] = match.group(1).strip()
    return env


@pytest.fixture(scope="session")
def compose_raw() -> dict[str, Any]:
    """docker-compose.yml as written."""
    return load_yaml(COMPOSE_FILE)


@pytest.fixture(scope="session")
def byo_raw() -> dict[str, Any]:
    """compose.byo-white.yml as written."""
    return load_yaml(BYO_FILE)


@pytest.fixture(scope="session")
def example_env() -> dict[str, str]:
    """.env.example's values (what `cp .env.example .env` gives)."""
    return read_env_file(ENV_EXAMPLE)

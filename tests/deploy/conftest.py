"""Fixtures for the deployment tests: the Compose project as written, substituted with .env.example's values
(the default deployment) and with the offline values .env.example documents in its comments."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.deploy.deploy_support import BYO_FILE, COMPOSE_FILE, ENV_EXAMPLE, load_yaml, read_env_file

OFFLINE_KEYS = ("WHITE_AGENT_KIND", "ARENA_SCENARIO", "WHITE_AGENT_ARGS")
POSTGRES_KEYS = ("COMPOSE_PROFILES", "ARENA_BACKEND_DB")
POSTGRES_TEST_PASSWORD = "pw-only-in-the-environment-7f3a"
"""Stands in for the password a user picks (.env.example shows a placeholder); searched for in every command."""


def documented_env(keys: tuple[str, ...], what: str) -> dict[str, str]:
    """.env.example's values with the settings it shows in its comments (``#   KEY=VALUE`` lines) for ``keys``."""
    env = read_env_file(ENV_EXAMPLE)
    text = ENV_EXAMPLE.read_text(encoding="utf-8")
    for key in keys:
        matches = re.findall(rf"(?m)^#\s+{key}=(.*)$", text)
        assert len(matches) == 1, f".env.example documents {len(matches)} {what} {key} lines, not one"
        env[key] = matches[0].strip()
    return env


def documented_offline_env() -> dict[str, str]:
    """The offline settings .env.example shows in its comments, applied to its values."""
    return documented_env(OFFLINE_KEYS, "offline")


def documented_postgres_env() -> dict[str, str]:
    """The PostgreSQL settings .env.example shows in its comments, applied to its values, with a password set."""
    env = documented_env(POSTGRES_KEYS, "postgres")
    assert re.search(r"(?m)^#\s+POSTGRES_PASSWORD=\S", ENV_EXAMPLE.read_text(encoding="utf-8")), (
        ".env.example's PostgreSQL block must say to set POSTGRES_PASSWORD"
    )
    env["POSTGRES_PASSWORD"] = POSTGRES_TEST_PASSWORD
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

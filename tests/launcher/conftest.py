"""Fixtures for the launcher tests (helpers live in launcher_test_helpers)."""

from __future__ import annotations

import pytest
from launcher_test_helpers import subprocess_environment


@pytest.fixture
def subprocess_env() -> dict[str, str]:
    """Environment for child pythons: the repo and the fake agents importable."""
    env: dict[str, str] = subprocess_environment()
    return env

"""Fixtures for green-agent battle tests: one green agent server for the session (its scoring pool takes seconds
to start), white agents per test, and a helper that runs an assessment through the public A2A interface."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from green_agent.service.a2a_server import create_app
from green_agent.service.operator_auth import OperatorToken
from launcher.cli.assessment_client import AssessmentOutcome, run_assessment
from tests.support import TEST_OPERATOR_TOKEN
from tests.support.servers import serve_app_factory
from white_agent.app import create_white_agent_app, make_agent


@pytest.fixture(scope="session")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runs")


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def green_url(runs_dir: Path) -> AsyncIterator[str]:
    token = OperatorToken(TEST_OPERATOR_TOKEN)
    async with serve_app_factory(
        lambda url: create_app(url, runs_dir=runs_dir, operator_token=token), startup_timeout_s=60
    ) as url:
        yield url


@contextlib.asynccontextmanager
async def white_agent(kind: str = "replay", **options: Any) -> AsyncIterator[str]:
    """A reference white agent on a free loopback port."""
    agent = make_agent(kind, **options)
    async with serve_app_factory(lambda url: create_white_agent_app(agent, url)) as url:
        yield url


async def assess(green: str, white: str, config: dict[str, Any], **options: Any) -> AssessmentOutcome:
    """Run one assessment request and return its outcome (events, markdown, result JSON)."""
    options.setdefault("operator_token", TEST_OPERATOR_TOKEN)
    return await run_assessment(green, white, config, idle_timeout_s=120, **options)

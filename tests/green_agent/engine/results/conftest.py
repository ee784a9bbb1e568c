"""Fixtures of the typed-results tests: one real tiny battle for the module that asks for it (the green agent's
scoring pool takes seconds to start), and a battle backend on loopback with fake agents."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from green_agent.service.a2a_server import create_app
from green_agent.service.operator_auth import OperatorToken
from launcher.cli.assessment_client import AssessmentOutcome
from tests.battle_backend.conftest import Arena, arena_on, run_backend
from tests.green_agent.service.conftest import assess, white_agent
from tests.support import TEST_OPERATOR_TOKEN
from tests.support.servers import serve_app_factory

TINY_BATTLE: dict[str, Any] = {"domain": "mock", "split": "base", "task_id": 0, "k": 2, "calibration": True}
"""One mock task, two attempts of the replay agent: the smallest real battle."""


@dataclass(frozen=True)
class RealRun:
    """A battle run through the green agent's A2A interface: its run directory and the Result artifact."""

    run_dir: Path
    outcome: AssessmentOutcome

    @property
    def summary_path(self) -> Path:
        return self.run_dir / "summary.json"


async def _run_tiny_battle(runs_dir: Path) -> AssessmentOutcome:
    token = OperatorToken(TEST_OPERATOR_TOKEN)
    async with (
        serve_app_factory(
            lambda url: create_app(url, runs_dir=runs_dir, operator_token=token, scoring_workers=1),
            startup_timeout_s=60,
        ) as green,
        white_agent("replay") as white,
    ):
        return await assess(green, white, TINY_BATTLE)


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> RealRun:
    """One tiny real battle per module (its own event loop: the fixture is synchronous)."""
    runs_dir = tmp_path_factory.mktemp("runs")
    outcome = asyncio.run(_run_tiny_battle(runs_dir))
    assert outcome.completed, outcome.error
    assert outcome.result is not None
    return RealRun(run_dir=runs_dir / str(outcome.result["battle_id"]), outcome=outcome)


@pytest.fixture
async def arena(tmp_path: Path) -> AsyncIterator[Arena]:
    """A battle backend (SQLite in tmp_path) and fake agents around it."""
    async with run_backend(tmp_path / "backend.sqlite3") as running, arena_on(running) as built:
        yield built

"""Fixtures for driving one attempt with scripted parties against a real tau2 task (mock or retail).

The environment is real (a tool sandbox per attempt, forked from the fork server), so are the tool calls and, where
a rule depends on tau2's verdict, the scorer. Only the white agent, the user and (per rule) the scorer, the sandbox
factory or the tool gateway are scripted.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from green_agent.engine.attempt import AttemptDeps, AttemptSpec, ToolGateway, run_attempt
from green_agent.engine.channels import Scorer, UserFactory
from green_agent.engine.config import BattleConfig
from green_agent.engine.results import AttemptResult
from green_agent.engine.tau.sandbox import SandboxFactory
from green_agent.engine.tau.scoring import ScoringPool
from green_agent.engine.tau.tasks import TaskRef, resolve_task
from green_agent.engine.tau.users import make_user
from tests.green_agent.engine.fakes import ScriptedUser, ScriptedWhite

MOCK = resolve_task("mock", None, 0)
"""create_task_1: the agent must call create_task(user_id="user_1", title="Important Meeting")."""
RETAIL = resolve_task("retail", "test", 0)
"""A retail task: its tools include ``calculate``, whose arguments can make a call arbitrarily slow."""

LIMITS: dict[str, Any] = {"turn_timeout_s": 5.0, "attempt_timeout_s": 60.0, "max_steps": 10, "tool_timeout_s": 5.0}
"""Generous limits for rules that do not depend on them; rules about a limit set it small."""
SHORT = 0.5
"""A limit meant to expire (seconds): attempt deadlines and tool time limits of the rules about them."""


@pytest.fixture(scope="session")
def scoring_pool() -> Iterator[ScoringPool]:
    """tau2's evaluator in one worker process, started by the first score (only the scored rules need it)."""
    pool = ScoringPool(max_workers=1, warm=False)
    yield pool
    asyncio.run(pool.close())


class Arena:
    """Runs one attempt of a task with the given parties; checks that the fakes were used as the loop promises."""

    def __init__(self, sandboxes: SandboxFactory, scoring: ScoringPool, trajectories: Path) -> None:
        self.sandboxes = sandboxes
        self.scoring = scoring
        self.trajectories = trajectories
        self.last_white: ScriptedWhite | None = None
        self.last_user: ScriptedUser | None = None

    async def play(
        self,
        white: ScriptedWhite,
        user: ScriptedUser | None = None,
        *,
        ref: TaskRef = MOCK,
        scorer: Scorer | None = None,
        sandboxes: SandboxFactory | None = None,
        gateway: ToolGateway | None = None,
        user_factory: UserFactory | None = None,
        **limits: Any,
    ) -> AttemptResult:
        """One attempt of ``ref``: ``user`` None plays the real scripted user of the harness (``make_user``)."""
        self.last_white, self.last_user = white, user
        config = BattleConfig(**{**LIMITS, **limits})
        deps = AttemptDeps(
            config=config,
            scoring=scorer or self.scoring,
            white_channels=white,
            user_factory=user_factory or (user.factory if user is not None else make_user),
            user_api_key=None,
            trajectories_dir=self.trajectories,
            tool_gateway=gateway,
            sandboxes=sandboxes or self.sandboxes,
        )
        result = await run_attempt(AttemptSpec("blame-rules", ref, 1, "http://white.invalid"), deps)
        assert not white.exhausted, "the test's white-agent script was too short"
        assert white.opened == white.closed, "the white channel was not closed"
        if white.opened:
            assert (white.url, white.turn_timeout_s) == ("http://white.invalid", config.turn_timeout_s)
            assert {sent.context_id for sent in white.sent} == {result.context_id}
        if user is not None:
            assert not user.exhausted, "the test's user script was too short"
            assert user.closed or not user.made, "the simulated user was not closed"
        return result


@pytest_asyncio.fixture
async def arena(scoring_pool: ScoringPool, tmp_path: Path) -> AsyncIterator[Arena]:
    async with SandboxFactory() as sandboxes:
        yield Arena(sandboxes, scoring_pool, tmp_path / "trajectories")

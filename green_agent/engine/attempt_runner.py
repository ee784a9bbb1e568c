"""Who runs a battle's attempts when not the battle's own process or its local worker processes (issue 29).

A :class:`~green_agent.engine.battle.Battle` runs each attempt through ``run(spec)``: in its process, or on the local
:class:`~green_agent.engine.workers.pool.WorkerPool` (docs/design/workers.md). Given :data:`AttemptRunners` (a
factory), it runs them through the runner that factory yields instead: the battle stays the one writer of its run
directory, journal, events and statistics, whoever plays the attempts. The factory is entered once per run, after the
run directory is opened (so it knows what a resumed battle still lacks), and exited when the attempts are over or the
battle is cancelled or interrupted. The pooled battle's owner (green_agent/service/pool_owner.py) is one.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from green_agent.engine.attempt import AttemptSpec
from green_agent.engine.config import BattleConfig
from green_agent.engine.results import AttemptResult
from green_agent.engine.tau.tasks import TaskRef


@dataclass(frozen=True)
class AttemptPlan:
    """What a battle asks its runner to run."""

    battle_id: str
    white_agent_url: str
    config: BattleConfig
    run_dir: Path | None
    """The battle's run directory (None: it keeps none); the runner writes trajectories under ``trajectories/``."""
    attempts: tuple[tuple[TaskRef, int], ...]
    """The (task, attempt number) pairs still to run, in the order they start (a resumed battle: what its run
    directory lacks). The battle may ask for fewer (a cancel, a budget or a certification stop)."""


class AttemptRunner(Protocol):
    """Plays one attempt of the plan and returns its result; never raises for the attempt's own failures (a harness
    failure is a result: ``harness_failure``). Cancelling ``run`` abandons the attempt."""

    async def run(self, spec: AttemptSpec) -> AttemptResult: ...


AttemptRunners = Callable[[AttemptPlan], AbstractAsyncContextManager[AttemptRunner]]
"""The factory a battle takes: entered with the battle's plan, yields the runner of its attempts."""

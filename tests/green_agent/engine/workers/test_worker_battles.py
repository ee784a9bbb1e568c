"""Battles over attempt worker processes (issue 27): the same numbers as one process, a killed worker blamed on the
harness without a hang, cancel stopping the workers."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from green_agent.engine.battle import Battle
from green_agent.engine.config import BattleConfig
from green_agent.engine.events import BattleEvent
from green_agent.engine.results import BattleResult
from green_agent.engine.tau.scoring import ScoringPool
from green_agent.engine.workers.pool import worker_processes
from tests.support.servers import serve_app_factory
from white_agent.app import create_white_agent_app, make_agent
from white_agent.protocol import GreenTurn
from white_agent.replay import ReplayAgent
from white_agent.server import AgentReply

FAULTS = {"skip_action": 0.15, "wrong_argument": 0.1, "malformed_reply": 0.1, "crash": 0.1, "drop_final": 0.1}


class SlowReplay(ReplayAgent):
    """The replay agent, a little slow on every turn: attempts stay in flight long enough to be killed."""

    async def reply(self, context_id: str, turn: GreenTurn) -> AgentReply:
        await asyncio.sleep(0.3)
        return await super().reply(context_id, turn)


@asynccontextmanager
async def serving(agent: Any) -> AsyncIterator[str]:
    async with serve_app_factory(lambda url: create_white_agent_app(agent, url + "/")) as url:
        yield url


def config(tasks: int, k: int, concurrency: int, **extra: Any) -> BattleConfig:
    fields = {"domain": "retail", "split": "test", "task_index": list(range(tasks)), "k": k, "calibration": True}
    return BattleConfig.model_validate({**fields, "concurrency": concurrency, **extra})


def outcomes(result: BattleResult) -> list[tuple[str, int, str, str | None, float | None]]:
    return [
        (a.task_key, a.attempt, a.outcome, a.failure.category.value if a.failure else None, a.reward)
        for a in result.attempts
    ]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_a_worker_split_battle_gives_the_summary_of_one_process(tmp_path: Path) -> None:
    cfg = config(tasks=8, k=4, concurrency=32)
    assert worker_processes(2, cfg, 32) == 2
    results: dict[int, BattleResult] = {}
    pids: dict[int, list[int]] = {}
    async with ScoringPool(max_workers=1) as scoring, serving(make_agent("flaky", seed=7, fault_rates=FAULTS)) as url:
        for workers in (1, 2):
            battle = Battle(f"split-{workers}", url, cfg, scoring=scoring, runs_dir=tmp_path, workers=workers)
            results[workers] = await battle.run()
            pids[workers] = battle.worker_pids
    assert pids[1] == [] and len(pids[2]) == 2  # the second really ran in two workers
    assert all(gone(pid) for pid in pids[2])
    one, split = results[1], results[2]
    assert outcomes(split) == outcomes(one)
    assert {f for *_, f, _ in outcomes(one)} > {None}  # the faults really happened
    assert split.summary == one.summary
    assert split.failure_breakdown == one.failure_breakdown
    assert split.infrastructure_errors == one.infrastructure_errors == 0
    assert all(a.trajectory_file and (tmp_path / "split-2" / a.trajectory_file).is_file() for a in split.attempts)


async def test_a_killed_worker_is_the_harness_fault_and_the_battle_ends(tmp_path: Path) -> None:
    cfg = config(tasks=10, k=4, concurrency=32)
    battle: Battle | None = None
    killed: list[int] = []

    async def kill_one(event: BattleEvent) -> None:
        if event.type == "attempt_started" and not killed and battle is not None and battle.worker_pids:
            started = sum(1 for e in battle.events if e.type == "attempt_started")
            if started >= 24:  # attempts are in flight in both workers
                killed.append(battle.worker_pids[0])
                os.kill(killed[0], signal.SIGKILL)

    async with ScoringPool(max_workers=1) as scoring, serving(SlowReplay()) as url:
        battle = Battle("kill", url, cfg, scoring=scoring, runs_dir=tmp_path, sinks=[kill_one], workers=2)
        result = await asyncio.wait_for(battle.run(), timeout=240)
    assert killed
    assert result.status == "completed" and len(result.attempts) == 40
    harness = [a for a in result.attempts if a.outcome == "infra_error"]
    assert harness, "the killed worker held attempts"
    for attempt in harness:
        assert attempt.failure is not None
        assert attempt.failure.category.value == "harness_error"
        assert attempt.failure.fault_author.value == "harness"
        assert f"worker process {killed[0]}" in attempt.failure.detail
    assert all(a.outcome == "success" for a in result.attempts if a.outcome != "infra_error")
    assert result.infrastructure_errors == len(harness)
    assert all(gone(pid) for pid in [*killed, *battle.worker_pids])


async def test_cancel_reaches_the_workers_and_stops_them(tmp_path: Path) -> None:
    cfg = config(tasks=10, k=4, concurrency=32)
    battle: Battle | None = None

    async def cancel_midway(event: BattleEvent) -> None:
        if event.type == "attempt_finished" and battle is not None and battle.attempts_done == 4:
            battle.request_cancel()

    async with ScoringPool(max_workers=1) as scoring, serving(SlowReplay()) as url:
        battle = Battle("cancel", url, cfg, scoring=scoring, runs_dir=tmp_path, sinks=[cancel_midway], workers=2)
        result = await asyncio.wait_for(battle.run(), timeout=240)
    assert result.status == "cancelled"
    assert 4 <= len(result.attempts) < 40
    assert all(a.outcome == "success" for a in result.attempts)  # cancelled attempts are not recorded as failures
    assert len(battle.worker_pids) == 2 and all(gone(pid) for pid in battle.worker_pids)


async def test_an_interrupted_worker_battle_resumes_to_the_numbers_of_an_uninterrupted_one(tmp_path: Path) -> None:
    cfg = config(tasks=8, k=4, concurrency=32)
    battle: Battle | None = None

    async def interrupt_midway(event: BattleEvent) -> None:
        if event.type == "attempt_finished" and battle is not None and battle.attempts_done == 6:
            battle.request_interrupt()

    async with ScoringPool(max_workers=1) as scoring, serving(make_agent("flaky", seed=7, fault_rates=FAULTS)) as url:
        whole = await Battle("whole", url, cfg, scoring=scoring, runs_dir=tmp_path, workers=1).run()
        battle = Battle("parts", url, cfg, scoring=scoring, runs_dir=tmp_path, sinks=[interrupt_midway], workers=2)
        first = await asyncio.wait_for(battle.run(), timeout=240)
        assert first.status == "interrupted" and 6 <= len(first.attempts) < 32
        assert all(gone(pid) for pid in battle.worker_pids)
        resumed = Battle("parts", url, cfg, scoring=scoring, runs_dir=tmp_path, workers=2, resume=True)
        rest = await asyncio.wait_for(resumed.run(), timeout=240)
    assert rest.status == "completed" and rest.resumed_attempts == len(first.attempts)
    assert outcomes(rest) == outcomes(whole)
    assert rest.summary == whole.summary

"""A worker that dies between being picked and being handed the attempt (a replacement that starts, answers
``ready`` and dies while ``run`` still awaits it) must not strand the attempt: ``_kill`` has already settled the
attempts it held, so the attempt is a harness failure at once instead of a future nobody resolves (a hung battle)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import pytest

from green_agent.engine.attempt import AttemptSpec
from green_agent.engine.config import BattleConfig
from green_agent.engine.tau.tasks import TaskRef
from green_agent.engine.workers import pool as pool_module
from green_agent.engine.workers.pool import WorkerPool


class _Stdin:
    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.lines.append(data)

    async def drain(self) -> None:
        return None


@pytest.mark.timeout(60)  # the hang guard: on the old code run() awaited a future nobody would resolve
async def test_a_worker_dead_by_the_time_it_is_picked_makes_a_harness_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    config = BattleConfig.model_validate(
        {"domain": "retail", "split": "test", "task_index": [0], "k": 2, "calibration": True, "concurrency": 32}
    )
    pool = WorkerPool(processes=2, battle_id="b", white_agent_url="http://127.0.0.1:9", config=config, run_dir=None)
    process = cast(asyncio.subprocess.Process, SimpleNamespace(pid=4242, stdin=_Stdin()))
    worker = pool_module._Worker(process=process, dead="exited with code -9")

    async def pick() -> Any:
        return worker

    monkeypatch.setattr(pool, "_pick", pick)
    ref = TaskRef(domain="retail", split="test", index=0, task_id="0", task=cast(Any, None))
    spec = AttemptSpec(battle_id="b", ref=ref, attempt=1, white_agent_url="http://127.0.0.1:9")

    result = await pool.run(spec)

    assert result.outcome == "infra_error"
    assert result.failure is not None and result.failure.category.value == "harness_error"
    assert "4242" in result.failure.detail and "(harness)" in result.failure.detail
    assert worker.pending == {}
    assert cast(_Stdin, process.stdin).lines == []  # nothing was sent to the dead worker

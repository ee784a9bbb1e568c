"""A worker process resolves an attempt's task with the battle's retrieval variant (banking_knowledge), as the
battle itself and the sandbox do: a worker-mode battle must not run another variant than the one configured."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from green_agent.engine.attempt import AttemptDeps
from green_agent.engine.config import BattleConfig
from green_agent.engine.tau.tasks import TaskRef
from green_agent.engine.workers import serve
from green_agent.engine.workers.protocol import AttemptDone, RunAttempt, StartWorker


class _Out:
    def __init__(self) -> None:
        self.sent: list[object] = []

    async def send(self, message: object) -> None:
        self.sent.append(message)


class _Stop(Exception):
    pass


def test_the_worker_resolves_the_task_with_the_battles_retrieval(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[Any, ...]] = []

    def resolve(*args: Any) -> TaskRef:
        seen.append(args)
        raise _Stop("resolved")

    monkeypatch.setattr(serve, "resolve_task", resolve)
    config = BattleConfig.model_validate({"domain": "banking_knowledge", "retrieval": "full_kb"})
    start = StartWorker(
        battle_id="b1", white_agent_url="http://127.0.0.1:9/", config=config, concurrency=1, scoring_workers=1
    )
    run = RunAttempt(attempt_id=0, domain="banking_knowledge", split=None, index=3, task_id="t", attempt=1)
    out = _Out()
    asyncio.run(serve._one(start, cast(AttemptDeps, None), run, cast(Any, out)))
    assert seen == [("banking_knowledge", None, 3, "full_kb")]
    [done] = out.sent
    assert isinstance(done, AttemptDone) and done.result.outcome == "infra_error"

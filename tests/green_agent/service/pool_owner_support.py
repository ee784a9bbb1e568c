"""What the pooled-owner tests share (issue 29): a small retail battle's config, pool settings, and fake members
whose ``run_attempt`` records a scripted ``PooledResult`` (outcomes depend only on task and attempt number), some
attempts scripted to misbehave (a result that does not validate, one naming another attempt, an attempt that
always fails in the harness)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any, Literal

from green_agent.engine.config import BattleConfig
from green_agent.engine.results import AttemptResult, AttemptUsage, TerminationReason, TokenUsage
from green_agent.service.attempt_lease_client import AttemptLeaseClient
from green_agent.service.outbox import RetryPolicy
from green_agent.service.pool_member import PoolMember
from green_agent.service.pool_settings import PoolSettings
from green_agent.wire.attempt_leases import LeaseOut
from green_agent.wire.pool_attempts import PooledAttempt, PooledBattle, PooledResult
from tests.green_agent.service.pool_support import PoolBackend

POOL, KEY = "pool-owner", "the owner tests' pool key"
FAST_RETRY = RetryPolicy(initial_delay_s=0.05, max_delay_s=0.5)
WHITE = "http://127.0.0.1:9/"
"""Never called: the members are fakes."""
Misbehaviour = Literal["invalid", "raise", "other_attempt"]


def config(tasks: int, k: int, concurrency: int = 4, **more: Any) -> BattleConfig:
    fields = {"domain": "retail", "split": "test", "task_index": list(range(tasks)), "k": k}
    return BattleConfig.model_validate({**fields, "concurrency": concurrency, **more})


def settings(backend: PoolBackend, worker_id: str) -> PoolSettings:
    return PoolSettings(name=POOL, backend_url=backend.url, key=KEY, worker_id=worker_id, capacity=4)


def client(backend: PoolBackend) -> AttemptLeaseClient:
    return AttemptLeaseClient(backend.url, POOL, KEY, retry=FAST_RETRY, outage_s=30)


def reward(index: int, attempt: int) -> float:
    return float((index * 7 + attempt * 3) % 5 < 3)


def record_of(index: int, attempt: int) -> dict[str, Any]:
    return {"role": "assistant", "content": f"task {index} attempt {attempt}"}


def fake_run(
    worker_id: str,
    misbehave: dict[tuple[int, int], Misbehaviour] | None = None,
    *,
    pause_s: float = 0.0,
    seen: Callable[[PooledBattle, str], None] | None = None,
    backend_url: str = "",
    hold: Callable[[int], asyncio.Event | None] = lambda index: None,
    cost_usd: float | None = None,
) -> Callable[[LeaseOut], Coroutine[Any, Any, dict[str, Any]]]:
    """A member's ``run_attempt``: the payload validated, a scripted result (with a one-record trajectory; costing
    the agent ``cost_usd`` when given); the attempts of a task whose ``hold(index)`` is an event wait for it
    first."""
    scripted = misbehave or {}

    async def run_attempt(lease: LeaseOut) -> dict[str, Any]:
        job = PooledAttempt.model_validate(lease.payload)
        if seen is not None:
            seen(job.battle, backend_url)
        await asyncio.sleep(pause_s)
        if (event := hold(job.index)) is not None:
            await event.wait()
        what = scripted.get((job.index, job.attempt))
        if what == "raise":
            raise RuntimeError("the member's sandbox would not start")
        if what == "invalid":
            return {"protocol": "arena.pool-attempt/1", "worker_id": worker_id, "result": {"outcome": "success"}}
        won = reward(job.index, job.attempt)
        result = AttemptResult(
            battle_id=job.battle.battle_id,
            domain=job.domain,
            split=job.split,
            task_index=job.index,
            task_id=job.task_id,
            attempt=job.attempt + 1 if what == "other_attempt" else job.attempt,
            context_id=f"ctx-{job.index}-{job.attempt}",
            outcome="success" if won else "failure",
            reward=won,
            steps=3,
            termination_reason=TerminationReason.AGENT_STOP,
            trajectory_file="../../etc/passwd",
        )
        if cost_usd is not None:
            agent = TokenUsage(calls=1, reported=1, cost_usd=cost_usd, cost_source="reported")
            result.usage = AttemptUsage(agent=agent)
        pooled = PooledResult(worker_id=worker_id, result=result, trajectory=[record_of(job.index, job.attempt)])
        return pooled.model_dump(mode="json")

    return run_attempt


@contextlib.asynccontextmanager
async def members(
    backend: PoolBackend, runs: list[Callable[[LeaseOut], Coroutine[Any, Any, dict[str, Any]]]]
) -> AsyncIterator[list[PoolMember]]:
    """One PoolMember per ``run_attempt``, leasing until the block ends (then cancelled, clients closed)."""
    clients = [client(backend) for _ in runs]
    pool = [
        PoolMember(c, f"member-{n}", run, capacity=4, ttl_s=30, wait_s=0.5, retry_pause_s=0.1)
        for n, (c, run) in enumerate(zip(clients, runs, strict=True))
    ]
    tasks = [asyncio.create_task(m.run()) for m in pool]
    try:
        yield pool
    finally:
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for c in clients:
            await c.aclose()
        for outcome in results:
            assert outcome is None or isinstance(outcome, asyncio.CancelledError), outcome


def journal(run_dir: Path) -> list[tuple[str, int]]:
    """(task key, attempt) of every line of the run directory's attempts.jsonl, in order."""
    lines = (run_dir / "attempts.jsonl").read_text(encoding="utf-8").splitlines()
    return [(_key(json.loads(line)), int(json.loads(line)["attempt"])) for line in lines if line.strip()]


def _key(data: dict[str, Any]) -> str:
    return f"{data['domain']}/{data['split'] or '-'}/{data['task_index']}"

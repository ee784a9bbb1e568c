"""Certify's within-task stop, scheduled (issue 28): a pass^k claim runs each task's attempts in sequence and skips
the rest at the task's first failure.

Each task of certify's seeded order becomes one coroutine that holds one slot of the battle's concurrency gate for
its whole block and runs its attempts one after another (attempt a + 1 starts only once attempt a is recorded), so
different tasks still run concurrently up to ``concurrency`` and start in the seeded order (the gate wakes its
waiters first come, first served). Before each attempt the skip rule
(:func:`green_agent.statistics.certify_stop.attempts_to_skip`) is applied to the task's recorded outcomes: once one
is a scored failure the remaining attempts are not run, and an ``attempts_skipped`` event says which and why. The
rule reads recorded outcomes only (the run directory's attempts on a resume), so a resume continues the same
sequence. The attempt itself (start checks, events, recording) is the battle's own ``run_one``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from green_agent.engine.certify import CertifyTracker
from green_agent.engine.events import AttemptsSkipped, ProgressEvent
from green_agent.engine.results import AttemptResult
from green_agent.engine.run_store import AttemptKey
from green_agent.engine.tau.tasks import TaskRef
from green_agent.statistics.certify_stop import SKIP_REASON, attempts_to_skip, first_failure

RunOne = Callable[[TaskRef, int], Awaitable[AttemptResult | None]]
"""The battle's attempt: None when it did not start (the battle is stopping)."""
Emit = Callable[[ProgressEvent, str], Awaitable[None]]


def skips_reported(prior_events: Iterable[object]) -> set[str]:
    """Tasks whose ``attempts_skipped`` event an earlier run of the battle already wrote (events.jsonl is hostile
    input: anything not shaped like one is ignored)."""
    out: set[str] = set()
    for event in prior_events:
        if not isinstance(event, dict) or event.get("type") != "attempts_skipped":
            continue
        data = event.get("data")
        if isinstance(data, dict) and isinstance(data.get("task_key"), str):
            out.add(data["task_key"])
    return out


def task_blocks(schedule: Sequence[tuple[TaskRef, int]]) -> list[tuple[TaskRef, list[int]]]:
    """The (task, attempt) pairs still to run, grouped by task in their order (attempt numbers ascending)."""
    blocks: dict[str, tuple[TaskRef, list[int]]] = {}
    for ref, attempt in schedule:
        blocks.setdefault(ref.key, (ref, []))[1].append(attempt)
    return [(ref, sorted(attempts)) for ref, attempts in blocks.values()]


class TaskStopSchedule:
    """The blocks of one battle whose tasks stop at their first failure (owned by that battle: no shared state)."""

    def __init__(
        self,
        battle_id: str,
        k: int,
        carried: Mapping[AttemptKey, AttemptResult],
        prior_events: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        self._battle_id = battle_id
        self._k = k
        self._outcomes: dict[str, dict[int, bool | None]] = {}
        for (key, attempt), result in carried.items():
            self._outcomes.setdefault(key, {})[attempt] = result.trial_outcome
        self._reported = skips_reported(prior_events)

    @classmethod
    def for_battle(
        cls,
        battle_id: str,
        tracker: CertifyTracker | None,
        carried: Mapping[AttemptKey, AttemptResult],
        prior_events: Sequence[Mapping[str, Any]],
    ) -> TaskStopSchedule | None:
        """The schedule when the battle certifies a pass^k claim (k >= 2), else None (attempts run as before)."""
        if tracker is None or not tracker.stops_within_task:
            return None
        return cls(battle_id, tracker.k, carried, prior_events)

    def tasks(
        self, schedule: Sequence[tuple[TaskRef, int]], gate: asyncio.Semaphore, run_one: RunOne, emit: Emit
    ) -> list[asyncio.Task[AttemptResult | None]]:
        """One asyncio task per task block, created in ``schedule``'s order (certify's seeded order)."""
        return [
            asyncio.create_task(self.run_block(ref, attempts, gate, run_one, emit), name=f"{self._battle_id}/{ref.key}")
            for ref, attempts in task_blocks(schedule)
        ]

    async def run_block(
        self, ref: TaskRef, attempts: Sequence[int], gate: asyncio.Semaphore, run_one: RunOne, emit: Emit
    ) -> AttemptResult | None:
        """Run ``attempts`` of ``ref`` in sequence within one slot of ``gate``, skipping the rest at a failure;
        returns the last attempt run (None if none ran)."""
        last: AttemptResult | None = None
        async with gate:
            for attempt in attempts:
                if await self._skip(ref.key, emit):
                    return last
                result = await run_one(ref, attempt)
                if result is None:  # the battle stopped starting attempts (decided, budget, cancel)
                    return last
                self._outcomes.setdefault(ref.key, {})[attempt] = result.trial_outcome
                last = result
            await self._skip(ref.key, emit)  # the last attempt failed: nothing to skip, nothing said
        return last

    async def _skip(self, key: str, emit: Emit) -> bool:
        """Apply the skip rule to the task's recorded outcomes; say so once (per battle, resumes included)."""
        outcomes = self._outcomes.get(key, {})
        skip = attempts_to_skip(outcomes, self._k)
        if not skip:
            return False
        if key not in self._reported:
            self._reported.add(key)
            failed = first_failure(outcomes) or 0
            event = AttemptsSkipped(
                battle_id=self._battle_id, task_key=key, failed_attempt=failed, attempts=skip, reason=SKIP_REASON
            )
            await emit(event, event.text(self._k))
        return True

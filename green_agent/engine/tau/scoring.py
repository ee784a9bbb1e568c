"""Scoring attempts with tau2's own evaluator, in worker processes.

Why processes: ``evaluate_simulation`` replays every recorded tool call on a fresh environment, builds the gold
environment from the task's actions and hashes both databases: 100-900 ms of pure-Python CPU work per attempt. In
the serving process it would stall the event loop (threads do not help: the GIL and GC pauses stay), so a small
``ProcessPoolExecutor`` does it. Each worker imports the evaluator once (with it litellm, ~4 s, paid at pool start,
not on the serving path) and raises the GC thresholds, which roughly triples tau2's speed on these many small
objects.

What crosses the process boundary is plain data: the task as (domain, split, index, task_id), resolved again in the
worker from the same package data, and the simulation as the JSON dict :meth:`AttemptEnvironment.simulation`
returns; the answer is tau2's ``RewardInfo`` as JSON. No tau2 object is pickled.

The reward is whatever tau2 says (``EvaluationType.ALL``, ``solo_mode=False``): the product of the checks named by
the task's ``reward_basis``. An evaluator exception or a dead worker is a harness failure, raised as
:class:`ScoringError`, never a zero for the agent.

:meth:`ScoringPool.score_explained` also asks the worker why a reward is below 1
(green_agent/engine/tau/explain.py): computed after tau2's answer was taken, from the same simulation, so it cannot
change the verdict; if explaining fails, the failure is logged and the attempt is scored without an explanation.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import multiprocessing
import time
import traceback
from concurrent.futures import Executor, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from pydantic import ValidationError

from green_agent.engine.results import FailureExplanation, RewardBreakdown
from green_agent.engine.tau.quiet import quiet_tau2
from green_agent.engine.tau.tasks import TaskRef
from green_agent.process_hygiene import die_with_parent

if TYPE_CHECKING:
    from tau2.data_model.simulation import RewardInfo, SimulationRun
    from tau2.data_model.tasks import Task

log = logging.getLogger(__name__)

DEFAULT_WORKERS = 2


class ScoringError(RuntimeError):
    """tau2's evaluator failed (or its worker died): an infrastructure error, not the agent's fault."""


# --- worker side -------------------------------------------------------------------------------------------------


def _worker_init() -> None:
    """Runs once in every worker process: quiet tau2, pay the evaluator import, make GC cheap for tau2's objects."""
    die_with_parent()  # kill -9 of the green agent must not leave scoring workers behind
    quiet_tau2()
    import tau2.evaluator.evaluator  # noqa: F401  (the ~4 s import, here rather than on the first score)

    gc.set_threshold(100_000, 50, 100)
    _use_cached_databases()


def _use_cached_databases() -> None:
    """Let the evaluator build its environments from databases parsed once per worker instead of once per build.

    The evaluator builds two environments per score through tau2's registry; tau2's constructors re-read the
    database file every time (airline: ~60 ms of ~450). :func:`fresh_environment` gives the same environment (same
    data, same hash) from a cached parse. Only this worker's registry is touched, and only if it still has the
    shape this was written against; otherwise tau2's own constructors stay.
    """
    from tau2.registry import registry

    from green_agent.engine.tau.environment import fresh_environment

    domains = getattr(registry, "_domains", None)
    if not isinstance(domains, dict):
        return
    for domain in ("retail", "airline", "telecom", "mock"):
        if domain in domains:
            domains[domain] = functools.partial(fresh_environment, domain)


def _worker_ready() -> bool:
    """A no-op task: proves the worker started and its initializer ran."""
    return True


def _where(error: BaseException) -> str:
    last = traceback.extract_tb(error.__traceback__)[-1:] if error.__traceback__ else []
    return f" (at {last[0].filename.rsplit('/', 1)[-1]}:{last[0].lineno})" if last else ""


def _explain(task: Task, run: SimulationRun, info: RewardInfo, domain: str) -> dict[str, Any]:
    """``{"explanation": json, "explain_s": seconds}``, or ``{"explain_error": detail}``: never raises, so a failure
    to explain cannot turn a scored attempt into an error."""
    started = time.perf_counter()
    try:
        from green_agent.engine.tau.explain import explain_failure

        explanation = explain_failure(task, run, info, domain)
        return {"explanation": explanation.model_dump(mode="json"), "explain_s": time.perf_counter() - started}
    except Exception as error:
        log.warning("explaining a failed attempt of task %s failed", task.id, exc_info=True)
        return {"explain_error": f"{type(error).__name__}: {error}{_where(error)}"[:1000]}


def _evaluate(
    domain: str, split: str | None, index: int, task_id: str, simulation: dict[str, Any], explain: bool = False
) -> dict[str, Any]:
    """Worker entry: score one simulation. Returns ``{"ok": reward_info_json}`` or ``{"error": detail}``; with
    ``explain`` and a reward below 1 also the explanation (:func:`_explain`'s keys)."""
    try:
        from tau2.data_model.simulation import SimulationRun
        from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

        from green_agent.engine.tau.tasks import resolve_task

        ref = resolve_task(domain, split, index)
        if ref.task_id != task_id:
            return {"error": f"task {ref.key} is {ref.task_id!r} in this worker, expected {task_id!r}"}
        run = SimulationRun.model_validate(simulation)
        info = evaluate_simulation(
            simulation=run, task=ref.task, evaluation_type=EvaluationType.ALL, solo_mode=False, domain=domain
        )
        answer: dict[str, Any] = {"ok": info.model_dump(mode="json")}  # the verdict, taken before any explaining
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}{_where(error)}"}
    if explain and float(answer["ok"]["reward"]) < 1.0:
        answer.update(_explain(ref.task, run, info, domain))
    return answer


# --- serving side ------------------------------------------------------------------------------------------------


def breakdown_from_reward_info(info: dict[str, Any]) -> RewardBreakdown:
    """Flatten tau2's ``RewardInfo`` JSON into the report's :class:`RewardBreakdown` (raw keeps the whole of it)."""
    db_check = info.get("db_check") or None
    communicate = info.get("communicate_checks") or []
    actions = info.get("action_checks") or []
    assertions = info.get("env_assertions") or []
    return RewardBreakdown(
        reward=float(info["reward"]),
        db_match=bool(db_check["db_match"]) if db_check else None,
        communicate_total=len(communicate),
        communicate_met=sum(1 for check in communicate if check.get("met")),
        action_total=len(actions),
        action_met=sum(1 for check in actions if check.get("action_match")),
        env_assertions_total=len(assertions),
        env_assertions_met=sum(1 for check in assertions if check.get("met")),
        reward_basis=[str(basis) for basis in info.get("reward_basis") or []],
        raw=info,
    )


@dataclass(frozen=True, slots=True)
class ScoredSimulation:
    """tau2's verdict on one attempt and, for a reward below 1, why (None when explaining failed)."""

    breakdown: RewardBreakdown
    explanation: FailureExplanation | None = None


def _explanation_from(answer: dict[str, Any], ref: TaskRef) -> FailureExplanation | None:
    if "explain_error" in answer:
        log.warning("no failure explanation for %s: %s", ref.key, answer["explain_error"])
        return None
    data = answer.get("explanation")
    if data is None:
        return None
    try:
        return FailureExplanation.model_validate(data)
    except ValidationError as error:
        log.warning("no failure explanation for %s: %s", ref.key, error)
        return None


class ScoringPool:
    """A process pool that scores attempts with tau2's evaluator; safe to use from many attempts at once.

    Use it as an async context manager (``async with ScoringPool() as pool``); entering starts the workers and waits
    until each has imported the evaluator, so the first score is not 4 s late. ``close()`` (or leaving the block)
    stops the workers. If a worker dies, the scores in flight fail with :class:`ScoringError` and the pool is
    rebuilt for later calls.
    """

    def __init__(self, max_workers: int = DEFAULT_WORKERS, *, warm: bool = True) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be >= 1")
        self._max_workers = max_workers
        self._warm = warm
        self._executor: ProcessPoolExecutor | None = None
        self._closed = False

    def _new_executor(self) -> ProcessPoolExecutor:
        # spawn, not fork: the serving process runs threads (asyncio.to_thread, httpx) and forking those is unsafe.
        return ProcessPoolExecutor(
            max_workers=self._max_workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_worker_init,
        )

    def _pool(self) -> Executor:
        if self._closed:
            raise ScoringError("the scoring pool is closed")
        if self._executor is None:
            self._executor = self._new_executor()
        return self._executor

    async def start(self) -> None:
        """Start every worker and wait for its initializer (done by ``__aenter__`` when ``warm``)."""
        loop = asyncio.get_running_loop()
        pool = self._pool()
        # Submitted together, before any finishes, each lands on a newly spawned worker.
        await asyncio.gather(*(loop.run_in_executor(pool, _worker_ready) for _ in range(self._max_workers)))

    async def __aenter__(self) -> Self:
        if self._warm:
            try:
                await self.start()
            except BaseException:
                await self.close()
                raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def score(self, ref: TaskRef, simulation: dict[str, Any]) -> RewardBreakdown:
        """Score one attempt's simulation (:meth:`AttemptEnvironment.simulation`) for task ``ref``.

        Raises :class:`ScoringError` when the evaluator raises or the worker dies.
        """
        return breakdown_from_reward_info((await self._run(ref, simulation, explain=False))["ok"])

    async def score_explained(self, ref: TaskRef, simulation: dict[str, Any]) -> ScoredSimulation:
        """:meth:`score`, plus the failure explanation when the reward is below 1 (the extra work only then).

        The breakdown is the same as :meth:`score` gives; raises :class:`ScoringError` in the same cases only.
        """
        answer = await self._run(ref, simulation, explain=True)
        breakdown = breakdown_from_reward_info(answer["ok"])
        if "explain_s" in answer:
            log.debug("explained the failure of %s in %.3f s", ref.key, answer["explain_s"])
        return ScoredSimulation(breakdown, _explanation_from(answer, ref) if breakdown.reward < 1.0 else None)

    async def _run(self, ref: TaskRef, simulation: dict[str, Any], *, explain: bool) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        pool = self._pool()
        try:
            answer: dict[str, Any] = await loop.run_in_executor(
                pool, _evaluate, ref.domain, ref.split, ref.index, ref.task_id, simulation, explain
            )
        except BrokenProcessPool as error:
            if self._executor is pool:  # rebuild once for everyone; the attempts in flight fail
                self._executor = None
                pool.shutdown(wait=False, cancel_futures=True)
            raise ScoringError(f"a scoring worker died: {error}") from None
        if "error" in answer:
            raise ScoringError(f"tau2 evaluator failed on {ref.key}: {answer['error']}")
        return answer

    async def close(self) -> None:
        """Stop the workers (waiting for scores in flight). Idempotent."""
        self._closed = True
        executor, self._executor = self._executor, None
        if executor is not None:
            await asyncio.to_thread(executor.shutdown, wait=True, cancel_futures=True)

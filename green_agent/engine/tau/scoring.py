"""Scoring attempts exactly as tau2's evaluator does, in worker processes.

Why processes: scoring replays every recorded tool call on a fresh environment and hashes its database: pure-Python
CPU work that would stall the event loop of the serving process (threads do not help: the GIL and GC pauses stay),
so a small ``ProcessPoolExecutor`` does it.

What a worker computes: tau2's ``evaluate_simulation(..., EvaluationType.ALL, solo_mode=False, domain)``, through
:mod:`green_agent.engine.tau.evaluation`, which calls tau2's own checks and combines them as that function does but
never imports litellm (tau2's ``evaluator.py`` pulls it in through the registry: ~4 s and ~150 MB per worker), keeps
each task's gold database hashes, and builds environments from databases validated once per worker
(:mod:`green_agent.engine.tau.databases`). tests/green_agent/engine/test_scoring_agreement.py holds the result equal
to tau2's unmodified evaluator on every attempt of the calibration sweeps and the offline demo. Workers also raise
the GC thresholds and freeze what they imported, which matters for tau2's many small objects.

Start-up: ``ScoringPool(warm=False)`` returns at once; :meth:`ScoringPool.start` spawns the workers and waits until
each has imported tau2's data model and evaluators (~1 s); scores submitted before that simply queue.

What crosses the process boundary: the task, pickled (an exact copy of the serving process's, which was loaded from
the package data like the one the attempt's sandbox played; the worker checks its id), so that a worker never loads
a task file (telecom's takes ~0.8 s); the simulation as the JSON dict :meth:`AttemptEnvironment.simulation` returns;
the answer is tau2's ``RewardInfo`` as JSON.

The reward is whatever tau2 says: the product of the checks named by the task's ``reward_basis``. An evaluator
exception or a dead worker is a harness failure, raised as :class:`ScoringError`, never a zero for the agent, with one
exception: an environment assertion whose function raised on the state the conversation left (mock's
``assert_task_status`` on a task the agent never created) is the agent's doing, scored 0 as tau2's own runner scores a
run whose evaluation raised, with tau2's error in ``info["evaluator_error"]`` (:func:`_provoked_verdict`).

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
import os
import pickle
import sys
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


WORKER_GC_THRESHOLDS = (100_000, 50, 100)
"""gc.set_threshold() in workers: tau2's environments are hundreds of thousands of small objects, and the default
young-generation threshold (700) makes the collector rescan them over and over (roughly triples scoring time)."""


def _worker_init() -> None:
    """Runs once in every worker process: quiet tau2, import what scoring needs (not litellm), make GC cheap."""
    die_with_parent()  # kill -9 of the green agent must not leave scoring workers behind
    quiet_tau2()
    import green_agent.engine.tau.evaluation  # noqa: F401  (tau2's data model and evaluators: ~1 s, paid here)

    gc.set_threshold(*WORKER_GC_THRESHOLDS)
    gc.freeze()  # what was imported lives as long as the worker: keep it out of every collection


def _use_cached_databases() -> None:
    """Let tau2's registry build environments from databases parsed once per process instead of once per build.

    Neither scoring nor the failure explanation uses the registry (it would import litellm; explain.py builds its
    environments with :func:`fresh_environment`); tests that call tau2's evaluator in process do. tau2's constructors
    re-read the database file every time (airline: ~60 ms); :func:`fresh_environment` gives the same environment
    (same data, same hash) from a cached parse. Only this process's registry is touched, and only if it still has
    the shape this was written against; otherwise tau2's own constructors stay.
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


def _worker_state() -> dict[str, Any]:
    """What a worker has loaded and cached (diagnostics and tests: litellm must never be among its modules)."""
    from green_agent.engine.tau.evaluation import gold_cache

    gold = gold_cache()
    return {
        "pid": os.getpid(),
        "litellm_imported": "litellm" in sys.modules,
        "tau2_evaluator_imported": "tau2.evaluator.evaluator" in sys.modules,
        "tau2_registry_imported": "tau2.registry" in sys.modules,
        "gold_cached": len(gold),
        "gold_hits": gold.hits,
        "gold_misses": gold.misses,
        "gc_thresholds": list(gc.get_threshold()),
    }


def _where(error: BaseException) -> str:
    last = traceback.extract_tb(error.__traceback__)[-1:] if error.__traceback__ else []
    return f" (at {last[0].filename.rsplit('/', 1)[-1]}:{last[0].lineno})" if last else ""


def _explain(task: Task, run: SimulationRun, info: RewardInfo, domain: str, retrieval: str | None) -> dict[str, Any]:
    """``{"explanation": json, "explain_s": seconds}``, or ``{"explain_error": detail}``: never raises, so a failure
    to explain cannot turn a scored attempt into an error."""
    started = time.perf_counter()
    try:
        from green_agent.engine.tau.explain import explain_failure

        explanation = explain_failure(task, run, info, domain, retrieval)
        return {"explanation": explanation.model_dump(mode="json"), "explain_s": time.perf_counter() - started}
    except Exception as error:
        log.warning("explaining a failed attempt of task %s failed", task.id, exc_info=True)
        return {"explain_error": f"{type(error).__name__}: {error}{_where(error)}"[:1000]}


def _task(domain: str, split: str | None, index: int, task_blob: bytes | None) -> Task:
    """The task to score against: the serving process's copy when sent, else resolved from the package data."""
    if task_blob is not None:
        task: Task = pickle.loads(task_blob)
        return task
    from green_agent.engine.tau.tasks import resolve_task

    return resolve_task(domain, split, index).task


PROVOKED_ERROR_KEY = "evaluator_error"
"""Key, in the ``info`` of a verdict :func:`_provoked_verdict` made, of tau2's exception (read by attribution)."""
MAX_PROVOKED_ERROR_CHARS = 500


def _provoked_verdict(task: Task, error: Exception) -> dict[str, Any] | None:
    """tau2's evaluator raised on the state the attempt left (an environment assertion's function failed there,
    :func:`~green_agent.engine.tau.evaluation.provoking_assertion`): the conversation's doing, scored 0 as tau2's
    runner scores a run whose evaluation raised, the assertion recorded as not met. None for any other error."""
    from tau2.data_model.simulation import EnvAssertionCheck, RewardInfo

    from green_agent.engine.tau.evaluation import provoking_assertion

    assertion = provoking_assertion(error)
    if assertion is None:
        return None
    criteria = task.evaluation_criteria
    shown = f"{type(error).__name__}: {error}"[:MAX_PROVOKED_ERROR_CHARS]
    info = RewardInfo(
        reward=0.0,
        env_assertions=[EnvAssertionCheck(env_assertion=assertion, met=False, reward=0.0)],
        reward_basis=criteria.reward_basis if criteria is not None else None,
        info={
            PROVOKED_ERROR_KEY: shown,
            "note": "tau2's evaluator raised on the state the conversation left (an environment assertion could "
            "not run there); scored 0, as tau2's runner scores it",
        },
    )
    verdict: dict[str, Any] = info.model_dump(mode="json")
    return verdict


def _evaluate(
    domain: str,
    split: str | None,
    index: int,
    task_id: str,
    simulation: dict[str, Any],
    explain: bool = False,
    task_blob: bytes | None = None,
    retrieval: str | None = None,
) -> dict[str, Any]:
    """Worker entry: score one simulation as tau2's evaluator would. Returns ``{"ok": reward_info_json}`` or
    ``{"error": detail}``; with ``explain`` and a reward below 1 also the explanation (:func:`_explain`'s keys).

    ``task_blob``: the task pickled by the serving process (see the module docstring); without it the worker
    resolves ``domain``/``split``/``index`` itself. ``retrieval``: banking_knowledge's variant (its environments
    depend on it)."""
    try:
        from tau2.data_model.simulation import SimulationRun

        from green_agent.engine.tau.evaluation import evaluate

        task = _task(domain, split, index, task_blob)
        if task.id != task_id:
            where = f"{domain}/{split or '-'}/{index}"
            return {"error": f"task {where} is {task.id!r} in this worker, expected {task_id!r}"}
        run = SimulationRun.model_validate(simulation)
        try:
            info = evaluate(run, task, domain, retrieval=retrieval)
        except Exception as error:
            provoked = _provoked_verdict(task, error)
            if provoked is None:
                raise
            return {"ok": provoked}
        answer: dict[str, Any] = {"ok": info.model_dump(mode="json")}  # the verdict, taken before any explaining
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}{_where(error)}"}
    if explain and float(answer["ok"]["reward"]) < 1.0:
        answer.update(_explain(task, run, info, domain, retrieval))
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

    Use it as an async context manager (``async with ScoringPool() as pool``). With ``warm=True`` entering starts the
    workers and waits until each has imported tau2's evaluators (~1 s); with ``warm=False`` it returns at once and
    :meth:`start` (e.g. in a background task) or the first score starts them; scores submitted meanwhile queue.
    ``close()`` (or leaving the block) stops the workers. If a worker dies, the scores in flight fail with
    :class:`ScoringError` and the pool is rebuilt for later calls.
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
        """Start every worker and wait for its initializer (done by ``__aenter__`` when ``warm``).

        Safe to run in the background while scores are submitted. Returns quietly when the pool was closed
        meanwhile; raises :class:`ScoringError` when a worker dies while starting.
        """
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        pool = self._pool()
        try:
            # Submitted together, before any finishes, each lands on a worker of its own.
            await asyncio.gather(*(loop.run_in_executor(pool, _worker_ready) for _ in range(self._max_workers)))
        except BrokenProcessPool as error:
            self._discard(pool)
            raise ScoringError(f"a scoring worker died while starting: {error}") from None
        except RuntimeError:
            if self._closed:  # shut down while starting: nothing left to warm
                return
            raise

    async def worker_state(self) -> dict[str, Any]:
        """One worker's loaded modules and caches (diagnostics; which worker answers is up to the pool)."""
        state: dict[str, Any] = await asyncio.get_running_loop().run_in_executor(self._pool(), _worker_state)
        return state

    def _discard(self, pool: Executor) -> None:
        """Forget a broken executor (once for everyone) so that the next call builds a new one."""
        if self._executor is pool:
            self._executor = None
            pool.shutdown(wait=False, cancel_futures=True)

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
            task_blob = pickle.dumps(ref.task, protocol=pickle.HIGHEST_PROTOCOL)  # an exact copy, ~0.1 ms
            answer: dict[str, Any] = await loop.run_in_executor(
                pool,
                _evaluate,
                ref.domain,
                ref.split,
                ref.index,
                ref.task_id,
                simulation,
                explain,
                task_blob,
                ref.retrieval,
            )
        except BrokenProcessPool as error:
            self._discard(pool)  # rebuilt for later calls; the attempts in flight fail
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

"""One battle: task selection, attempts scheduled with a concurrency bound, progress events, the final result.

A :class:`Battle` owns everything about its run (its attempts, its events, its output directory) and borrows only
stateless services from the server (the scoring process pool, an HTTP connection pool). Two battles in one process
share no mutable state.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Literal

import httpx

from green_agent.engine.attempt import AttemptDeps, AttemptSpec, ToolGateway, harness_failure, run_attempt
from green_agent.engine.attempt_details import task_scenario
from green_agent.engine.attempt_order import attempt_order
from green_agent.engine.attempt_runner import AttemptPlan, AttemptRunner, AttemptRunners
from green_agent.engine.battle_ids import run_dir_for, validate_battle_id
from green_agent.engine.budget import BudgetTracker
from green_agent.engine.capped_transport import capped_http_client
from green_agent.engine.certify import CertifyTracker
from green_agent.engine.certify_schedule import TaskStopSchedule
from green_agent.engine.channels import a2a_channels
from green_agent.engine.config import BattleConfig, ConfigError
from green_agent.engine.consistency import battle_consistency
from green_agent.engine.costs import battle_usage
from green_agent.engine.events import (
    AttemptFinished,
    AttemptStarted,
    BattleEvent,
    BattleFinished,
    BattleStarted,
    BattleStopped,
    EventSink,
    ProgressEvent,
    TaskStarted,
    fan_out,
    utc_now,
)
from green_agent.engine.report import render_markdown, winner_rule
from green_agent.engine.results import AttemptResult, BattleResult, GoldGap, ResultStatus
from green_agent.engine.run_store import (
    AttemptJournal,
    AttemptKey,
    RunFileError,
    RunManifest,
    check_resumable,
    config_hash,
    load_run,
    read_events,
    write_run_dir,
)
from green_agent.engine.tau.fingerprints import battle_fingerprint
from green_agent.engine.tau.gold_gaps import gold_gap
from green_agent.engine.tau.sandbox import SandboxFactory
from green_agent.engine.tau.scoring import ScoringPool
from green_agent.engine.tau.tasks import TaskRef, select_tasks
from green_agent.engine.tau.users import check_user_config, make_user, user_api_key
from green_agent.engine.workers.pool import WorkerPool, attempt_workers
from green_agent.provider_limits import ProviderLimits
from green_agent.statistics import summarize_trials

log = logging.getLogger(__name__)


class Battle:
    """Runs one battle to completion and returns its :class:`BattleResult`."""

    def __init__(
        self,
        battle_id: str,
        white_agent_url: str,
        config: BattleConfig,
        *,
        scoring: ScoringPool,
        runs_dir: Path | None = None,
        sinks: Sequence[EventSink] = (),
        journal_sinks: Sequence[EventSink] = (),
        tool_gateway: ToolGateway | None = None,
        sandboxes: SandboxFactory | None = None,
        max_attempts: int | None = None,
        run_dir: Path | None = None,
        resume: bool = False,
        retry_infra: bool = False,
        providers: ProviderLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
        workers: int = 1,
        scoring_workers: int = 1,
        attempt_runners: AttemptRunners | None = None,
    ) -> None:
        check_user_config(config.user_simulator)  # refuse an LLM user without its key before anything starts
        # Issue 27: the LLM user's provider limiter (shared with the green agent's other battles) and the budgets.
        providers = providers or ProviderLimits()
        self._user_limiter = providers.for_user(config)
        self._budget = BudgetTracker(config, clock=clock)
        self.battle_id = validate_battle_id(battle_id)
        self.white_agent_url = white_agent_url
        self.config = config
        self._scoring = scoring
        self.run_dir = run_dir or (run_dir_for(runs_dir, battle_id) if runs_dir is not None else None)
        self._sinks = list(sinks)
        self._journal_sinks = list(journal_sinks)
        self._tool_gateway = tool_gateway
        self._sandboxes = sandboxes
        self._max_attempts = max_attempts
        self._events: list[BattleEvent] = []
        self._lock = asyncio.Lock()  # keeps events in order across concurrent attempts
        self._attempt_tasks: list[asyncio.Task[AttemptResult | None]] = []
        self._finished: list[AttemptResult] = []
        self._cancel_requested = False
        self._interrupt_requested = False
        self._resume = resume
        self._retry_infra = retry_infra
        self._journal: AttemptJournal | None = None
        self._persisting: set[asyncio.Task[None]] = set()
        self._prior_events: list[dict[str, Any]] = []
        self.resumed_attempts = 0
        self.attempts_total = 0
        self.markdown: str | None = None
        self._certify: CertifyTracker | None = None
        self._certify_stopped = False
        self._workers = workers  # attempt worker processes at most (engine/workers; 1: all in this process)
        self._scoring_workers = scoring_workers
        self._provider_cap = providers.max_concurrency  # split between the workers
        self._providers = providers  # the service's ledger: its workers hold shares of the cap (provider_limits.py)
        self.worker_pids: list[int] = []
        """The attempt worker processes running this battle's attempts (empty: they run in this process)."""
        self.attempt_runners = attempt_runners
        """Who runs the attempts instead of this process or its workers (engine/attempt_runner.py; e.g. a pool)."""

    @property
    def attempts_done(self) -> int:
        """Attempts finished so far (each one is kept, also when the battle is cancelled)."""
        return len(self._finished)

    def request_cancel(self) -> None:
        """Stop the battle: attempts in flight are cancelled, and it ends with a partial result (``cancelled``)."""
        self._cancel_requested = True
        for task in self._attempt_tasks:
            task.cancel()

    def request_interrupt(self) -> None:
        """The green agent is stopping (SIGTERM, Ctrl-C): attempts in flight are abandoned, not recorded (the white
        agent may be going down with us, and its errors are not its fault), and the battle ends ``interrupted`` with a
        partial summary; ``--resume`` runs what is missing."""
        self._interrupt_requested = True
        for task in self._attempt_tasks:
            task.cancel()

    @property
    def events(self) -> list[BattleEvent]:
        """Events emitted so far (copies are cheap; the models are not mutated after emission)."""
        return list(self._events)

    async def emit(
        self, payload: ProgressEvent, text: str, *, trajectory: tuple[dict[str, Any], ...] | None = None
    ) -> None:
        """Record one typed event with its human ``text`` and deliver it to every sink, in order; ``trajectory`` (an
        attempt's messages) is lent to the sinks for this delivery only."""
        event = payload.event(text)
        event.carry_trajectory(trajectory)
        try:
            async with self._lock:
                self._events.append(event)
                await fan_out(self._sinks, event)
        finally:
            event.carry_trajectory(None)

    async def _re_emit(self, carried: dict[AttemptKey, AttemptResult]) -> None:
        """On a resume: the ``attempt_finished`` event of every attempt carried over, to the journal sinks only.

        An attempt is journaled before its event is sent, so a stop between the two loses the event; the journal
        sinks (the backend's) are given every carried attempt again and drop the ones they already delivered. The
        battle's own event list (the A2A stream, events.jsonl) is not told twice."""
        if not self._journal_sinks or not carried:
            return
        for done, (_, result) in enumerate(sorted(carried.items()), start=1):
            finished = AttemptFinished.from_result(result, done=done, total=self.attempts_total)
            event = finished.event(finished.text(self.config.k))
            async with self._lock:
                await fan_out(self._journal_sinks, event)

    async def run(self) -> BattleResult:
        """Select tasks, run every attempt (bounded concurrency), summarise, write the run directory."""
        started_at, t0 = utc_now(), time.perf_counter()
        cfg = self.config
        refs: list[TaskRef] = await asyncio.to_thread(select_tasks, cfg)
        self.attempts_total = len(refs) * cfg.k
        if self._max_attempts is not None and self.attempts_total > self._max_attempts:
            raise ConfigError(
                f"k: {len(refs)} tasks x k={cfg.k} = {self.attempts_total} attempts exceed this green "
                f"agent's limit of {self._max_attempts} per battle"
            )
        if cfg.certify is not None:
            self._certify = CertifyTracker(cfg, cfg.certify, [r.key for r in refs], self.attempts_total)
        carried = await self._open_run_dir(refs, started_at)
        started = BattleStarted(
            battle_id=self.battle_id,
            attempts_total=self.attempts_total,
            resumed_attempts=len(carried),
            tasks=[r.key for r in refs],
            k=cfg.k,
            calibration=cfg.calibration,
            seed=cfg.seed,
            mode=cfg.mode,
        )
        await self.emit(started, started.text(resumed=self._resume))
        await self._re_emit(carried)
        # One HTTP pool per battle: the A2A client factory mutates its client's default headers, so battles
        # (possibly against agents of different protocol versions) must not share one.
        workers: AbstractAsyncContextManager[AttemptRunner | None]
        if self.attempt_runners is not None:  # issue 29: e.g. published to a pool of green agents
            order = attempt_order(refs, cfg.k, carried, mandated=self._certify.order if self._certify else None)
            workers = self.attempt_runners(
                AttemptPlan(self.battle_id, self.white_agent_url, cfg, self.run_dir, (*order,))
            )
        else:
            workers = attempt_workers(
                workers=self._workers,
                battle_id=self.battle_id,
                white_agent_url=self.white_agent_url,
                config=cfg,
                run_dir=self.run_dir,
                scoring_workers=self._scoring_workers,
                attempts=self.attempts_total - len(carried),
                provider_max_concurrency=self._provider_cap,
                providers=self._providers,
            )
        async with (
            capped_http_client(max_bytes=cfg.max_reply_bytes, max_connections=max(8, cfg.concurrency + 4)) as http,
            workers as pool,
        ):
            self.worker_pids = pool.pids if isinstance(pool, WorkerPool) else []
            return await self._run_attempts(refs, carried, http, started_at, t0, pool)

    async def _open_run_dir(self, refs: list[TaskRef], started_at: str) -> dict[AttemptKey, AttemptResult]:
        """Start the run directory's journal; on a resume, check the stored battle and return its finished attempts.

        RunFileError (a ConfigError: the battle is refused) when the directory holds a different battle, or a
        battle while no resume was asked for."""
        if self.run_dir is None:
            return {}
        keys = [ref.key for ref in refs]
        stored = await asyncio.to_thread(load_run, self.run_dir)
        self._journal = AttemptJournal(self.run_dir)
        if stored is None:
            manifest = RunManifest(
                battle_id=self.battle_id,
                white_agent_url=self.white_agent_url,
                config=self.config,
                config_hash=config_hash(self.config),
                created_at=started_at,
                tasks=keys,
                certify_order=self._certify.order if self._certify is not None else None,
            )
            await self._journal.start(manifest, keep_bytes=None)
            return {}
        if not self._resume:
            raise RunFileError(
                f"battle_id: {self.run_dir} already holds battle {stored.manifest.battle_id}; "
                "resume it or choose another id"
            )
        check_resumable(stored, self.config, keys)
        wanted = {(key, a) for key in keys for a in range(1, self.config.k + 1)}
        carried = {
            key: attempt
            for key, attempt in stored.attempts.attempts.items()
            if key in wanted and not (self._retry_infra and attempt.outcome == "infra_error")
        }
        if stored.finished and len(carried) == len(wanted):
            raise RunFileError(f"battle_id: battle {self.battle_id} already finished; nothing to resume")
        await self._journal.start(None, keep_bytes=stored.attempts.good_bytes if stored.attempts.torn else None)
        self._prior_events = await asyncio.to_thread(read_events, self.run_dir)
        self._finished = list(carried.values())
        self.resumed_attempts = len(carried)
        return carried

    async def _record(self, result: AttemptResult) -> None:
        """Make a finished attempt durable, then count it (unless the green agent is stopping: see
        :meth:`request_interrupt`)."""
        if self._interrupt_requested:
            raise asyncio.CancelledError
        # Shielded: a cancel landing mid-write must not leave an attempt on disk that the summary does not count.
        persist = asyncio.create_task(self._persist(result))
        self._persisting.add(persist)
        persist.add_done_callback(self._persisting.discard)
        await asyncio.shield(persist)

    async def _persist(self, result: AttemptResult) -> None:
        if self._journal is not None:
            try:
                await self._journal.append(result)
            except OSError:
                log.exception("could not append attempt %s/%s to %s", result.task_key, result.attempt, self.run_dir)
        self._finished.append(result)  # kept even if a cancel lands while the event below is sent

    async def _run_attempts(
        self,
        refs: list[TaskRef],
        carried: dict[AttemptKey, AttemptResult],
        http: httpx.AsyncClient,
        started_at: str,
        t0: float,
        pool: AttemptRunner | None = None,
    ) -> BattleResult:
        cfg = self.config
        deps = AttemptDeps(
            config=cfg,
            scoring=self._scoring,
            white_channels=a2a_channels(http, concurrency=cfg.concurrency),
            user_factory=functools.partial(make_user, limiter=self._user_limiter),
            user_api_key=user_api_key(cfg.user_simulator),
            trajectories_dir=self.run_dir / "trajectories" if self.run_dir else None,
            tool_gateway=self._tool_gateway,
            sandboxes=self._sandboxes,
        )
        gate = asyncio.Semaphore(cfg.concurrency)
        announced: set[str] = set()
        # A pass^k certify claim runs each task's attempts in sequence, stopping at its first failure (the schedule
        # holds the gate per task block); None otherwise.
        task_stop = TaskStopSchedule.for_battle(self.battle_id, self._certify, carried, self._prior_events)
        slot: contextlib.AbstractAsyncContextManager[Any] = gate if task_stop is None else contextlib.nullcontext()

        async def one(ref: TaskRef, attempt: int) -> AttemptResult | None:
            async with slot:
                if self._certify_stopped or self._budget.exhausted(self._finished, self.attempts_total):  # stop
                    return None
                key = ref.key
                if key not in announced:
                    announced.add(key)
                    await self.emit(
                        TaskStarted(battle_id=self.battle_id, task_key=key),
                        f"🎯 Starting pass@{cfg.k} evaluation ({ref.domain} task {ref.index}, id {ref.task_id})",
                    )
                starting = AttemptStarted(battle_id=self.battle_id, task_key=key, attempt=attempt)
                await self.emit(starting, starting.text(cfg.k))
                spec = AttemptSpec(self.battle_id, ref, attempt, self.white_agent_url)
                try:
                    result = await (pool.run(spec) if pool is not None else run_attempt(spec, deps))
                except Exception as error:
                    log.exception("attempt %s/%s raised", key, attempt)
                    result = harness_failure(spec, f"{type(error).__name__} in the attempt loop: {error}")
                await self._record(result)
                if self._certify is not None and self._certify.decided(self._finished):
                    self._certify_stopped = True
                finished = AttemptFinished.from_result(
                    result, done=self.attempts_done, total=self.attempts_total, scenario=task_scenario(ref.task)
                )
                await self.emit(finished, finished.text(cfg.k), trajectory=result.take_trajectory())
                return result

        if self._certify is not None:
            self._certify_stopped = self._certify.decided(self._finished)  # a resume may be decided already
        # Attempts start in this order (the semaphore wakes its waiters first come, first served): certify's seeded
        # order (each task's k attempts as one block, within the budget), else longest expected first.
        mandated = self._certify.order if self._certify is not None else None
        schedule = attempt_order(refs, cfg.k, carried, mandated=mandated)
        self._attempt_tasks = (
            [asyncio.create_task(one(ref, a), name=f"{self.battle_id}/{ref.key}/{a}") for ref, a in schedule]
            if task_stop is None
            else task_stop.tasks(schedule, gate, one, self.emit)
        )
        if self._cancel_requested:
            self.request_cancel()
        if self._interrupt_requested:
            self.request_interrupt()
        try:
            await asyncio.gather(*self._attempt_tasks, return_exceptions=True)
            await asyncio.gather(*self._persisting, return_exceptions=True)
        except asyncio.CancelledError:
            for task in self._attempt_tasks:  # the battle itself is being torn down: take the attempts with it
                task.cancel()
            await asyncio.gather(*self._attempt_tasks, return_exceptions=True)
            await asyncio.gather(*self._persisting, return_exceptions=True)
            await self._write_interrupted(refs, started_at, t0)
            raise
        status: ResultStatus = (
            "interrupted" if self._interrupt_requested else "cancelled" if self._cancel_requested else "completed"
        )
        if status != "completed":
            await self.emit(*self._stop_event(status))
        result, markdown = await self._summarise(refs, started_at, t0, status)
        self.markdown = markdown
        if status != "interrupted":  # an interrupted battle is not over: it ends when a resume finishes it
            finished = BattleFinished(
                battle_id=self.battle_id,
                summary=[row.model_dump(mode="json") for row in result.summary.macro],
                failure_breakdown=result.failure_breakdown,
                infrastructure_errors=result.infrastructure_errors,
            )
            await self.emit(finished, markdown)
        if self.run_dir is not None:
            await asyncio.to_thread(write_run_dir, self.run_dir, result, markdown, self._all_events())
        return result

    def _all_events(self) -> list[dict[str, Any]]:
        """events.jsonl: an earlier run's events (on a resume), then this run's."""
        return [*self._prior_events, *(e.model_dump(mode="json") for e in self._events)]

    def _stop_event(self, status: ResultStatus) -> tuple[BattleStopped, str]:
        """The event and text of a battle that ends before all its attempts ran."""
        done = f"{self.attempts_done} of {self.attempts_total} attempts finished"
        kind: Literal["battle_cancelled", "battle_interrupted"] = (
            "battle_interrupted" if status == "interrupted" else "battle_cancelled"
        )
        stopped = BattleStopped(battle_id=self.battle_id, type=kind, done=self.attempts_done, total=self.attempts_total)
        if status == "interrupted":
            kept = f"{done} and are kept; resume the battle to run the rest"
            return stopped, f"⏸️ Battle interrupted (the green agent is stopping): {kept}"
        return stopped, f"🛑 Battle cancelled: {done}; the summary covers those"

    async def _summarise(
        self, refs: list[TaskRef], started_at: str, t0: float, status: ResultStatus
    ) -> tuple[BattleResult, str]:
        """The result of the attempts finished so far and its markdown (CPU work proportional to the battle's size,
        bootstrap intervals included: off the event loop)."""
        result = await asyncio.to_thread(self._assemble, refs, started_at, time.perf_counter() - t0)
        result.status = status
        return result, await asyncio.to_thread(render_markdown, result)

    async def _write_interrupted(self, refs: list[TaskRef], started_at: str, t0: float) -> None:
        """The battle task is torn down (shutdown without an interrupt first): write a partial summary marked
        ``interrupted``. Sinks are not told (their transports are going away); the event is kept for events.jsonl."""
        if self.run_dir is None:
            return
        stopped, text = self._stop_event("interrupted")
        self._events.append(stopped.event(text))
        try:
            result, markdown = await self._summarise(refs, started_at, t0, "interrupted")
            await asyncio.to_thread(write_run_dir, self.run_dir, result, markdown, self._all_events())
        except Exception:
            log.exception("could not write the interrupted summary of battle %s", self.battle_id)

    def _assemble(self, refs: list[TaskRef], started_at: str, seconds: float) -> BattleResult:
        finished = list(self._finished)  # one snapshot (this runs in a thread while attempts may still finish)
        attempts = sorted(finished, key=lambda r: (r.domain, r.split or "", r.task_index, r.attempt))
        trials: dict[str, list[bool | None]] = {r.key: [] for r in refs}
        for a in attempts:
            trials[a.task_key].append(a.trial_outcome)
        stopped = self._certify.summarize(trials, attempts, self.config.seed) if self._certify is not None else None
        summary = stopped or summarize_trials(trials, k_max=self.config.k, seed=self.config.seed)
        failures = Counter(a.failure.category.value for a in attempts if a.failure is not None)
        result = BattleResult(
            battle_id=self.battle_id,
            white_agent_url=self.white_agent_url,
            config=self.config,
            calibration=self.config.calibration,
            started_at=started_at,
            finished_at=utc_now(),
            duration_s=round(seconds, 3),
            attempts=attempts,
            summary=summary,
            failure_breakdown=dict(sorted(failures.items())),
            infrastructure_errors=sum(1 for a in attempts if a.outcome == "infra_error"),
            gold_gaps=self._gold_gaps(refs),
            usage=battle_usage(attempts),
            resumed_attempts=self.resumed_attempts,
            fingerprint=battle_fingerprint(refs, self.config.user_simulator),
            certification=self._certify.certification(finished) if self._certify is not None else None,
            budget_stop=self._budget.summary(len(attempts)),
            consistency=battle_consistency(attempts, self.run_dir),  # reads trajectory files: runs in a thread
        )
        result.winner_rule = winner_rule(result)  # the rule needs the summary just built
        return result

    def _gold_gaps(self, refs: list[TaskRef]) -> list[GoldGap]:
        """The calibration battle's tasks whose gold solution cannot pass (none listed outside calibration)."""
        if not self.config.calibration:
            return []
        return [
            GoldGap(task_key=ref.key, task_id=ref.task_id, reason=reason)
            for ref in refs
            if (reason := gold_gap(ref.domain, ref.task_id)) is not None
        ]

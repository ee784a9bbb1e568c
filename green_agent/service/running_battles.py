"""The battles one green-agent application knows: start in the background, look up, cancel, report to a backend.

Every entry point (AgentBeats battle_start, an A2A assessment request, MCP tools) starts battles through
:class:`BattleRegistry`, so they all get the same behaviour: one battle per id, results posted exactly once,
failures reported instead of swallowed. A registry belongs to one application instance (no module-level state).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from green_agent.engine.attempt import ToolGateway
from green_agent.engine.battle import Battle
from green_agent.engine.battle_ids import claim_run_dir, run_dir_for, validate_battle_id
from green_agent.engine.battle_limits import remote_limit_problem
from green_agent.engine.config import BattleConfig, ConfigError, parse_remote_battle_config
from green_agent.engine.events import BattleEvent, EventSink
from green_agent.engine.results import BattleResult
from green_agent.engine.run_store import read_manifest, summary_status
from green_agent.engine.tau.sandbox import SandboxFactory
from green_agent.engine.tau.scoring import ScoringPool
from green_agent.engine.workers.pool import worker_processes
from green_agent.provider_limits import DEFAULT_PROVIDER_MAX_CONCURRENCY, ProviderLimits
from green_agent.service.admission import (
    DEFAULT_MAX_ATTEMPTS_IN_FLIGHT,
    DEFAULT_MAX_QUEUED_BATTLES,
    DEFAULT_MAX_RUNNING_BATTLES,
    Admission,
    Ticket,
)
from green_agent.service.backend_client import BackendReporter
from green_agent.service.backend_target import (
    BackendTarget,
    read_target,
    replay_token,
    resumed_target,
    write_target,
)
from green_agent.service.descriptors import check_descriptors
from green_agent.service.outbox import DEFAULT_RETENTION_S, OUTBOX_FILE, load_outbox, recent_outboxes
from green_agent.service.pool_owner import PoolSettings, pool_runners
from green_agent.wire.agentbeats import ResultReason, refusal_reason
from green_agent.wire.backend_posts import ResumeBackfill, progress_post_for, result_post

log = logging.getLogger(__name__)


BattleState = Literal["running", "finished", "error", "cancelled"]
EndState = Literal["finished", "error", "cancelled"]


@dataclass
class BattleRecord:
    """A battle known to this server and its outcome once it ends."""

    battle_id: str
    battle: Battle
    task: asyncio.Task[BattleResult] | None = None
    result: BattleResult | None = None
    ended: EndState | None = None
    """How the battle ended (None until then): ``finished`` (``result`` holds it), ``cancelled`` (``result`` holds the
    partial result, unless the battle was torn down before it could make one) or ``error`` (see ``error``)."""
    error: str | None = None
    """Why the battle ended in ``error``: its configuration was refused, or the harness failed."""
    ticket: Ticket | None = None
    """Its place under the green agent's bounds (see :mod:`green_agent.service.admission`)."""
    reporter: BackendReporter | None = None
    """Its backend reporter, once the battle knows where it reports (a resumed battle reads that from its run
    directory first)."""

    @property
    def queued(self) -> bool:
        """Accepted, waiting for a place under the green agent's bounds (no attempt runs yet)."""
        return self.running and self.ticket is not None and not self.ticket.granted.is_set()

    @property
    def state(self) -> BattleState:
        if self.task is not None and not self.task.done():
            return "running"
        return self.ended or "error"  # a task that ended without a state never ran (torn down before it started)

    @property
    def running(self) -> bool:
        return self.state == "running"


INTERRUPT_GRACE_S = 5.0
"""At shutdown, how long interrupted battles get to summarise what finished before they are cancelled."""


def resumable_run(runs_dir: Path, battle_id: str, white_agent_url: str) -> bool:
    """True when runs_dir/battle_id holds an interrupted (or never summarised) run of a battle against
    ``white_agent_url``. A cancelled battle is not continued automatically: it posted its result already."""
    try:
        run_dir = run_dir_for(runs_dir, battle_id)
        manifest = read_manifest(run_dir)
    except ConfigError:
        return False
    return (
        manifest is not None
        and manifest.white_agent_url == white_agent_url
        and summary_status(run_dir) in (None, "interrupted")
    )


def backend_sink(reporter: BackendReporter, run_dir: Path | None = None) -> EventSink:
    """Progress events as AgentBeats progress posts (markdown for the start and end, structured detail always;
    ``attempt_finished`` also carries the attempt's bounded trajectory from ``run_dir``, read in a worker thread
    before the event is queued, so the events keep their order)."""

    async def sink(event: BattleEvent) -> None:
        post = await progress_post_for(event, run_dir)
        reporter.progress(post.message, detail=post.detail, markdown_content=post.markdown_content)

    return sink


@dataclass(frozen=True)
class ServiceLimits:
    """What the green agent's operator lets remote parties ask for (flags of ``arena-green``)."""

    max_attempts_per_battle: int = 2000
    """tasks x k of one battle."""
    max_concurrency: int = 16
    """Attempts in flight a remote config may ask for (each holds a tool-sandbox process)."""
    max_request_bytes: int = 8 * 1024 * 1024
    """Largest HTTP request body (A2A, MCP, /run, evaluations)."""
    max_json_depth: int = 64
    """Deepest JSON nesting accepted in a request body."""
    open_assessments: bool = False
    """Accept A2A assessment requests without the operator token (``--open-assessments``): for AgentBeats
    scenario runners, which cannot send one. The requester gets only its own battle's stream; task reads, lists and
    cancels, MCP control, /run and /evaluations still need the token."""
    max_running_battles: int = DEFAULT_MAX_RUNNING_BATTLES
    """Battles running at once; more wait in the queue (``--max-running-battles``)."""
    max_attempts_in_flight: int = DEFAULT_MAX_ATTEMPTS_IN_FLIGHT
    """Attempts in flight across all battles (each holds a sandbox process; ``--max-attempts-in-flight``)."""
    max_queued_battles: int = DEFAULT_MAX_QUEUED_BATTLES
    """Battles waiting for a place; beyond, battles are refused as busy (``--max-queued-battles``)."""
    workers: int = 1
    """Attempt worker processes a battle may use (``--workers``; 1: in this process; green_agent/engine/workers)."""
    scoring_workers: int = 2
    """tau2 scoring processes (``--scoring-workers``), split between a battle's workers."""
    provider_max_concurrency: int = DEFAULT_PROVIDER_MAX_CONCURRENCY
    """LLM calls in flight per provider (base URL + model) across all battles and evaluations, adapted down on 429
    (``--provider-max-concurrency``; green_agent/provider_limits.py)."""


@dataclass
class BattleRegistry:
    """Starts and tracks the battles of one green-agent application."""

    scoring: ScoringPool
    runs_dir: Path
    default_config: BattleConfig
    limits: ServiceLimits = field(default_factory=ServiceLimits)
    sandboxes: SandboxFactory | None = None
    """Where attempts' tool sandboxes come from (None: a factory per battle, for tests without an app)."""
    battles: dict[str, BattleRecord] = field(default_factory=dict)
    tool_gateway: ToolGateway | None = None
    """Given at construction (the MCP component's, by ``create_app``): serves attempts' tools natively when a battle
    uses tool_mode = "mcp"."""
    outbox_retention_s: float = DEFAULT_RETENTION_S
    """How long a backend event is retried, counted from when it was reported (``arena-green --outbox-retention``)."""
    pool: PoolSettings | None = None  # --pool: battles reporting to its backend are published to it (pool_owner.py)
    _by_task: dict[str, str] = field(default_factory=dict)
    _background: set[asyncio.Task[Any]] = field(default_factory=set)
    _replays: dict[str, BackendReporter] = field(default_factory=dict)
    """Reporters delivering what an earlier process left in an outbox, by battle id."""
    admission: Admission = field(init=False)
    """The bounds on battles and attempts at once (from ``limits``)."""
    providers: ProviderLimits = field(init=False)
    """Every provider's adaptive concurrency cap, shared by the battles (LLM user) and the evaluations (judge)."""

    def __post_init__(self) -> None:
        self.providers = ProviderLimits(max_concurrency=self.limits.provider_max_concurrency)
        self.admission = Admission(
            self.limits.max_running_battles, self.limits.max_attempts_in_flight, self.limits.max_queued_battles
        )

    def get(self, battle_id: str) -> BattleRecord | None:
        return self.battles.get(battle_id)

    def battle_of_task(self, a2a_task_id: str) -> str | None:
        """The battle an A2A assessment Task runs (for tasks/cancel)."""
        return self._by_task.get(a2a_task_id)

    def remote_config(self, data: object) -> BattleConfig:
        """A config from the network, on top of this green agent's default (operator-only fields refused)."""
        # The operator's own scenario (--scenario, e.g. arena run's) may ask for more than the remote cap.
        cap = max(self.limits.max_concurrency, self.default_config.concurrency)
        config = parse_remote_battle_config(data, self.default_config, max_concurrency=cap)
        if isinstance(data, dict) and (problem := remote_limit_problem(data, self.default_config)):
            raise ConfigError(problem)  # budgets and the provider cap: lower than the operator's only
        return config

    def start(
        self,
        battle_id: str,
        white_agent_url: str,
        config: BattleConfig,
        *,
        sinks: Sequence[EventSink] = (),
        backend: BackendTarget | None = None,
        a2a_task_id: str | None = None,
        resume: bool | None = False,
        retry_infra: bool = False,
        operator: bool = False,
    ) -> BattleRecord:
        """Start a battle in the background. ConfigError when the id is invalid or taken, or the config cannot run.

        The run directory is created here (refused if it exists): two runs never share a directory. With ``resume``
        an earlier, unfinished run of the battle in that directory is continued (only its missing attempts run;
        ``retry_infra`` also re-runs its infrastructure errors); ``None`` resumes only when the directory holds an
        unfinished run against the same white agent URL (a green agent restarted under an AgentBeats battle).
        A resumed battle reports where its run directory says it reported before, with the battle token kept there,
        unless ``backend`` names another backend (then the stored token comes along only for the ``operator``;
        see :mod:`green_agent.service.backend_target`).

        The battle waits for a place under the green agent's bounds (``record.queued``); CapacityError when the
        queue is full too, ConfigError when its concurrency alone exceeds the attempts allowed in flight.
        """
        validate_battle_id(battle_id)
        if resume is None:
            resume = resumable_run(self.runs_dir, battle_id, white_agent_url)
        existing = self.battles.get(battle_id)
        # A battle refused before it started (no event emitted) leaves nothing behind and may be asked for again;
        # otherwise an id is used once per process (a resume needs a restarted green agent: outbox, result settled).
        if existing is not None and not (existing.state == "error" and not existing.battle.events):
            raise ConfigError(f"battle_id: battle {battle_id} already exists ({existing.state})")
        planned = config.planned_attempts()
        if planned is not None and planned > self.limits.max_attempts_per_battle:
            raise ConfigError(
                f"k: {planned} attempts (tasks x k) exceed this green agent's limit of "
                f"{self.limits.max_attempts_per_battle} per battle"
            )
        self.admission.check(config.concurrency)
        check_descriptors(config.concurrency, worker_processes(self.limits.workers, config, planned or 1 << 30))
        run_dir = run_dir_for(self.runs_dir, battle_id)
        holder: list[BattleRecord] = []  # the sink reports through the record's reporter, set when the battle runs

        async def report(event: BattleEvent) -> None:
            reporter = holder[0].reporter if holder else None
            if reporter is not None:
                await backend_sink(reporter, run_dir)(event)

        backfill = ResumeBackfill(run_dir, run_dir / OUTBOX_FILE)

        async def report_journaled(event: BattleEvent) -> None:
            reporter = holder[0].reporter if holder else None
            if reporter is not None and (post := await backfill.missing(event)) is not None:
                reporter.progress(post.message, detail=post.detail, markdown_content=post.markdown_content)

        all_sinks = [*sinks, report]
        battle = Battle(
            battle_id,
            white_agent_url,
            config,
            scoring=self.scoring,
            runs_dir=self.runs_dir,
            sinks=all_sinks,
            journal_sinks=[report_journaled],
            tool_gateway=self.tool_gateway,
            sandboxes=self.sandboxes,
            max_attempts=self.limits.max_attempts_per_battle,
            resume=resume,
            retry_infra=retry_infra,
            providers=self.providers,
            workers=self.limits.workers,
            scoring_workers=self.limits.scoring_workers,
        )
        # Last check: a refused start must not use up the id.
        claim_run_dir(self.runs_dir, battle_id, resume=resume, retry_infra=retry_infra)
        record = BattleRecord(battle_id, battle, ticket=self.admission.enter(battle_id, config.concurrency))
        holder.append(record)
        self.battles[battle_id] = record
        if a2a_task_id:
            self._by_task[a2a_task_id] = battle_id
        record.task = asyncio.create_task(
            self._run(record, backend, resume=resume, operator=operator), name=f"battle-{battle_id}"
        )
        self._keep(record.task)
        return record

    def report_refusal(self, battle_id: str, backend: BackendTarget, error: ConfigError) -> None:
        """Tell a backend that a battle could not start (so it does not wait for its timeout), and why: the text for
        humans in ``detail["error"]``, the reason code in ``detail["reason"]``."""
        detail = {"error": str(error), "reason": refusal_reason(error).value}

        async def post() -> None:
            async with self._reporter(battle_id, backend) as reporter:
                reporter.progress(f"configuration error: {error}", detail=detail)
                reporter.result(f"battle could not start: {error}", winner="draw", detail=detail)

        self._keep(asyncio.create_task(post()))

    async def cancel(self, battle_id: str) -> BattleRecord:
        """Cancel a running battle: its attempts stop and it ends with a partial result marked ``cancelled``.

        The same path serves MCP ``cancel_battle`` and A2A ``tasks/cancel``.
        """
        record = self.battles.get(battle_id)
        if record is None:
            raise KeyError(battle_id)
        if record.task is not None and not record.task.done():
            if record.queued:  # nothing ran: the waiting task simply ends
                record.task.cancel()
            record.battle.request_cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.shield(record.task)
        return record

    def interrupt_all(self) -> None:
        """The green agent is stopping: every running battle ends ``interrupted`` with a partial summary on disk."""
        for record in self.battles.values():
            if record.queued and record.task is not None:
                record.task.cancel()  # never started: nothing to summarise
            elif record.running:
                record.battle.request_interrupt()

    async def aclose(self) -> None:
        """Cancel everything still running (application shutdown). Backend events not delivered yet stay in their
        battles' outboxes (the next start replays them). A battle that ends while this runs hands its reporter to a
        new background task: the loop takes those too.

        Running battles are interrupted first and given a few seconds to write their partial summaries (the signal
        handler normally interrupted them already); only then is anything cancelled."""
        self.interrupt_all()
        running = [
            record.task for record in self.battles.values() if record.task is not None and not record.task.done()
        ]
        if running:
            await asyncio.wait(running, timeout=INTERRUPT_GRACE_S)
        while tasks := [task for task in self._background if not task.done()]:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def start_outbox_replay(self) -> None:
        """Deliver, in the background, what an earlier process of this green agent left in the outboxes of its runs
        directory (within the retention). Called once when the application starts."""
        self._keep(asyncio.create_task(self._replay_outboxes(), name="outbox-replay"))

    async def _replay_outboxes(self) -> None:
        paths = await asyncio.to_thread(recent_outboxes, self.runs_dir, self.outbox_retention_s)
        for path in paths:
            battle_id = path.parent.name
            if battle_id in self.battles or battle_id in self._replays:
                continue
            try:
                reporter = await self._replay_reporter(path, battle_id)
            except (OSError, ValueError) as error:
                log.warning("cannot replay the outbox %s: %s", path, error)
                continue
            if reporter is None:
                continue
            if battle_id in self.battles or not reporter.endpoint.endswith(f"/battles/{battle_id}"):
                # Started while the file was read (its own reporter takes the file over), or not this run's file.
                await reporter.aclose(timeout=0)
                continue
            self._replays[battle_id] = reporter
            reporter.start()
            self._keep(asyncio.create_task(self._deliver_rest(reporter, battle_id), name=f"outbox-replay-{battle_id}"))

    async def _replay_reporter(self, path: Path, battle_id: str) -> BackendReporter | None:
        """A reporter for an outbox left by an earlier process: with the battle's stored token when the outbox
        reports to the backend that issued it (so a result left undelivered is accepted), else tokenless."""
        stored = await asyncio.to_thread(read_target, path.parent)
        state = await asyncio.to_thread(load_outbox, path) if stored is not None and stored.token else None
        token = replay_token(stored, state.backend_url if state is not None else None)
        if state is None or token is None or not state.pending or state.battle_id != battle_id:
            return await BackendReporter.replay(path, retention_s=self.outbox_retention_s)
        assert state.backend_url is not None  # replay_token checked it
        reporter = BackendReporter(state.backend_url, battle_id, token=token, retention_s=self.outbox_retention_s)
        await reporter.open_outbox(path)
        log.warning("battle %s: replaying %d undelivered events from %s", battle_id, len(state.pending), path)
        return reporter

    async def _deliver_rest(self, reporter: BackendReporter, replay_of: str | None = None) -> None:
        """Let ``reporter`` deliver what it holds (bounded by the retention: it expires what it cannot), then close
        it. Cancelled (shutdown, or the battle was started again): what is left stays in the outbox."""
        try:
            await reporter.flush()
        finally:
            await reporter.aclose(timeout=0)
            if replay_of is not None and self._replays.get(replay_of) is reporter:
                del self._replays[replay_of]

    async def _open_outbox(self, battle_id: str, reporter: BackendReporter) -> None:
        """Make the battle's reporter durable, taking the outbox over from a replay of an earlier run (the battle
        was given to us again, now with its token), then start it."""
        replay = self._replays.pop(battle_id, None)
        if replay is not None:
            await replay.aclose(timeout=0)
        await reporter.open_outbox(run_dir_for(self.runs_dir, battle_id) / OUTBOX_FILE)
        reporter.start()

    async def _hand_over(self, reporter: BackendReporter, exc_type: type[BaseException] | None) -> bool:
        """The battle is over: its reporter keeps delivering in the background (bounded by the retention) while the
        process lives. On shutdown (cancelled) it stops at once; what is left stays in the outbox. Never
        suppresses the battle's exception."""
        if exc_type is not None and issubclass(exc_type, asyncio.CancelledError):
            await reporter.aclose(timeout=0)
        else:
            self._keep(asyncio.create_task(self._deliver_rest(reporter), name=f"outbox-{reporter.endpoint}"))
        return False

    def _reporter(self, battle_id: str, backend: BackendTarget) -> BackendReporter:
        return BackendReporter(backend.url, battle_id, token=backend.token, retention_s=self.outbox_retention_s)

    async def _run(
        self, record: BattleRecord, backend: BackendTarget | None, *, resume: bool, operator: bool
    ) -> BattleResult:
        try:
            return await self._run_reporting(record, backend, resume=resume, operator=operator)
        finally:
            if record.ticket is not None:
                self.admission.release(record.ticket)

    async def _target(
        self, battle_id: str, backend: BackendTarget | None, *, resume: bool, operator: bool
    ) -> BackendTarget | None:
        """Where the battle reports (a resumed one: where it reported before, with its stored token), recorded in
        its run directory for a later resume. A disk error is logged, never fatal."""
        run_dir = run_dir_for(self.runs_dir, battle_id)
        stored = await asyncio.to_thread(read_target, run_dir) if resume else None
        target = resumed_target(backend, stored, operator=operator)
        if target is not None and (stored is None or stored.token is None or target.token is not None):
            try:
                await asyncio.to_thread(write_target, run_dir, target)
            except OSError as error:
                log.warning("battle %s: cannot record where it reports (%s); a resume will lack it", battle_id, error)
        return target

    async def _wait_for_place(self, record: BattleRecord) -> None:
        """Wait (queued, holding no process) until the green agent's bounds let the battle run."""
        ticket = record.ticket
        if ticket is None or ticket.granted.is_set():
            return
        note = f"battle {record.battle_id} {self.admission.describe_wait(ticket)}"
        log.info("%s", note)
        if record.reporter is not None:
            detail = {
                "reason": "queued",
                "queue_position": self.admission.position(ticket),
                "max_running_battles": self.admission.max_running_battles,
                "max_attempts_in_flight": self.admission.max_attempts_in_flight,
            }
            record.reporter.progress(note, detail=detail)
        await ticket.granted.wait()

    async def _run_reporting(
        self, record: BattleRecord, backend: BackendTarget | None, *, resume: bool, operator: bool
    ) -> BattleResult:
        async with contextlib.AsyncExitStack() as stack:
            target = await self._target(record.battle_id, backend, resume=resume, operator=operator)
            record.battle.attempt_runners = pool_runners(self.pool, target, record.battle.config, self.default_config)
            reporter = self._reporter(record.battle_id, target) if target is not None else None
            if reporter is not None:
                stack.push_async_exit(lambda exc_type, _exc, _tb: self._hand_over(reporter, exc_type))
                await self._open_outbox(record.battle_id, reporter)
                record.reporter = reporter
            try:
                await self._wait_for_place(record)
                result = await record.battle.run()
            except asyncio.CancelledError:
                record.ended = "cancelled"
                raise
            except ConfigError as error:
                record.ended, record.error = "error", f"configuration error: {error}"
                if reporter is not None:
                    detail = {"error": str(error), "reason": refusal_reason(error).value}
                    reporter.result(f"battle could not start: {error}", winner="draw", detail=detail)
                raise
            except Exception as error:
                log.exception("battle %s failed in the harness", record.battle_id)
                record.ended, record.error = "error", f"{type(error).__name__}: {error}"
                if reporter is not None:
                    detail = {"error": record.error, "reason": ResultReason.HARNESS_ERROR.value}
                    reporter.result(f"battle failed in the harness: {record.error}", winner="draw", detail=detail)
                raise
            record.result = result
            record.ended = "cancelled" if result.status in ("cancelled", "interrupted") else "finished"
            # An interrupted battle has no result yet: a resume (maybe by a restarted green agent) posts it once.
            if reporter is not None and target is not None and result.status != "interrupted":
                post = result_post(result, record.battle.markdown, target.white_name)
                reporter.result(
                    post.message, winner=post.winner, detail=post.detail, markdown_content=post.markdown_content
                )
            return result

    def _keep(self, task: asyncio.Task[Any]) -> None:
        self._background.add(task)
        task.add_done_callback(self._background.discard)

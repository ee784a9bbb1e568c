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
from green_agent.engine.battle_ids import claim_run_dir, validate_battle_id
from green_agent.engine.config import BattleConfig, ConfigError, parse_remote_battle_config
from green_agent.engine.events import BattleEvent, EventSink
from green_agent.engine.report import render_markdown, winner_for
from green_agent.engine.results import BattleResult
from green_agent.engine.tau.sandbox import SandboxFactory
from green_agent.engine.tau.scoring import ScoringPool
from green_agent.service.agentbeats import ResultReason, refusal_reason
from green_agent.service.backend_client import BackendReporter

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

    @property
    def state(self) -> BattleState:
        if self.task is not None and not self.task.done():
            return "running"
        return self.ended or "error"  # a task that ended without a state never ran (torn down before it started)

    @property
    def running(self) -> bool:
        return self.state == "running"


@dataclass(frozen=True)
class BackendTarget:
    """Where a battle reports in the AgentBeats shapes (and as whom the white agent is named for the winner)."""

    url: str
    token: str | None = None
    white_name: str = "white_agent"


def backend_sink(reporter: BackendReporter) -> EventSink:
    """Progress events as AgentBeats progress posts (markdown for the start and end, structured detail always)."""

    async def sink(event: BattleEvent) -> None:
        markdown = event.text if event.type in ("battle_started", "battle_finished") else None
        first_line = event.text.splitlines()[0] if event.text else event.type
        reporter.progress(first_line, detail=event.wire(), markdown_content=markdown)

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
    """Set by the MCP component: serves attempts' tools natively when a battle uses tool_mode = "mcp"."""
    _by_task: dict[str, str] = field(default_factory=dict)
    _background: set[asyncio.Task[Any]] = field(default_factory=set)

    def get(self, battle_id: str) -> BattleRecord | None:
        return self.battles.get(battle_id)

    def battle_of_task(self, a2a_task_id: str) -> str | None:
        """The battle an A2A assessment Task runs (for tasks/cancel)."""
        return self._by_task.get(a2a_task_id)

    def remote_config(self, data: object) -> BattleConfig:
        """A config from the network, on top of this green agent's default (operator-only fields refused)."""
        return parse_remote_battle_config(data, self.default_config, max_concurrency=self.limits.max_concurrency)

    def start(
        self,
        battle_id: str,
        white_agent_url: str,
        config: BattleConfig,
        *,
        sinks: Sequence[EventSink] = (),
        backend: BackendTarget | None = None,
        a2a_task_id: str | None = None,
    ) -> BattleRecord:
        """Start a battle in the background. ConfigError when the id is invalid or taken, or the config cannot run.

        The run directory is created here (refused if it exists): two runs never share a directory.
        """
        validate_battle_id(battle_id)
        existing = self.battles.get(battle_id)
        if existing is not None:
            raise ConfigError(f"battle_id: battle {battle_id} already exists ({existing.state})")
        planned = config.planned_attempts()
        if planned is not None and planned > self.limits.max_attempts_per_battle:
            raise ConfigError(
                f"k: {planned} attempts (tasks x k) exceed this green agent's limit of "
                f"{self.limits.max_attempts_per_battle} per battle"
            )
        reporter = self._reporter(battle_id, backend) if backend else None  # nothing is sent before it is entered
        all_sinks = [*sinks, *([backend_sink(reporter)] if reporter else [])]
        battle = Battle(
            battle_id,
            white_agent_url,
            config,
            scoring=self.scoring,
            runs_dir=self.runs_dir,
            sinks=all_sinks,
            tool_gateway=self.tool_gateway,
            sandboxes=self.sandboxes,
            max_attempts=self.limits.max_attempts_per_battle,
        )
        claim_run_dir(self.runs_dir, battle_id)  # last check: a refused start must not use up the id
        record = BattleRecord(battle_id, battle)
        self.battles[battle_id] = record
        if a2a_task_id:
            self._by_task[a2a_task_id] = battle_id
        record.task = asyncio.create_task(self._run(record, reporter, backend), name=f"battle-{battle_id}")
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
            record.battle.request_cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.shield(record.task)
        return record

    async def aclose(self) -> None:
        """Cancel everything still running (application shutdown)."""
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    def _reporter(self, battle_id: str, backend: BackendTarget) -> BackendReporter:
        return BackendReporter(
            backend.url,
            battle_id,
            token=backend.token,
            spool_path=self.runs_dir / battle_id / "undelivered_events.jsonl",
        )

    async def _run(
        self, record: BattleRecord, reporter: BackendReporter | None, backend: BackendTarget | None
    ) -> BattleResult:
        async with contextlib.AsyncExitStack() as stack:
            if reporter is not None:
                await stack.enter_async_context(reporter)
            try:
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
            record.ended = "cancelled" if result.status == "cancelled" else "finished"
            if reporter is not None and backend is not None:
                reporter.result(
                    f"pass^k evaluation finished: {len(result.attempts)} attempts",
                    winner=winner_for(result, backend.white_name),
                    detail=result.model_dump(mode="json"),
                    markdown_content=record.battle.markdown or render_markdown(result),
                )
            return result

    def _keep(self, task: asyncio.Task[Any]) -> None:
        self._background.add(task)
        task.add_done_callback(self._background.discard)

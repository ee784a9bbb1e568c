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

from green_agent.attempt import ToolGateway
from green_agent.backend_client import BackendReporter
from green_agent.battle import Battle
from green_agent.config import BattleConfig, ConfigError
from green_agent.events import BattleEvent, EventSink
from green_agent.report import render_markdown, winner_for
from green_agent.results import BattleResult
from green_agent.tau.scoring import ScoringPool

log = logging.getLogger(__name__)


@dataclass
class BattleRecord:
    """A battle known to this server and its outcome once it ends."""

    battle_id: str
    battle: Battle
    task: asyncio.Task[BattleResult] | None = None
    result: BattleResult | None = None
    error: str | None = None

    @property
    def state(self) -> Literal["running", "finished", "error", "cancelled"]:
        if self.task is not None and not self.task.done():
            return "running"
        if self.result is not None:
            return "finished"
        return "cancelled" if self.error == "cancelled" else "error"

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


@dataclass
class BattleRegistry:
    """Starts and tracks the battles of one green-agent application."""

    scoring: ScoringPool
    runs_dir: Path
    default_config: BattleConfig
    battles: dict[str, BattleRecord] = field(default_factory=dict)
    battle_infos: dict[str, dict[str, Any]] = field(default_factory=dict)
    tool_gateway: ToolGateway | None = None
    """Set by the MCP component: serves attempts' tools natively when a battle uses tool_mode = "mcp"."""
    _background: set[asyncio.Task[Any]] = field(default_factory=set)

    def get(self, battle_id: str) -> BattleRecord | None:
        return self.battles.get(battle_id)

    def start(
        self,
        battle_id: str,
        white_agent_url: str,
        config: BattleConfig,
        *,
        sinks: Sequence[EventSink] = (),
        backend: BackendTarget | None = None,
    ) -> BattleRecord:
        """Start a battle in the background. ConfigError when the id is taken or the config cannot run."""
        existing = self.battles.get(battle_id)
        if existing is not None:
            raise ConfigError(f"battle_id: battle {battle_id} already exists ({existing.state})")
        reporter = self._reporter(battle_id, backend) if backend else None
        all_sinks = [*sinks, *([backend_sink(reporter)] if reporter else [])]
        battle = Battle(battle_id, white_agent_url, config, scoring=self.scoring, runs_dir=self.runs_dir, sinks=all_sinks,
                        tool_gateway=self.tool_gateway)
        record = BattleRecord(battle_id, battle)
        self.battles[battle_id] = record
        record.task = asyncio.create_task(self._run(record, reporter, backend), name=f"battle-{battle_id}")
        self._keep(record.task)
        return record

    def report_refusal(self, battle_id: str, backend: BackendTarget, reason: str) -> None:
        """Tell a backend that a battle could not start (so it does not wait for its timeout)."""

        async def post() -> None:
            async with self._reporter(battle_id, backend) as reporter:
                reporter.progress(f"configuration error: {reason}", detail={"error": reason})
                reporter.result(f"battle could not start: {reason}", winner="draw", detail={"error": reason})

        self._keep(asyncio.create_task(post()))

    async def cancel(self, battle_id: str) -> BattleRecord:
        """Cancel a running battle (its attempts stop; nothing is reported as a result)."""
        record = self.battles.get(battle_id)
        if record is None:
            raise KeyError(battle_id)
        if record.task is not None and not record.task.done():
            record.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await record.task
        return record

    async def aclose(self) -> None:
        """Cancel everything still running (application shutdown)."""
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    def _reporter(self, battle_id: str, backend: BackendTarget) -> BackendReporter:
        return BackendReporter(backend.url, battle_id, token=backend.token,
                               spool_path=self.runs_dir / battle_id / "undelivered_events.jsonl")

    async def _run(self, record: BattleRecord, reporter: BackendReporter | None,
                   backend: BackendTarget | None) -> BattleResult:
        async with contextlib.AsyncExitStack() as stack:
            if reporter is not None:
                await stack.enter_async_context(reporter)
            try:
                result = await record.battle.run()
            except asyncio.CancelledError:
                record.error = "cancelled"
                raise
            except Exception as error:
                log.exception("battle %s failed in the harness", record.battle_id)
                record.error = f"{type(error).__name__}: {error}"
                if reporter is not None:
                    reporter.result(f"battle failed in the harness: {record.error}", winner="draw",
                                    detail={"error": record.error})
                raise
            record.result = result
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

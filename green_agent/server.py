"""The green agent's A2A server: AgentBeats battles, assessment requests, and a clear answer to anything else.

Accepted messages (text JSON, or the same object as a data part):
1. AgentBeats ``battle_info`` and ``battle_start``: acknowledged at once with a Message; the battle runs in the
   background and reports to the ``backend_url`` of ``green_battle_context``. A battle_start for a battle that is
   already running is acknowledged and ignored.
2. An assessment request ``{"participants": {"white_agent": url}, "config": {...}}``: answered as an A2A Task whose
   status updates stream the battle's log and which ends with a "Result" artifact (markdown + BattleResult JSON).
3. Anything else: a Message listing the accepted formats.

All state lives in a :class:`BattleRegistry` created per application in its lifespan: two apps (or two test servers
in one process) share nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from a2a.helpers import get_data_parts, new_data_part, new_task_from_user_message, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Message, Role, TaskState
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from green_agent.config import BattleConfig, ConfigError, parse_battle_config
from green_agent.events import BattleEvent
from green_agent.registry import BackendTarget, BattleRegistry
from green_agent.tau.scoring import ScoringPool

log = logging.getLogger(__name__)

ACCEPTED_FORMATS = """This is the Arena green agent (tau-bench reliability assessor). Send one of:
1. an AgentBeats battle message: {"type": "battle_info", ...} or {"type": "battle_start", "battle_id": ...,
   "green_battle_context": {"backend_url": ..., "task_config": ...}, "opponent_infos": [{"name": ..., "agent_url": ...}]}
2. an assessment request: {"participants": {"white_agent": "<A2A URL of the agent under test>"},
   "config": {"mode": "manual", "k": 4, "domain": "retail", "task_id": 5, ...}}
   answered as a Task that streams progress and ends with a "Result" artifact (markdown + JSON).
Both as JSON text (or a JSON data part)."""


def _incoming_payload(context: RequestContext) -> dict[str, Any] | None:
    """The request as a JSON object: a data part that is an object wins, else the text parsed as JSON."""
    message = context.message
    if message is not None:
        for data in get_data_parts(message.parts):
            if isinstance(data, dict) and ("type" in data or "participants" in data):
                return data
    text = context.get_user_input().strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _reply(text: str, context: RequestContext) -> Message:
    return new_text_message(text, context_id=context.context_id, role=Role.ROLE_AGENT)


class GreenAgentExecutor(AgentExecutor):
    """Routes each incoming message to the battle protocol it belongs to."""

    def __init__(self, registry: BattleRegistry) -> None:
        self.registry = registry

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        payload = _incoming_payload(context)
        kind = payload.get("type") if payload else None
        if kind == "battle_info" and payload is not None:
            self.registry.battle_infos[str(payload.get("battle_id"))] = payload
            await event_queue.enqueue_event(_reply(f"battle_info received for battle {payload.get('battle_id')}", context))
        elif kind == "battle_start" and payload is not None:
            await event_queue.enqueue_event(_reply(self._start_agentbeats_battle(payload), context))
        elif payload is not None and "participants" in payload:
            await self._run_assessment(payload, context, event_queue)
        else:
            await event_queue.enqueue_event(_reply(ACCEPTED_FORMATS, context))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        if context.task_id:
            updater = TaskUpdater(event_queue, context.task_id, context.context_id or "")
            await updater.cancel()

    # -- AgentBeats -------------------------------------------------------------------------------------------

    def _start_agentbeats_battle(self, payload: dict[str, Any]) -> str:
        """Start the battle in the background and answer at once (the backend's stream ends with our Message)."""
        battle_id = str(payload.get("battle_id") or "")
        if not battle_id:
            return "battle_start ignored: battle_id is required"
        existing = self.registry.get(battle_id)
        if existing is not None:
            return f"battle {battle_id} is already {existing.state}; battle_start ignored"
        green_context = payload.get("green_battle_context") or {}
        backend_url = green_context.get("backend_url") or payload.get("backend_url")
        opponents = payload.get("opponent_infos") or []
        white_url = opponents[0].get("agent_url") if opponents else next(iter(payload.get("red_battle_contexts") or {}), None)
        backend = BackendTarget(
            url=backend_url,
            token=green_context.get("battle_token") or payload.get("battle_token"),
            white_name=opponents[0].get("name", "white_agent") if opponents else "white_agent",
        ) if backend_url else None
        try:
            if not white_url:
                raise ConfigError("opponent_infos: no white agent URL in battle_start")
            # AgentBeats sends the registered task_config; our backend also passes the battle's own config.
            config = self._config_from(green_context.get("config") or green_context.get("task_config"))
            record = self.registry.start(battle_id, white_url, config, backend=backend)
        except ConfigError as error:
            if backend is not None:
                self.registry.report_refusal(battle_id, backend, str(error))
            return f"battle {battle_id} refused: {error}"
        return f"battle {battle_id} accepted: {record.battle.config.k} attempts per task against {white_url}"

    def _config_from(self, task_config: Any) -> BattleConfig:
        """AgentBeats task_config: a dict or a JSON string overriding this server's default config; empty = default."""
        if isinstance(task_config, str):  # AgentBeats 1.2.6 sends f"Task description: {registered task_config}"
            task_config = task_config.strip().removeprefix("Task description:").strip()
        if task_config in (None, "", {}):
            return self.registry.default_config
        if isinstance(task_config, str):
            try:
                task_config = json.loads(task_config)
            except ValueError:
                raise ConfigError("task_config: not a JSON object") from None
        if not isinstance(task_config, dict):
            raise ConfigError("task_config: expected a JSON object")
        merged = {**self.registry.default_config.model_dump(), **task_config.get("pass_k_config", task_config)}
        return parse_battle_config(merged)

    # -- assessment request ------------------------------------------------------------------------------------

    async def _run_assessment(self, payload: dict[str, Any], context: RequestContext, event_queue: EventQueue) -> None:
        """Answer as a Task: status updates stream the battle log; a "Result" artifact ends it."""
        assert context.message is not None
        task = context.current_task or new_task_from_user_message(context.message)
        await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()

        def status(text: str, data: dict[str, Any] | None = None) -> Message:
            parts = [new_text_part(text)] + ([new_data_part(data)] if data is not None else [])
            return updater.new_agent_message(parts)

        async def stream(event: BattleEvent) -> None:
            await updater.update_status(TaskState.TASK_STATE_WORKING, status(event.text, {"arena_event": event.wire()}))

        try:
            white_url, config = _assessment_request(payload)
            battle_id = str(payload.get("battle_id") or uuid.uuid4().hex[:12])
            backend = BackendTarget(payload["backend_url"], payload.get("battle_token")) if payload.get("backend_url") else None
            record = self.registry.start(battle_id, white_url, config, sinks=[stream], backend=backend)
        except ConfigError as error:
            await updater.failed(status(f"configuration error: {error}", {"error": str(error)}))
            return
        assert record.task is not None
        try:
            result = await asyncio.shield(record.task)
        except asyncio.CancelledError:
            if record.state == "cancelled":
                await updater.cancel(status(f"battle {battle_id} was cancelled"))
                return
            raise
        except Exception:  # noqa: BLE001 - the task must end failed with the reason, never hang
            await updater.failed(status(f"battle failed in the harness: {record.error}", {"error": record.error}))
            return
        markdown = record.battle.markdown or ""
        await updater.add_artifact([new_text_part(markdown), new_data_part(result.model_dump(mode="json"))], name="Result")
        await updater.complete(status(markdown.splitlines()[0] if markdown else "done"))


def _assessment_request(payload: dict[str, Any]) -> tuple[str, BattleConfig]:
    """The white agent URL and the validated config of an assessment request; ConfigError naming the field."""
    participants = payload.get("participants") or {}
    if not isinstance(participants, dict) or not participants:
        raise ConfigError('participants: expected {"white_agent": "<url>"}')
    white_url = participants.get("white_agent") or (next(iter(participants.values())) if len(participants) == 1 else None)
    if not isinstance(white_url, str) or not white_url:
        raise ConfigError(f"participants.white_agent: required (got roles {sorted(participants)})")
    raw_config = payload.get("config") or {}
    if not isinstance(raw_config, dict):
        raise ConfigError("config: expected a JSON object")
    return white_url, parse_battle_config(raw_config)


def build_card(url: str) -> AgentCard:
    """The green agent's card, advertising JSON-RPC at ``url`` for protocol 1.0 and 0.3."""
    return AgentCard(
        name="arena-green-agent",
        description="Arena tau-bench reliability assessor: pass^k / pass@k with confidence intervals over k "
        "fresh-context attempts per task, with a failure breakdown.",
        version="0.1.0",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="0.3"),
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=[
            AgentSkill(
                id="tau_bench_pass_k",
                name="tau-bench pass^k assessment",
                description="Runs tau2 retail/airline/telecom/mock tasks k times against a white agent over A2A.",
                tags=["assessment", "tau-bench", "pass^k", "agentbeats"],
                examples=['{"participants": {"white_agent": "http://127.0.0.1:9004"}, "config": {"k": 4}}'],
            )
        ],
    )


class Component(Protocol):
    """An optional part of the green agent's HTTP surface (MCP, /run, evaluations): routes plus a lifespan."""

    def routes(self, registry: Callable[[], BattleRegistry]) -> list[BaseRoute]:
        """Routes to mount; ``registry()`` returns the app's registry once the lifespan has started."""
        ...

    def lifespan(self, registry: BattleRegistry) -> contextlib.AbstractAsyncContextManager[None]:
        """Entered while the app runs, after the registry exists (e.g. an MCP session manager)."""
        ...


def create_app(
    card_url: str,
    *,
    runs_dir: Path = Path("runs"),
    default_config: BattleConfig | None = None,
    scoring_workers: int = 2,
    components: Sequence[Component] = (),
) -> Starlette:
    """The green agent as a Starlette app: A2A JSON-RPC at /, the agent card, /health, plus ``components``."""
    card = build_card(card_url)
    holder: dict[str, BattleRegistry] = {}

    def registry() -> BattleRegistry:
        if "registry" not in holder:
            raise RuntimeError("the green agent is not started (lifespan not running)")
        return holder["registry"]

    class _LazyExecutor(AgentExecutor):
        # The request handler is built before the lifespan creates the registry; resolve it per call.
        async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
            await GreenAgentExecutor(registry()).execute(context, event_queue)

        async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
            await GreenAgentExecutor(registry()).cancel(context, event_queue)

    handler = DefaultRequestHandler(agent_executor=_LazyExecutor(), task_store=InMemoryTaskStore(), agent_card=card)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            scoring = await stack.enter_async_context(ScoringPool(max_workers=scoring_workers))
            battles = BattleRegistry(scoring=scoring, runs_dir=runs_dir, default_config=default_config or BattleConfig())
            stack.push_async_callback(battles.aclose)
            holder["registry"] = battles
            app.state.registry = battles
            for component in components:
                await stack.enter_async_context(component.lifespan(battles))
            yield

    async def health(request: Request) -> JSONResponse:
        battles = holder.get("registry")
        running = sum(1 for r in battles.battles.values() if r.running) if battles else 0
        return JSONResponse({"status": "ok" if battles else "starting", "battles_running": running})

    routes: list[BaseRoute] = [
        *create_agent_card_routes(card),
        # Legacy card path: the AgentBeats backend (1.2.6) and a2a-sdk 0.2 clients look here.
        *create_agent_card_routes(card, card_url="/.well-known/agent.json"),
        *create_jsonrpc_routes(handler, rpc_url="/", enable_v0_3_compat=True),
        Route("/health", health, methods=["GET"]),
    ]
    for component in components:
        routes.extend(component.routes(registry))
    return Starlette(routes=routes, lifespan=lifespan)

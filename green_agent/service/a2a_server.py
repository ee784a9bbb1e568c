"""The green agent's A2A server: AgentBeats battles, assessment requests, and a clear answer to anything else.

Accepted messages (text JSON, or the same object as a data part):
1. AgentBeats ``battle_info`` and ``battle_start`` (parsed by :mod:`green_agent.service.agentbeats`): acknowledged at
   once with a Message; the battle runs in the background and reports to the ``backend_url`` of
   ``green_battle_context``. A battle_start for a battle that is already running is acknowledged and ignored.
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
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from a2a.helpers import (
    get_data_parts,
    get_text_parts,
    new_data_part,
    new_task_from_user_message,
    new_text_message,
    new_text_part,
)
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import Message, Role, TaskState
from a2a.utils.errors import InvalidRequestError, TaskNotFoundError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from green_agent.body_limits import BodyLimitMiddleware, json_shape_problem
from green_agent.engine.battle_ids import new_battle_id, validate_battle_id
from green_agent.engine.config import BattleConfig, ConfigError
from green_agent.engine.events import BattleEvent
from green_agent.engine.tau.sandbox import SandboxFactory
from green_agent.engine.tau.scoring import ScoringPool
from green_agent.service.agent_card import build_card
from green_agent.service.agentbeats import (
    AgentBeatsMessageError,
    ResultReason,
    parse_battle_info,
    parse_battle_start,
    refusal_reason,
)
from green_agent.service.operator_auth import OperatorAuthMiddleware, OperatorToken
from green_agent.service.outbox import DEFAULT_RETENTION_S
from green_agent.service.running_battles import BackendTarget, BattleRegistry, ServiceLimits
from green_agent.service.warm_up import cancel_and_wait, warm_up

log = logging.getLogger(__name__)

ACCEPTED_FORMATS = """This is the Arena green agent (tau-bench reliability assessor). Send one of:
1. an AgentBeats battle message: {"type": "battle_info", ...} or
   {"type": "battle_start", "battle_id": ..., "green_battle_context": {"backend_url": ..., "task_config": ...},
   "opponent_infos": [{"name": ..., "agent_url": ...}]}
2. an assessment request: {"participants": {"white_agent": "<A2A URL of the agent under test>"},
   "config": {"mode": "manual", "k": 4, "domain": "retail", "task_index": 5, ...}}
   answered as a Task that streams progress and ends with a "Result" artifact (markdown + JSON).
   Optional "battle_id"; "resume": true continues an interrupted run of that battle id (only missing attempts run),
   "retry_infra": true also re-runs its attempts that ended as infrastructure errors.
Both as JSON text (or a JSON data part)."""


def _incoming_payload(context: RequestContext) -> dict[str, Any] | None:
    """The request as a JSON object: a data part that is an object wins, else the text parsed as JSON."""
    return message_payload(context.message)


def message_payload(message: Message | None) -> dict[str, Any] | None:
    """A message's JSON object (data part first, else the text), or None. Bounded: anyone may send these."""
    if message is None:
        return None
    for data in get_data_parts(message.parts):
        if isinstance(data, dict) and ("type" in data or "participants" in data):
            return data
    text = "\n".join(get_text_parts(message.parts)).strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    if not text.startswith("{") or json_shape_problem(text.encode("utf-8", "replace")) is not None:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _reply(text: str, context: RequestContext) -> Message:
    return new_text_message(text, context_id=context.context_id, role=Role.ROLE_AGENT)


ASSESSMENT_NEEDS_TOKEN = (
    "assessment requests need the green agent's operator token (Authorization: Bearer <token>); "
    "AgentBeats battle_start messages do not"
)

OPERATOR_STATE_KEY = "arena_operator"
"""Key of :class:`ServerCallContext` state that says whether the request carried the operator token."""


def is_operator(call_context: ServerCallContext | None) -> bool:
    """True when the A2A request was authenticated with the green agent's operator token."""
    return bool(call_context is not None and call_context.state.get(OPERATOR_STATE_KEY))


class OperatorContextBuilder(DefaultServerCallContextBuilder):
    """Builds the A2A call context and records whether the request presented the operator token."""

    def __init__(self, token: OperatorToken) -> None:
        self._token = token

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        headers = context.state.get("headers")
        if isinstance(headers, dict):  # the SDK reads A2A-Version from here; the credential stays out of task state
            context.state["headers"] = {
                k: v for k, v in headers.items() if k.lower() not in ("authorization", "cookie")
            }
        context.state[OPERATOR_STATE_KEY] = self._token.authorizes(request.scope.get("headers", []))
        return context


class OperatorRequestHandler(DefaultRequestHandler):
    """The SDK's request handler, with task reads, lists, cancels and subscriptions reserved to the operator.

    A caller without the token gets "task not found" for every id (never a list of what exists), so the agent
    under test can neither read nor cancel any battle, its own included. An assessment request without the token
    is refused with a JSON-RPC error before any task exists (unless ``open_assessments``).
    """

    def __init__(self, *args: Any, open_assessments: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._open_assessments = open_assessments

    def _check_send(self, params: Any, context: ServerCallContext) -> None:
        _require_operator_for_existing_task(params, context)
        if is_operator(context) or self._open_assessments:
            return
        payload = message_payload(getattr(params, "message", None))
        if payload is not None and "participants" in payload:
            raise InvalidRequestError(ASSESSMENT_NEEDS_TOKEN)

    async def on_message_send(self, params: Any, context: ServerCallContext) -> Any:
        self._check_send(params, context)
        return await super().on_message_send(params, context)

    async def on_message_send_stream(self, params: Any, context: ServerCallContext) -> Any:
        self._check_send(params, context)
        async for event in super().on_message_send_stream(params, context):
            yield event

    async def on_get_task(self, params: Any, context: ServerCallContext) -> Any:
        _require_operator(context)
        return await super().on_get_task(params, context)

    async def on_list_tasks(self, params: Any, context: ServerCallContext) -> Any:
        _require_operator(context)
        return await super().on_list_tasks(params, context)

    async def on_cancel_task(self, params: Any, context: ServerCallContext) -> Any:
        _require_operator(context)
        return await super().on_cancel_task(params, context)

    async def on_subscribe_to_task(self, params: Any, context: ServerCallContext) -> Any:
        _require_operator(context)
        async for event in super().on_subscribe_to_task(params, context):
            yield event

    async def on_create_task_push_notification_config(self, params: Any, context: ServerCallContext) -> Any:
        _require_operator(context)
        return await super().on_create_task_push_notification_config(params, context)

    async def on_get_task_push_notification_config(self, params: Any, context: ServerCallContext) -> Any:
        _require_operator(context)
        return await super().on_get_task_push_notification_config(params, context)

    async def on_list_task_push_notification_configs(self, params: Any, context: ServerCallContext) -> Any:
        _require_operator(context)
        return await super().on_list_task_push_notification_configs(params, context)

    async def on_delete_task_push_notification_config(self, params: Any, context: ServerCallContext) -> Any:
        _require_operator(context)
        return await super().on_delete_task_push_notification_config(params, context)


def _require_operator_for_existing_task(params: Any, context: ServerCallContext) -> None:
    """Only the operator may add a message to an existing task (e.g. inject text into a running assessment)."""
    message: Any = getattr(params, "message", None)
    if message is not None and getattr(message, "task_id", None) and not is_operator(context):
        raise TaskNotFoundError("task not found (continuing a task needs the green agent's operator token)")


def _require_operator(context: ServerCallContext) -> None:
    if not is_operator(context):
        raise TaskNotFoundError("task not found (task operations need the green agent's operator token)")


class GreenAgentExecutor(AgentExecutor):
    """Routes each incoming message to the battle protocol it belongs to."""

    def __init__(self, registry: BattleRegistry) -> None:
        self.registry = registry

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        payload = _incoming_payload(context)
        kind = payload.get("type") if payload else None
        if kind == "battle_info" and payload is not None:
            # Acknowledged only: nothing is stored, so a flood of battle_info messages costs no memory.
            info = parse_battle_info(payload)
            await event_queue.enqueue_event(_reply(f"battle_info received for battle {info.shown_id}", context))
        elif kind == "battle_start" and payload is not None:
            await event_queue.enqueue_event(_reply(self._start_agentbeats_battle(payload), context))
        elif payload is not None and "participants" in payload:
            if not (is_operator(context.call_context) or self.registry.limits.open_assessments):
                await event_queue.enqueue_event(_reply(ASSESSMENT_NEEDS_TOKEN, context))  # (the handler refuses first)
                return
            await self._run_assessment(payload, context, event_queue)
        else:
            await event_queue.enqueue_event(_reply(ACCEPTED_FORMATS, context))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """A2A tasks/cancel (operator only, checked by the request handler): cancel the battle behind the task."""
        battle_id = self.registry.battle_of_task(context.task_id) if context.task_id else None
        if battle_id is not None:
            await self.registry.cancel(battle_id)
        if context.task_id:
            updater = TaskUpdater(event_queue, context.task_id, context.context_id or "")
            await updater.cancel()

    # -- AgentBeats -------------------------------------------------------------------------------------------

    def _start_agentbeats_battle(self, payload: dict[str, Any]) -> str:
        """Start the battle in the background and answer at once (the backend's stream ends with our Message)."""
        try:
            start = parse_battle_start(payload)
        except AgentBeatsMessageError as error:
            return f"battle_start refused: {error}"
        battle_id = start.battle_id
        existing = self.registry.get(battle_id)
        if existing is not None:
            return f"battle {battle_id} is already {existing.state}; battle_start ignored"
        backend = (
            BackendTarget(url=start.report_url, token=start.token, white_name=start.white_name)
            if start.report_url
            else None
        )
        try:
            white_url = start.white_url()
            # AgentBeats sends the registered task_config; our backend also passes the battle's own config.
            overrides = start.config_overrides()
            config = self.registry.default_config if overrides is None else self.registry.remote_config(overrides)
            # A restarted green agent given the battle again continues its unfinished run (same white agent).
            record = self.registry.start(battle_id, white_url, config, backend=backend, resume=None)
        except ConfigError as error:
            if backend is not None:
                self.registry.report_refusal(battle_id, backend, error)
            return f"battle {battle_id} refused: {error}"
        accepted = f"{record.battle.config.k} attempts per task against {white_url}"
        if record.queued and record.ticket is not None:
            return f"battle {battle_id} accepted and {self.registry.admission.describe_wait(record.ticket)}: {accepted}"
        return f"battle {battle_id} accepted: {accepted}"

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
            white_url, config = _assessment_request(payload, self.registry)
            battle_id = validate_battle_id(payload["battle_id"]) if payload.get("battle_id") else new_battle_id()
            backend_url, backend_token = payload.get("backend_url"), payload.get("battle_token")
            backend = (
                BackendTarget(backend_url, backend_token if isinstance(backend_token, str) else None)
                if isinstance(backend_url, str) and backend_url
                else None
            )
            record = self.registry.start(
                battle_id,
                white_url,
                config,
                sinks=[stream],
                backend=backend,
                a2a_task_id=task.id,
                resume=_flag(payload, "resume"),
                retry_infra=_flag(payload, "retry_infra"),
                operator=is_operator(context.call_context),
            )
        except ConfigError as error:
            refusal = {"error": str(error), "reason": refusal_reason(error).value}
            await updater.failed(status(f"configuration error: {error}", refusal))
            return
        assert record.task is not None
        if record.queued and record.ticket is not None:
            queued = self.registry.admission.describe_wait(record.ticket)
            await updater.update_status(TaskState.TASK_STATE_WORKING, status(f"battle {battle_id} {queued}"))
        try:
            result = await asyncio.shield(record.task)
        except asyncio.CancelledError:
            if record.state == "cancelled":
                await updater.cancel(status(f"battle {battle_id} was cancelled"))
                return
            raise
        except ConfigError as error:  # found once the battle looked at its tasks (e.g. a task index out of range)
            refusal = {"error": str(error), "reason": refusal_reason(error).value}
            await updater.failed(status(f"configuration error: {error}", refusal))
            return
        except Exception:
            failure = {"error": record.error, "reason": ResultReason.HARNESS_ERROR.value}
            await updater.failed(status(f"battle failed in the harness: {record.error}", failure))
            return
        markdown = record.battle.markdown or ""
        await updater.add_artifact(
            [new_text_part(markdown), new_data_part(result.model_dump(mode="json"))], name="Result"
        )
        if result.status in ("cancelled", "interrupted"):
            ended = f"battle {battle_id} was {result.status}"
            await updater.cancel(status(f"{ended}: partial summary in the Result artifact"))
            return
        await updater.complete(status(markdown.splitlines()[0] if markdown else "done"))


def _flag(payload: dict[str, Any], name: str) -> bool:
    """An optional boolean of the assessment request (``resume``, ``retry_infra``); anything else is refused."""
    value = payload.get(name, False)
    if not isinstance(value, bool):
        raise ConfigError(f"{name}: expected true or false")
    return value


def _assessment_request(payload: dict[str, Any], registry: BattleRegistry) -> tuple[str, BattleConfig]:
    """The white agent URL and the validated config of an assessment request; ConfigError naming the field."""
    participants = payload.get("participants") or {}
    if not isinstance(participants, dict) or not participants:
        raise ConfigError('participants: expected {"white_agent": "<url>"}')
    white_url = participants.get("white_agent") or (
        next(iter(participants.values())) if len(participants) == 1 else None
    )
    if not isinstance(white_url, str) or not white_url:
        raise ConfigError(f"participants.white_agent: required (got roles {sorted(map(str, participants))[:8]})")
    raw_config = payload.get("config") or {}
    if not isinstance(raw_config, dict):
        raise ConfigError("config: expected a JSON object")
    return white_url, registry.remote_config(raw_config)


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
    operator_token: OperatorToken | None = None,
    limits: ServiceLimits | None = None,
    outbox_retention_s: float = DEFAULT_RETENTION_S,
) -> Starlette:
    """The green agent as a Starlette app: A2A JSON-RPC at /, the agent card, /health, plus ``components``.

    ``operator_token`` guards the control surface (see :mod:`green_agent.service.operator_auth`); when omitted a random
    one is generated and kept in ``app.state.operator_token``. ``limits`` bound what remote parties may ask for.
    ``outbox_retention_s``: how long backend events are retried; on start, undelivered events of earlier processes
    found in ``runs_dir`` are replayed in the background.
    """
    card = build_card(card_url)
    token = operator_token or OperatorToken.new()
    service_limits = limits or ServiceLimits()
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

    handler = OperatorRequestHandler(
        agent_executor=_LazyExecutor(),
        task_store=InMemoryTaskStore(),
        agent_card=card,
        open_assessments=service_limits.open_assessments,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            # Neither pool is waited for: /health answers at once, the workers and the fork server warm up in the
            # background, and an attempt that needs them before they are warm simply waits its turn.
            scoring = await stack.enter_async_context(ScoringPool(max_workers=scoring_workers, warm=False))
            sandboxes = await stack.enter_async_context(SandboxFactory())
            warming = asyncio.get_running_loop().create_task(warm_up(scoring))
            stack.push_async_callback(cancel_and_wait, warming)
            app.state.warming = warming
            battles = BattleRegistry(
                scoring=scoring,
                runs_dir=runs_dir,
                default_config=default_config or BattleConfig(),
                limits=service_limits,
                sandboxes=sandboxes,
                outbox_retention_s=outbox_retention_s,
            )
            stack.push_async_callback(battles.aclose)
            battles.start_outbox_replay()  # backend events an earlier process could not deliver
            holder["registry"] = battles
            app.state.registry = battles
            loop = asyncio.get_running_loop()
            # Called from the server's signal handler (main.py): battles stop before their connections do.
            app.state.interrupt_battles = lambda: loop.call_soon_threadsafe(battles.interrupt_all)
            for component in components:
                await stack.enter_async_context(component.lifespan(battles))
            yield

    async def health(request: Request) -> JSONResponse:
        battles = holder.get("registry")
        running = sum(1 for r in battles.battles.values() if r.running and not r.queued) if battles else 0
        queued = battles.admission.queued if battles else 0
        warming = getattr(request.app.state, "warming", None)
        # "warm": the scoring workers are started (a battle sent before that runs, its first scores just wait).
        warm = warming is not None and warming.done()
        body = {"status": "ok" if battles else "starting", "battles_running": running, "battles_queued": queued}
        return JSONResponse({**body, "warm": warm})

    routes: list[BaseRoute] = [
        *create_agent_card_routes(card),
        # Legacy card path: the AgentBeats backend (1.2.6) and a2a-sdk 0.2 clients look here.
        *create_agent_card_routes(card, card_url="/.well-known/agent.json"),
        *create_jsonrpc_routes(
            handler, rpc_url="/", enable_v0_3_compat=True, context_builder=OperatorContextBuilder(token)
        ),
        Route("/health", health, methods=["GET"]),
    ]
    for component in components:
        routes.extend(component.routes(registry))
    middleware = [
        Middleware(
            BodyLimitMiddleware, max_bytes=service_limits.max_request_bytes, max_depth=service_limits.max_json_depth
        ),
        Middleware(OperatorAuthMiddleware, token=token),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, middleware=middleware)
    app.state.operator_token = token
    return app

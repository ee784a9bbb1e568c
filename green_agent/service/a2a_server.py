"""The green agent's application: A2A JSON-RPC at /, the agent card, /health, plus optional components.

What the endpoint accepts is routed by :mod:`green_agent.service.a2a_executor`; who may do what over A2A is
:mod:`green_agent.service.a2a_auth`; the operator token on the HTTP surface is
:mod:`green_agent.service.operator_auth`. Everything the application holds is one frozen
:class:`~green_agent.service.context.ServiceContext` built by :func:`create_app`: two apps (or two test servers in
one process) share nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from green_agent.body_limits import BodyLimitMiddleware
from green_agent.engine.attempt import ToolGateway
from green_agent.engine.config import BattleConfig
from green_agent.service.a2a_auth import OperatorContextBuilder, OperatorRequestHandler
from green_agent.service.bounded_task_store import DEFAULT_MAX_TASK_HISTORY, BoundedHistoryTaskStore
from green_agent.service.context import build_service_context
from green_agent.service.operator_auth import OperatorAuthMiddleware, OperatorToken
from green_agent.service.outbox import DEFAULT_RETENTION_S
from green_agent.service.pool_settings import PoolSettings
from green_agent.service.running_battles import BattleRegistry, ServiceLimits
from green_agent.service.warm_up import cancel_and_wait, warm_up

log = logging.getLogger(__name__)


class Component(Protocol):
    """An optional part of the green agent's HTTP surface (MCP, /run, evaluations): routes plus a lifespan."""

    def routes(self, registry: Callable[[], BattleRegistry]) -> list[BaseRoute]:
        """Routes to mount; ``registry()`` returns the app's registry (built with the app; its pools and background
        work start with the lifespan)."""
        ...

    def lifespan(self, registry: BattleRegistry) -> contextlib.AbstractAsyncContextManager[None]:
        """Entered while the app runs, after the registry exists (e.g. an MCP session manager)."""
        ...


@runtime_checkable
class ToolGatewayProvider(Protocol):
    """A component that serves attempts' tools natively (the MCP component): its gateway goes to the registry."""

    @property
    def tool_gateway(self) -> ToolGateway | None:
        """The gateway for ``tool_mode = "mcp"`` battles, or None when this component cannot serve one."""
        ...


def _tool_gateway_of(components: Sequence[Component]) -> ToolGateway | None:
    """The one tool gateway the components provide (None without one); ValueError when two do."""
    gateways = [
        gateway
        for component in components
        if isinstance(component, ToolGatewayProvider) and (gateway := component.tool_gateway) is not None
    ]
    if len(gateways) > 1:
        raise ValueError(f"components: {len(gateways)} of them provide a tool gateway (at most one may)")
    return gateways[0] if gateways else None


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
    pool: PoolSettings | None = None,
    max_task_history: int = DEFAULT_MAX_TASK_HISTORY,
) -> Starlette:
    """The green agent as a Starlette app: A2A JSON-RPC at /, the agent card, /health, plus ``components``.

    ``operator_token`` guards the control surface (see :mod:`green_agent.service.operator_auth`); when omitted a random
    one is generated and kept in ``app.state.operator_token``. ``limits`` bound what remote parties may ask for.
    ``outbox_retention_s``: how long backend events are retried; on start, undelivered events of earlier processes
    found in ``runs_dir`` are replayed in the background. ``pool``: this green agent's pool (``context.pool``).
    ``max_task_history``: messages an A2A task keeps besides its first (a battle's last progress updates; see
    :mod:`green_agent.service.bounded_task_store`).
    """
    context = build_service_context(
        card_url,
        runs_dir=runs_dir,
        default_config=default_config or BattleConfig(),
        scoring_workers=scoring_workers,
        operator_token=operator_token or OperatorToken.new(),
        limits=limits or ServiceLimits(),
        outbox_retention_s=outbox_retention_s,
        tool_gateway=_tool_gateway_of(components),
        pool=pool,
    )
    battles = context.registry
    handler = OperatorRequestHandler(
        agent_executor=context.executor,
        task_store=BoundedHistoryTaskStore(max_task_history),
        agent_card=context.card,
        open_assessments=context.limits.open_assessments,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if getattr(app.state, "warming", None) is not None:  # its pools are closed: battles would only fail
            raise RuntimeError("a green agent app serves once: call create_app() again for another server")
        async with contextlib.AsyncExitStack() as stack:
            # Neither pool is waited for: /health answers at once, the workers and the fork server warm up in the
            # background, and an attempt that needs them before they are warm simply waits its turn.
            await stack.enter_async_context(context.scoring)
            await stack.enter_async_context(context.sandboxes)
            warming = asyncio.get_running_loop().create_task(warm_up(context.scoring))
            stack.push_async_callback(cancel_and_wait, warming)
            stack.push_async_callback(battles.aclose)
            battles.start_outbox_replay()  # backend events an earlier process could not deliver
            app.state.warming = warming
            loop = asyncio.get_running_loop()
            # Called from the server's signal handler (main.py): battles stop before their connections do.
            app.state.interrupt_battles = lambda: loop.call_soon_threadsafe(battles.interrupt_all)
            for component in components:
                await stack.enter_async_context(component.lifespan(battles))
            yield

    async def health(request: Request) -> JSONResponse:
        warming = getattr(request.app.state, "warming", None)  # set once the lifespan runs
        running = sum(1 for r in battles.battles.values() if r.running and not r.queued)
        # "warm": the scoring workers are started (a battle sent before that runs, its first scores just wait).
        warm = warming is not None and warming.done()
        body = {
            "status": "ok" if warming is not None else "starting",
            "battles_running": running,
            "battles_queued": battles.admission.queued,
        }
        return JSONResponse({**body, "warm": warm})

    routes: list[BaseRoute] = [
        *create_agent_card_routes(context.card),
        # Legacy card path: the AgentBeats backend (1.2.6) and a2a-sdk 0.2 clients look here.
        *create_agent_card_routes(context.card, card_url="/.well-known/agent.json"),
        *create_jsonrpc_routes(
            handler,
            rpc_url="/",
            enable_v0_3_compat=True,
            context_builder=OperatorContextBuilder(context.operator_token),
        ),
        Route("/health", health, methods=["GET"]),
    ]
    for component in components:
        routes.extend(component.routes(lambda: battles))
    middleware = [
        Middleware(
            BodyLimitMiddleware, max_bytes=context.limits.max_request_bytes, max_depth=context.limits.max_json_depth
        ),
        Middleware(OperatorAuthMiddleware, token=context.operator_token),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, middleware=middleware)
    app.state.context = context
    app.state.registry = battles
    app.state.operator_token = context.operator_token
    return app

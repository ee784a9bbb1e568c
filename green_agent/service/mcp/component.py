"""The MCP component of the green agent: the control server at /mcp/ and the attempt tool endpoints.

Plug it into the app with ``create_app(card_url, components=[McpComponent(public_url=card_url)])``. Both endpoints
share the A2A server's process and port; the component's lifespan runs their session managers. Its tool gateway
(:attr:`McpComponent.tool_gateway`) is handed to the battle registry when ``create_app`` builds it, which is what
makes ``tool_mode = "mcp"`` battles possible.

Credentials: the component checks none itself for /mcp/; ``create_app`` wraps the whole application in
:class:`~green_agent.service.operator_auth.OperatorAuthMiddleware`, so the control tools need the operator token (401
otherwise). /mcp-attempts/ is left to the attempt endpoints, which check their own per-attempt bearer tokens (the
operator token is not one of them). Mounting the component in another app means providing that guard too.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence

from mcp.server.mcpserver import MCPServer
from starlette.routing import BaseRoute, Mount

from green_agent.service.mcp.attempt_tools import ATTEMPT_SESSION_IDLE_S, AttemptToolGateway
from green_agent.service.mcp.control import build_control_server
from green_agent.service.mcp.security import transport_security
from green_agent.service.running_battles import BattleRegistry

log = logging.getLogger(__name__)

CONTROL_PATH = "/mcp"
"""The control server's mount point; clients use ``<base url>/mcp/`` (with the trailing slash)."""


class McpComponent:
    """MCP for the green agent (a :class:`green_agent.service.a2a_server.Component`). One instance serves one
    application.

    ``allowed_hosts``: Host header values both MCP endpoints accept besides loopback on any port (``127.0.0.1:*``,
    ``localhost:*``, ``[::1]:*``); DNS-rebinding protection stays on. Containers add their service names, e.g.
    ``["green:*"]``. The host of ``public_url`` is always allowed.
    ``public_url``: the green agent's URL as white agents reach it (its card URL). Without it the control tools
    work but battles cannot use ``tool_mode = "mcp"`` (there is no URL to hand to the white agent).
    """

    def __init__(
        self,
        allowed_hosts: Sequence[str] | None = None,
        *,
        public_url: str | None = None,
        probe_timeout_s: float = 5.0,
        attempt_session_idle_s: float = ATTEMPT_SESSION_IDLE_S,
    ) -> None:
        self._security = transport_security(allowed_hosts, public_url)
        self._probe_timeout_s = probe_timeout_s
        self._registry: BattleRegistry | None = None
        self.control: MCPServer | None = None
        self.gateway: AttemptToolGateway | None = (
            AttemptToolGateway(
                public_url,
                security=self._security,
                step_limit=self._max_steps_of,
                session_idle_timeout_s=attempt_session_idle_s,
            )
            if public_url
            else None
        )

    @property
    def tool_gateway(self) -> AttemptToolGateway | None:
        """The attempt tool gateway (with a public URL), given to the battle registry at construction."""
        return self.gateway

    @property
    def allowed_hosts(self) -> list[str]:
        """The Host header values both endpoints accept."""
        return list(self._security.allowed_hosts)

    def routes(self, registry: Callable[[], BattleRegistry]) -> list[BaseRoute]:
        """``/mcp/`` (control) and, with a public URL, ``/mcp-attempts/{id}/`` (attempt tools)."""
        if self.control is not None:
            raise RuntimeError("an McpComponent serves one application: create one per create_app() call")
        self.control = build_control_server(
            registry, mcp_tool_mode_available=lambda: self.gateway is not None, probe_timeout_s=self._probe_timeout_s
        )
        app = self.control.streamable_http_app(streamable_http_path="/", transport_security=self._security)
        routes: list[BaseRoute] = [Mount(CONTROL_PATH, app=app)]
        if self.gateway is not None:
            routes.append(self.gateway.route())
        return routes

    @contextlib.asynccontextmanager
    async def lifespan(self, registry: BattleRegistry) -> AsyncIterator[None]:
        """Run both session managers while the app runs."""
        if self.control is None:
            raise RuntimeError("McpComponent.routes() must be called (by create_app) before its lifespan")
        self._registry = registry
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(self.control.session_manager.run())
            if self.gateway is not None:
                await stack.enter_async_context(self.gateway.run())
            try:
                yield
            finally:
                self._registry = None

    def _max_steps_of(self, attempt_key: str) -> int | None:
        """The max_steps of the battle an attempt key (``<battle id>/<task key>/<attempt>``) belongs to."""
        registry = self._registry
        if registry is None:
            return None
        owners = [battle_id for battle_id in registry.battles if attempt_key.startswith(battle_id + "/")]
        if not owners:
            return None
        return registry.battles[max(owners, key=len)].battle.config.max_steps

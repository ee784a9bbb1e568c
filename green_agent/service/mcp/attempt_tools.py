"""Tool mode "mcp": each attempt's tau2 tools on an MCP endpoint of its own, for as long as the attempt runs.

Why this shape:

* **One endpoint per attempt** (``/mcp-attempts/<random id>/``) with a **bearer token of its own**. The dispatcher
  resolves the endpoint from the URL, compares the token in constant time, and only then hands the request to the
  MCP machinery with the endpoint attached to the request scope. Tool handlers read the environment from that
  scope and nowhere else, so a request can only ever reach the environment its token was issued for: another
  attempt's token on this URL is refused (401), this token on another attempt's URL is refused too, and a
  handshake-era session opened with one token cannot be reused with another (the session manager binds sessions
  to the authenticated principal and answers 404 otherwise).
* **Calls go through** :meth:`AttemptEnvironment.call_tool`, exactly as a ``<json>`` tool action does in text mode,
  so the trajectory records them verbatim and tau2 scores the attempt the same way.
* **Closing** (the attempt ends, whatever the reason) removes the endpoint before anything else: later requests get
  404 and a call that was already inside the handler sees the endpoint closed and is refused, so nothing is
  recorded on an environment that has been handed to the scorer.
* **Runaway agents**: tool calls stop being executed once the environment has counted ``max_steps`` assistant
  steps (tool calls plus messages to the user, :attr:`AttemptEnvironment.steps`); the refusal is an MCP tool error
  telling the agent to answer the user. The attempt loop itself counts A2A turns, and the attempt and turn time
  limits bound the wall time.

One low-level MCP server and one session manager serve every endpoint; 2026-era clients (mcp >= 2.3, one POST per
call) never create sessions, handshake-era clients get a stateful session bound to their token.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import secrets
from collections.abc import AsyncIterator, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from green_agent.engine.attempt import ToolEndpoint
from green_agent.engine.tau.environment import AttemptEnvironment

log = logging.getLogger(__name__)

ATTEMPTS_PATH = "/mcp-attempts"
"""Where attempt endpoints live: ``<public url>/mcp-attempts/<endpoint id>/``."""

ATTEMPT_SESSION_IDLE_S = 600.0
"""Handshake-era sessions of attempt endpoints are dropped after this long without a request."""

StepLimit = Callable[[str], int | None]
"""attempt key -> the attempt's ``max_steps`` (``None``: no limit known)."""

_SCOPE_KEY = "arena.attempt_endpoint"
_current_endpoint: ContextVar[_AttemptEndpoint | None] = ContextVar("arena_attempt_endpoint", default=None)

_INSTRUCTIONS = (
    "The tools of one tau-bench attempt. Every call runs on this attempt's environment and is recorded in its "
    "trajectory. Talk to the customer over A2A with 'respond' actions; call tools here."
)


@dataclass(eq=False)
class _AttemptEndpoint:
    """One open attempt: its environment, its credentials and its tool list."""

    endpoint_id: str
    token: str
    attempt_key: str
    env: AttemptEnvironment
    tools: list[types.Tool]
    schemas: dict[str, dict[str, Any]]
    max_steps: int | None
    open: bool = True
    calls: int = 0
    refused: int = 0
    principal: AuthenticatedUser = field(init=False)

    def __post_init__(self) -> None:
        # The session manager compares principals to bind handshake-era sessions to the token that opened them.
        self.principal = AuthenticatedUser(
            AccessToken(token="attempt-bearer", client_id=f"arena-attempt-{self.endpoint_id}", scopes=[])
        )


def mcp_tools(openai_tools: list[dict[str, Any]]) -> list[types.Tool]:
    """OpenAI function schemas (what ``env.tools`` holds) as MCP tools: same names, descriptions and parameters."""
    tools: list[types.Tool] = []
    for entry in openai_tools:
        function = entry.get("function", entry)
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        tools.append(
            types.Tool(name=function["name"], description=function.get("description"), input_schema=parameters)
        )
    return tools


def _error_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def _rejection(status: int, message: str) -> Response:
    """A JSON-RPC error without id, as the MCP transports answer HTTP-level refusals."""
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": types.INVALID_REQUEST, "message": message}}
    headers = {"WWW-Authenticate": 'Bearer error="invalid_token"'} if status == 401 else None
    return Response(json.dumps(body), status_code=status, media_type="application/json", headers=headers)


def _bearer(scope: Scope) -> str | None:
    value = Headers(scope=scope).get("authorization")
    if value is None or value[:7].lower() != "bearer ":
        return None
    return value[7:].strip()


class _Dispatcher:
    """The ASGI app behind ``/mcp-attempts/{endpoint_id}/``: endpoint lookup and token check, then MCP."""

    def __init__(self, gateway: AttemptToolGateway) -> None:
        self._gateway = gateway

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint_id = str(scope.get("path_params", {}).get("endpoint_id", ""))
        endpoint = self._gateway.endpoint(endpoint_id)
        if endpoint is None:
            await _rejection(
                404, "unknown or closed attempt endpoint (an attempt's MCP endpoint closes when the attempt ends)"
            )(scope, receive, send)
            return
        token = _bearer(scope)
        if token is None or not hmac.compare_digest(token.encode(), endpoint.token.encode()):
            await _rejection(401, "missing or invalid bearer token for this attempt endpoint")(scope, receive, send)
            return
        scope["user"] = endpoint.principal
        scope[_SCOPE_KEY] = endpoint
        reset = _current_endpoint.set(endpoint)
        try:
            await self._gateway.sessions.handle_request(scope, receive, send)
        finally:
            _current_endpoint.reset(reset)


class AttemptToolGateway:
    """A :class:`green_agent.engine.attempt.ToolGateway` serving attempts' tools over MCP (streamable HTTP).

    Mount :meth:`route` in the green agent's app and run :meth:`run` in its lifespan; then ``open(env, key)``
    gives each attempt its endpoint.
    """

    def __init__(
        self,
        public_url: str,
        *,
        security: TransportSecuritySettings,
        step_limit: StepLimit | None = None,
        session_idle_timeout_s: float = ATTEMPT_SESSION_IDLE_S,
    ) -> None:
        """``public_url``: the green agent's base URL as white agents reach it (the agent card's URL)."""
        self._base_url = public_url.rstrip("/") + ATTEMPTS_PATH
        self._step_limit = step_limit
        self._endpoints: dict[str, _AttemptEndpoint] = {}
        self._server: Server[Any] = Server(
            "arena-attempt-tools",
            version="0.1.0",
            instructions=_INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            get_tool_input_schema=self._input_schema,
        )
        self.sessions = StreamableHTTPSessionManager(
            app=self._server,
            json_response=True,  # tool calls send no notifications: one JSON answer per POST, no SSE machinery
            security_settings=security,
            session_idle_timeout=session_idle_timeout_s,
        )

    # -- wiring ------------------------------------------------------------------------------------------------

    def route(self) -> Route:
        """The route serving every attempt endpoint."""
        return Route(ATTEMPTS_PATH + "/{endpoint_id}/", endpoint=_Dispatcher(self), name="mcp_attempt_tools")

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """Serve while the block runs (the session manager's task group); every endpoint closes at exit."""
        async with self.sessions.run():
            try:
                yield
            finally:
                for endpoint in list(self._endpoints.values()):
                    endpoint.open = False
                self._endpoints.clear()

    @property
    def open_endpoints(self) -> int:
        """How many attempts currently have an endpoint (diagnostics, tests)."""
        return len(self._endpoints)

    def endpoint(self, endpoint_id: str) -> _AttemptEndpoint | None:
        """The open endpoint with this id, if any."""
        endpoint = self._endpoints.get(endpoint_id)
        return endpoint if endpoint is not None and endpoint.open else None

    # -- the ToolGateway protocol ------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def open(self, env: AttemptEnvironment, attempt_key: str) -> AsyncIterator[ToolEndpoint]:
        """Expose ``env``'s tools on a new endpoint with a new token; revoke both when the block exits."""
        tools = mcp_tools(env.tools)
        endpoint = _AttemptEndpoint(
            endpoint_id=secrets.token_urlsafe(16),
            token=secrets.token_urlsafe(32),
            attempt_key=attempt_key,
            env=env,
            tools=tools,
            schemas={tool.name: tool.input_schema for tool in tools},
            max_steps=self._step_limit(attempt_key) if self._step_limit else None,
        )
        self._endpoints[endpoint.endpoint_id] = endpoint
        try:
            yield ToolEndpoint(url=f"{self._base_url}/{endpoint.endpoint_id}/", token=endpoint.token)
        finally:
            endpoint.open = False
            self._endpoints.pop(endpoint.endpoint_id, None)
            log.debug(
                "attempt %s: MCP endpoint closed after %d tool call(s), %d refused",
                attempt_key,
                endpoint.calls,
                endpoint.refused,
            )

    # -- MCP handlers ------------------------------------------------------------------------------------------

    @staticmethod
    def _endpoint_of(ctx: ServerRequestContext[Any, Any]) -> _AttemptEndpoint:
        request = ctx.request
        scope = getattr(request, "scope", None)
        endpoint = scope.get(_SCOPE_KEY) if isinstance(scope, Mapping) else None
        if not isinstance(endpoint, _AttemptEndpoint):
            raise MCPError(code=types.INVALID_REQUEST, message="this request did not come through an attempt endpoint")
        return endpoint

    @staticmethod
    def _input_schema(name: str) -> Mapping[str, Any] | None:
        endpoint = _current_endpoint.get()
        return endpoint.schemas.get(name) if endpoint is not None else None

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self._endpoint_of(ctx).tools)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        endpoint = self._endpoint_of(ctx)
        if not endpoint.open:
            return _error_result("this attempt has ended: its tools are closed")
        if endpoint.max_steps is not None and endpoint.env.steps >= endpoint.max_steps:
            endpoint.refused += 1
            return _error_result(
                f"max_steps ({endpoint.max_steps}) reached for this attempt: tool calls are no longer executed; "
                "reply to the user with a respond action"
            )
        arguments = dict(params.arguments) if params.arguments is not None else {}
        try:
            outcome = await endpoint.env.call_tool(params.name, arguments)
        except Exception as error:  # a fault inside tau2: reported to the caller, never a crash
            log.exception("attempt %s: tau2 failed running tool %r", endpoint.attempt_key, params.name)
            return _error_result(f"the tau2 environment failed while running {params.name}: {type(error).__name__}")
        endpoint.calls += 1
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=outcome.content)], is_error=outcome.error
        )

"""The AgentBeats platform's MCP tools, served by the backend itself: update_battle_process, report_on_battle_end,
talk_to_agent (and the platform's trivial ``echo``), with the platform's names and arguments.

Why: LLM-driven green agents written for AgentBeats do not post to ``/battles/{id}`` themselves; their model calls
these tools on the platform's MCP server (``backend/mcp/mcp_server.py`` of agentbeats 1.2.6, a separate FastMCP
process on port 9001 that forwards every report to the backend over HTTP). Here the tools live in the backend's
process and write through :meth:`BattleService.post_event`, the very path of ``POST /battles/{id}``: same ordering,
same atomic finish (ELO, unlock), same refusal once the battle is over. Where the platform fell back to a local log
file and returned a success-looking string, we answer an MCP tool error (``is_error``) naming the cause, so the
calling model learns that its report was refused.

Transports: streamable HTTP at ``/mcp/`` and, because AgentBeats agents connect with the legacy HTTP+SSE client
(openai-agents' ``MCPServerSse``), the legacy SSE transport at ``/sse`` (messages posted to ``/messages/``), the
platform's own paths. DNS-rebinding protection is on for both: loopback names on any port, the configured
``mcp_allowed_hosts`` and the host of ``public_url``.

Bounds: the reports go through ``BattleService.post_event``, so an event is held to the same caps as over HTTP
(``max_event_bytes`` / ``max_result_bytes``, nesting, finite numbers, no lone surrogates: a tool error naming the
argument); the MCP request bodies themselves are capped by the app's body-limit middleware.

Battle token (``--require-token``): the platform's tools have no token argument, so agents written for it can only
report to a backend that does not require one. Ours accept an optional extra argument ``battle_token`` (what an LLM
can pass: the token arrives in battle_info/battle_start) and, failing that, the token from the MCP HTTP request's
``X-Battle-Token`` or ``Authorization: Bearer`` header (what a programmatic client configures once per
connection). The argument wins when both are present.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Annotated, Any
from urllib.parse import urlsplit

import anyio
import httpx
import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import BaseModel, Field
from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.routing import BaseRoute, Mount
from starlette.types import ASGIApp, Receive, Scope, Send

from battle_backend.battles.a2a_messages import A2ADeliveryError, A2AReply, send_text, stream_text
from battle_backend.battles.agent_cards import AgentCardError, a2a_endpoint, fetch_agent_card
from battle_backend.battles.api_models import ApiError, BattleEvent, check_arena_result, validate_data
from battle_backend.battles.json_limits import JsonLimits
from battle_backend.context import BackendContext
from battle_backend.http.security import presented_token
from battle_backend.settings import BackendSettings
from battle_backend.store.timestamps import display_timestamp

logger = logging.getLogger(__name__)

MCP_PATH = "/mcp"
"""Streamable HTTP mount; clients use ``<backend>/mcp/`` (with the trailing slash)."""
SSE_PATH = "/sse"
"""Legacy HTTP+SSE endpoint, the path AgentBeats' own MCP server used."""
MESSAGES_PATH = "/messages/"
"""Where legacy SSE clients post their messages (announced to them in the ``endpoint`` event)."""

LOOPBACK_HOSTS: tuple[str, ...] = ("127.0.0.1:*", "localhost:*", "[::1]:*")
"""Host header values always accepted: a DNS-rebinding attack arrives with the attacker's name, never these."""

NO_RESPONSE = "No response from agent."
"""What the platform's talk_to_agent answers when the agent's reply holds no text."""

INSTRUCTIONS = """\
AgentBeats battle platform tools (Arena battle backend).
- update_battle_process(battle_id, message, reported_by, detail?, markdown_content?): log a progress event.
- report_on_battle_end(battle_id, message, winner, reported_by, detail?, markdown_content?): report the result;
  YOU MUST CALL THIS AT THE END OF THE BATTLE. It finishes the battle; later reports are refused.
- talk_to_agent(query, target_url): send a text message to the A2A agent at target_url and get its text reply.
If the backend requires battle tokens, pass the battle_token you received in battle_info / battle_start."""


class EventLogged(BaseModel):
    """update_battle_process's structured answer (its text is the platform's ``logged to backend``)."""

    status: str = Field(description="'logged to backend', as the AgentBeats platform answers")
    battle_id: str
    seq: int = Field(description="the event's position in the battle's interact_history (1-based)")
    timestamp: str = Field(description="the event's timestamp as ISO 8601 UTC text")


class ResultReported(BaseModel):
    """report_on_battle_end's structured answer (its text is the platform's ``battle result reported: winner=...``)."""

    status: str
    battle_id: str
    seq: int = Field(description="the result event's position in the battle's interact_history (1-based)")
    winner: str
    state: str = Field(description="the battle's state after the report: finished")
    timestamp: str = Field(description="the event's timestamp as ISO 8601 UTC text")


class AgentReply(BaseModel):
    """talk_to_agent's structured answer (its text is the agent's reply, as on the platform)."""

    reply: str
    target_url: str
    endpoint: str = Field(description="the JSON-RPC URL the message was sent to (from the agent card)")
    streamed: bool = Field(description="true when sent with message/stream, false with message/send")


# --- transport security -------------------------------------------------------------------------------------
def _host_of(url: str) -> str | None:
    """The Host header a client sends when it calls ``url`` (``name:port``, or ``name`` without a port)."""
    parts = urlsplit(url)
    if not parts.hostname:
        return None
    name = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{name}:{parts.port}" if parts.port else name


def transport_security(settings: BackendSettings) -> TransportSecuritySettings:
    """Host/Origin checks for both transports: loopback, ``settings.mcp_allowed_hosts`` and the public URL's host.

    Origins are derived from the hosts (http and https) so a browser-based MCP client on an allowed host works;
    clients that send no Origin header are unaffected.
    """
    hosts = list(LOOPBACK_HOSTS)
    extra = [*settings.mcp_allowed_hosts]
    if settings.public_url and (public := _host_of(settings.public_url)):
        extra.append(public)
    for host in extra:
        if host not in hosts:
            hosts.append(host)
    origins = [f"{scheme}://{host}" for host in hosts for scheme in ("http", "https")]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


@contextlib.contextmanager
def _root_logging_kept() -> Iterator[None]:
    """MCPServer() raises the root logger to INFO and adds a handler; put both back (the backend stays quiet)."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        yield
    finally:
        root.setLevel(level)
        root.handlers[:] = handlers


# --- tool helpers -------------------------------------------------------------------------------------------
def _text_result(text: str, structured: BaseModel) -> types.CallToolResult:
    """The platform's plain-text answer for the model, plus our structured content for programs."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=structured.model_dump(mode="json")
    )


def _tool_error(battle_id: str, error: ApiError) -> ToolError:
    """The HTTP API's refusal, worded for a tool caller (the status it would have answered is named)."""
    if error.status_code == 404:
        return ToolError(f"battle_id: no battle {battle_id!r} on this backend (HTTP API: 404)")
    if error.status_code == 401:
        return ToolError(
            "battle_token: this backend requires the battle's token (the battle_token from battle_info / "
            "battle_start): pass it as the battle_token argument, or send 'Authorization: Bearer <token>' or "
            "'X-Battle-Token: <token>' on the MCP connection (HTTP API: 401)"
        )
    if isinstance(error.detail, list):
        problems = []
        for item in error.detail:
            if isinstance(item, dict):
                where = ".".join(str(part) for part in item.get("loc", [])[1:]) or "arguments"
                problems.append(f"{where}: {item.get('msg')}")
        return ToolError(f"{'; '.join(problems)} (HTTP API: {error.status_code})")
    return ToolError(f"{error.detail} (HTTP API: {error.status_code})")


def _token(argument: str | None, ctx: Context) -> str | None:
    """The battle token: the argument when given, else the MCP request's headers."""
    if argument and argument.strip():
        return argument.strip()
    headers = ctx.headers
    if headers is None:
        return None
    return presented_token(headers if isinstance(headers, Headers) else Headers(headers=dict(headers)))


def _part_texts(parts: Any) -> list[str]:
    """Texts of a 0.3 parts list (``kind: text``; parts without a kind but with text count too)."""
    if not isinstance(parts, list):
        return []
    return [
        p["text"]
        for p in parts
        if isinstance(p, dict) and p.get("kind", "text") == "text" and isinstance(p.get("text"), str)
    ]


def _reply_texts(raw: Mapping[str, Any], kind: str) -> list[str]:
    """What the agent said in one result: a message's parts, a status message, artifacts. A task's history is
    left out (it starts with our own query)."""
    if kind == "message":
        return _part_texts(raw.get("parts"))
    texts: list[str] = []
    status = raw.get("status")
    if isinstance(status, dict) and isinstance(status.get("message"), dict):
        texts.extend(_part_texts(status["message"].get("parts")))
    artifacts = raw.get("artifacts") if kind == "task" else [raw.get("artifact")]
    for artifact in artifacts or []:
        if isinstance(artifact, dict):
            texts.extend(_part_texts(artifact.get("parts")))
    return texts


def reply_text(replies: list[A2AReply]) -> str:
    """The agent's whole answer: the text of every result in order. Streamed artifact chunks (``append``) are
    joined as they came; separate messages are separated by a newline."""
    pieces: list[str] = []
    for reply in replies:
        texts = _reply_texts(reply.raw, reply.kind)
        if not texts:
            continue
        text = "".join(texts)
        if reply.kind == "artifact-update" and reply.raw.get("append") and pieces:
            pieces[-1] += text
        else:
            pieces.append(text)
    return "\n".join(pieces).strip() or NO_RESPONSE


def _streaming(card: Mapping[str, Any]) -> bool:
    """Stream unless the card says the agent cannot (the platform always streams)."""
    capabilities = card.get("capabilities")
    return not (isinstance(capabilities, dict) and capabilities.get("streaming") is False)


def _reject_unknown_arguments(server: MCPServer) -> ServerMiddleware[Any]:
    """Middleware: an argument a tool does not take is a tool error naming it, instead of being dropped."""
    accepted: dict[str, frozenset[str]] = {}

    async def middleware(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        params = ctx.params
        if ctx.method == "tools/call" and isinstance(params, Mapping):
            name, arguments = params.get("name"), params.get("arguments")
            if not accepted:
                for tool in await server.list_tools():
                    accepted[tool.name] = frozenset(tool.input_schema.get("properties", {}))
            if isinstance(name, str) and name in accepted and isinstance(arguments, Mapping):
                unknown = sorted(set(arguments) - accepted[name])
                if unknown:
                    known = ", ".join(sorted(accepted[name])) or "none"
                    text = f"unknown argument(s) for {name}: {', '.join(unknown)} (accepted: {known})"
                    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)
        return await call_next(ctx)

    return middleware


# --- the server ---------------------------------------------------------------------------------------------
BackendGetter = Callable[[], BackendContext]


def build_platform_server(backend: BackendGetter) -> MCPServer:
    """The MCP server with the platform's tools; ``backend()`` returns the running app's context."""
    with _root_logging_kept():
        server: MCPServer = MCPServer(
            "Open MCP for AgentBeast Battle Arena", version="1.0.0", instructions=INSTRUCTIONS, log_level="WARNING"
        )
    server.middleware.append(_reject_unknown_arguments(server))

    async def post(battle_id: str, payload: dict[str, Any], token: str | None) -> tuple[int, str]:
        """Write one event through the HTTP API's own path; (seq, timestamp) or a ToolError."""
        ctx = backend()
        try:
            event = validate_data(BattleEvent, payload)
            if event.is_result and token is not None:  # the same schema check as the HTTP path, off the loop
                await anyio.to_thread.run_sync(check_arena_result, event)
            record = await ctx.service.post_event(battle_id, event, payload, token)
        except ApiError as error:
            raise _tool_error(battle_id, error) from None
        return record.seq, display_timestamp(record.payload.get("timestamp"))

    @server.tool()
    def echo(message: str) -> str:
        """Echo the input message (the platform's connectivity check)."""
        return f"Echo: {message}"

    @server.tool()
    async def update_battle_process(
        battle_id: str,
        message: str,
        reported_by: str,
        ctx: Context,
        detail: dict[str, Any] | None = None,
        markdown_content: str | None = None,
        battle_token: str | None = None,
    ) -> Annotated[types.CallToolResult, EventLogged]:
        """Log a battle progress update: what happened, who did it, optional structured detail and markdown.

        Args:
            battle_id: the battle's id (from battle_start)
            message: a short, human-readable description, e.g. "red agent launched attack"
            reported_by: the role or agent that triggered the event, e.g. "green_agent", "evaluator"
            detail: structured data about the event (prompts, responses, configurations, ...)
            markdown_content: rich text for the battle page (rendered as sanitised markdown)
            battle_token: only when the backend requires tokens: the battle_token from battle_info / battle_start
        """
        payload: dict[str, Any] = {"is_result": False, "message": message, "reported_by": reported_by}
        if detail:
            payload["detail"] = detail
        if markdown_content:
            payload["markdown_content"] = markdown_content
        seq, timestamp = await post(battle_id, payload, _token(battle_token, ctx))
        status = "logged to backend"
        return _text_result(status, EventLogged(status=status, battle_id=battle_id, seq=seq, timestamp=timestamp))

    @server.tool()
    async def report_on_battle_end(
        battle_id: str,
        message: str,
        winner: str,
        reported_by: str,
        ctx: Context,
        detail: dict[str, Any] | None = None,
        markdown_content: str | None = None,
        battle_token: str | None = None,
    ) -> Annotated[types.CallToolResult, ResultReported]:
        """Report the final battle result. YOU MUST CALL THIS AT THE END OF THE BATTLE. It finishes the battle
        (ratings updated, agents released); later reports are refused.

        Args:
            battle_id: the battle's id (from battle_start)
            message: a short, human-readable description of the outcome
            winner: the winner: an opponent's name or role (e.g. "blue_agent"), "green_agent", or "draw"
            reported_by: the name of the agent reporting the result
            detail: structured result data (optional)
            markdown_content: rich text for the battle page (rendered as sanitised markdown)
            battle_token: only when the backend requires tokens: the battle_token from battle_info / battle_start
        """
        payload: dict[str, Any] = {"is_result": True, "message": message, "winner": winner, "reported_by": reported_by}
        if detail:
            payload["detail"] = detail
        if markdown_content:
            payload["markdown_content"] = markdown_content
        seq, timestamp = await post(battle_id, payload, _token(battle_token, ctx))
        status = f"battle result reported: winner={winner}"
        return _text_result(
            status,
            ResultReported(
                status=status, battle_id=battle_id, seq=seq, winner=winner, state="finished", timestamp=timestamp
            ),
        )

    @server.tool()
    async def talk_to_agent(query: str, target_url: str) -> Annotated[types.CallToolResult, AgentReply]:
        """Send ``query`` as a text message to the A2A agent at ``target_url`` and return its plain-text reply.

        Args:
            query: the text to send
            target_url: the agent's base URL (its card is read from /.well-known/agent-card.json)
        """
        ctx = backend()
        settings = ctx.settings
        if not target_url.startswith(("http://", "https://")):
            raise ToolError(f"target_url: expected the http(s) URL of an A2A agent, got {target_url!r}")
        try:
            card = await fetch_agent_card(
                ctx.http,
                target_url,
                timeout=settings.http_timeout_s,
                max_bytes=settings.max_request_bytes,
                limits=JsonLimits.from_settings(settings),
            )
        except AgentCardError as error:
            raise ToolError(f"target_url: {target_url} does not answer as an A2A agent: {error}") from None
        endpoint = a2a_endpoint(card, target_url)
        streamed = _streaming(card)
        limit = settings.talk_to_agent_timeout_s
        replies: list[A2AReply] = []
        try:
            async with asyncio.timeout(limit):
                if streamed:
                    stream = stream_text(ctx.http, endpoint, query, connect_timeout=settings.http_timeout_s)
                    async with contextlib.aclosing(stream):
                        async for reply in stream:
                            replies.append(reply)
                else:
                    replies.append(await send_text(ctx.http, endpoint, query, timeout=limit))
        except TimeoutError:
            raise ToolError(
                f"target_url: {target_url} did not finish answering within {limit:g} s"
                + (" (the partial reply is dropped)" if replies else "")
            ) from None
        except httpx.TimeoutException:
            raise ToolError(f"target_url: {target_url} did not answer within {limit:g} s") from None
        except A2ADeliveryError as error:
            logger.debug("talk_to_agent %s failed: %s", target_url, error)
            raise ToolError(f"target_url: {error}") from None
        except ValueError:
            raise ToolError(f"target_url: {endpoint} answered something that is not A2A JSON-RPC") from None
        text = reply_text(replies)
        return _text_result(text, AgentReply(reply=text, target_url=target_url, endpoint=endpoint, streamed=streamed))

    return server


class _Unavailable:
    """ASGI stand-in while the app's lifespan is not running (the session manager only exists inside it)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await PlainTextResponse("MCP is not running", status_code=503)(scope, receive, send)


class PlatformMcp:
    """The platform tools on one backend app: :meth:`routes` go into the app, :meth:`run` into its lifespan.

    The streamable HTTP app is rebuilt on every lifespan (a session manager runs only once), so an app object
    can be served, stopped and served again like the rest of the backend.
    """

    def __init__(self, settings: BackendSettings) -> None:
        self._security = transport_security(settings)
        self._context: BackendContext | None = None
        self.server = build_platform_server(self._backend)
        self._streamable: ASGIApp = _Unavailable()
        self._sse = self.server.sse_app(
            sse_path=SSE_PATH, message_path=MESSAGES_PATH, transport_security=self._security
        )

    @property
    def allowed_hosts(self) -> list[str]:
        """The Host header values both transports accept."""
        return list(self._security.allowed_hosts)

    def _backend(self) -> BackendContext:
        if self._context is None:
            raise ToolError("the battle backend is not running")
        return self._context

    async def _forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._streamable(scope, receive, send)

    def routes(self) -> list[BaseRoute]:
        """``/mcp`` (streamable HTTP) and the legacy SSE pair ``/sse`` + ``/messages/``."""
        return [Mount(MCP_PATH, app=self._forward), *self._sse.routes]

    @contextlib.asynccontextmanager
    async def run(self, context: BackendContext) -> AsyncIterator[None]:
        """Serve the tools against ``context`` while the block runs."""
        streamable = self.server.streamable_http_app(streamable_http_path="/", transport_security=self._security)
        async with self.server.session_manager.run():
            self._context = context
            self._streamable = streamable
            try:
                yield
            finally:
                self._streamable = _Unavailable()
                self._context = None

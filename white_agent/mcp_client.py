"""Tool mode "mcp": the white agents' client for an attempt's MCP tool endpoint (see :mod:`white_agent.protocol`).

Why a module of its own: only agents playing in tool mode "mcp" use it, so the MCP client stack (``mcp``,
``mcp_types``, ``httpx2``: ~0.4 s of imports) is imported where it is used, not when an agent starts.
"""

from __future__ import annotations

import contextlib
import json
import ssl
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol

from white_agent.errors import McpToolsError as McpToolsError  # re-exported: it was defined here

if TYPE_CHECKING:
    import mcp_types
    from mcp import Client


class McpEndpoint(Protocol):
    """What the client needs of an endpoint (:class:`white_agent.protocol.McpEndpointInfo` is one). A protocol, not
    an import: :mod:`white_agent.protocol` re-exports this module, so importing it back would close a circle."""

    @property
    def url(self) -> str: ...

    @property
    def token(self) -> str: ...


class McpConnector:
    """Opens MCP client sessions on attempt endpoints, authenticated with each endpoint's bearer token.

    One session per A2A turn: a2a-sdk runs each turn in its own task and mcp's client holds a task group, which must
    be left in the task that entered it. What can be shared is shared: the TLS context (building one costs ~40-80 ms,
    more than a whole turn of tool calls on loopback) is created once per connector, on first use.
    """

    def __init__(self, *, timeout_s: float = 60.0) -> None:
        self._timeout_s = timeout_s
        self._tls: ssl.SSLContext | None = None

    @contextlib.asynccontextmanager
    async def open(self, info: McpEndpoint) -> AsyncIterator[Client]:
        """A connected client; connection and handshake failures raise :class:`McpToolsError`."""
        import httpx2  # lazy (module docstring)
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        if self._tls is None:
            self._tls = httpx2.create_ssl_context()
        headers = {"Authorization": f"Bearer {info.token}"}
        async with contextlib.AsyncExitStack() as stack:
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(self._timeout_s), verify=self._tls)
            )
            try:
                client = await stack.enter_async_context(
                    Client(streamable_http_client(info.url, http_client=http), cache=None)
                )
            except Exception as error:  # transport, HTTP and protocol errors all mean "no tools"
                raise McpToolsError(f"cannot open the MCP tool endpoint: {describe_mcp_error(error)}") from error
            yield client


def describe_mcp_error(error: BaseException) -> str:
    """Class and message of the innermost error (task groups wrap transport errors in exception groups)."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    text = str(error).replace("\n", " ")[:200]
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def tool_result_text(result: mcp_types.CallToolResult) -> str:
    """A tool result as the text a model reads: the text blocks joined, else the structured content as JSON."""
    import mcp_types  # lazy (module docstring)

    texts = [block.text for block in result.content if isinstance(block, mcp_types.TextContent)]
    if texts:
        return "\n".join(texts)
    if result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    return ""


def openai_tools_from_mcp(tools: list[mcp_types.Tool]) -> list[dict[str, Any]]:
    """MCP tools as OpenAI ``tools`` entries (name, description, JSON schema of the parameters)."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description or "",
                "parameters": tool.input_schema or {"type": "object", "properties": {}},
            },
        }
        for tool in tools
    ]

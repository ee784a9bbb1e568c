"""Fixtures of the MCP tests: one green agent with the MCP component for the session (its scoring pool takes seconds
to start), white agents per test, and helpers to talk to both MCP endpoints with the mcp package's own client.

The green agent has the fixed test operator token (:data:`tests.support.TEST_OPERATOR_TOKEN`): :func:`control` sends
it by default, as an operator's MCP client must (/mcp/ answers 401 without it); attempt endpoints take their own
per-attempt tokens instead (:func:`attempt_client`)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
import pytest_asyncio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from green_agent.service.a2a_server import create_app
from green_agent.service.mcp import McpComponent
from green_agent.service.operator_auth import OperatorToken, bearer_header
from tests.support import TEST_OPERATOR_TOKEN
from tests.support.servers import serve_app_factory
from white_agent.app import create_white_agent_app, make_agent


@dataclass(frozen=True)
class GreenServer:
    """The running green agent: its base URL, its MCP component, where it writes runs and its operator token."""

    url: str
    component: McpComponent
    runs_dir: Path
    operator_token: str = TEST_OPERATOR_TOKEN


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def green(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[GreenServer]:
    runs_dir = tmp_path_factory.mktemp("mcp-runs")
    holder: dict[str, McpComponent] = {}

    def factory(url: str) -> Any:
        holder["component"] = McpComponent(public_url=url, probe_timeout_s=2.0)
        return create_app(
            url, runs_dir=runs_dir, components=[holder["component"]], operator_token=OperatorToken(TEST_OPERATOR_TOKEN)
        )

    async with serve_app_factory(factory, startup_timeout_s=60) as url:
        yield GreenServer(url, holder["component"], runs_dir)


_OPERATOR = object()
"""Default of :func:`control`'s ``token``: the green agent's operator token."""


@contextlib.asynccontextmanager
async def control(
    green: GreenServer, *, token: str | object | None = _OPERATOR, **options: Any
) -> AsyncIterator[Client]:
    """An MCP client session on the green agent's control endpoint, sending ``Authorization: Bearer <token>``:
    the operator token unless ``token`` says otherwise (None: no Authorization header at all)."""
    value = green.operator_token if token is _OPERATOR else token
    headers = bearer_header(value) if isinstance(value, str) else None
    async with (
        create_mcp_http_client(headers=headers) as http,  # the SDK's own timeouts (long reads for wait=true)
        Client(streamable_http_client(f"{green.url}/mcp/", http_client=http), **options) as client,
    ):
        yield client


@contextlib.asynccontextmanager
async def attempt_client(url: str, token: str | None, **options: Any) -> AsyncIterator[Client]:
    """An MCP client session on an attempt endpoint, with ``Authorization: Bearer <token>`` (none if None)."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0)) as http,
        Client(streamable_http_client(url, http_client=http), cache=None, **options) as client,
    ):
        yield client


@contextlib.asynccontextmanager
async def white_agent(kind: str = "replay", **options: Any) -> AsyncIterator[str]:
    """A reference white agent on a free loopback port."""
    agent = make_agent(kind, **options)
    async with serve_app_factory(lambda url: create_white_agent_app(agent, url)) as url:
        yield url


def structured(result: Any) -> dict[str, Any]:
    """The structured content of a successful tool result (fails the test with the error text otherwise)."""
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return dict(result.structured_content)


def error_text(result: Any) -> str:
    """The text of a tool error (fails the test if the call succeeded)."""
    assert result.is_error, result.structured_content
    return " ".join(getattr(block, "text", "") for block in result.content)


def trajectory_tool_calls(run_dir: Path) -> dict[str, list[tuple[str, str]]]:
    """Per trajectory file: the tool calls recorded in it, as (name, arguments JSON) in order."""
    calls: dict[str, list[tuple[str, str]]] = {}
    for path in sorted((run_dir / "trajectories").glob("*.jsonl")):
        records = [json.loads(line) for line in path.read_text().splitlines()[1:]]
        calls[path.name] = [
            (call["name"], json.dumps(call["arguments"], sort_keys=True))
            for record in records
            for call in record.get("tool_calls") or []
        ]
    return calls

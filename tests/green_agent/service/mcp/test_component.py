"""The component's wiring: allowed hosts (DNS-rebinding protection on, container names configurable), quiet logging,
one component per application. Served without a battle registry: these requests never reach one."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp_types import TextContent
from starlette.applications import Starlette

from green_agent.engine.config import BattleConfig, parse_remote_battle_config
from green_agent.service.mcp import McpComponent, transport_security
from green_agent.service.mcp.security import host_of
from tests.support.servers import serve_app

CLIENT_INFO = {"name": "t", "version": "1"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": CLIENT_INFO},
}
HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}


def _unused_registry() -> Any:
    raise AssertionError("these requests must not need the battle registry")


@contextlib.asynccontextmanager
async def _serving(component: McpComponent, registry_getter: Any = _unused_registry) -> AsyncIterator[str]:
    registry = SimpleNamespace(tool_gateway=None, battles={})

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        # The gateway goes to the registry when create_app builds it; the lifespan only runs the session managers.
        async with component.lifespan(registry):  # type: ignore[arg-type]
            assert registry.tool_gateway is None
            yield
        assert registry.tool_gateway is None

    async with serve_app(Starlette(routes=component.routes(registry_getter), lifespan=lifespan)) as url:
        yield url


def test_allowed_hosts_extend_loopback_with_configured_and_public_hosts() -> None:
    settings = transport_security(["green:*", "arena.example"], "http://green-agent:9009/")
    assert settings.enable_dns_rebinding_protection
    assert settings.allowed_hosts == [
        "127.0.0.1:*",
        "localhost:*",
        "[::1]:*",
        "green:*",
        "arena.example",
        "green-agent:9009",
    ]
    assert "http://green:*" in settings.allowed_origins and "https://arena.example" in settings.allowed_origins
    assert transport_security(None, None).allowed_hosts == ["127.0.0.1:*", "localhost:*", "[::1]:*"]
    assert [host_of(u) for u in ("http://h:1/x", "https://h/", "http://[::1]:8/")] == ["h:1", "h", "[::1]:8"]


async def test_configured_container_names_are_accepted_and_others_refused() -> None:
    component = McpComponent(allowed_hosts=["green:*"], public_url="http://arena-green:9009")
    async with _serving(component) as url, httpx.AsyncClient() as http:
        statuses = {}
        for host in ("green:9009", "arena-green:9009", "localhost:1", "evil.example:9009", "arena-green:1"):
            response = await http.post(f"{url}/mcp/", headers={**HEADERS, "Host": host}, json=INITIALIZE)
            statuses[host] = response.status_code
    assert statuses == {
        "green:9009": 200,
        "arena-green:9009": 200,
        "localhost:1": 200,
        "evil.example:9009": 421,
        "arena-green:1": 421,
    }


async def test_attempt_routes_exist_only_with_a_public_url() -> None:
    async with _serving(McpComponent()) as url, httpx.AsyncClient() as http:
        response = await http.post(f"{url}/mcp-attempts/x/", headers=HEADERS, json=INITIALIZE)
    assert response.status_code == 404


async def test_without_a_public_url_mcp_mode_battles_are_refused() -> None:
    registry = SimpleNamespace(
        tool_gateway=None,
        battles={},
        get=lambda _battle_id: None,
        remote_config=lambda data: parse_remote_battle_config(data, BattleConfig()),
    )
    async with _serving(McpComponent(), lambda: registry) as url, Client(f"{url}/mcp/") as client:
        result = await client.call_tool(
            "start_battle", {"white_agent_url": "http://127.0.0.1:9", "config": {"tool_mode": "mcp"}}
        )
    assert result.is_error
    assert isinstance(result.content[0], TextContent) and "public_url" in result.content[0].text


def test_building_the_server_leaves_root_logging_alone() -> None:
    # As in a fresh process: no root handlers (mcp's MCPServer() would add one and set INFO).
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    root.handlers[:], root.level = [], logging.WARNING
    try:
        McpComponent(public_url="http://127.0.0.1:1").routes(_unused_registry)
        assert root.level == logging.WARNING and root.handlers == []
    finally:
        root.handlers[:], root.level = handlers, level


def test_one_component_serves_one_application() -> None:
    component = McpComponent()
    component.routes(_unused_registry)
    with pytest.raises(RuntimeError, match="one application"):
        component.routes(_unused_registry)

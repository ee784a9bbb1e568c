"""Attempt endpoints (/mcp-attempts/<id>/): one environment per endpoint, one token per endpoint, closed with the
attempt. Endpoints are opened on the running green agent's gateway, exactly as the attempt loop opens them."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import TextContent

from green_agent.engine.attempt import ToolEndpoint
from green_agent.engine.tau.environment import AttemptEnvironment
from green_agent.engine.tau.tasks import resolve_task
from tests.green_agent.service.mcp.conftest import GreenServer, attempt_client, error_text

pytestmark = pytest.mark.asyncio(loop_scope="session")

LEGACY_VERSION = "2025-06-18"
ACCEPT = "application/json, text/event-stream"


async def _env(index: int = 0) -> AttemptEnvironment:
    return await AttemptEnvironment.create(resolve_task("retail", "test", index))


USER_ID = "mei_kovacs_8020"
"""A real user of the retail database (retail/test/0's customer), to make calls that succeed."""


def _user_id(env: AttemptEnvironment) -> str:
    """A user id that exists in ``env``'s retail database (the environment itself lives in its tool sandbox)."""
    assert env.ref.domain == "retail"
    return USER_ID


def _mcp_error(error: BaseException) -> MCPError | None:
    """The MCPError inside the exception groups the client's task groups raise."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error if isinstance(error, MCPError) else None


async def _refused(url: str, token: str | None) -> MCPError:
    with pytest.raises(BaseException) as caught:
        async with attempt_client(url, token) as client:
            await client.list_tools()
    error = _mcp_error(caught.value)
    assert error is not None, caught.value
    return error


def _gateway(green: GreenServer) -> Any:
    assert green.component.gateway is not None
    return green.component.gateway


async def test_an_endpoint_serves_its_attempts_tools_and_records_calls_verbatim(green: GreenServer) -> None:
    env = await _env()
    async with (
        _gateway(green).open(env, "direct/retail/test/0/1") as endpoint,
        attempt_client(endpoint.url, endpoint.token) as client,
    ):
        listed = (await client.list_tools()).tools
        before = env.message_count
        found = await client.call_tool("get_user_details", {"user_id": _user_id(env)})
        unknown = await client.call_tool("no_such_tool", {})
        bad = await client.call_tool("get_user_details", {"user_id": "nobody_0000"})
    assert [tool.name for tool in listed] == [tool["function"]["name"] for tool in env.tools]
    assert listed[0].input_schema == env.tools[0]["function"]["parameters"]
    found_content = found.content[0]
    assert isinstance(found_content, TextContent)
    assert not found.is_error and json.loads(found_content.text)["user_id"] == _user_id(env)
    assert unknown.is_error and bad.is_error and error_text(bad).startswith("Error")
    # Every call, failed ones included, is in the trajectory as a call plus its verbatim output.
    records = env.trajectory_records()[before:]
    assert [r["tool_calls"][0]["name"] for r in records[0::2]] == [
        "get_user_details",
        "no_such_tool",
        "get_user_details",
    ]
    assert [r["content"] for r in records[1::2]] == [found_content.text, error_text(unknown), error_text(bad)]


async def test_tokens_of_two_concurrent_attempts_are_isolated(green: GreenServer) -> None:
    env_a, env_b = await _env(0), await _env(1)
    gateway = _gateway(green)
    async with gateway.open(env_a, "direct/a/1") as a, gateway.open(env_b, "direct/b/1") as b:
        assert a.url != b.url and a.token != b.token
        count_b = env_b.message_count
        for url, token in [(b.url, a.token), (a.url, b.token), (b.url, None), (b.url, b.token + "x")]:
            refused = await _refused(url, token)
            assert "bearer token" in refused.message
        async with attempt_client(a.url, a.token) as client:
            await client.call_tool("get_user_details", {"user_id": _user_id(env_a)})
        assert env_b.message_count == count_b  # nothing reached B's environment
        assert env_a.trajectory_records()[-2]["tool_calls"][0]["name"] == "get_user_details"
        async with attempt_client(b.url, b.token) as client:
            assert not (await client.call_tool("get_user_details", {"user_id": _user_id(env_b)})).is_error


async def test_an_endpoint_closes_when_its_attempt_ends(green: GreenServer) -> None:
    gateway = _gateway(green)
    env = await _env()
    async with gateway.open(env, "direct/closing/1") as endpoint:
        async with attempt_client(endpoint.url, endpoint.token) as client:
            await client.list_tools()
        open_now = gateway.open_endpoints
    assert gateway.open_endpoints == open_now - 1
    refused = await _refused(endpoint.url, endpoint.token)
    assert "closed" in refused.message
    async with httpx.AsyncClient() as http:
        response = await http.post(
            endpoint.url,
            headers={"Authorization": f"Bearer {endpoint.token}", "Accept": ACCEPT},
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        )
    assert response.status_code == 404


async def _legacy_session(http: httpx.AsyncClient, endpoint: ToolEndpoint) -> str:
    """Open a handshake-era (stateful) session with raw HTTP; return its session id."""
    response = await http.post(
        endpoint.url,
        headers=_headers(endpoint.token),
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": LEGACY_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
    )
    assert response.status_code == 200, response.text
    return response.headers["mcp-session-id"]


def _headers(token: str, session: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}", "Accept": ACCEPT, "MCP-Protocol-Version": LEGACY_VERSION}
    return {**headers, "Mcp-Session-Id": session} if session else headers


async def test_a_legacy_session_is_bound_to_the_token_that_opened_it(green: GreenServer) -> None:
    gateway = _gateway(green)
    env_a, env_b = await _env(0), await _env(1)
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "get_user_details", "arguments": {"user_id": _user_id(env_b)}},
    }
    async with (
        gateway.open(env_a, "direct/la/1") as a,
        gateway.open(env_b, "direct/lb/1") as b,
        httpx.AsyncClient() as http,
    ):
        session_a = await _legacy_session(http, a)
        # B's own URL and token, but A's session: refused as an unknown session, B's environment untouched.
        count_b = env_b.message_count
        hijack = await http.post(b.url, headers=_headers(b.token, session_a), json=call)
        assert hijack.status_code == 404 and env_b.message_count == count_b
        own = await http.post(a.url, headers=_headers(a.token, session_a), json=call)
        assert own.status_code == 200 and env_a.trajectory_records()[-2]["tool_calls"][0]["name"] == "get_user_details"


async def test_mcp_client_in_legacy_mode_works_too(green: GreenServer) -> None:
    env = await _env()
    async with (
        _gateway(green).open(env, "direct/legacy/1") as endpoint,
        attempt_client(endpoint.url, endpoint.token, mode="legacy") as client,
    ):
        result = await client.call_tool("get_user_details", {"user_id": _user_id(env)})
    assert not result.is_error


async def test_host_header_protection_stays_on(green: GreenServer) -> None:
    env = await _env()
    client_info = {"name": "t", "version": "1"}
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": LEGACY_VERSION, "capabilities": {}, "clientInfo": client_info},
    }
    async with _gateway(green).open(env, "direct/host/1") as endpoint, httpx.AsyncClient() as http:
        attempt = await http.post(endpoint.url, headers={**_headers(endpoint.token), "Host": "evil.example"}, json=body)
        # The control endpoint with the operator token: the Host check still applies behind the token check.
        operator = _headers(green.operator_token)
        control = await http.post(f"{green.url}/mcp/", headers={**operator, "Host": "evil.example:80"}, json=body)
        allowed = await http.post(f"{green.url}/mcp/", headers={**operator, "Host": "localhost:1234"}, json=body)
    assert attempt.status_code == 421 and control.status_code == 421
    assert allowed.status_code == 200

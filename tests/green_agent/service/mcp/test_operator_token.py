"""Who may use which MCP endpoint: the control endpoint (/mcp/) only with the green agent's operator token; each
attempt endpoint (/mcp-attempts/<id>/) only with its own attempt token, which the operator token does not replace.

Why both directions matter: the agent under test is usually on the same host and learns its attempt token from the
first message; with it (or with no credential at all) it must not be able to read, list or cancel battles. And the
operator token is not a master key for attempt endpoints: those calls are recorded in an attempt's trajectory, so
only the attempt's own agent may make them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2
import pytest
import pytest_asyncio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import TextContent

from green_agent.engine.tau.environment import AttemptEnvironment
from green_agent.engine.tau.tasks import resolve_task
from tests.green_agent.service.mcp.conftest import GreenServer, attempt_client, control, structured, white_agent

pytestmark = pytest.mark.asyncio(loop_scope="session")

LEGACY_VERSION = "2025-06-18"
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": LEGACY_VERSION}
USER_ID = "mei_kovacs_8020"  # a customer of tau2's retail database


def _rpc(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, **({"params": params} if params is not None else {})}


def _call(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return _rpc("tools/call", {"name": tool, "arguments": arguments})


INITIALIZE = _rpc(
    "initialize", {"protocolVersion": LEGACY_VERSION, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
)


def _bad_credentials(green: GreenServer, attempt_token: str) -> dict[str, dict[str, str]]:
    """Authorization headers that must all be refused on /mcp/ (label -> extra headers)."""
    operator = green.operator_token
    return {
        "none": {},
        "wrong": {"Authorization": "Bearer not-the-operator-token-0000"},
        "attempt token": {"Authorization": f"Bearer {attempt_token}"},
        "operator token + suffix": {"Authorization": f"Bearer {operator}x"},
        "operator token prefix": {"Authorization": f"Bearer {operator[:-1]}"},
        "operator token, Basic scheme": {"Authorization": f"Basic {operator}"},
        "wrong cookie": {"Cookie": "arena_operator=not-the-operator-token-0000"},
    }


@pytest_asyncio.fixture(loop_scope="session")
async def running_battle(green: GreenServer) -> AsyncIterator[str]:
    """A battle that stays running (its agent never answers) until the test ends; yields its id."""
    config = {"domain": "airline", "task_id": [0], "k": 2, "calibration": True, "turn_timeout_s": 600}
    async with white_agent("flaky", fault_rates={"no_reply": 1.0}, no_reply_s=600) as white:
        # One client per step: an MCP client's task group must not span a fixture's setup and teardown.
        async with control(green) as client:
            started = structured(await client.call_tool("start_battle", {"white_agent_url": white, "config": config}))
        try:
            yield started["battle_id"]
        finally:
            async with control(green) as client:
                cancelled = structured(await client.call_tool("cancel_battle", {"battle_id": started["battle_id"]}))
            assert cancelled["state"] == "cancelled"


async def test_without_the_operator_token_the_control_endpoint_answers_401(
    green: GreenServer, running_battle: str
) -> None:
    env = await AttemptEnvironment.create(resolve_task("retail", "test", 0))
    assert green.component.gateway is not None
    requests = {
        "initialize": INITIALIZE,
        "tools/list": _rpc("tools/list"),
        "get_battle": _call("get_battle", {"battle_id": running_battle}),
        "get_results": _call("get_results", {"battle_id": running_battle}),
        "cancel_battle": _call("cancel_battle", {"battle_id": running_battle}),
        "compare_runs": _call("compare_runs", {"a": running_battle, "b": running_battle}),
    }
    async with env, green.component.gateway.open(env, "direct/operator-401/1") as endpoint, httpx.AsyncClient() as http:
        answers: dict[tuple[str, str, str], httpx.Response] = {}
        for label, credential in _bad_credentials(green, endpoint.token).items():
            for path in ("/mcp/", "/mcp"):
                for name, body in requests.items():
                    answers[(label, path, name)] = await http.post(
                        f"{green.url}{path}", headers={**MCP_HEADERS, **credential}, json=body
                    )
            answers[(label, "/mcp/", "GET")] = await http.get(f"{green.url}/mcp/", headers=credential)
        query = await http.post(
            f"{green.url}/mcp/?token=not-the-operator-token-0000", headers=MCP_HEADERS, json=requests["cancel_battle"]
        )
        allowed = await http.post(
            f"{green.url}/mcp/",
            json=INITIALIZE,
            headers={**MCP_HEADERS, "Authorization": f"Bearer {green.operator_token}"},
        )
    refused = {key: r.status_code for key, r in answers.items() if r.status_code != 401}
    assert refused == {}
    assert query.status_code == 401 and allowed.status_code == 200
    for response in [*answers.values(), query]:
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert running_battle not in response.text  # nothing about the battle comes back
    # None of those requests reached the battle: it is still running.
    async with control(green) as client:
        status = structured(await client.call_tool("get_battle", {"battle_id": running_battle}))
    assert status["state"] == "running"


@pytest.mark.parametrize("token", [None, "not-the-operator-token-0000"], ids=["no token", "wrong token"])
async def test_an_mcp_client_without_the_operator_token_cannot_use_the_control_tools(
    green: GreenServer, running_battle: str, token: str | None
) -> None:
    statuses: list[int] = []

    async def record(response: httpx2.Response) -> None:
        statuses.append(response.status_code)

    headers = {"Authorization": f"Bearer {token}"} if token is not None else None
    attempts = {
        "list_tools": None,
        "get_battle": {"battle_id": running_battle},
        "cancel_battle": {"battle_id": running_battle},
    }
    for tool, arguments in attempts.items():
        statuses.clear()
        with pytest.raises(BaseException) as caught:  # the SDK's task groups wrap the MCPError
            async with (
                asyncio.timeout(30),
                httpx2.AsyncClient(headers=headers, timeout=30.0, event_hooks={"response": [record]}) as http,
                Client(streamable_http_client(f"{green.url}/mcp/", http_client=http)) as client,
            ):
                if arguments is None:
                    await client.list_tools()
                else:
                    await client.call_tool(tool, arguments)
        assert _mcp_error(caught.value) is not None, (tool, caught.value)
        assert statuses and set(statuses) == {401}, (tool, statuses)
    async with control(green) as client:
        status = structured(await client.call_tool("get_battle", {"battle_id": running_battle}))
    assert status["state"] == "running"


def _mcp_error(error: BaseException) -> MCPError | None:
    """The MCPError inside the exception groups the client's task groups raise."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error if isinstance(error, MCPError) else None


async def test_attempt_endpoints_take_their_own_token_not_the_operator_token(green: GreenServer) -> None:
    env = await AttemptEnvironment.create(resolve_task("retail", "test", 0))
    assert green.component.gateway is not None
    call = _call("get_user_details", {"user_id": USER_ID})
    async with (
        env,
        green.component.gateway.open(env, "direct/operator-attempt/1") as endpoint,
        httpx.AsyncClient() as http,
    ):
        before = env.message_count
        operator = await http.post(
            endpoint.url, json=call, headers={**MCP_HEADERS, "Authorization": f"Bearer {green.operator_token}"}
        )
        operator_cookie = await http.post(
            endpoint.url, json=call, headers={**MCP_HEADERS, "Cookie": f"arena_operator={green.operator_token}"}
        )
        operator_query = await http.post(f"{endpoint.url}?token={green.operator_token}", json=call, headers=MCP_HEADERS)
        assert env.message_count == before  # none of those calls reached (or was recorded on) the environment
        async with attempt_client(endpoint.url, endpoint.token) as client:  # no operator token anywhere
            own = await client.call_tool("get_user_details", {"user_id": USER_ID})
    assert (operator.status_code, operator_cookie.status_code, operator_query.status_code) == (401, 401, 401)
    assert "bearer token" in operator.json()["error"]["message"]
    assert not own.is_error and isinstance(own.content[0], TextContent) and USER_ID in own.content[0].text
    assert env.trajectory_records()[-2]["tool_calls"][0]["name"] == "get_user_details"


# Percent-encoded: httpx would resolve literal dot segments itself; the server decodes these into "..".
@pytest.mark.parametrize(
    "raw_path",
    [
        b"/mcp-attempts/%2E%2E/mcp/",
        b"/mcp-attempts/x/%2E%2E/%2E%2E/mcp/",
        b"/mcp-attempts/..%2Fmcp/",
        b"/health/%2E%2E/mcp/",
        b"/health%2F..%2Fmcp/",
        b"/.well-known/%2E%2E/mcp/",
    ],
)
async def test_open_path_prefixes_do_not_lead_to_the_control_endpoint(green: GreenServer, raw_path: bytes) -> None:
    # The paths the token check lets through (attempt endpoints, /health, the card) are matched as the router
    # matches them: no dot segment or encoded slash turns one of them into /mcp/.
    url = httpx.URL(green.url).copy_with(raw_path=raw_path)
    async with httpx.AsyncClient() as http:
        response = await http.post(url, headers=MCP_HEADERS, json=_rpc("tools/list"))
    assert response.status_code in (401, 404, 405), (response.status_code, response.text)
    assert "get_battle" not in response.text

"""The AgentBeats platform MCP tools on the backend (update_battle_process, report_on_battle_end, talk_to_agent),
driven with the mcp package's own client over streamable HTTP (/mcp/) and the legacy SSE transport (/sse)."""

from __future__ import annotations

import asyncio
import json
import socket
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from battle_backend import BackendSettings, create_app
from battle_backend.__main__ import build_parser, settings_from_args
from battle_backend.testing import FakeA2AAgent
from tests.battle_backend.conftest import Arena, Registered, arena_on, progress, run_backend
from tests.support.servers import serve_app


def mcp_url(arena: Arena) -> str:
    return arena.backend.url + "/mcp/"


def error_text(result: Any) -> str:
    assert result.is_error, f"expected a tool error, got {result}"
    return " ".join(getattr(block, "text", "") for block in result.content)


def agent_events(battle: dict[str, Any]) -> list[dict[str, Any]]:
    """interact_history without the backend's own system entries."""
    return [e for e in battle["interact_history"] if e.get("reported_by") != "system"]


async def running_battle(arena: Arena) -> tuple[str, str, Registered, Registered]:
    """A started battle: (battle id, token, green, white)."""
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    start = await arena.started(green, battle_id)
    return battle_id, str(start["battle_token"]), green, white


def free_port() -> int:
    """A loopback port nothing listens on (bound then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- a scripted A2A agent for talk_to_agent ---------------------------------------------------------------------
def scripted_agent(
    *, streaming: bool = True, events: list[dict[str, Any]] | None = None, hang: bool = False
) -> tuple[Starlette, list[tuple[str, str]]]:
    """An A2A 0.3 agent whose answers are given: ``events`` on message/stream (one SSE event each), the first
    event on message/send; ``hang`` streams nothing until the client goes away. Records (method, text) calls."""
    calls: list[tuple[str, str]] = []
    answers = events or []

    async def card(request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "name": "scripted",
                "description": "scripted agent",
                "url": str(request.url).split("/.well-known/")[0] + "/",
                "version": "1.0.0",
                "protocolVersion": "0.3.0",
                "capabilities": {"streaming": streaming},
                "defaultInputModes": ["text/plain"],
                "defaultOutputModes": ["text/plain"],
                "skills": [],
            }
        )

    async def rpc(request: Request) -> Response:
        body = await request.json()
        parts = body["params"]["message"]["parts"]
        calls.append((body["method"], "".join(p.get("text", "") for p in parts)))

        def wrap(result: dict[str, Any]) -> dict[str, Any]:
            return {"jsonrpc": "2.0", "id": body["id"], "result": result}

        if body["method"] == "message/send":
            return JSONResponse(wrap(answers[0]))

        async def stream() -> AsyncIterator[dict[str, str]]:
            if hang:
                await asyncio.Event().wait()
            for event in answers:
                yield {"data": json.dumps(wrap(event))}

        return EventSourceResponse(stream(), ping=0)

    app = Starlette(
        routes=[
            Route("/.well-known/agent-card.json", card, methods=["GET"]),
            Route("/", rpc, methods=["POST"]),
        ]
    )
    return app, calls


def text_parts(text: str) -> list[dict[str, str]]:
    return [{"kind": "text", "text": text}]


# --- the tools and their arguments ------------------------------------------------------------------------------
async def test_tools_have_the_platform_names_and_arguments(arena: Arena) -> None:
    async with Client(mcp_url(arena)) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert {"update_battle_process", "report_on_battle_end", "talk_to_agent", "echo"} <= set(tools)
    update = tools["update_battle_process"].input_schema
    assert set(update["required"]) == {"battle_id", "message", "reported_by"}
    assert {"detail", "markdown_content", "battle_token"} <= set(update["properties"])
    end = tools["report_on_battle_end"].input_schema
    assert set(end["required"]) == {"battle_id", "message", "winner", "reported_by"}
    assert {"detail", "markdown_content", "battle_token"} <= set(end["properties"])
    talk = tools["talk_to_agent"].input_schema
    assert set(talk["required"]) == {"query", "target_url"} == set(talk["properties"])
    assert "ctx" not in update["properties"]


async def test_progress_then_result_through_mcp(arena: Arena) -> None:
    battle_id, token, _green, white = await running_battle(arena)
    async with Client(mcp_url(arena)) as client:
        first = await client.call_tool(
            "update_battle_process",
            {
                "battle_id": battle_id,
                "message": "task 1 attempt 1 passed",
                "reported_by": "green_agent",
                "detail": {"task": 1, "reward": 1.0},
                "markdown_content": "**passed**",
            },
        )
        assert not first.is_error, first
        assert first.content[0].text == "logged to backend"  # the platform's answer, word for word
        assert (await arena.post(battle_id, progress("posted over HTTP"))).status_code == 204
        second = await client.call_tool(
            "update_battle_process", {"battle_id": battle_id, "message": "task 2", "reported_by": "green_agent"}
        )
        assert second.structured_content["seq"] > first.structured_content["seq"]
        end = await client.call_tool(
            "report_on_battle_end",
            {
                "battle_id": battle_id,
                "message": "white agent passed",
                "winner": "white_agent",
                "reported_by": "green_agent",
                "detail": {"pass_hat_1": 1.0},
                "battle_token": token,  # a result needs the battle's token (only the green agent has it)
            },
        )
        assert not end.is_error, end
        assert end.content[0].text == "battle result reported: winner=white_agent"
        assert end.structured_content["state"] == "finished"

    battle = await arena.get(battle_id)
    assert battle["state"] == "finished"
    events = agent_events(battle)
    assert [e["message"] for e in events] == [
        "task 1 attempt 1 passed",
        "posted over HTTP",
        "task 2",
        "white agent passed",
    ]
    assert events[0]["is_result"] is False and events[0]["reported_by"] == "green_agent"
    assert events[0]["detail"] == {"task": 1, "reward": 1.0} and events[0]["markdown_content"] == "**passed**"
    assert events[0]["timestamp"] == first.structured_content["timestamp"]
    assert "detail" not in events[2] and "markdown_content" not in events[2]  # absent, as the platform posts it
    assert events[-1]["is_result"] is True and events[-1]["winner"] == "white_agent"
    assert battle["result"]["winner"] == "white_agent" and battle["result"]["detail"] == {"pass_hat_1": 1.0}
    agent = (await arena.client.get(f"/agents/{white.agent_id}")).json()
    assert agent["status"] == "unlocked"
    assert agent["elo"]["rating"] > 1000


async def test_reports_after_the_end_are_tool_errors_like_the_http_400(arena: Arena) -> None:
    battle_id, token, *_ = await running_battle(arena)
    async with Client(mcp_url(arena)) as client:
        end = await client.call_tool(
            "report_on_battle_end",
            {
                "battle_id": battle_id,
                "message": "draw",
                "winner": "draw",
                "reported_by": "green_agent",
                "battle_token": token,
            },
        )
        assert not end.is_error
        late = await client.call_tool(
            "update_battle_process", {"battle_id": battle_id, "message": "too late", "reported_by": "green_agent"}
        )
        again = await client.call_tool(
            "report_on_battle_end",
            {
                "battle_id": battle_id,
                "message": "again",
                "winner": "green_agent",
                "reported_by": "green_agent",
                "battle_token": token,
            },
        )
    for answer in (late, again):
        text = error_text(answer)
        assert "finished" in text and "400" in text
    assert (await arena.post(battle_id, progress("too late over HTTP"))).status_code == 400
    battle = await arena.get(battle_id)
    assert battle["result"]["winner"] == "draw"
    assert [e["message"] for e in agent_events(battle)] == ["draw"]


async def test_unknown_battle_and_unknown_arguments_are_tool_errors(arena: Arena) -> None:
    async with Client(mcp_url(arena)) as client:
        update = await client.call_tool(
            "update_battle_process", {"battle_id": "no-such-battle", "message": "m", "reported_by": "g"}
        )
        end = await client.call_tool(
            "report_on_battle_end",
            {"battle_id": "no-such-battle", "message": "m", "winner": "draw", "reported_by": "g"},
        )
        unknown = await client.call_tool(
            "update_battle_process", {"battle_id": "x", "message": "m", "reported_by": "g", "colour": "blue"}
        )
        missing = await client.call_tool("report_on_battle_end", {"battle_id": "x", "message": "m"})
    assert "no-such-battle" in error_text(update) and "404" in error_text(update)
    assert "no-such-battle" in error_text(end)
    assert "colour" in error_text(unknown)
    assert "winner" in error_text(missing)


async def test_concurrent_reports_all_land_in_call_order_per_sequence(arena: Arena) -> None:
    battle_id, *_ = await running_battle(arena)
    count = 20
    async with Client(mcp_url(arena)) as client:
        answers = await asyncio.gather(
            *(
                client.call_tool(
                    "update_battle_process", {"battle_id": battle_id, "message": f"event {i}", "reported_by": "green"}
                )
                for i in range(count)
            )
        )
    assert not any(answer.is_error for answer in answers)
    seq_of = {f"event {i}": answer.structured_content["seq"] for i, answer in enumerate(answers)}
    assert len(set(seq_of.values())) == count
    history = [e["message"] for e in agent_events(await arena.get(battle_id))]
    assert sorted(history) == sorted(seq_of)
    assert history == sorted(seq_of, key=seq_of.__getitem__)  # interact_history is in sequence order


async def test_legacy_sse_transport_reports_like_the_platform(arena: Arena) -> None:
    """AgentBeats agents connect with an HTTP+SSE client to <server>/sse."""
    battle_id, *_ = await running_battle(arena)
    async with Client(sse_client(arena.backend.url + "/sse"), mode="legacy") as client:
        assert (await client.call_tool("echo", {"message": "hi"})).content[0].text == "Echo: hi"
        answer = await client.call_tool(
            "update_battle_process", {"battle_id": battle_id, "message": "over sse", "reported_by": "green_agent"}
        )
    assert not answer.is_error, answer
    assert [e["message"] for e in agent_events(await arena.get(battle_id))] == ["over sse"]


# --- talk_to_agent ----------------------------------------------------------------------------------------------
async def test_talk_to_agent_returns_the_agents_reply(arena: Arena) -> None:
    fake = FakeA2AAgent(name="white-fake")
    url = await arena.mount("talk", fake.app)
    async with Client(mcp_url(arena)) as client:
        answer = await client.call_tool("talk_to_agent", {"query": "What is 2+2?", "target_url": url})
    assert not answer.is_error, answer
    assert answer.content[0].text == "white-fake: received"
    assert answer.structured_content["reply"] == "white-fake: received"
    assert answer.structured_content["streamed"] is True
    assert fake.received == ["What is 2+2?"] and fake.methods == ["message/stream"]


async def test_talk_to_agent_collects_a_streamed_task_without_echoing_the_query(arena: Arena) -> None:
    query = "Please answer: hello?"
    task_id, context_id = uuid.uuid4().hex, uuid.uuid4().hex
    user = {"kind": "message", "role": "user", "messageId": "m0", "parts": text_parts(query)}

    def status(state: str, text: str | None, final: bool = False) -> dict[str, Any]:
        message = {"kind": "message", "role": "agent", "messageId": uuid.uuid4().hex, "parts": text_parts(text)}
        return {
            "kind": "status-update",
            "taskId": task_id,
            "contextId": context_id,
            "status": {"state": state, **({"message": message} if text else {})},
            "final": final,
        }

    def artifact(text: str, append: bool) -> dict[str, Any]:
        return {
            "kind": "artifact-update",
            "taskId": task_id,
            "contextId": context_id,
            "artifact": {"artifactId": "a1", "parts": text_parts(text)},
            "append": append,
        }

    events = [
        {"kind": "task", "id": task_id, "contextId": context_id, "status": {"state": "submitted"}, "history": [user]},
        status("working", "thinking"),
        artifact("Hello, ", False),
        artifact("world", True),
        status("completed", None, final=True),
    ]
    app, calls = scripted_agent(events=events)
    url = await arena.mount("task-agent", app)
    async with Client(mcp_url(arena)) as client:
        answer = await client.call_tool("talk_to_agent", {"query": query, "target_url": url})
    assert not answer.is_error, answer
    assert answer.structured_content["reply"] == "thinking\nHello, world"
    assert query not in answer.content[0].text
    assert calls == [("message/stream", query)]


async def test_talk_to_agent_uses_message_send_when_the_card_says_no_streaming(arena: Arena) -> None:
    reply = {"kind": "message", "role": "agent", "messageId": "r1", "parts": text_parts("plain answer")}
    app, calls = scripted_agent(streaming=False, events=[reply])
    url = await arena.mount("no-stream", app)
    async with Client(mcp_url(arena)) as client:
        answer = await client.call_tool("talk_to_agent", {"query": "hi", "target_url": url})
    assert answer.structured_content == {
        "reply": "plain answer",
        "target_url": url,
        "endpoint": url + "/",
        "streamed": False,
    }
    assert calls == [("message/send", "hi")]


async def test_talk_to_agent_failures_are_tool_errors(arena: Arena) -> None:
    failing = FakeA2AAgent(name="failing", rpc_error=True)
    failing_url = await arena.mount("failing", failing.app)
    unreachable = f"http://127.0.0.1:{free_port()}"
    garbled_app, _ = scripted_agent()
    garbled_app.router.routes[1] = Route(
        "/", lambda request: Response("oops", media_type="text/plain"), methods=["POST"]
    )
    garbled_url = await arena.mount("garbled", garbled_app)
    async with Client(mcp_url(arena)) as client:
        garbled = await client.call_tool("talk_to_agent", {"query": "hi", "target_url": garbled_url})
        down = await client.call_tool("talk_to_agent", {"query": "hi", "target_url": unreachable})
        not_url = await client.call_tool("talk_to_agent", {"query": "hi", "target_url": "white-agent"})
        rpc_error = await client.call_tool("talk_to_agent", {"query": "hi", "target_url": failing_url})
        still_serving = await client.call_tool("echo", {"message": "ok"})
    assert unreachable in error_text(down) and "ConnectError" in error_text(down)
    assert "target_url" in error_text(not_url)
    assert "fake failure" in error_text(rpc_error)
    assert "not A2A JSON-RPC" in error_text(garbled)
    assert not still_serving.is_error


async def test_talk_to_agent_gives_up_after_its_timeout(db_path: Path) -> None:
    async with run_backend(db_path, talk_to_agent_timeout_s=0.5) as backend, arena_on(backend) as arena:
        app, calls = scripted_agent(hang=True)
        url = await arena.mount("silent", app)
        async with Client(mcp_url(arena)) as client:
            answer = await client.call_tool("talk_to_agent", {"query": "anyone?", "target_url": url})
    assert "did not finish answering within 0.5 s" in error_text(answer)
    assert calls == [("message/stream", "anyone?")]


# --- battle token -----------------------------------------------------------------------------------------------
async def test_required_token_as_argument_or_header(db_path: Path) -> None:
    async with run_backend(db_path, require_token=True) as backend, arena_on(backend) as arena:
        battle_id, token, *_ = await running_battle(arena)
        other_id, other_token, *_ = await running_battle(arena)
        base = {"battle_id": battle_id, "reported_by": "green_agent"}
        async with Client(mcp_url(arena)) as client:
            missing = await client.call_tool("update_battle_process", {**base, "message": "no token"})
            wrong = await client.call_tool(
                "update_battle_process", {**base, "message": "wrong", "battle_token": "nope"}
            )
            foreign = await client.call_tool(
                "update_battle_process", {**base, "message": "foreign", "battle_token": other_token}
            )
            unproven_end = await client.call_tool("report_on_battle_end", {**base, "message": "end", "winner": "draw"})
            by_argument = await client.call_tool(
                "update_battle_process", {**base, "message": "argument", "battle_token": token}
            )
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0)) as http,
            Client(streamable_http_client(mcp_url(arena), http_client=http)) as client,
        ):
            by_header = await client.call_tool("update_battle_process", {**base, "message": "bearer header"})
            other_with_argument = await client.call_tool(
                "update_battle_process",
                {"battle_id": other_id, "reported_by": "g", "message": "argument wins", "battle_token": other_token},
            )
        async with Client(
            sse_client(arena.backend.url + "/sse", headers={"X-Battle-Token": token}), mode="legacy"
        ) as client:
            by_sse_header = await client.call_tool("update_battle_process", {**base, "message": "sse header"})
            end = await client.call_tool("report_on_battle_end", {**base, "message": "end", "winner": "draw"})
        for refused in (missing, wrong, foreign, unproven_end):
            assert "battle_token" in error_text(refused) and "401" in error_text(refused)
        for accepted in (by_argument, by_header, other_with_argument, by_sse_header, end):
            assert not accepted.is_error, accepted
        battle = await arena.get(battle_id)
        assert [e["message"] for e in agent_events(battle)] == ["argument", "bearer header", "sse header", "end"]
        assert battle["state"] == "finished"
        assert [e["message"] for e in agent_events(await arena.get(other_id))] == ["argument wins"]


# --- transport security and configuration ---------------------------------------------------------------------
async def test_foreign_host_headers_are_refused_configured_ones_accepted(db_path: Path) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    async with run_backend(
        db_path, mcp_allowed_hosts=("backend:*",), public_url="http://arena.example:9000"
    ) as backend:
        port = backend.url.rsplit(":", 1)[1]

        async def status(host: str, path: str = "/mcp/") -> int:
            if path == "/sse":
                async with backend.client.stream("GET", path, headers={"Host": host}) as response:
                    return response.status_code
            response = await backend.client.post(path, json=initialize, headers={**accept, "Host": host})
            return response.status_code

        assert await status("evil.example") == 421
        assert await status(f"evil.example:{port}") == 421
        assert await status("evil.example", "/sse") == 421
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "backend:9000", "arena.example:9000"):
            assert await status(host) == 200, host
        async with (
            httpx2.AsyncClient(headers={"Host": "backend:9000"}, timeout=httpx2.Timeout(30.0, read=300.0)) as http,
            Client(streamable_http_client(backend.url + "/mcp/", http_client=http)) as client,
        ):
            assert (await client.call_tool("echo", {"message": "container"})).content[0].text == "Echo: container"


async def test_the_same_app_serves_mcp_again_after_a_restart(tmp_path: Path) -> None:
    app = create_app(BackendSettings(db_path=tmp_path / "restart.sqlite3"))
    for round_number in range(2):
        async with serve_app(app) as url, Client(url + "/mcp/") as client:
            answer = await client.call_tool("echo", {"message": str(round_number)})
            assert answer.content[0].text == f"Echo: {round_number}"


def test_mcp_allowed_host_option_is_repeatable(tmp_path: Path) -> None:
    parser = build_parser()
    args = parser.parse_args(["--mcp-allowed-host", "backend:*", "--mcp-allowed-host", "arena:9000"])
    assert settings_from_args(args).mcp_allowed_hosts == ("backend:*", "arena:9000")
    assert settings_from_args(parser.parse_args([])).mcp_allowed_hosts == ()
    with pytest.raises(ValueError, match="mcp_allowed_hosts"):
        BackendSettings(mcp_allowed_hosts=("http://backend:9000",))


async def test_plain_http_clients_see_the_mcp_endpoint(arena: Arena) -> None:
    """Without the trailing slash the mount redirects, as for any MCP server mounted at /mcp."""
    async with httpx.AsyncClient(base_url=arena.backend.url, trust_env=False) as http:
        response = await http.post("/mcp", json={})
    assert response.status_code in (307, 308)
    assert response.headers["location"] == arena.backend.url + "/mcp/"

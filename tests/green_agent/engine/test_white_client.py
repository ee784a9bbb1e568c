"""WhiteAgentClient against real A2A servers on loopback: replies, wires (1.0 and legacy 0.3), every failure class."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.responses import JSONResponse, PlainTextResponse

from green_agent.engine.turn_protocol import parse_action
from green_agent.engine.white_client import (
    WhiteAgentClient,
    WhiteAgentCommunicationError,
    WhiteAgentError,
    WhiteAgentReportedFailure,
    WhiteAgentTimeout,
    WhiteReply,
)
from tests.green_agent.engine.a2a_servers import (
    AgentRecord,
    Behaviour,
    LegacyHandler,
    LegacyRecord,
    crash,
    echo,
    hang,
    legacy_agent,
    legacy_message,
    reply_message,
    reply_task,
    sdk_agent,
)


@contextlib.asynccontextmanager
async def white(
    behaviour: Behaviour, *, protocol_version: str = "1.0", turn_timeout_s: float = 20, **options: Any
) -> AsyncIterator[tuple[WhiteAgentClient, AgentRecord]]:
    """An a2a-sdk test agent and a client talking to it."""
    async with (
        sdk_agent(behaviour, protocol_version=protocol_version) as (url, record),
        WhiteAgentClient(url, turn_timeout_s=turn_timeout_s, **options) as client,
    ):
        yield client, record


@contextlib.asynccontextmanager
async def legacy_white(
    handler: LegacyHandler, *, turn_timeout_s: float = 20, **options: Any
) -> AsyncIterator[tuple[WhiteAgentClient, LegacyRecord]]:
    """A hand-written A2A 0.3 agent and a client talking to it."""
    async with (
        legacy_agent(handler) as (url, record),
        WhiteAgentClient(url, turn_timeout_s=turn_timeout_s, **options) as client,
    ):
        yield client, record


ACTION = '<json>{"name": "get_order", "arguments": {"order_id": "#W1"}}</json>'


@pytest.fixture(params=["1.0", "0.3"])
def card_version(request: pytest.FixtureRequest) -> str:
    """The protocol version the test agent's card advertises (the client must follow it)."""
    return str(request.param)


def _expected_wire(card_version: str) -> tuple[str, str]:
    return ("SendMessage", "1.0") if card_version == "1.0" else ("message/send", "0.3")


async def test_message_reply_and_what_the_agent_received(card_version: str) -> None:
    data_out = {"name": "get_order", "arguments": {"order_id": "#W1", "qty": 2}}
    async with white(reply_message(ACTION, data=data_out), protocol_version=card_version) as (
        client,
        record,
    ):
        reply = await client.send(
            context_id="ctx-attempt-1",
            text="User message: hi",
            data={"tools": [{"name": "get_order"}], "n": 1},
            metadata={"arena": {"task_id": "5", "attempt": 1}},
        )
        second = await client.send(context_id="ctx-attempt-1", text="Tool call result:\nok")

    assert isinstance(reply, WhiteReply)
    assert reply.kind == "message" and reply.task_state is None
    assert reply.text == ACTION
    # protobuf Struct: whole numbers come back as floats
    assert reply.data_parts == [{"name": "get_order", "arguments": {"order_id": "#W1", "qty": 2.0}}]
    assert reply.echoed_context_id == "ctx-attempt-1"
    assert second.text == ACTION

    first_seen, second_seen = record.received
    assert first_seen.context_id == second_seen.context_id == "ctx-attempt-1"
    assert all("taskId" not in m and "task_id" not in m for m in record.wire_messages)  # never a task id
    assert [m["contextId"] for m in record.wire_messages] == ["ctx-attempt-1", "ctx-attempt-1"]
    assert first_seen.message_id != second_seen.message_id
    assert first_seen.text == "User message: hi" and second_seen.text == "Tool call result:\nok"
    assert first_seen.data == [{"tools": [{"name": "get_order"}], "n": 1.0}]
    assert second_seen.data == []
    assert first_seen.message_metadata["arena"] == {"task_id": "5", "attempt": 1.0}
    assert first_seen.request_metadata["arena"] == {"task_id": "5", "attempt": 1.0}

    method, version = _expected_wire(card_version)
    assert set(record.methods) == {method}
    assert set(record.versions) == {version}

    # and the reply parses into an action (data part wins)
    assert parse_action(reply.text, reply.data_parts).source == "data"


async def test_completed_task_reply_uses_status_message_and_artifacts(card_version: str) -> None:
    behaviour = reply_task("completed", status_text=ACTION, artifact_text="(artifact note)")
    async with white(behaviour, protocol_version=card_version) as (client, _record):
        reply = await client.send(context_id="ctx-task", text="User message: hi")
    assert reply.kind == "task" and reply.task_state == "completed"
    assert reply.text.splitlines() == [ACTION, "(artifact note)"]
    assert reply.echoed_context_id == "ctx-task" and reply.task_id
    assert parse_action(reply.text, reply.data_parts).name == "get_order"


async def test_input_required_task_is_a_normal_reply() -> None:
    async with white(reply_task("input_required", status_text=ACTION)) as (client, _record):
        reply = await client.send(context_id="ctx-ir", text="hi")
    assert reply.task_state == "input_required" and reply.text == ACTION


async def test_task_reply_with_only_an_artifact() -> None:
    async with white(reply_task("completed", status_text=None, artifact_text=ACTION)) as (
        client,
        _record,
    ):
        reply = await client.send(context_id="ctx-art", text="hi")
    assert reply.text == ACTION


@pytest.mark.parametrize("state", ["failed", "rejected", "canceled"])
async def test_task_in_a_failure_state_is_a_reported_failure(state: str, card_version: str) -> None:
    async with white(
        reply_task(state, status_text="cannot do that"), protocol_version=card_version, turn_timeout_s=20
    ) as (client, _r):
        with pytest.raises(WhiteAgentReportedFailure) as caught:
            await client.send(context_id="ctx-fail", text="hi")
    assert caught.value.task_state == state
    assert caught.value.text == "cannot do that"
    assert state in caught.value.detail and "cannot do that" in caught.value.detail
    assert isinstance(caught.value, WhiteAgentError)


async def test_executor_crash_is_a_jsonrpc_communication_error(card_version: str) -> None:
    async with white(crash, protocol_version=card_version) as (client, _record):
        with pytest.raises(WhiteAgentCommunicationError) as caught:
            await client.send(context_id="ctx-crash", text="hi")
    assert caught.value.kind == "jsonrpc"
    assert caught.value.jsonrpc_code == -32603
    assert "the agent crashed" in caught.value.detail


async def test_agent_slower_than_the_turn_limit_times_out(card_version: str) -> None:
    async with white(hang, protocol_version=card_version, turn_timeout_s=0.5) as (client, _record):
        with pytest.raises(WhiteAgentTimeout) as caught:
            await client.send(context_id="ctx-slow", text="hi")
    assert caught.value.timeout_s == 0.5
    assert "0.5 s" in caught.value.detail


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_refused_port_is_a_card_communication_error_on_every_send() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    async with WhiteAgentClient(url, turn_timeout_s=5) as client:
        for _ in range(2):  # a failed card fetch is not cached: each attempt fails on its own
            with pytest.raises(WhiteAgentCommunicationError) as caught:
                await client.send(context_id="ctx-x", text="hi")
            assert caught.value.kind == "card"
            assert url in caught.value.detail
        with pytest.raises(WhiteAgentCommunicationError):
            await client.connect()


async def test_agent_that_goes_away_after_the_card_is_a_connect_error() -> None:
    async with sdk_agent(echo) as (url, _record):
        client = WhiteAgentClient(url, turn_timeout_s=5)
        await client.__aenter__()
        card = await client.connect()
        assert card.name == "test white agent"
    try:
        with pytest.raises(WhiteAgentCommunicationError) as caught:
            await client.send(context_id="ctx-gone", text="hi")
        assert caught.value.kind in ("connect", "network")
    finally:
        await client.aclose()


async def test_concurrent_attempts_keep_their_own_contexts() -> None:
    contexts = [f"ctx-{uuid.uuid4()}" for _ in range(8)]
    async with white(echo) as (client, record):

        async def attempt(context_id: str) -> list[WhiteReply]:
            return [await client.send(context_id=context_id, text=f"{context_id} turn {n}") for n in range(3)]

        results = await asyncio.gather(*(attempt(c) for c in contexts))
    for context_id, replies in zip(contexts, results, strict=True):
        assert [r.text for r in replies] == [f"{context_id}|{context_id} turn {n}" for n in range(3)]
        assert {r.echoed_context_id for r in replies} == {context_id}
    assert len({r.message_id for r in record.received}) == len(record.received) == 24


async def test_caller_supplied_httpx_client_is_used_and_left_open() -> None:
    async with sdk_agent(echo) as (url, _record), httpx.AsyncClient() as http:
        async with WhiteAgentClient(url, httpx_client=http, turn_timeout_s=20) as client:
            reply = await client.send(context_id="ctx-own", text="x")
        assert not http.is_closed
    assert reply.text == "ctx-own|x"


async def test_context_id_is_required() -> None:
    async with WhiteAgentClient("http://127.0.0.1:1", turn_timeout_s=1) as client:
        with pytest.raises(ValueError):
            await client.send(context_id="", text="hi")


# ----------------------------------------------------------------------------------------------- legacy 0.3 agents


async def test_legacy_agent_speaks_message_send_and_gets_our_context() -> None:
    def handler(method: str, params: dict[str, Any]) -> Any:
        message = params["message"]
        return legacy_message(ACTION, message.get("contextId"))

    async with legacy_white(handler) as (client, record):
        reply = await client.send(context_id="ctx-legacy", text="User message: hi", data={"k": 1})
    assert reply.kind == "message" and reply.text == ACTION and reply.echoed_context_id == "ctx-legacy"
    ((method, params),) = record.calls
    assert method == "message/send" and record.versions == ["0.3"]
    message = params["message"]
    assert message["contextId"] == "ctx-legacy" and message["role"] == "user" and "taskId" not in message
    assert [p["kind"] for p in message["parts"]] == ["text", "data"]


async def test_legacy_task_returned_while_working_is_polled_until_done() -> None:
    polls: list[str] = []

    def handler(method: str, params: dict[str, Any]) -> Any:
        if method == "message/send":
            context_id = params["message"]["contextId"]
            return {"kind": "task", "id": "task-1", "contextId": context_id, "status": {"state": "working"}}
        polls.append(params["id"])
        state = "working" if len(polls) < 3 else "completed"
        status: dict[str, Any] = {"state": state}
        if state == "completed":
            status["message"] = legacy_message(ACTION, "ctx-poll")
        return {"kind": "task", "id": "task-1", "contextId": "ctx-poll", "status": status}

    async with legacy_white(handler, poll_interval_s=0.01) as (client, record):
        reply = await client.send(context_id="ctx-poll", text="hi")
    assert reply.task_state == "completed" and reply.text == ACTION
    assert polls == ["task-1"] * 3
    assert [m for m, _ in record.calls] == ["message/send"] + ["tasks/get"] * 3


async def test_http_error_status_is_a_communication_error() -> None:
    async with legacy_white(lambda m, p: PlainTextResponse("boom", status_code=503)) as (
        client,
        _record,
    ):
        with pytest.raises(WhiteAgentCommunicationError) as caught:
            await client.send(context_id="ctx-503", text="hi")
    assert caught.value.kind == "http_status"
    assert caught.value.status_code == 503


@pytest.mark.parametrize(
    "answer",
    [
        PlainTextResponse("not json at all"),
        JSONResponse(["a", "list"]),
        JSONResponse({"jsonrpc": "2.0", "id": "1", "result": {"kind": "message", "parts": "nope"}}),
    ],
)
async def test_malformed_replies_are_invalid_response_errors(answer: Any) -> None:
    async with legacy_white(lambda m, p: answer) as (client, _record):
        with pytest.raises(WhiteAgentCommunicationError) as caught:
            await client.send(context_id="ctx-bad", text="hi")
    assert caught.value.kind == "invalid_response"


async def test_jsonrpc_error_object_from_a_legacy_agent() -> None:
    def handler(method: str, params: dict[str, Any]) -> Any:
        error = {"code": -32000, "message": "quota exceeded"}
        return JSONResponse({"jsonrpc": "2.0", "id": "1", "error": error})

    async with legacy_white(handler) as (client, _record):
        with pytest.raises(WhiteAgentCommunicationError) as caught:
            await client.send(context_id="ctx-err", text="hi")
    assert caught.value.kind == "jsonrpc"
    assert "quota exceeded" in caught.value.detail


async def test_card_without_interfaces_is_a_card_error() -> None:
    from starlette.applications import Starlette
    from starlette.routing import Route

    from tests.support.servers import serve_app

    async def card(request: Any) -> JSONResponse:
        return JSONResponse({"name": "no url", "description": "", "version": "1", "skills": []})

    app = Starlette(routes=[Route("/.well-known/agent-card.json", card)])
    async with serve_app(app) as url, WhiteAgentClient(url, turn_timeout_s=5) as client:
        with pytest.raises(WhiteAgentCommunicationError) as caught:
            await client.send(context_id="ctx-card", text="hi")
    assert caught.value.kind == "card"


async def test_turn_limit_governs_not_the_http_clients_own_timeout() -> None:
    async def slow(context: Any, queue: Any, record: AgentRecord) -> None:
        await asyncio.sleep(0.6)
        await reply_message(ACTION)(context, queue, record)

    async with httpx.AsyncClient(timeout=0.1) as http, white(slow, httpx_client=http) as (client, _record):
        reply = await client.send(context_id="ctx-patient", text="hi")
    assert reply.text == ACTION

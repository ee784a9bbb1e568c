"""The direct path (white_agent.turns) answers exactly as the a2a-sdk's own request handler would.

The reference is the SDK's DefaultRequestHandler running the same executor for every turn (what the white agent did
before it answered plain turns itself). Both apps get the same JSON-RPC requests, in both wire formats, from twin
agents; every response must be equal once generated ids and timestamps are blanked.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from a2a.helpers import get_data_parts, new_data_part, new_text_part
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.types.a2a_pb2 import (
    AuthenticationInfo,
    Message,
    Part,
    Role,
    SendMessageRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
)
from a2a.utils.errors import InvalidParamsError
from a2a.utils.proto_utils import validate_proto_required_fields
from hypothesis import given
from hypothesis import strategies as st
from starlette.applications import Starlette

from tests.white_agent.helpers import arena_block, first_message
from white_agent.app import create_white_agent_app, make_agent
from white_agent.gold import load_gold_task
from white_agent.proto_values import data_part_values
from white_agent.protocol import GreenTurn
from white_agent.required_fields import required_fields_present
from white_agent.server import AgentReply, ReplyKind, build_agent_card, create_app
from white_agent.turns import TurnExecutor

URL = "http://white.test/"
TASK = "40"  # retail test: 3 reads, then a write
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _sdk_app(agent: Any) -> Starlette:
    """The reference: the SDK's handler, asking the agent through the executor on every turn."""
    card = build_agent_card(URL, name=agent.card_name, description=agent.card_description)
    handler = DefaultRequestHandler(agent_executor=TurnExecutor(agent), task_store=InMemoryTaskStore(), agent_card=card)
    routes = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_url="/", enable_v0_3_compat=True)]
    return Starlette(routes=routes)


def _blank(value: Any) -> Any:
    """Generated ids become "<uuid>", timestamps disappear: what is left must not differ between the two paths."""
    if isinstance(value, dict):
        return {k: _blank(v) for k, v in value.items() if k != "timestamp"}
    if isinstance(value, list):
        return [_blank(v) for v in value]
    if isinstance(value, str):
        return _UUID.sub("<uuid>", value)
    return value


def _v1(message: dict[str, Any], **params: Any) -> tuple[dict[str, Any], dict[str, str]]:
    body = {"jsonrpc": "2.0", "id": "r1", "method": "SendMessage", "params": {"message": message, **params}}
    return body, {"A2A-Version": "1.0"}


def _v03(message: dict[str, Any], **params: Any) -> tuple[dict[str, Any], dict[str, str]]:
    parts = [
        {"kind": "text", "text": p["text"]} if "text" in p else {"kind": "data", "data": p["data"]}
        for p in message.get("parts", [])
    ]
    legacy = {**message, "kind": "message", "role": "user", "parts": parts}
    body = {"jsonrpc": "2.0", "id": "r1", "method": "message/send", "params": {"message": legacy, **params}}
    return body, {}


def _message(text: str, context_id: str | None, data: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"text": text}] + ([{"data": data}] if data is not None else [])
    message: dict[str, Any] = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": parts, **extra}
    if context_id is not None:
        message["contextId"] = context_id
    return message


def _attempt(context_id: str, turns: int) -> Iterator[dict[str, Any]]:
    """The first message of an attempt at retail task 40, then tool results."""
    text, data, metadata = first_message("hello", arena=arena_block(TASK))
    yield _message(text, context_id, data, metadata=metadata)
    for _ in range(turns - 1):
        yield _message("Tool call result:\nok", context_id)


class DataAgent:
    """Replies carrying a data part and metadata, in turn as a Message, a completed Task and a failed Task."""

    card_name = card_description = "data agent"

    def __init__(self) -> None:
        self.turns = 0

    async def reply(self, context_id: str, turn: GreenTurn) -> AgentReply:
        kinds: list[ReplyKind] = ["message", "task_completed", "task_failed"]
        kind = kinds[self.turns % 3]
        self.turns += 1
        data = {"tool_calls": [{"name": "get_price", "arguments": {"ticker": "AAPL"}, "result": 195.2}]}
        return AgentReply(
            f"turn {self.turns}: {turn.content}", kind=kind, data=data, metadata={"arena/usage": {"n": 1}}
        )

    async def aclose(self) -> None:
        return None


async def _both(kind: str, requests: list[tuple[dict[str, Any], dict[str, str]]], **options: Any) -> list[Any]:
    """Send every request to the white agent's app and to the reference; return the paired, blanked responses."""
    if kind == "data":
        direct = create_app(DataAgent(), card_url=URL, name="data", description="data")
        reference = _sdk_app(DataAgent())
    else:
        direct = create_white_agent_app(make_agent(kind, **options), URL)
        reference = _sdk_app(make_agent(kind, **options))
    pairs = []
    async with (
        httpx.AsyncClient(transport=httpx.ASGITransport(app=direct), base_url=URL) as one,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=reference), base_url=URL) as two,
    ):
        for body, headers in requests:
            first = await one.post("/", content=json.dumps(body), headers=headers)
            second = await two.post("/", content=json.dumps(body), headers=headers)
            pairs.append(((first.status_code, _blank(first.json())), (second.status_code, _blank(second.json()))))
    return pairs


N_TURNS = len(load_gold_task("retail", "test", TASK).steps) + 2


@pytest.mark.parametrize("wire", [_v1, _v03])
async def test_replay_attempt_answers_as_the_sdk_does_without_its_task_machinery(
    wire: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    executed: list[object] = []
    original = TurnExecutor.execute

    async def counting(self: TurnExecutor, context: Any, queue: Any) -> None:
        executed.append(self)
        await original(self, context, queue)

    monkeypatch.setattr(TurnExecutor, "execute", counting)
    pairs = await _both("replay", [wire(m) for m in _attempt("ctx", N_TURNS)])
    assert all(a == b for a, b in pairs), next((a, b) for a, b in pairs if a != b)
    assert all(a[0] == 200 and "result" in a[1] for a, _ in pairs)
    assert len(executed) == N_TURNS  # the reference's executor on every turn, the direct path's never


@pytest.mark.parametrize("wire", [_v1, _v03])
@pytest.mark.parametrize("fault", ["malformed_reply", "crash", "report_failure", "task_reply", "no_reply"])
async def test_flaky_turns_answer_as_the_sdk_does(wire: Any, fault: str) -> None:
    options: dict[str, Any] = {"seed": 4, "fault_rates": {fault: 1.0}, "no_reply_s": 0.01}
    pairs = await _both("flaky", [wire(m) for m in _attempt("ctx", N_TURNS)], **options)
    assert all(a == b for a, b in pairs), next((a, b) for a, b in pairs if a != b)
    if fault == "crash":
        assert any("error" in a[1] for a, _ in pairs)
    if fault in ("report_failure", "task_reply"):
        assert any("task" in str(a[1]) for a, _ in pairs)


def _odd_requests() -> list[tuple[dict[str, Any], dict[str, str]]]:
    """Requests the direct path leaves to the SDK (or that the SDK rejects), in both wire formats."""
    text, data, metadata = first_message("hello", arena=arena_block(TASK))
    first = _message(text, "ctx-odd", data, metadata=metadata)
    no_parts = {"messageId": "m", "role": "ROLE_USER", "contextId": "c", "parts": []}
    return [
        _v1(_message(text, None, data, metadata=metadata)),  # no context id: the SDK makes one
        _v03(_message(text, None, data, metadata=metadata)),
        _v1(_message("User message:\nhi", "c2", taskId="no-such-task")),
        _v03(_message("User message:\nhi", "c3", taskId="no-such-task")),
        _v1(no_parts),
        _v03(no_parts),
        _v1({**first, "messageId": ""}),
        _v1(first, configuration={"historyLength": -1}),
        _v1(_message(text, "ctx-push", data, metadata=metadata), configuration={"taskPushNotificationConfig": {}}),
        _v1(
            _message(text, "ctx-push2", data, metadata=metadata),
            configuration={"taskPushNotificationConfig": {"url": "https://push.test/"}},
        ),
        _v1(_message("User message:\nno arena here", "ctx-plain")),
        _v03(_message("User message:\nno arena here", "ctx-plain-03")),
    ]


@pytest.mark.parametrize("wire", [_v1, _v03])
async def test_data_parts_and_metadata_travel_as_through_the_sdk(wire: Any) -> None:
    pairs = await _both("data", [wire(_message(f"User message:\nturn {i}", "ctx")) for i in range(6)])
    assert all(a == b for a, b in pairs), next((a, b) for a, b in pairs if a != b)
    assert "195.2" in json.dumps(pairs[0][0]) and "arena/usage" in json.dumps(pairs[0][0])


async def test_requests_left_to_the_sdk_get_its_answers() -> None:
    pairs = await _both("flaky", _odd_requests(), seed=4, fault_rates={"task_reply": 0.5})
    assert all(a == b for a, b in pairs), next((a, b) for a, b in pairs if a != b)
    assert any("error" in a[1] for a, _ in pairs) and any("result" in a[1] for a, _ in pairs)


async def test_a_task_answered_directly_is_stored_by_the_sdk() -> None:
    app = create_white_agent_app(make_agent("flaky", seed=1, fault_rates={"task_reply": 1.0}), URL)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=URL) as http:
        body, headers = _v1(next(_attempt("ctx", 1)))
        task = (await http.post("/", json=body, headers=headers)).json()["result"]["task"]
        get = {"jsonrpc": "2.0", "id": "g", "method": "GetTask", "params": {"id": task["id"]}}
        stored = (await http.post("/", json=get, headers=headers)).json()["result"]
    assert stored["status"]["state"] == "TASK_STATE_COMPLETED" and stored["id"] == task["id"]


def _sdk_accepts(request: Any) -> bool:
    try:
        validate_proto_required_fields(request)
    except InvalidParamsError:
        return False
    return True


def _part(kind: str) -> Part:
    if kind == "text":
        return new_text_part("t")
    if kind == "data":
        return new_data_part({"tools": [{"name": "f", "parameters": {"type": "object"}}], "n": [1, {"x": None}]})
    return Part()


messages = st.builds(
    lambda message_id, role, parts: Message(message_id=message_id, role=role, parts=[_part(p) for p in parts]),
    st.sampled_from(["", "m1"]),
    st.sampled_from([Role.ROLE_UNSPECIFIED, Role.ROLE_USER, Role.ROLE_AGENT]),
    st.lists(st.sampled_from(["text", "data", "empty"]), max_size=3),
)


@given(
    message=st.none() | messages,
    push_url=st.sampled_from([None, "", "https://push.test"]),
    scheme=st.sampled_from([None, "", "Bearer"]),
    history=st.sampled_from([None, 0, 2]),
    metadata=st.booleans(),
)
def test_required_field_check_agrees_with_the_sdk_on_requests(
    message: Message | None, push_url: str | None, scheme: str | None, history: int | None, metadata: bool
) -> None:
    request = SendMessageRequest()
    if message is not None:
        request.message.CopyFrom(message)
    if push_url is not None:
        config = TaskPushNotificationConfig(url=push_url)
        if scheme is not None:
            config.authentication.CopyFrom(AuthenticationInfo(scheme=scheme))
        request.configuration.task_push_notification_config.CopyFrom(config)
    if history is not None:
        request.configuration.history_length = history
    if metadata:
        request.metadata.update({"arena": {"task_id": "5", "nested": [{"a": 1}]}})
    assert required_fields_present(request) == _sdk_accepts(request)


@given(
    task_id=st.sampled_from(["", "t1"]),
    context_id=st.sampled_from(["", "c1"]),
    state=st.sampled_from([None, TaskState.TASK_STATE_UNSPECIFIED, TaskState.TASK_STATE_COMPLETED]),
    status_message=st.none() | messages,
    history=st.lists(messages, max_size=3),
)
def test_required_field_check_agrees_with_the_sdk_on_tasks(
    task_id: str, context_id: str, state: int | None, status_message: Message | None, history: list[Message]
) -> None:
    task = Task(id=task_id, context_id=context_id, history=history)
    if state is not None:
        task.status.CopyFrom(TaskStatus(state=state))  # type: ignore[arg-type]
    if status_message is not None:
        task.status.message.CopyFrom(status_message)
    assert required_fields_present(task) == _sdk_accepts(task)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=30,
)


@given(values=st.lists(json_values, max_size=3), texts=st.lists(st.text(max_size=3), max_size=2))
def test_data_parts_read_as_the_sdk_reads_them(values: list[Any], texts: list[str]) -> None:
    parts = [new_text_part(t) for t in texts] + [new_data_part(v) for v in values] + [Part()]
    fast, sdk = data_part_values(parts), get_data_parts(parts)
    assert fast == sdk
    assert json.dumps(fast) == json.dumps(sdk)  # the same key order and the same types (floats for numbers)


@pytest.mark.parametrize("number", [float("inf"), float("-inf"), float("nan")])
def test_numbers_json_cannot_hold_fail_as_in_the_sdk(number: float) -> None:
    part = new_data_part({"x": [1, number]})
    with pytest.raises(ValueError) as sdk:
        get_data_parts([part])
    with pytest.raises(ValueError) as fast:
        data_part_values([part])
    assert type(fast.value) is type(sdk.value) and str(fast.value) == str(sdk.value)

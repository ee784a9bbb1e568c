"""A battle answered as an A2A Task keeps a bounded history in the green agent, while every client sees it all.

The green agent here keeps 4 messages per task besides the request, far fewer than a battle's progress updates: a
streaming client still receives every event the battle wrote, ``tasks/get`` returns the request, the last 4 updates and
the Result artifact, a blocking ``message/send`` returns the same final task, and a client that resubscribes mid-battle
starts from the bounded task and receives every later event.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers import get_data_parts
from a2a.types.a2a_pb2 import SubscribeToTaskRequest, Task

from green_agent.service.a2a_server import create_app
from green_agent.service.operator_auth import OperatorToken
from green_agent.wire.assessment import RESULT_ARTIFACT_NAME
from launcher.cli.assessment_client import TERMINAL_STATES, build_request_text, state_name
from tests.green_agent.service.conftest import assess, white_agent
from tests.support import TEST_OPERATOR_TOKEN
from tests.support.servers import serve_app_factory

pytestmark = pytest.mark.asyncio(loop_scope="session")

KEPT = 4
CONFIG = {"domain": "mock", "split": "base", "mode": "all", "k": 2, "concurrency": 4}
OPERATOR = {"Authorization": f"Bearer {TEST_OPERATOR_TOKEN}", "A2A-Version": "1.0"}


@pytest.fixture(scope="module")
def bounded_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bounded-runs")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def bounded_green(bounded_runs: Path) -> AsyncIterator[str]:
    token = OperatorToken(TEST_OPERATOR_TOKEN)
    async with serve_app_factory(
        lambda url: create_app(url, runs_dir=bounded_runs, operator_token=token, max_task_history=KEPT),
        startup_timeout_s=60,
    ) as url:
        yield url


async def _rpc(green: str, method: str, params: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}
    async with httpx.AsyncClient(timeout=120, headers=headers) as client:
        answer: dict[str, Any] = (await client.post(green + "/", json=body)).json()
    assert "error" not in answer, answer
    result: dict[str, Any] = answer["result"]
    return result


def _written_events(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]


async def test_a_streaming_client_sees_every_event_and_the_stored_task_keeps_the_last_ones(
    bounded_green: str, bounded_runs: Path
) -> None:
    async with white_agent("replay") as white:
        outcome = await assess(bounded_green, white, CONFIG, battle_id="bounded-stream")
    assert outcome.completed, outcome
    written = _written_events(bounded_runs / "bounded-stream")
    assert len(written) > 3 * KEPT  # the bound is exercised
    assert [e["type"] for e in outcome.events] == [e["type"] for e in written]  # every event streamed, in order

    task = await _rpc(bounded_green, "GetTask", {"id": outcome.task_id}, OPERATOR)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    history = task["history"]
    assert len(history) == KEPT + 1
    assert history[0]["role"] == "ROLE_USER"  # the request that started the battle is kept
    assert all(m["role"] == "ROLE_AGENT" for m in history[1:])
    # The last progress updates (the final one is the task's status message, not in the history).
    last = [p["data"]["arena_event"]["type"] for m in history[1:] for p in m["parts"] if "data" in p]
    assert last == [e["type"] for e in written][-KEPT:]
    (artifact,) = [a for a in task["artifacts"] if a["name"] == RESULT_ARTIFACT_NAME]
    assert next(p["data"] for p in artifact["parts"] if "data" in p) == outcome.result


async def test_a_blocking_send_returns_the_final_task_with_its_result(bounded_green: str, bounded_runs: Path) -> None:
    async with white_agent("replay") as white:
        text = build_request_text(white, CONFIG, "bounded-send")
        message = {
            "kind": "message",
            "role": "user",
            "messageId": uuid.uuid4().hex,
            "parts": [{"kind": "text", "text": text}],
        }
        headers = {"Authorization": f"Bearer {TEST_OPERATOR_TOKEN}"}
        task = await _rpc(bounded_green, "message/send", {"message": message}, headers)
    assert task["kind"] == "task" and task["status"]["state"] == "completed", task
    assert len(task["history"]) == KEPT + 1 and task["history"][0]["role"] == "user"
    summary = json.loads((bounded_runs / "bounded-send" / "summary.json").read_text())
    (artifact,) = [a for a in task["artifacts"] if a["name"] == RESULT_ARTIFACT_NAME]
    result = next(p["data"] for p in artifact["parts"] if p["kind"] == "data")
    assert result["battle_id"] == "bounded-send" and result["status"] == summary["status"] == "completed"


async def _resubscribe(green: str, task_id: str) -> tuple[Task, list[dict[str, Any]], dict[str, Any] | None, str]:
    """``tasks/resubscribe`` with the SDK client: the snapshot, the streamed events, the Result data, the end state."""
    snapshot: Task | None = None
    events: list[dict[str, Any]] = []
    result: dict[str, Any] | None = None
    state = "working"
    async with httpx.AsyncClient(timeout=120, headers={"Authorization": f"Bearer {TEST_OPERATOR_TOKEN}"}) as http:
        card = await A2ACardResolver(http, green).get_agent_card()
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create(card)
        async for response in client.subscribe(SubscribeToTaskRequest(id=task_id)):
            kind = response.WhichOneof("payload")
            if kind == "task" and snapshot is None:
                snapshot = response.task
            elif kind == "status_update":
                status = response.status_update.status
                state = state_name(status.state)
                data = get_data_parts(status.message.parts) if status.HasField("message") else []
                events += [d["arena_event"] for d in data if isinstance(d, dict) and "arena_event" in d]
            elif kind == "artifact_update" and response.artifact_update.artifact.name == RESULT_ARTIFACT_NAME:
                found = get_data_parts(response.artifact_update.artifact.parts)
                result = found[0] if found and isinstance(found[0], dict) else None
            if state in TERMINAL_STATES:
                break
    assert snapshot is not None
    return snapshot, events, result, state


async def test_a_client_that_resubscribes_mid_battle_receives_every_later_event(bounded_green: str) -> None:
    # Every attempt's agent stalls one turn for 0.5 s: the battle is still running when the second client arrives.
    async with white_agent("flaky", seed=1, fault_rates={"no_reply": 1.0}, no_reply_s=0.5) as white:
        config = {**CONFIG, "concurrency": 1}
        first = asyncio.create_task(assess(bounded_green, white, config, battle_id="bounded-resubscribe"))
        working: list[dict[str, Any]] = []
        for _ in range(600):  # a bound that only turns a hang into a failure
            listing = await _rpc(bounded_green, "ListTasks", {}, OPERATOR)
            working = [t for t in listing["tasks"] if t["status"]["state"] == "TASK_STATE_WORKING"]
            if working and len(working[0].get("history", [])) == KEPT + 1:
                break
            await asyncio.sleep(0.05)
        assert len(working) == 1, working
        snapshot, later, result, state = await _resubscribe(bounded_green, working[0]["id"])
        outcome = await first
    assert outcome.completed and state == "completed", (outcome, state)
    assert len(snapshot.history) == KEPT + 1  # the snapshot a resubscriber starts from is the bounded task
    assert later, "the resubscribed stream carried no progress event"
    seen = [(e["type"], e["timestamp"]) for e in outcome.events]
    assert [(e["type"], e["timestamp"]) for e in later] == seen[len(seen) - len(later) :]  # every later event
    assert result == outcome.result

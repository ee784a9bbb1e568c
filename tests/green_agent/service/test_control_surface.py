"""The green agent's control surface through its public A2A interface: the operator token, battle ids, cancel.

Why here (in-process green agent): these are contracts of the A2A entry point itself; tests/adversarial drives the
same rules from a hostile agent against a green agent in its own process.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from launcher.cli.assessment_client import AssessmentError, run_assessment
from tests.green_agent.service.conftest import assess, white_agent
from tests.support import TEST_OPERATOR_TOKEN

pytestmark = pytest.mark.asyncio(loop_scope="session")

TASK = {"domain": "mock", "split": "base", "task_id": 0}


def _rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}


def _send(text: str) -> dict[str, Any]:
    return _rpc(
        "message/send",
        {
            "message": {
                "kind": "message",
                "role": "user",
                "messageId": uuid.uuid4().hex,
                "parts": [{"kind": "text", "text": text}],
            }
        },
    )


async def test_assessment_without_the_token_is_refused(green_url: str, runs_dir: Path) -> None:
    request = {
        "participants": {"white_agent": "http://127.0.0.1:9"},
        "config": {**TASK, "k": 2},
        "battle_id": "no-token-battle",
    }
    with pytest.raises(
        AssessmentError, match="refused the request: assessment requests need the green agent's operator token"
    ):
        await run_assessment(green_url, "http://127.0.0.1:9", {**TASK, "k": 2}, battle_id="no-token-battle")
    async with httpx.AsyncClient(timeout=10, headers={"Authorization": "Bearer wrong-token-0123456789"}) as http:
        answer = (await http.post(green_url + "/", json=_send(json.dumps(request)))).json()
    assert "operator token" in json.dumps(answer)
    assert not (runs_dir / "no-token-battle").exists()


async def test_task_operations_without_the_token_find_nothing(green_url: str) -> None:
    async with white_agent("replay") as white:
        outcome = await assess(green_url, white, {**TASK, "k": 2})
    assert outcome.task_id
    async with httpx.AsyncClient(timeout=10) as http:
        for method in ("tasks/get", "tasks/cancel"):
            answer = (await http.post(green_url + "/", json=_rpc(method, {"id": outcome.task_id}))).json()
            assert answer["error"]["code"] == -32001, answer  # task not found: existence is not confirmed
        async with httpx.AsyncClient(timeout=10, headers={"Authorization": f"Bearer {TEST_OPERATOR_TOKEN}"}) as op:
            answer = (await op.post(green_url + "/", json=_rpc("tasks/get", {"id": outcome.task_id}))).json()
    assert answer["result"]["id"] == outcome.task_id


@pytest.mark.parametrize("battle_id", ["../escape", "/tmp/abs", "a" * 129, "x/y", ".hidden", "a..b"])
async def test_battle_ids_that_are_paths_are_refused(green_url: str, runs_dir: Path, battle_id: str) -> None:
    outcome = await assess(green_url, "http://127.0.0.1:9", {**TASK, "k": 2}, battle_id=battle_id)
    assert outcome.state == "failed"
    assert "battle_id:" in (outcome.error or "")
    assert not (runs_dir.parent / "escape").exists() and not Path("/tmp/abs").exists()


async def test_a_reused_battle_id_is_refused_and_the_first_run_is_untouched(green_url: str, runs_dir: Path) -> None:
    async with white_agent("replay") as white:
        first = await assess(green_url, white, {**TASK, "k": 2}, battle_id="reused-id")
        before = {p.name: p.stat().st_mtime_ns for p in (runs_dir / "reused-id").rglob("*")}
        second = await assess(green_url, white, {**TASK, "k": 2}, battle_id="reused-id")
    assert first.state == "completed", first.error
    assert second.state == "failed" and "battle_id:" in (second.error or "")
    assert {p.name: p.stat().st_mtime_ns for p in (runs_dir / "reused-id").rglob("*")} == before


async def test_a2a_cancel_stops_the_battle_and_the_summary_says_cancelled(green_url: str, runs_dir: Path) -> None:
    # The flaky agent never answers its turns: the battle is still running when it is cancelled.
    async with white_agent("flaky", seed=1, fault_rates={"no_reply": 1.0}) as white:
        task = asyncio.create_task(
            assess(
                green_url,
                white,
                {"domain": "mock", "split": "base", "mode": "all", "k": 2, "turn_timeout_s": 30, "concurrency": 2},
                battle_id="cancel-me",
            )
        )
        for _ in range(400):
            if (runs_dir / "cancel-me" / ".battle").exists():
                break
            await asyncio.sleep(0.05)
        async with httpx.AsyncClient(
            timeout=10, headers={"Authorization": f"Bearer {TEST_OPERATOR_TOKEN}", "A2A-Version": "1.0"}
        ) as op:
            # The task's state may reach the task store a moment after the battle's run directory appears (seen on
            # a loaded CI machine): ask again until it says working; the bound only turns a hang into a failure.
            for _ in range(200):
                listing = (await op.post(green_url + "/", json=_rpc("ListTasks", {}))).json()
                tasks = [t for t in listing["result"]["tasks"] if t["status"]["state"] == "TASK_STATE_WORKING"]
                if tasks:
                    break
                await asyncio.sleep(0.1)
            assert len(tasks) == 1, listing
            task_id = tasks[0]["id"]
            answer = (await op.post(green_url + "/", json=_rpc("CancelTask", {"id": task_id}))).json()
        assert "error" not in answer, answer
        outcome = await asyncio.wait_for(task, 30)
    assert outcome.state == "canceled", outcome
    summary = json.loads((runs_dir / "cancel-me" / "summary.json").read_text())
    assert summary["status"] == "cancelled"
    assert len(summary["attempts"]) < summary["config"]["k"] * 10  # stopped early: not every attempt ran

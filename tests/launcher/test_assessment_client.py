"""The assessment client against a fake green A2A server (a2a-sdk 1.3 Task mode) and a dying one."""

from __future__ import annotations

import json
import sys
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from arena_fake_green import build_app
from launcher_test_helpers import REPO, pid_alive, serve

from launcher.cli.assessment_client import AssessmentError, build_request_text, run_assessment
from launcher.ports import free_port, loopback_url
from launcher.processes import start_process, stop_process, wait_until_ready

WHITE = "http://127.0.0.1:9"
CONFIG: dict[str, Any] = {
    "mode": "manual",
    "k": 4,
    "domain": "retail",
    "task_id": 5,
    "user_simulator": {"kind": "scripted"},
}


def test_request_text_shape() -> None:
    payload = json.loads(build_request_text(WHITE, CONFIG, "b-1", backend_url=None))
    assert payload == {"participants": {"white_agent": WHITE}, "config": CONFIG, "battle_id": "b-1"}
    assert "backend_url" in json.loads(build_request_text(WHITE, CONFIG, backend_url="http://x"))


def _served(tmp_path: Path, mode: str, record: Path | None = None) -> AbstractAsyncContextManager[str]:
    port = free_port()
    served: AbstractAsyncContextManager[str] = serve(
        build_app(loopback_url(port), tmp_path / "runs", mode, record), port
    )
    return served


async def test_completed_assessment_streams_events_and_result(tmp_path: Path) -> None:
    record = tmp_path / "request.json"
    seen: list[tuple[dict[str, Any], str]] = []
    async with _served(tmp_path, "ok", record) as url:
        outcome = await run_assessment(
            url, WHITE, CONFIG, battle_id="battle-7", on_event=lambda event, text: seen.append((event, text))
        )
    assert outcome.state == "completed" and outcome.completed
    assert outcome.error is None
    assert outcome.battle_started
    assert outcome.markdown is not None and outcome.markdown.startswith("# Battle battle-7")
    assert outcome.result is not None and outcome.result["battle_id"] == "battle-7"
    assert len(outcome.result["attempts"]) == 4

    request = json.loads(record.read_text())
    assert request == {"participants": {"white_agent": WHITE}, "config": CONFIG, "battle_id": "battle-7"}

    types = [event["type"] for event, _ in seen]
    assert types[0] == "battle_started"
    assert types.count("attempt_started") == 4 and types.count("attempt_finished") == 4
    finished = [event for event, _ in seen if event["type"] == "attempt_finished"]
    # Counters come back as ints although protobuf data parts carry doubles.
    assert [e["done"] for e in finished] == [1, 2, 3, 4]
    assert all(isinstance(e["total"], int) and e["total"] == 4 for e in finished)
    assert seen[0][1] == "🎯 Starting pass@4 evaluation"
    assert seen[1][1] == "🔄 Starting attempt 1/4..."


async def test_rejected_config_is_a_failed_outcome_before_battle_start(tmp_path: Path) -> None:
    async with _served(tmp_path, "reject") as url:
        outcome = await run_assessment(url, WHITE, {**CONFIG, "k": 3}, on_event=lambda e, t: None)
    assert outcome.state == "failed"
    assert not outcome.battle_started
    assert outcome.error is not None and "k must be even" in outcome.error
    assert outcome.result is None


async def test_failure_mid_battle(tmp_path: Path) -> None:
    async with _served(tmp_path, "fail_mid") as url:
        outcome = await run_assessment(url, WHITE, CONFIG)
    assert outcome.state == "failed"
    assert outcome.battle_started
    assert outcome.error == "harness exploded"


async def test_plain_message_reply(tmp_path: Path) -> None:
    async with _served(tmp_path, "message") as url:
        outcome = await run_assessment(url, WHITE, CONFIG)
    assert outcome.state == "message"
    assert outcome.error is not None and "accepted formats" in outcome.error


async def test_unreachable_green_agent(tmp_path: Path) -> None:
    with pytest.raises(AssessmentError, match="could not read the green agent's card"):
        await run_assessment(loopback_url(free_port()), WHITE, CONFIG, connect_timeout_s=2)


async def test_hung_green_agent_trips_the_idle_timeout(tmp_path: Path) -> None:
    async with _served(tmp_path, "hang") as url:
        with pytest.raises(AssessmentError, match="sent nothing for"):
            await run_assessment(url, WHITE, CONFIG, idle_timeout_s=1.0)


async def test_green_agent_dying_mid_stream_raises(tmp_path: Path) -> None:
    port = free_port()
    url = loopback_url(port)
    env_code = (
        "import os, sys; os.environ['FAKE_GREEN_MODE'] = 'die'; "
        f"sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(REPO)!r}]; "
        "sys.argv = ['fake', '--port', sys.argv[1], '--card-url', sys.argv[2], '--runs-dir', sys.argv[3]]; "
        "import arena_fake_green; arena_fake_green.main()"
    )
    proc = start_process(
        "fake_green", [sys.executable, "-c", env_code, str(port), url, str(tmp_path / "runs")], log_dir=tmp_path
    )
    try:
        await wait_until_ready(proc, url + "/.well-known/agent-card.json", timeout_s=60)
        events: list[str] = []
        with pytest.raises(AssessmentError, match="lost the connection"):
            await run_assessment(url, WHITE, CONFIG, on_event=lambda e, t: events.append(e["type"]))
        assert events == ["battle_started"]
        assert proc.popen.wait(timeout=30) == 7
    finally:
        await stop_process(proc, grace_s=2)
    assert not pid_alive(proc.pid)

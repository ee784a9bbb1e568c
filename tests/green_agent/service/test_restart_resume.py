"""A green agent restarted under a battle it already has on disk continues it: an AgentBeats battle_start for a battle
id whose run directory holds an unfinished run against the same white agent runs only the missing attempts and
posts one result covering all of them; an assessment request resumes only when it asks to (``"resume": true``), and
a changed configuration is refused naming the field."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

from green_agent.engine.run_store import ATTEMPTS_FILE
from green_agent.service.a2a_server import create_app
from green_agent.service.operator_auth import OperatorToken
from tests.green_agent.service.conftest import assess, white_agent
from tests.green_agent.service.recording_backend import Recorded, make_recording_backend
from tests.green_agent.service.test_agentbeats_flow import battle_start, send_v03
from tests.support import TEST_OPERATOR_TOKEN
from tests.support.servers import serve_app, serve_app_factory

pytestmark = pytest.mark.asyncio(loop_scope="session")

CONFIG = {"domain": "retail", "task_index": [0, 1], "k": 2, "calibration": True, "concurrency": 2}


def crash_copy(source: Path, runs: Path, keep: int) -> Path:
    """What a kill -9 after ``keep`` attempts leaves: run.json, the first attempts, no summary."""
    target = runs / source.name
    target.mkdir(parents=True)
    shutil.copy(source / "run.json", target / "run.json")
    lines = (source / ATTEMPTS_FILE).read_bytes().splitlines(keepends=True)
    (target / ATTEMPTS_FILE).write_bytes(b"".join(lines[:keep]) + lines[keep][:17])  # and a torn line
    return target


def restarted_green(runs: Path) -> contextlib.AbstractAsyncContextManager[str]:
    """A new green agent process's app on ``runs`` (what a restart after a crash gives), served on loopback."""
    token = OperatorToken(TEST_OPERATOR_TOKEN)
    return serve_app_factory(lambda url: create_app(url, runs_dir=runs, operator_token=token), startup_timeout_s=60)


def outcomes(result: dict[str, Any]) -> list[tuple[int, int, str, float | None]]:
    return [(a["task_index"], a["attempt"], a["outcome"], a["reward"]) for a in result["attempts"]]


async def test_a_restarted_green_agent_resumes_its_battle_and_reports_once(
    green_url: str, runs_dir: Path, tmp_path: Path
) -> None:
    battle_id = "resume-" + uuid.uuid4().hex[:8]
    async with white_agent("replay") as white:
        first = await assess(green_url, white, CONFIG, battle_id=battle_id)
        assert first.completed and first.result is not None
        restarted_runs = tmp_path / "runs"
        crash_copy(runs_dir / battle_id, restarted_runs, keep=2)
        record = Recorded()
        async with (
            restarted_green(restarted_runs) as green,
            serve_app(make_recording_backend(record)) as backend,
        ):
            ack = await send_v03(green, battle_start(battle_id, backend, white, json.dumps(CONFIG)))
            assert "accepted" in ack
            await asyncio.wait_for(record.result_seen.wait(), timeout=120)
    assert len(record.results) == 1
    result = record.results[0]["detail"]
    assert result["resumed_attempts"] == 2 and result["status"] == "completed"
    assert outcomes(result) == outcomes(first.result)
    started = [e for e in record.events if "Starting attempt" in e.get("message", "")]
    assert len(started) == 2  # only the missing attempts ran
    summary = json.loads((restarted_runs / battle_id / "summary.json").read_text())
    assert summary["summary"] == first.result["summary"]


async def test_an_assessment_resumes_only_when_asked_and_never_with_another_config(
    green_url: str, runs_dir: Path, tmp_path: Path
) -> None:
    battle_id = "resume-" + uuid.uuid4().hex[:8]
    restarted_runs = tmp_path / "runs"
    async with white_agent("replay") as white:
        first = await assess(green_url, white, CONFIG, battle_id=battle_id)
        assert first.completed and first.result is not None
        crash_copy(runs_dir / battle_id, restarted_runs, keep=3)
        async with restarted_green(restarted_runs) as green:
            again = await assess(green, white, CONFIG, battle_id=battle_id)
            assert not again.completed and "already holds battle" in str(again.error)

            changed = await assess(
                green, white, {**CONFIG, "k": 4}, battle_id=battle_id, extra_request_fields={"resume": True}
            )
            assert not changed.completed and "k: 2 -> 4" in str(changed.error)

            resumed = await assess(
                green, white, {**CONFIG, "concurrency": 1}, battle_id=battle_id, extra_request_fields={"resume": True}
            )
            assert resumed.completed and resumed.result is not None
    assert resumed.result["resumed_attempts"] == 3
    assert outcomes(resumed.result) == outcomes(first.result)
    assert resumed.result["summary"] == first.result["summary"]


def mark_infra_error(run_dir: Path, line: int) -> None:
    """Rewrite one stored attempt as an infrastructure error (as if the harness had failed it)."""
    path = run_dir / ATTEMPTS_FILE
    lines = path.read_bytes().splitlines(keepends=True)
    attempt = json.loads(lines[line])
    attempt.update(
        outcome="infra_error",
        reward=None,
        failure={"category": "harness_error", "fault_author": "harness", "detail": "made up by the test"},
    )
    lines[line] = json.dumps(attempt).encode() + b"\n"
    path.write_bytes(b"".join(lines))


async def test_retry_infra_reruns_a_finished_battles_infrastructure_errors_only(
    green_url: str, runs_dir: Path, tmp_path: Path
) -> None:
    battle_id = "resume-" + uuid.uuid4().hex[:8]
    restarted_runs = tmp_path / "runs"
    async with white_agent("replay") as white:
        first = await assess(green_url, white, CONFIG, battle_id=battle_id)
        assert first.completed and first.result is not None
        shutil.copytree(runs_dir / battle_id, restarted_runs / battle_id, ignore=shutil.ignore_patterns(".battle"))
        mark_infra_error(restarted_runs / battle_id, line=1)
        async with restarted_green(restarted_runs) as green:
            plain = await assess(green, white, CONFIG, battle_id=battle_id, extra_request_fields={"resume": True})
            assert not plain.completed and "already finished" in str(plain.error)
            retried = await assess(
                green, white, CONFIG, battle_id=battle_id, extra_request_fields={"resume": True, "retry_infra": True}
            )
            assert retried.completed and retried.result is not None
    assert retried.result["resumed_attempts"] == 3
    assert retried.result["infrastructure_errors"] == 0
    assert outcomes(retried.result) == outcomes(first.result)
    started = [e for e in retried.events if e.get("type") == "attempt_started"]
    assert len(started) == 1

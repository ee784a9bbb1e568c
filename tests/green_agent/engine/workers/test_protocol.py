"""The worker protocol is typed, bounded and published (docs/workers.schema.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from green_agent.engine.config import BattleConfig
from green_agent.engine.workers.pool import MIN_IN_FLIGHT_PER_WORKER, worker_processes
from green_agent.engine.workers.protocol import (
    FROM_WORKER,
    MAX_MESSAGE_BYTES,
    TO_WORKER,
    RunAttempt,
    StartWorker,
    WorkerFailed,
    WorkerReady,
    encode,
    schema,
)

SCHEMA = Path(__file__).resolve().parents[4] / "docs" / "workers.schema.json"


def test_the_published_schema_is_the_models() -> None:
    hint = "regenerate: python -m green_agent.engine.workers.protocol > docs/workers.schema.json"
    assert json.loads(SCHEMA.read_text(encoding="utf-8")) == json.loads(json.dumps(schema())), hint


def test_messages_round_trip_and_refusals_name_the_field() -> None:
    start = StartWorker(
        battle_id="b", white_agent_url="http://127.0.0.1:9/", config=BattleConfig(), concurrency=8, scoring_workers=1
    )
    assert TO_WORKER.validate_json(encode(start)) == start
    run = RunAttempt(attempt_id=3, domain="retail", split="test", index=4, task_id="4", attempt=2)
    assert TO_WORKER.validate_json(encode(run)) == run
    with pytest.raises(ValidationError, match="attempt"):
        TO_WORKER.validate_json(b'{"kind": "run", "attempt_id": 1, "domain": "retail", "index": 0, "task_id": "0"}')
    with pytest.raises(ValidationError, match="extra"):
        FROM_WORKER.validate_json(b'{"kind": "ready", "pid": 1, "more": 2}')


def test_a_message_over_the_bound_is_refused() -> None:
    with pytest.raises(ValueError, match=str(MAX_MESSAGE_BYTES)):
        encode(
            RunAttempt(attempt_id=0, domain="retail", index=0, task_id="x" * 512, attempt=1).model_copy(
                update={"task_id": "x" * MAX_MESSAGE_BYTES}
            )
        )
    assert len(encode(WorkerFailed(detail="x" * 2000))) < 4096


def test_how_many_workers_a_battle_uses() -> None:
    def cfg(concurrency: int, tool_mode: str = "text") -> BattleConfig:
        return BattleConfig.model_validate({"concurrency": concurrency, "tool_mode": tool_mode})

    assert worker_processes(1, cfg(512), 1000) == 1  # workers=1: today's path
    assert worker_processes(8, cfg(MIN_IN_FLIGHT_PER_WORKER), 1000) == 1  # small battles stay in process
    assert worker_processes(8, cfg(MIN_IN_FLIGHT_PER_WORKER + 1), 1000) == 2
    assert worker_processes(2, cfg(256), 1000) == 2
    assert worker_processes(8, cfg(256), 3) == 3  # no more workers than attempts
    assert worker_processes(8, cfg(256, "mcp"), 1000) == 1  # the serving process's MCP endpoint serves the tools


def test_an_invalid_result_fails_its_attempt_only_and_garbage_breaks_the_protocol() -> None:
    from green_agent.engine.workers.pool import _parse, _Unreadable

    bad = _parse(b'{"kind": "done", "attempt_id": 7, "result": {"outcome": "maybe"}}\n')
    assert isinstance(bad, _Unreadable) and bad.attempt_id == 7 and "outcome" in bad.error
    with pytest.raises(ValueError):
        _parse(b"Traceback (most recent call last):\n")
    with pytest.raises(ValueError):
        _parse(b'{"kind": "ready"}\n')
    assert isinstance(_parse(b'{"kind": "ready", "pid": 12}\n'), WorkerReady)

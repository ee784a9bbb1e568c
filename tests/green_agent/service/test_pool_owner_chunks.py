"""How a pooled battle's owner splits what it publishes into requests (green_agent/service/pool_owner.py): at most
MAX_ATTEMPTS_PER_PUBLISH attempts and about PUBLISH_BYTES of payload per request, every attempt once, in the order
the battle asked for them. No backend: ``_chunks`` only builds the requests."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from green_agent.engine.attempt_runner import AttemptPlan
from green_agent.engine.config import BattleConfig
from green_agent.engine.tau.tasks import TaskRef
from green_agent.service import pool_owner
from green_agent.service.pool_owner import PoolOwner
from green_agent.service.pool_settings import PoolSettings

SETTINGS = PoolSettings(name="p", backend_url="http://127.0.0.1:8000", key="the-secret-key", worker_id="w")


def _owner(tasks: int, k: int) -> tuple[PoolOwner, list[tuple[str, int]]]:
    refs = [TaskRef("retail", "test", i, f"task-{i}", task=cast(Any, None)) for i in range(tasks)]
    attempts = tuple((ref, a) for ref in refs for a in range(1, k + 1))
    plan = AttemptPlan("b-1", "http://127.0.0.1:9/", BattleConfig(), None, attempts)
    return PoolOwner(plan, SETTINGS, "token"), [(ref.key, a) for ref, a in attempts]


def _size(payload: dict[str, Any]) -> int:
    return len(json.dumps(payload, separators=(",", ":")))


def test_requests_stay_under_the_byte_bound_and_keep_every_attempt_once_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    owner, keys = _owner(tasks=10, k=3)
    one = _size(owner._chunks(keys[:1])[0][0].payload)
    monkeypatch.setattr(pool_owner, "PUBLISH_BYTES", 4 * one)  # room for four payloads per request
    chunks = owner._chunks(keys)
    assert [(a.task_key, a.attempt) for chunk in chunks for a in chunk] == keys
    assert [len(chunk) for chunk in chunks] == [4] * 7 + [2]
    assert all(sum(_size(a.payload) for a in chunk) <= 4 * one for chunk in chunks)


def test_requests_hold_at_most_the_attempts_one_publish_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    owner, keys = _owner(tasks=5, k=2)
    monkeypatch.setattr(pool_owner, "MAX_ATTEMPTS_PER_PUBLISH", 3)
    chunks = owner._chunks(keys)
    assert [len(chunk) for chunk in chunks] == [3, 3, 3, 1]
    assert [(a.task_key, a.attempt) for chunk in chunks for a in chunk] == keys


def test_a_payload_larger_than_the_byte_bound_still_goes_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    owner, keys = _owner(tasks=3, k=1)
    monkeypatch.setattr(pool_owner, "PUBLISH_BYTES", 1)
    assert [len(chunk) for chunk in owner._chunks(keys)] == [1, 1, 1]

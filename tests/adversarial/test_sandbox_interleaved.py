"""Killed tool sandboxes never hurt anybody else (issue 24, item 2): ``calculate("9**9**9")`` attempts interleaved
with a calibration battle on one green agent end as the bomber's ``timeout``s, with no infrastructure error anywhere,
and the calibration battle scores 1.0. The green agent serves on ``$ARENA_LOOP`` (asyncio by default; CI runs this
file once more with ARENA_LOOP=uvloop, see .ci/run). benchmarks/bench_sandbox_interleaved.py runs it with 200 bombs.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.adversarial.harness import GreenAgent, ReferenceWhite
from tests.adversarial.hostile_agent import HostileAgent
from tests.adversarial.sandbox_interleave import bombs_beside_calibration

BOMB_TASKS, BOMB_K = 4, 10
"""40 bombs: each kill frees descriptors that the concurrent attempts' sockets and pipes reuse."""
CALIBRATION_TASKS = 8


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_calculate_bombs_interleaved_with_a_calibration_battle(
    green_factory: Any, hostile: HostileAgent, replay_white: ReferenceWhite
) -> None:
    green: GreenAgent = green_factory()
    report = await bombs_beside_calibration(
        green,
        hostile,
        replay_white.url,
        bomb_tasks=BOMB_TASKS,
        bomb_k=BOMB_K,
        bomb_concurrency=8,
        calibration_tasks=CALIBRATION_TASKS,
    )
    print(f"\n[sandbox interleave] {report.line()}")
    expected_loop = (os.environ.get("ARENA_LOOP") or "asyncio").strip().lower()
    if expected_loop in ("asyncio", "uvloop"):
        assert report.loop == expected_loop, f"the green agent serves on {report.loop}, not {expected_loop}"
    assert report.infrastructure == [], f"attempts blamed on the infrastructure: {report.infrastructure}"
    assert report.bomb_outcomes == {("failure", "timeout", "white_agent"): BOMB_TASKS * BOMB_K}, report.bomb_outcomes
    assert report.calibration_rewards == [1.0] * (CALIBRATION_TASKS * 2), report.calibration_rewards
    assert report.calibration_pass_hat == 1.0

"""Tool-sandbox kills interleaved with a calibration battle on one green agent (issue 24, item 2).

A hostile white agent calls ``calculate("9**9**9")`` in every attempt of one battle, so each of its attempts ends
with its sandbox killed at the tool time limit, while the reference replay agent plays a calibration battle on the
same green agent. Every kill frees a descriptor number the kernel hands straight to the next socket or sandbox
pipe opened; a teardown that touched the number after closing it unregistered (or read) somebody else's descriptor:
the bomber's attempt became a harness error, or another attempt never woke up.

Shared by tests/adversarial/test_sandbox_interleaved.py (CI-sized) and benchmarks/bench_sandbox_interleaved.py
(200 bombs, the issue's figure). Whichever loop the green agent serves on comes from ``ARENA_LOOP`` (inherited).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Any

import psutil

from tests.adversarial.harness import GreenAgent, assert_completed, failure_of, run_battle
from tests.adversarial.hostile_agent import HostileAgent, calculate_bomb

RETAIL_TEST_TASKS = 40
"""Tasks in retail's test split (the bomber spreads its attempts over its first ones)."""


@dataclass
class InterleaveReport:
    loop: str
    bombs: int
    bomb_outcomes: dict[tuple[str, str | None, str | None], int]
    infrastructure: list[tuple[Any, Any, Any]]
    calibration_attempts: int
    calibration_rewards: list[float]
    calibration_pass_hat: float | None
    bomb_battle_s: float
    calibration_battle_s: float

    def line(self) -> str:
        return (
            f"loop={self.loop} bombs={self.bombs} outcomes={dict(self.bomb_outcomes)} "
            f"infrastructure_errors={len(self.infrastructure)} calibration: {self.calibration_attempts} attempts, "
            f"pass^2={self.calibration_pass_hat} (bomb battle {self.bomb_battle_s:.1f} s, calibration "
            f"{self.calibration_battle_s:.1f} s)"
        )


def serving_loop(green: GreenAgent) -> str:
    """Which loop the green agent's process runs: uvloop when its extension module is mapped, else asyncio."""
    maps = psutil.Process(green.pid).memory_maps()
    return "uvloop" if any(f"{os.sep}uvloop{os.sep}" in m.path for m in maps) else "asyncio"


def _infrastructure(attempts: list[dict[str, Any]]) -> list[tuple[Any, Any, Any]]:
    from tests.adversarial.harness import INFRA_AUTHORS, INFRA_CATEGORIES

    return [
        (a.get("task_key") or a.get("task_index"), a.get("attempt"), a.get("failure"))
        for a in attempts
        if a.get("outcome") == "infra_error"
        or (a.get("failure") or {}).get("category") in INFRA_CATEGORIES
        or (a.get("failure") or {}).get("fault_author") in INFRA_AUTHORS
    ]


async def bombs_beside_calibration(
    green: GreenAgent,
    hostile: HostileAgent,
    replay_url: str,
    *,
    bomb_tasks: int,
    bomb_k: int,
    bomb_concurrency: int,
    calibration_tasks: int,
    calibration_concurrency: int = 4,
    tool_timeout_s: float = 1.0,
    timeout_s: float = 900.0,
) -> InterleaveReport:
    """Run the bomber's battle (``bomb_tasks`` x ``bomb_k`` attempts) and a retail calibration battle
    (``calibration_tasks`` x 2) at the same time; both must complete. Measures, does not judge."""
    hostile.set_behaviour(calculate_bomb("9**9**9"))
    bomb_config = {
        "mode": "manual",
        "domain": "retail",
        "split": "test",
        "task_id": list(range(bomb_tasks)),
        "k": bomb_k,
        "max_steps": 6,
        "concurrency": bomb_concurrency,
        "turn_timeout_s": 60.0,
        "attempt_timeout_s": 120.0,
        "tool_timeout_s": tool_timeout_s,
    }
    calibration_config = {
        "mode": "manual",
        "domain": "retail",
        "split": "test",
        # The calibration tasks come after the bomber's, so the two battles do not share a task.
        "task_id": list(range(RETAIL_TEST_TASKS - calibration_tasks, RETAIL_TEST_TASKS)),
        "k": 2,
        "calibration": True,
        "concurrency": calibration_concurrency,
    }
    calibration = asyncio.create_task(run_battle(green, replay_url, calibration_config, timeout_s=timeout_s))
    bombs = asyncio.create_task(run_battle(green, hostile.served_url, bomb_config, timeout_s=timeout_s))
    try:
        bomb_outcome, calibration_outcome = await asyncio.gather(bombs, calibration)
    finally:
        for task in (bombs, calibration):
            if not task.done():
                task.cancel()
        await asyncio.gather(bombs, calibration, return_exceptions=True)

    bomb_attempts = assert_completed(bomb_outcome, green, attempts=bomb_tasks * bomb_k)
    calibration_attempts = assert_completed(calibration_outcome, green, attempts=calibration_tasks * 2)
    outcomes: dict[tuple[str, str | None, str | None], int] = {}
    for attempt in bomb_attempts:
        category, author, _detail = failure_of(attempt)
        key = (str(attempt.get("outcome")), category, author)
        outcomes[key] = outcomes.get(key, 0) + 1
    assert calibration_outcome.result is not None
    macro = {row["j"]: row for row in calibration_outcome.result.get("summary", {}).get("macro", [])}
    return InterleaveReport(
        loop=serving_loop(green),
        bombs=len(bomb_attempts),
        bomb_outcomes=outcomes,
        infrastructure=_infrastructure(bomb_attempts) + _infrastructure(calibration_attempts),
        calibration_attempts=len(calibration_attempts),
        calibration_rewards=[float(a.get("reward") or 0.0) for a in calibration_attempts],
        calibration_pass_hat=macro.get(2, {}).get("pass_hat_mean"),
        bomb_battle_s=bomb_outcome.elapsed_s,
        calibration_battle_s=calibration_outcome.elapsed_s,
    )

"""Tool calls are bounded: ``calculate("9**9**9")`` in the retail domain (tau2 evaluates the expression with
``eval``; the power never finishes in practice) must end that attempt as the agent's ``timeout`` naming the tool time
limit (``tool_timeout_s``, default 5 s), while the green agent keeps answering /health and another attempt of the
same battle and a whole other battle run normally. The bomb's process must be killed, not left computing.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psutil
import pytest

from tests.adversarial.conftest import MOCK_TASK, RETAIL_TASK, battle_config
from tests.adversarial.harness import (
    GreenAgent,
    HealthPoller,
    ReferenceWhite,
    alive,
    assert_completed,
    assert_no_infrastructure_errors,
    descendants,
    describe,
    failure_of,
    mentions_tool_limit,
    run_battle,
)
from tests.adversarial.hostile_agent import HostileAgent, by_context, calculate_bomb, tool_then_malformed

TOOL_TIMEOUT_S = 5.0
"""BattleConfig.tool_timeout_s default (the tests rely on the default, they do not set it)."""
POLL_S = TOOL_TIMEOUT_S + 2.0
BURNING_CPU_PERCENT = 50.0


async def wait_until(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        await asyncio.sleep(0.02)


def burning_descendants(green: GreenAgent, window_s: float = 1.0) -> list[tuple[psutil.Process, float]]:
    """Descendants of the green agent using more than half a core over ``window_s`` (a tool still computing)."""
    procs = descendants(green.pid)
    for proc in procs:
        try:
            proc.cpu_percent(None)
        except psutil.Error:
            continue
    time.sleep(window_s)
    hot = []
    for proc in alive(procs):
        try:
            usage = proc.cpu_percent(None)
        except psutil.Error:
            continue
        if usage > BURNING_CPU_PERCENT:
            hot.append((proc, usage))
    return hot


@pytest.mark.slow
@pytest.mark.timeout(420)
async def test_calculate_bomb_is_the_agents_timeout_and_stalls_nothing_else(
    green_factory: Any, hostile: HostileAgent, replay_white: ReferenceWhite
) -> None:
    green: GreenAgent = green_factory()
    # Context 0: the bomb. Context 1: calculate("2 + 2"), then a malformed reply (format_error at step 2).
    hostile.set_behaviour(
        by_context({0: calculate_bomb("9**9**9")}, tool_then_malformed("calculate", {"expression": "2 + 2"}))
    )
    bomb_config = battle_config(RETAIL_TASK, turn_timeout_s=30.0, attempt_timeout_s=120.0)
    bomb_battle = asyncio.create_task(
        run_battle(green, hostile.served_url, bomb_config, timeout_s=240, watch_health=False)
    )
    replay_battle: asyncio.Task[Any] | None = None
    try:
        await wait_until(
            lambda: any(r.context_index == 0 and r.note == "action calculate" for r in hostile.records),
            90,
            "the hostile agent to send the calculate bomb",
        )
        # A second battle at the same time: the reference replay agent (calibration) on the mock domain.
        replay_battle = asyncio.create_task(
            run_battle(
                green, replay_white.url, battle_config(MOCK_TASK, calibration=True), timeout_s=240, watch_health=False
            )
        )
        async with HealthPoller(green, interval_s=0.02, timeout_s=2.0) as health:
            await asyncio.sleep(POLL_S)
        print(f"\n[calculate bomb] while the bomb ran ({POLL_S:g} s from the moment it was sent): {health.summary()}")
        # Every poll answered within its 2 s limit (a tool on the event loop would hold it for minutes). The speed
        # goal (p99 < 100 ms) depends on the machine's load: benchmarks/bench_health_during_bomb.py measures it.
        assert health.failures == 0, f"GET /health must keep answering while a tool call runs away: {health.summary()}"

        bomb_outcome = await asyncio.wait_for(bomb_battle, 120)
        replay_outcome = await asyncio.wait_for(replay_battle, 120)
    finally:
        for task in (bomb_battle, replay_battle):
            if task is not None and not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    attempts = assert_completed(bomb_outcome, green, attempts=2)
    assert_no_infrastructure_errors(attempts)
    bomb_context = next(r.context_id for r in hostile.records if r.context_index == 0)
    other_context = next(r.context_id for r in hostile.records if r.context_index == 1)
    by_ctx = {a["context_id"]: a for a in attempts}
    bomb, other = by_ctx[bomb_context], by_ctx[other_context]
    category, author, detail = failure_of(bomb)
    print(
        f"[calculate bomb] bomb attempt: {category}/{author} after {bomb['duration_s']} s: {detail[:200]!r}; "
        f"bomb battle took {bomb_outcome.elapsed_s:.1f} s, the concurrent replay battle "
        f"{replay_outcome.elapsed_s:.1f} s"
    )
    assert (bomb["outcome"], category, author) == ("failure", "timeout", "white_agent"), failure_of(bomb)
    assert mentions_tool_limit(detail), f"the detail must name the tool time limit: {detail!r}"
    assert bomb["duration_s"] < TOOL_TIMEOUT_S + 20, bomb["duration_s"]

    # The other attempt of the same battle: its calculate ran normally, then its malformed reply ended it.
    assert (other["outcome"], *failure_of(other)[:2]) == ("failure", "format_error", "white_agent"), failure_of(other)
    tool_results = [r for r in hostile.records if r.context_id == other_context and r.turn == 2]
    assert tool_results and "4" in tool_results[0].text_head, [r.text_head for r in tool_results]

    # The other battle: every attempt of the reference replay agent succeeded.
    replay_attempts = assert_completed(replay_outcome, green, attempts=2)
    assert [a["outcome"] for a in replay_attempts] == ["success", "success"], [failure_of(a) for a in replay_attempts]

    # Nothing keeps computing the bomb after its attempt ended.
    hot = burning_descendants(green)
    assert not hot, (
        f"processes of the green agent still burn CPU after the bomb attempt ended: "
        f"{[(d, f'{u:.0f}%') for d, (_, u) in zip(describe([p for p, _ in hot]), hot, strict=True)]}"
    )
    assert green.healthy(), "the green agent must still be healthy"

"""The green agent's process lifecycle under a hostile agent: SIGTERM mid-battle ends it within 5 s (also while a
tool call runs away), and SIGKILL of the green agent mid-battle leaves no orphan child process (scoring workers, tool
processes, a forkserver -- nothing). Each test uses a dedicated green agent."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import pytest

from tests.adversarial.conftest import MOCK_TASK, RETAIL_TASK, battle_config
from tests.adversarial.harness import GreenAgent, alive, describe, kill_all, run_battle, wait_all_gone
from tests.adversarial.hostile_agent import HostileAgent, by_context, calculate_bomb, sleep_then

EXIT_BOUND_S = 5.0
ORPHAN_BOUND_S = 5.0


async def _start_long_battle(green: GreenAgent, hostile: HostileAgent, *, bomb: bool) -> asyncio.Task[Any]:
    """A battle whose attempts wait on the white agent (both asleep for minutes), or with one of them running the
    calculate bomb; returns once the white agent is busy with both attempts (and the bomb had 1.5 s to start)."""
    sleeper = sleep_then(600.0)
    if bomb:
        hostile.set_behaviour(by_context({0: calculate_bomb("9**9**9")}, sleeper))
        config = battle_config(RETAIL_TASK, turn_timeout_s=300.0, attempt_timeout_s=600.0)
    else:
        hostile.set_behaviour(sleeper)
        config = battle_config(MOCK_TASK, turn_timeout_s=300.0, attempt_timeout_s=600.0)
    battle = asyncio.create_task(run_battle(green, hostile.served_url, config, timeout_s=900, watch_health=False))
    deadline = time.monotonic() + 90
    both_by: float | None = None
    while True:
        contexts = {t.context_id for t in hostile.message_arrivals()}
        bomb_sent = any(r.note == "action calculate" for r in hostile.records)
        if bomb and bomb_sent and both_by is None:
            both_by = time.monotonic() + 10  # the other attempt may be stuck behind a blocked event loop
        if len(contexts) >= 2 and (bomb_sent or not bomb):
            break
        if both_by is not None and time.monotonic() > both_by:
            print(f"\n[lifecycle] only {len(contexts)} attempt(s) reached the white agent after the bomb")
            break
        if battle.done():
            raise AssertionError(f"the battle ended early: {battle.result().describe()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"the battle never got going ({len(contexts)} contexts, bomb sent: {bomb_sent})")
        await asyncio.sleep(0.05)
    if bomb:
        await asyncio.sleep(1.5)  # the tool call is running now (in its own process, or blocking the loop)
    return battle


async def _finish(battle: asyncio.Task[Any]) -> None:
    if not battle.done():
        battle.cancel()
    await asyncio.gather(battle, return_exceptions=True)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("during", ["agent_turns", "tool_bomb"])
async def test_sigterm_mid_battle_exits_within_5_seconds(
    green_factory: Any, hostile: HostileAgent, during: str
) -> None:
    green: GreenAgent = green_factory()
    battle = await _start_long_battle(green, hostile, bomb=during == "tool_bomb")
    try:
        tree = green.remember_descendants()
        print(f"\n[SIGTERM {during}] green agent {green.pid} with {len(tree)} descendants: {describe(tree)}")
        sent = time.monotonic()
        green.signal(signal.SIGTERM)
        while green.running() and time.monotonic() - sent < EXIT_BOUND_S + 10:
            await asyncio.sleep(0.02)
        exit_s = time.monotonic() - sent
        code = green.popen.poll()
        print(
            f"[SIGTERM {during}] exited after {exit_s:.2f} s with code {code}"
            if code is not None
            else f"[SIGTERM {during}] still running {exit_s:.1f} s after SIGTERM"
        )
        assert code is not None and exit_s < EXIT_BOUND_S, (
            f"the green agent must exit within {EXIT_BOUND_S:g} s of SIGTERM (took {exit_s:.1f} s, "
            f"{'exited' if code is not None else 'still running'})\n{green.log_tail(2000)}"
        )
        left = await asyncio.to_thread(wait_all_gone, [*tree, *green.seen_descendants], ORPHAN_BOUND_S)
        assert not left, f"children left running after the green agent exited: {describe(left)}"
    finally:
        await _finish(battle)


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_sigkill_mid_battle_leaves_no_orphan_processes(green_factory: Any, hostile: HostileAgent) -> None:
    """One attempt runs the calculate bomb, the other waits on the white agent; then SIGKILL (to the green agent's
    main process only, not its group: the children must go away on their own)."""
    green: GreenAgent = green_factory()
    battle = await _start_long_battle(green, hostile, bomb=True)
    try:
        tree = green.remember_descendants()
        print(f"\n[SIGKILL] green agent {green.pid} with {len(tree)} descendants before the kill:")
        for line in describe(tree):
            print(f"  {line}")
        os.kill(green.pid, signal.SIGKILL)
        green.popen.wait(timeout=10)
        started = time.monotonic()
        left = await asyncio.to_thread(wait_all_gone, tree, ORPHAN_BOUND_S)
        gone_s = time.monotonic() - started
        print(
            f"[SIGKILL] {len(tree) - len(left)}/{len(tree)} descendants gone within {gone_s:.2f} s"
            + (f"; ORPHANS: {describe(left)}" if left else "")
        )
        assert not left, f"orphans {ORPHAN_BOUND_S:g} s after SIGKILL of the green agent: {describe(left)}"
    finally:
        await _finish(battle)
        kill_all(alive(green.seen_descendants))  # the fixture does it too; now, so the next test starts clean

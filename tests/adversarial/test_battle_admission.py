"""A flood of unauthenticated ``battle_start`` messages is bounded (issue 24, item 4).

Before the fix, every AgentBeats ``battle_start`` (no credential: that is the protocol) ran at once with its own
``concurrency`` of attempts, each holding a tool-sandbox process: 24 messages against a silent white agent held 389
processes and 2.3 GB. Now the green agent runs at most ``--max-running-battles`` battles and
``--max-attempts-in-flight`` attempts across them; up to ``--max-queued-battles`` more wait (told their position),
the rest are refused as busy, with the reason.

The flood: 24 battles of 2 attempts each (concurrency 2) against a white agent that never answers within the test,
on a green agent bounded to 2 battles, 4 attempts and a queue of 3. Measured while the attempts hang: the green
agent's process tree never grows by more than the 4 sandboxes (plus the fork server they come from), the silent
agent sees at most 4 conversations, /health says 2 running and 3 queued, and the answers say accepted (2), queued
with a position (3), refused as busy with the bounds (19). On a green agent without the bounds (the flags are
then left out) the tree grows by a sandbox per attempt of every battle, and the test fails on the first bound.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.adversarial.conftest import battle_config
from tests.adversarial.harness import (
    GreenAgent,
    alive,
    descendants,
    green_help_text,
    jsonrpc,
    new_battle_id,
    user_message,
)
from tests.adversarial.hostile_agent import HostileAgent, sleep_then

FLOOD = 24
RUNNING, IN_FLIGHT, QUEUED = 2, 4, 3
BOUND_FLAGS = [
    *("--max-running-battles", str(RUNNING)),
    *("--max-attempts-in-flight", str(IN_FLIGHT)),
    *("--max-queued-battles", str(QUEUED)),
]
WATCH_S = 12.0
"""How long the process tree is watched after the flood (attempts hang far longer: 60 s turns)."""


def _tree_size(green: GreenAgent) -> int:
    return len(alive(descendants(green.pid)))


async def _battle_start(green: GreenAgent, white_url: str, battle_id: str) -> str:
    start = {
        "type": "battle_start",
        "battle_id": battle_id,
        "green_battle_context": {
            "task_config": json.dumps(battle_config(k=2, concurrency=2, turn_timeout_s=60.0, attempt_timeout_s=90.0))
        },
        "opponent_infos": [{"name": "white_agent", "agent_url": white_url}],
    }
    status, body = await jsonrpc(green, "message/send", {"message": user_message(json.dumps(start))}, timeout_s=30)
    assert status == 200, body
    return json.dumps(body["result"]["parts"])


@pytest.mark.timeout(300)
async def test_a_battle_start_flood_stays_within_the_bounds_queued_or_refused_with_the_reason(
    green_factory: Callable[..., GreenAgent], hostile: HostileAgent
) -> None:
    bounded = "--max-running-battles" in green_help_text()
    green = green_factory(extra_args=BOUND_FLAGS if bounded else [])
    hostile.set_behaviour(sleep_then(120.0))
    await asyncio.sleep(1.0)  # the scoring workers settle
    baseline = _tree_size(green)

    answers: list[str] = []
    for index in range(FLOOD):  # one after the other: the order decides who runs, who waits and who is refused
        answers.append(await _battle_start(green, hostile.served_url, new_battle_id(f"flood{index}")))

    peak, contexts = baseline, 0
    deadline = time.monotonic() + WATCH_S
    while time.monotonic() < deadline:
        peak = max(peak, _tree_size(green))
        contexts = max(contexts, len({turn.context_id for turn in hostile.message_arrivals()}))
        await asyncio.sleep(0.2)
    health: dict[str, Any] = green.health_json(timeout_s=10) or {}
    print(f"\n[flood] tree {baseline} -> peak {peak}; conversations {contexts}; health {health}")
    for index, answer in enumerate(answers):
        print(f"[flood] {index:2d}: {answer[:220]}")

    # Processes: the sandboxes of at most IN_FLIGHT attempts, plus the fork server they are forked from.
    assert peak - baseline <= IN_FLIGHT + 1, f"the process tree grew from {baseline} to {peak}"
    assert contexts <= IN_FLIGHT, f"{contexts} attempts reached the white agent at once (bound {IN_FLIGHT})"
    assert health.get("battles_running") == RUNNING and health.get("battles_queued") == QUEUED, health

    accepted = [a for a in answers if "accepted" in a and "queued" not in a]
    queued = [a for a in answers if "accepted and queued (position" in a]
    refused = [a for a in answers if "refused" in a]
    assert len(accepted) == RUNNING and len(queued) == QUEUED and len(refused) == FLOOD - RUNNING - QUEUED, answers
    assert [f"position {n}" in a for n, a in enumerate(queued, start=1)] == [True] * QUEUED, queued
    assert all("busy" in a and f"at most {RUNNING} battles and {IN_FLIGHT} attempts" in a for a in refused), refused
    assert green.healthy(timeout_s=5)

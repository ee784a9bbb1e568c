"""The battle hands an attempt's trajectory to its event's sinks from memory (the messages it wrote to the file),
for that delivery only: the events it keeps (events.jsonl, MCP's recent events) hold no trajectory afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest

from green_agent.engine.battle import Battle
from green_agent.engine.config import BattleConfig
from green_agent.engine.events import BattleEvent
from green_agent.engine.tau.scoring import ScoringPool
from tests.green_agent.service.conftest import white_agent


@pytest.mark.asyncio(loop_scope="session")
async def test_each_attempt_event_carries_its_trajectory_during_delivery_only(tmp_path: Path) -> None:
    carried: list[int | None] = []

    async def sink(event: BattleEvent) -> None:
        if event.type == "attempt_finished":
            carried.append(None if event.trajectory is None else len(event.trajectory))

    config = BattleConfig.model_validate({"domain": "retail", "task_index": [0], "k": 2, "calibration": True})
    async with ScoringPool(max_workers=1) as scoring, white_agent("replay") as white:
        battle = Battle("handover-1", white, config, scoring=scoring, runs_dir=tmp_path, sinks=[sink])
        result = await battle.run()
    assert len(carried) == 2 and all(count is not None and count > 0 for count in carried), carried
    assert all(a.trajectory_file for a in result.attempts)
    assert all(event.trajectory is None for event in battle.events)
    assert all(a.take_trajectory() is None for a in result.attempts)  # handed over once, not kept by the result

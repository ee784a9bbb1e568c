"""A real battle (the flaky reference agent, tau2's retail tasks, the scoring pool) writes ``consistency`` into
summary.json and its section into summary.md, with every divergence found in the attempts' trajectory files."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from green_agent.engine.battle import Battle
from green_agent.engine.config import BattleConfig
from green_agent.engine.consistency import attempt_turns
from green_agent.engine.divergence import first_divergence
from green_agent.engine.results import BattleResult
from green_agent.engine.tau.regrade import regrade_run
from green_agent.engine.tau.scoring import ScoringPool
from tests.support.servers import serve_app_factory
from white_agent.app import create_white_agent_app, make_agent

FAULTS = {"skip_action": 0.2, "wrong_argument": 0.2}


@asynccontextmanager
async def serving(agent: Any) -> AsyncIterator[str]:
    async with serve_app_factory(lambda url: create_white_agent_app(agent, url + "/")) as url:
        yield url


async def test_a_battle_reports_flip_rates_and_divergences(tmp_path: Path) -> None:
    cfg = BattleConfig.model_validate(
        {"domain": "retail", "split": "test", "task_index": list(range(6)), "k": 4, "calibration": True}
    )
    async with ScoringPool(max_workers=1) as scoring, serving(make_agent("flaky", seed=3, fault_rates=FAULTS)) as url:
        result = await Battle("consistency-battle", url, cfg, scoring=scoring, runs_dir=tmp_path).run()
    run_dir = tmp_path / "consistency-battle"
    consistency = result.consistency
    assert consistency is not None and consistency.tasks == 6
    assert consistency.mixed_tasks >= 1, "the faults should make some task's attempts disagree"
    for task in consistency.least_consistent:
        attempts = [a for a in result.attempts if a.task_key == task.task_key and a.trial_outcome is not None]
        assert task.attempts_compared == task.attempts == len(attempts)
        turns = {a.attempt: attempt_turns(run_dir, a) or [] for a in attempts}
        passed = {a.attempt: bool(a.trial_outcome) for a in attempts}
        assert task.first_divergence == first_divergence(turns, passed)
    assert any(task.first_divergence is not None for task in consistency.least_consistent)
    on_disk = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert on_disk["consistency"]["mixed_tasks"] == consistency.mixed_tasks
    assert "## Consistency across attempts" in (run_dir / "summary.md").read_text(encoding="utf-8")

    # arena regrade recomputes it from the re-scored outcomes (the same tau2 here: the true figures again, not the
    # stale ones the old summary holds)
    stale = {**on_disk, "consistency": {**on_disk["consistency"], "least_consistent": [], "mixed_tasks": 0}}
    (run_dir / "summary.json").write_text(json.dumps(stale), encoding="utf-8")
    regrade_run(run_dir, tmp_path / "regraded")
    regraded = BattleResult.model_validate_json((tmp_path / "regraded" / "summary.json").read_bytes())
    assert regraded.consistency == consistency

"""``arena regrade`` of a run whose tasks stopped at their first failure (a pass^k certify battle, issue 28): the
regraded summary reads pass^j as the battle did (from each task's leading passes; a stopped task counts as 0), not
as a fixed design (which would count pass^k only over the tasks that ran k attempts)."""

from __future__ import annotations

from pathlib import Path

from green_agent.engine.results import BattleResult
from green_agent.engine.tau.regrade import regrade_run
from tests.green_agent.engine.test_certify_task_stop import BATTLE, K, run_battle


async def test_regrading_a_stopped_run_on_the_same_tau2_keeps_its_figures(tmp_path: Path) -> None:
    result, _ = await run_battle(tmp_path / "runs")
    report = regrade_run(tmp_path / "runs" / BATTLE, tmp_path / "regraded")
    assert report.differences == []  # the same tau2: every outcome as recorded
    new = BattleResult.model_validate_json((tmp_path / "regraded" / "summary.json").read_text(encoding="utf-8"))
    assert [m.coverage for m in new.summary.macro] == [m.coverage for m in result.summary.macro]
    assert [m.pass_hat_mean for m in new.summary.macro] == [m.pass_hat_mean for m in result.summary.macro]
    assert new.summary.macro[K - 1].pass_at_mean is None  # pass@k not estimable under the stop
    assert new.summary.interval_note == result.summary.interval_note

"""A certify comparison's baseline read from a run whose tasks stopped at their first failure (a pass^k certify
battle, issue 28): its attempts are not a fixed design, so each task's pass^j comes from its leading passes (as the
run's own summary reads it), not from the mean over the attempts run."""

from __future__ import annotations

from pathlib import Path

from green_agent.engine.run_store import baseline_values
from green_agent.statistics.certify_stop import leading_successes
from tests.green_agent.engine.test_certify_task_stop import BATTLE, K, by_task, run_battle


async def test_a_baseline_read_from_a_stopped_run_takes_each_tasks_pass_j_from_its_leading_passes(
    tmp_path: Path,
) -> None:
    result, _ = await run_battle(tmp_path)
    tasks = by_task(result.attempts)
    assert any(len(got) < K for got in tasks.values())  # some task stopped at a failure before attempt k
    for j in (1, 2, K):
        expected: dict[str, float] = {}
        for key, got in tasks.items():
            x, failed = leading_successes([a.trial_outcome for a in got])
            if x >= j or failed:
                expected[key] = float(x >= j)
        # The unbiased per-task values the battle's own summary reports, not the mean over the attempts run (a
        # task that passed then failed is 0 for pass^2, not 1/2; one stopped at attempt 1 is 0 for pass^4).
        assert baseline_values(tmp_path / BATTLE, j) == expected, j
        summary_values = {t.task_id: t.pass_hat[j - 1] for t in result.summary.tasks if t.pass_hat[j - 1] is not None}
        assert baseline_values(tmp_path / BATTLE, j) == summary_values, j

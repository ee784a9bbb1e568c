"""``arena compare`` refuses a run whose tasks stopped at their first failure (a pass^k certify battle, issue 28):
paired attempt by attempt its pass^j would be biased (pass^4 over only the tasks that ran 4 attempts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.cli.compare_command import CompareError, build_report, read_local_run
from tests.green_agent.engine.test_certify_task_stop import BATTLE, K, run_battle


async def test_arena_compare_refuses_a_run_whose_tasks_stopped_at_their_first_failure(tmp_path: Path) -> None:
    await run_battle(tmp_path)
    stopped = read_local_run(tmp_path / BATTLE)
    for a, b in ((stopped, stopped), (stopped, stopped.model_copy(update={"certification": None}))):
        with pytest.raises(CompareError, match="stopped each task at its first failure"):
            build_report(a, b, metric=f"pass^{K}")

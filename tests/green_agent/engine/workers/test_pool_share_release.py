"""A battle's worker processes hold their shares of the provider caps until they have stopped
(docs/design/providers.md, "Shares": "given back when they stop"): while a stopping worker may still have model calls
in flight, nobody else is handed its slots. The workers here are stand-ins that speak the start/ready handshake and
exit at the end of their input, so the test needs no tau2 environment and no model."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

from green_agent.engine.config import BattleConfig
from green_agent.engine.workers.pool import WorkerPool
from green_agent.provider_limits import ProviderLimits

STAND_IN = """
import json, os, sys
sys.stdin.readline()  # start
sys.stdout.write(json.dumps({"kind": "ready", "pid": os.getpid()}) + "\\n")
sys.stdout.flush()
for _line in sys.stdin:  # share messages, until the end of input
    pass
"""


def _stand_in_python(tmp_path: Path) -> str:
    """An executable that WorkerPool runs as ``<it> -m <worker module>``: it runs the stand-in worker instead."""
    script = tmp_path / "stand_in_worker.py"
    script.write_text(STAND_IN)
    launcher = tmp_path / "python"
    launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}"\n')
    launcher.chmod(launcher.stat().st_mode | stat.S_IXUSR)
    return str(launcher)


async def test_a_battles_workers_give_their_shares_back_only_once_they_have_stopped(tmp_path: Path) -> None:
    providers = ProviderLimits(max_concurrency=8)
    config = BattleConfig.model_validate(
        {"domain": "retail", "split": "test", "task_index": [0], "k": 2, "calibration": True, "concurrency": 32}
    )
    pool = WorkerPool(
        processes=2,
        battle_id="b",
        white_agent_url="http://127.0.0.1:9",
        config=config,
        run_dir=None,
        python=_stand_in_python(tmp_path),
        providers=providers,
    )
    told: list[tuple[int, list[int | None]]] = []  # another battle's shares, and this pool's workers' exit codes

    def tell(slots: int) -> None:
        told.append((slots, [w.process.returncode for w in pool._workers]))

    other = providers.hold_workers(1, tell)
    assert other.slots == 8
    async with pool:
        assert len(pool.pids) == 2
        assert other.slots == 8 // 3  # three workers share the cap while the pool runs
    assert other.slots == 8  # given back
    slots, codes = told[-1]
    assert slots == 8 and len(codes) == 2
    assert all(code is not None for code in codes), f"the shares were given back while the workers still ran: {told}"
    other.release()

"""``arena run --resume --backend URL`` after ``kill -9`` of ``arena run --backend URL`` (issue 24, item 3).

A real backend process on 127.0.0.1 serves two battles of the seeded offline demo: one uninterrupted, and one whose
``arena run`` process group is killed with SIGKILL in the middle (its agents go down with it), then resumed. The
backend battle of the resumed run must end with exactly one result, equal to the uninterrupted battle's (every
attempt's outcome, the figures, the winner), and hold each attempt's ``attempt_finished`` event exactly once.
Before the fix, ``--resume --backend`` was refused (exit 2) and the backend battle never got its result.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from launcher_test_helpers import attempts_on_disk, ours

from tests.support.backend_process import restartable_backend

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "scenarios" / "offline_demo.toml"
KILL_AFTER = 8
"""Attempts on disk before the kill (of the demo's 20)."""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", "COLUMNS": "200", "NO_COLOR": "1"}


def _arena(*args: str, runs: Path) -> list[str]:
    return [sys.executable, "-m", "launcher", "run", str(DEMO), *args, "--runs-dir", str(runs)]


async def _run_to_end(argv: list[str]) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=REPO, env=_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    output, _ = await asyncio.wait_for(proc.communicate(), timeout=600)
    return int(proc.returncode or 0), output.decode("utf-8", "replace")


async def _wait_for(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def _backend_battles(runs: Path) -> list[str]:
    """The battles in ``runs`` (the green agent's run directory is named after the backend's battle id)."""
    return [d.name for d in runs.iterdir() if (d / "run.json").is_file()] if runs.is_dir() else []


def _results(battle: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in battle["interact_history"] if e.get("is_result")]


def _finished_attempts(battle: dict[str, Any]) -> list[tuple[Any, Any, Any]]:
    details = [e.get("detail") or {} for e in battle["interact_history"] if e.get("reported_by") == "green_agent"]
    return sorted(
        (d.get("task_key"), d.get("attempt"), d.get("outcome"))
        for d in details
        if isinstance(d, dict) and d.get("type") == "attempt_finished"
    )


def _outcome_view(summary: dict[str, Any]) -> dict[str, Any]:
    """Everything a reader takes from a result, minus times, ports, ids and context ids."""
    return {
        "summary": summary["summary"],
        "failure_breakdown": summary["failure_breakdown"],
        "infrastructure_errors": summary["infrastructure_errors"],
        "status": summary["status"],
        "attempts": [
            (
                a["task_index"],
                a["attempt"],
                a["outcome"],
                a["reward"],
                a["steps"],
                a["termination_reason"],
                (a["failure"] or {}).get("category"),
            )
            for a in sorted(summary["attempts"], key=lambda a: (a["task_index"], a["attempt"]))
        ],
    }


def _green_agent(runs: Path) -> psutil.Process:
    """The green agent itself (behind its launcher), not its launcher, scoring workers or sandboxes."""
    greens: list[psutil.Process] = [p for p in ours(runs) if p.cmdline()[1:3] == ["-m", "green_agent"]]
    assert len(greens) == 1, greens
    return greens[0]


@pytest.mark.slow
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("victim", ["arena", "green"])
async def test_resume_after_kill_9_with_backend_posts_the_one_result_of_an_uninterrupted_run(
    tmp_path: Path, victim: str
) -> None:
    async with restartable_backend(tmp_path) as backend:
        # The uninterrupted battle, for reference.
        code, output = await _run_to_end([*_arena("--backend", backend.url, runs=tmp_path / "whole"), "-q"])
        assert code == 0, output
        (whole_id,) = _backend_battles(tmp_path / "whole")
        reference = await backend.battle(whole_id)
        assert reference["state"] == "finished" and len(_results(reference)) == 1

        # The same scenario, its arena run process group killed with SIGKILL in the middle of the battle.
        runs = tmp_path / "runs"
        arena = await asyncio.create_subprocess_exec(
            *_arena("--backend", backend.url, runs=runs),
            cwd=REPO,
            env=_env(),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        lines: list[str] = []

        async def read() -> None:
            assert arena.stdout is not None
            async for raw in arena.stdout:
                lines.append(raw.decode("utf-8", "replace"))

        reader = asyncio.create_task(read())
        try:
            await _wait_for(lambda: _backend_battles(runs), 300, "the battle on the backend")
            (battle_id,) = _backend_battles(runs)
            run_dir = runs / battle_id
            await _wait_for(lambda: attempts_on_disk(run_dir) >= KILL_AFTER, 300, f"{KILL_AFTER} attempts")
            if victim == "arena":
                os.killpg(arena.pid, signal.SIGKILL)
                await asyncio.wait_for(arena.wait(), timeout=60)
            else:  # arena run notices that its green agent is gone, stops the rest and says how to resume
                _green_agent(runs).send_signal(signal.SIGKILL)
                assert await asyncio.wait_for(arena.wait(), timeout=120) == 3
                await asyncio.wait_for(reader, timeout=30)
                hint = f"resume with: arena run {DEMO} --resume --backend {backend.url} --battle-id {battle_id}"
                assert any(hint in line for line in lines), "".join(lines)
            await _wait_for(lambda: not ours(runs), 120, "the run's agents to exit")
        finally:
            if arena.returncode is None:
                os.killpg(arena.pid, signal.SIGKILL)
                await arena.wait()
            for child in ours(runs):
                child.kill()
            await asyncio.wait_for(reader, timeout=30)
        cut = await backend.battle(battle_id)
        assert cut["state"] == "running" and not _results(cut), "".join(lines)

        # Resume through the backend: the backend battle goes on and gets its one result.
        code, output = await _run_to_end([*_arena("--resume", "--backend", backend.url, runs=runs), "-q"])
        assert code == 0, output
        assert f"resuming battle {battle_id} on {backend.url}" in output, output
        final = await backend.battle(battle_id)

    assert final["state"] == "finished", final.get("error")
    results = _results(final)
    assert len(results) == 1
    result, expected = results[0], _results(reference)[0]
    assert result["winner"] == expected["winner"]
    assert _outcome_view(result["detail"]) == _outcome_view(expected["detail"])
    assert result["detail"]["resumed_attempts"] >= KILL_AFTER
    assert final["result"]["winner"] == reference["result"]["winner"]
    # Each attempt's event exactly once, as in the uninterrupted run: those of the killed run (delivered then or from
    # its outbox), the resumed ones, and those journaled in the instant the green agent was stopped before their
    # event reached the outbox (the resume posts them from the journal).
    finished, expected_events = _finished_attempts(final), _finished_attempts(reference)
    assert len(set(finished)) == len(finished) and set(finished) <= set(expected_events), finished
    assert sorted(finished) == sorted(expected_events), (finished, expected_events)
    summary = json.loads((runs / battle_id / "summary.json").read_text(encoding="utf-8"))
    assert _outcome_view(summary) == _outcome_view(expected["detail"])

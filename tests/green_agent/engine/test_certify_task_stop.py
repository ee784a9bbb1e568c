"""A pass^k certify battle stops each task at its first failure (issue 28, green_agent/engine/certify_schedule.py):
a task's attempts run in sequence, none runs after a failure, the skip is in the events and summary.json with its
reason, and a resume from what a kill leaves on disk continues the same sequence to the same decision."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from green_agent.engine.battle import Battle
from green_agent.engine.config import BattleConfig
from green_agent.engine.events import BattleEvent
from green_agent.engine.results import AttemptResult, BattleResult
from green_agent.engine.tau.scoring import ScoringPool
from tests.support.servers import serve_app_factory
from white_agent.app import create_white_agent_app, make_agent

K = 4
FAULTS = {"skip_action": 0.15, "wrong_argument": 0.1, "malformed_reply": 0.1, "drop_final": 0.1}
BATTLE = "task-stop"


def config() -> BattleConfig:
    data: dict[str, Any] = {
        "domain": "retail",
        "split": "test",
        "task_index": list(range(10)),
        "k": K,
        "calibration": True,
        "concurrency": 2,
        "seed": 3,
        "certify": "pass^4>=0.9",
    }
    return BattleConfig.model_validate(data)


@asynccontextmanager
async def flaky_agent() -> AsyncIterator[str]:
    agent = make_agent("flaky", seed=7, fault_rates=FAULTS)
    async with serve_app_factory(lambda url: create_white_agent_app(agent, url + "/")) as url:
        yield url


async def run_battle(runs: Path, *, resume: bool = False) -> tuple[BattleResult, Battle]:
    async with ScoringPool(max_workers=1) as scoring, flaky_agent() as url:
        battle = Battle(BATTLE, url, config(), scoring=scoring, runs_dir=runs, resume=resume)
        return await battle.run(), battle


def by_task(attempts: list[AttemptResult]) -> dict[str, list[AttemptResult]]:
    out: dict[str, list[AttemptResult]] = {}
    for a in sorted(attempts, key=lambda a: (a.task_key, a.attempt)):
        out.setdefault(a.task_key, []).append(a)
    return out


def position(events: list[BattleEvent], kind: str, key: str, attempt: int) -> int:
    return next(
        i
        for i, e in enumerate(events)
        if e.type == kind and e.data.get("task_key") == key and e.data.get("attempt") == attempt
    )


def read_json(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


async def test_a_failed_attempt_ends_its_task_and_the_summary_says_why(tmp_path: Path) -> None:
    result, battle = await run_battle(tmp_path)
    tasks = by_task(result.attempts)
    stopped = {key: got for key, got in tasks.items() if any(a.trial_outcome is False for a in got)}
    assert any(len(got) < K for got in stopped.values())  # the faults made some task fail before its last attempt
    events = battle.events
    for key, got in tasks.items():
        assert [a.attempt for a in got] == list(range(1, len(got) + 1))
        assert all(a.trial_outcome is not False for a in got[:-1]), key  # nothing ran after a failure
        for a in got[1:]:  # attempt a starts only once attempt a - 1 finished
            assert position(events, "attempt_finished", key, a.attempt - 1) < position(
                events, "attempt_started", key, a.attempt
            )
    skips = {e.data["task_key"]: e.data for e in events if e.type == "attempts_skipped"}
    expected = {key: got for key, got in stopped.items() if len(got) < K}
    assert set(skips) == set(expected)
    for key, got in expected.items():
        assert skips[key]["attempts"] == list(range(len(got) + 1, K + 1))
        assert skips[key]["failed_attempt"] == len(got) and skips[key]["reason"] == "certify_task_failed"

    summary = read_json(tmp_path / BATTLE / "summary.json")
    cert = summary["certification"]
    stop = cert["task_stop"]
    assert stop["rule"] == "stop_task_at_first_failure" and stop["tasks_stopped"] == len(expected)
    assert stop["attempts_skipped"] == sum(K - len(got) for got in expected.values())
    assert {s["task_key"]: s["attempts"] for s in stop["skipped"]} == {k: v["attempts"] for k, v in skips.items()}
    assert "certify_task_failed" in stop["note"]
    assert cert["attempts_used"] == len(result.attempts) < cert["attempts_fixed_design"]
    assert all(a["outcome"] != "skipped" for a in summary["attempts"])  # skips are not attempts, nor failures
    pass_k = result.summary.macro[K - 1]
    ran = [got for got in tasks.values() if got[-1].trial_outcome is False or len(got) == K]
    assert pass_k.coverage == len(ran)  # tasks stopped at a failure count (as 0), not left out
    assert pass_k.pass_hat_mean == sum(1 for got in ran if len(got) == K and got[-1].trial_outcome) / len(ran)
    assert result.summary.macro[1].pass_at_mean is None  # pass@2 cannot be estimated under the stop
    assert summary["summary"]["interval_note"].endswith("leans toward tasks that ran more of them.")
    markdown = (tmp_path / BATTLE / "summary.md").read_text(encoding="utf-8")
    assert "- within-task stop: Certify stopped each task at its first failure" in markdown


async def test_a_resume_from_a_killed_run_skips_the_carried_failure_and_reaches_the_same_decision(
    tmp_path: Path,
) -> None:
    await run_battle(tmp_path / "whole")
    whole_dir = tmp_path / "whole" / BATTLE
    reference = read_json(whole_dir / "summary.json")["certification"]
    lines = (whole_dir / "attempts.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    records = [json.loads(line) for line in lines]
    # What a kill -9 leaves: run.json and the journal up to an attempt that failed before its task's last attempt.
    cut = next(i for i, r in enumerate(records) if r["outcome"] != "success" and r["attempt"] < K and i > 0)
    failed = records[cut]
    key = f"{failed['domain']}/{failed['split']}/{failed['task_index']}"
    cut_dir = tmp_path / "cut" / BATTLE
    cut_dir.mkdir(parents=True)
    shutil.copy(whole_dir / "run.json", cut_dir / "run.json")
    (cut_dir / "attempts.jsonl").write_text("".join(lines[: cut + 1]), encoding="utf-8")

    resumed, battle = await run_battle(tmp_path / "cut", resume=True)
    assert resumed.resumed_attempts == cut + 1
    started = [(e.data["task_key"], e.data["attempt"]) for e in battle.events if e.type == "attempt_started"]
    assert not [s for s in started if s[0] == key]  # the carried failure's task runs nothing more
    skips = [e.data for e in battle.events if e.type == "attempts_skipped" and e.data["task_key"] == key]
    assert len(skips) == 1 and skips[0]["attempts"] == list(range(failed["attempt"] + 1, K + 1))
    again = read_json(cut_dir / "summary.json")["certification"]
    for name in ("decision", "order", "tasks_observed", "sequence_low", "sequence_high", "estimate", "stop_reason"):
        assert again[name] == reference[name], name
    assert (key, failed["attempt"]) in {(a.task_key, a.attempt) for a in resumed.attempts}  # carried, counted

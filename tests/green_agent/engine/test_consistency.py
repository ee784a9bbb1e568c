"""A battle's ``consistency`` from its run directory's trajectory files (green_agent/engine/consistency.py): flip
rates, the first divergence, files that cannot be read, summary.md's section and the JSON round trip."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from green_agent.engine.config import BattleConfig
from green_agent.engine.consistency import MARKDOWN_TASKS, attempt_turns, battle_consistency, consistency_markdown
from green_agent.engine.report import render_markdown
from green_agent.engine.results import AttemptResult, BattleResult
from green_agent.statistics import summarize_trials


def _attempt(index: int, number: int, ok: bool | None) -> AttemptResult:
    return AttemptResult(
        battle_id="consistency-run",
        domain="mock",
        split="base",
        task_index=index,
        task_id=f"task_{index}",
        attempt=number,
        context_id=f"ctx-{index}-{number}",
        outcome="infra_error" if ok is None else "success" if ok else "failure",
        termination_reason="user_stop",
        trajectory_file=f"trajectories/mock-base-{index:04d}-attempt{number:02d}.jsonl",
    )


def _write(run_dir: Path, attempt: AttemptResult, messages: list[dict[str, Any]]) -> None:
    assert attempt.trajectory_file is not None
    path = run_dir / attempt.trajectory_file
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {"attempt": attempt.model_dump(mode="json", exclude={"trajectory_file"})}
    path.write_text("\n".join(json.dumps(r) for r in [header, *messages]) + "\n", encoding="utf-8")


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"role": "assistant", "tool_calls": [{"id": "c", "name": name, "arguments": arguments}]}


GREETING = {"role": "assistant", "content": "Hi! How can I help you today?"}
ASK = {"role": "user", "content": "cancel order 7"}


def _result(attempts: list[AttemptResult], k: int = 4) -> BattleResult:
    trials: dict[str, list[bool | None]] = {}
    for a in attempts:
        trials.setdefault(a.task_key, []).append(a.trial_outcome)
    return BattleResult(
        battle_id="consistency-run",
        white_agent_url="http://127.0.0.1:9009",
        config=BattleConfig(mode="manual", k=k, domain="mock", split="base", task_index=0),
        started_at="2026-11-27T10:00:00Z",
        finished_at="2026-11-27T10:01:00Z",
        duration_s=60.0,
        attempts=attempts,
        summary=summarize_trials(trials, k_max=k, seed=0, n_bootstrap=0),
        failure_breakdown={},
        infrastructure_errors=0,
    )


def test_divergence_is_read_from_the_trajectory_files(tmp_path: Path) -> None:
    a = [_attempt(0, 1, True), _attempt(0, 2, False), _attempt(0, 3, True), _attempt(0, 4, None)]
    good = [GREETING, ASK, _call("get_order", order_id="7"), _call("cancel_order", order_id="7")]
    bad = [GREETING, ASK, _call("get_order", order_id="7"), _call("cancel_order", order_id="8")]
    for attempt, messages in zip(a, [good, bad, good, bad], strict=True):
        _write(tmp_path, attempt, messages)
    steady = [_attempt(1, 1, True), _attempt(1, 2, True)]
    summary = battle_consistency([*a, *steady], tmp_path)
    assert summary is not None
    assert (summary.tasks, summary.mixed_tasks) == (2, 1)
    (task,) = summary.least_consistent
    assert task.task_key == "mock/base/0" and (task.attempts, task.successes) == (3, 2)
    assert task.flip_rate == 2 / 3
    assert task.first_divergence is not None
    assert (task.first_divergence.turn, task.first_divergence.passing_attempt) == (3, 1)
    assert task.first_divergence.failing_attempt == 2
    assert task.attempts_compared == 3
    assert summary.mean_flip_rate == (2 / 3 + 0.0) / 2


def test_unreadable_files_leave_turns_unknown_and_never_raise(tmp_path: Path) -> None:
    outside = tmp_path / "outside.jsonl"
    outside.write_text(json.dumps(_call("x")) + "\n", encoding="utf-8")
    run_dir = tmp_path / "run"
    (run_dir / "trajectories").mkdir(parents=True)
    missing, linked, long_line, not_json, other = (_attempt(0, n, n % 2 == 0) for n in range(1, 6))
    assert linked.trajectory_file and long_line.trajectory_file and not_json.trajectory_file
    os.symlink(outside, run_dir / linked.trajectory_file)
    (run_dir / long_line.trajectory_file).write_bytes(b'{"role": "assistant", "content": "' + b"x" * (2 << 20))
    (run_dir / not_json.trajectory_file).write_text("{not json\n", encoding="utf-8")
    _write(run_dir, _attempt(0, 1, True), [GREETING])  # written for attempt 1: its header names another attempt
    assert other.trajectory_file
    os.replace(run_dir / "trajectories/mock-base-0000-attempt01.jsonl", run_dir / other.trajectory_file)
    for attempt in (missing, linked, long_line, not_json, other):
        assert attempt_turns(run_dir, attempt) is None
    summary = battle_consistency([missing, linked, long_line, not_json, other], run_dir)
    assert summary is not None
    (task,) = summary.least_consistent
    assert task.attempts_compared == 0 and task.first_divergence is None


def test_without_a_run_directory_flip_rates_remain() -> None:
    summary = battle_consistency([_attempt(0, 1, True), _attempt(0, 2, False)], None)
    assert summary is not None and summary.least_consistent[0].flip_rate == 1.0
    assert summary.least_consistent[0].first_divergence is None


def test_k_of_one_has_no_consistency(tmp_path: Path) -> None:
    assert battle_consistency([_attempt(0, 1, True), _attempt(1, 1, False)], tmp_path) is None


def test_summary_json_round_trip_and_old_results_without_the_key(tmp_path: Path) -> None:
    attempts = [_attempt(0, 1, True), _attempt(0, 2, False)]
    result = _result(attempts, k=2)
    assert "consistency" not in result.model_dump(mode="json")  # old results read and write as before
    result.consistency = battle_consistency(attempts, tmp_path)
    dumped = result.model_dump(mode="json")
    assert dumped["consistency"]["least_consistent"][0]["flip_rate"] == 1.0
    assert BattleResult.model_validate_json(result.model_dump_json()) == result


def test_summary_md_lists_the_least_consistent_tasks_with_the_link_hint(tmp_path: Path) -> None:
    attempts = [_attempt(i, n, n != 2 or i % 5 == 0) for i in range(MARKDOWN_TASKS + 5) for n in (1, 2)]
    result = _result(attempts, k=2)
    assert consistency_markdown(result) == []
    result.consistency = battle_consistency(attempts, tmp_path)
    markdown = render_markdown(result)
    section = markdown.split("## Consistency across attempts", 1)[1].split("## Per task", 1)[0]
    assert "/ui/battles/consistency-run/tasks/TASK_KEY" in section
    assert section.count("| mock/base/") == MARKDOWN_TASKS
    assert "unknown (trajectories not available)" in section
    assert "more task(s) with mixed outcomes" in section

"""A battle's ``consistency`` (summary.json): per task, the flip rate of its outcomes and the first turn where its
passing and failing attempts part, from the attempts' trajectory files (green_agent/engine/divergence.py defines
both).

Blocking (it reads the trajectory files of the run directory): the battle calls it from the thread that assembles
its result. A trajectory file is the run directory's, but what it holds came from the agent under test: it is read
through :func:`green_agent.run_files.open_run_file` (regular file inside the run, bounded), line by line, and a
missing, refused or unreadable file leaves that attempt's turns unknown (not compared), never an exception.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from green_agent.engine.divergence import (
    MAX_TURNS,
    ConsistencySummary,
    TaskConsistency,
    first_divergence,
    flip_rate,
    summarize_consistency,
    turn_signatures,
)
from green_agent.engine.results import AttemptResult, BattleResult
from green_agent.run_files import MAX_TRAJECTORY_FILE_BYTES, RunFileRefused, open_run_file

__all__ = ["attempt_turns", "battle_consistency", "consistency_markdown", "task_consistency"]

log = logging.getLogger(__name__)

MAX_LINE_BYTES = 1024 * 1024
"""Trajectory lines longer than this are not parsed (the engine writes lines of at most 256 Ki characters): such a
line makes the attempt's turns unknown."""


def attempt_turns(run_dir: Path, attempt: AttemptResult) -> list[str] | None:
    """The turn signatures of an attempt from its trajectory file; None when they cannot be known."""
    if not attempt.trajectory_file:
        return None
    relative = PurePosixPath(attempt.trajectory_file.replace("\\", "/"))
    messages: list[object] = []
    agent_messages = 0
    try:
        with open_run_file(run_dir, relative, max_bytes=MAX_TRAJECTORY_FILE_BYTES) as handle:
            for number, line in enumerate(iter(lambda: handle.readline(MAX_LINE_BYTES + 1), b"")):
                if len(line) > MAX_LINE_BYTES:
                    raise ValueError(f"line {number + 1} is longer than {MAX_LINE_BYTES} bytes")
                if not line.strip():
                    continue
                record = json.loads(line)
                if number == 0 and isinstance(record, dict) and "attempt" in record and "role" not in record:
                    header = record["attempt"] if isinstance(record["attempt"], dict) else {}
                    if header.get("task_id") != attempt.task_id or header.get("attempt") != attempt.attempt:
                        raise ValueError("its header names another attempt")
                    continue
                if isinstance(record, dict) and record.get("role") == "assistant":
                    messages.append(record)
                    agent_messages += 1
                    if agent_messages >= MAX_TURNS:
                        break
    except (OSError, RunFileRefused, ValueError, RecursionError) as error:
        log.debug("attempt %s/%s: turns unknown (%s)", attempt.task_key, attempt.attempt, error)
        return None
    return turn_signatures(messages)


def task_consistency(attempts: list[AttemptResult], turns: dict[int, list[str]]) -> TaskConsistency:
    """One task's consistency from its attempts and the turns known of them (by attempt number)."""
    counted = {a.attempt: a.trial_outcome for a in attempts if a.trial_outcome is not None}
    passed = {number: bool(outcome) for number, outcome in counted.items()}
    known = {number: turns[number] for number in passed if number in turns}
    return TaskConsistency(
        task_key=attempts[0].task_key,
        task_id=attempts[0].task_id,
        attempts=len(passed),
        successes=sum(1 for ok in passed.values() if ok),
        flip_rate=flip_rate(list(passed.values())),
        first_divergence=first_divergence(known, passed),
        attempts_compared=len(known),
    )


def battle_consistency(attempts: Iterable[AttemptResult], run_dir: Path | None) -> ConsistencySummary | None:
    """The battle's consistency summary; None when no task has two counted attempts. Turns are read only for tasks
    with both a success and a failure (the only ones a divergence exists for), and only when there is a run
    directory (without one, the flip rates are still there and no divergence is given)."""
    by_task: dict[str, list[AttemptResult]] = {}
    for attempt in attempts:
        by_task.setdefault(attempt.task_key, []).append(attempt)
    tasks = []
    for task_attempts in by_task.values():
        outcomes = {a.trial_outcome for a in task_attempts if a.trial_outcome is not None}
        turns: dict[int, list[str]] = {}
        if run_dir is not None and outcomes == {True, False}:
            for attempt in task_attempts:
                if attempt.trial_outcome is not None and (known := attempt_turns(run_dir, attempt)) is not None:
                    turns[attempt.attempt] = known
        tasks.append(task_consistency(sorted(task_attempts, key=lambda a: a.attempt), turns))
    return summarize_consistency(tasks)


MARKDOWN_TASKS = 10
"""Least consistent tasks listed in summary.md (summary.json lists up to ``MAX_LISTED_TASKS``)."""


def _divergence_text(task: TaskConsistency) -> str:
    divergence = task.first_divergence
    if divergence is not None:
        return f"turn {divergence.turn} (#{divergence.passing_attempt} passes, #{divergence.failing_attempt} fails)"
    if task.attempts_compared < 2:
        return "unknown (trajectories not available)"
    return "none: the same actions (parted on what was said or on the user)"


def consistency_markdown(result: BattleResult) -> list[str]:
    """summary.md's "Consistency" section: the least consistent tasks with their flip rate and first divergence,
    and where to see their attempts side by side. Empty when the result has no ``consistency`` (k = 1)."""
    summary = result.consistency
    if summary is None:
        return []
    mean = "n/a" if summary.mean_flip_rate is None else f"{summary.mean_flip_rate:.3f}"
    lines = [
        "## Consistency across attempts",
        "",
        f"- {summary.mixed_tasks} of {summary.tasks} tasks (with at least 2 counted attempts) have both successes and "
        f"failures; mean flip rate {mean} (flip rate: the share of a task's pairs of attempts whose outcomes differ; "
        'docs/metrics.md, "Consistency")',
    ]
    if not summary.least_consistent:
        return [*lines, ""]
    lines += [
        "- first divergence: the first turn (the agent's n-th message) where a passing and a failing attempt took "
        "different actions (tool calls and arguments; replies count as the same action whatever their wording)",
        f"- side by side: the battle page's task view, `/ui/battles/{result.battle_id}/tasks/TASK_KEY` (`arena view "
        "RUN_DIR`, or the backend the battle reported to)",
        "",
        "| task | successes | flip rate | first divergence |",
        "|---|---|---|---|",
    ]
    for task in summary.least_consistent[:MARKDOWN_TASKS]:
        lines.append(
            f"| {task.task_key} | {task.successes}/{task.attempts} | {task.flip_rate or 0.0:.3f} | "
            f"{_divergence_text(task)} |"
        )
    more = len(summary.least_consistent) - MARKDOWN_TASKS + summary.not_listed
    if more > 0:
        lines += ["", f"{more} more task(s) with mixed outcomes: summary.json's `consistency` lists up to 100."]
    return [*lines, ""]

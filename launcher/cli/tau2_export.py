"""``arena export --format tau2``: a finished battle as tau2's own results file (tau2's ``Results`` model).

Why: tau2's tools (``tau2 view --file``, ``tau2.metrics.agent_metrics.compute_metrics``, tau2-based notebooks) read
that file and nothing else, so a battle in this shape can be inspected and re-scored with the benchmark's own code,
next to runs made with tau2's runner.

What maps to what:

* ``info``: the domain's ``EnvironmentInfo`` (name and policy, as tau2's runner records it: no tool definitions),
  the white agent's URL as the agent ``implementation``, the simulated user's kind / model / sampling settings,
  ``num_trials`` = k, ``max_steps`` = the battle's (Arena counts agent actions only; tau2 counts every turn),
  ``seed`` = the battle's task-selection seed. Arena does not know tau2's git commit: ``git_commit`` is "unknown".
* ``tasks``: the tau2 ``Task`` of every task played, loaded from the installed package data exactly as the battle
  loaded it (:func:`green_agent.engine.tau.tasks.load_tasks`: index ``task_index`` of ``domain``/``split``).
* ``simulations``: one ``SimulationRun`` per counted attempt: ``trial`` = attempt - 1, the conversation from the
  attempt's trajectory file (those lines already are tau2 message dumps), ``reward_info`` = tau2's own RewardInfo
  (kept whole in ``breakdown.raw``) or, for attempts stopped before tau2 could score them, the RewardInfo tau2's
  evaluator gives a premature termination (reward 0, no basis). Arena's outcome, failure category, fault author and
  termination reason ride along in ``reward_info.info["arena"]``, the only free-form field tau2 has, with the
  battle's fingerprint for that attempt (``fingerprint``: tau2 distribution and version, evaluator hash, the task's
  hash, the user simulator; absent for results written before fingerprints existed). tau2's ``info`` has no field
  for it (its ``git_commit`` stays "unknown").
* ``start_time``: the first message's timestamp (the environment's opening greeting; the battle's start when the
  trajectory is missing); ``end_time`` = start + ``duration_s``. Costs are unknown (``None``).

Termination reasons: Arena uses tau2's names plus ``deadline`` (the attempt's time limit fired). tau2 has no time
limit; its closest reason is ``max_steps`` (the conversation ran out of its budget and is scored 0 without checks,
as Arena scores a deadline), so ``deadline`` is written as ``max_steps`` and the original kept in the info above.

Infrastructure errors (outcome ``infra_error``: the simulated user, the environment or the harness failed) are *left
out* and counted in a warning. tau2 has no field for "not the agent's fault": its ``skipped`` flag comes with reward
0, and ``compute_metrics`` counts every simulation (``skipped`` included) as a trial, so an included infra error
would be a failure in tau2's pass^k, while Arena excludes it from n. Left out, tau2's pass^k over the file is the
same as Arena's for every k up to the smallest number of counted attempts of a task (tau2 reports only those k).

Multi-domain battles: tau2's task ids repeat across domains ("0" in retail and in airline), and tau2 keys a results
file by task id alone, so those ids are written as ``<domain>/<task id>`` (in ``tasks`` and ``simulations``) and
the environment is named ``retail+airline`` with both policies.

Hostile content: trajectory paths must stay inside the run directory, files over :data:`MAX_TRAJECTORY_BYTES` are
not read, lines that are not tau2 messages are dropped; each case is exported with what is left (possibly no
messages) and counted in a warning. A task that the installed tau2 does not have stops the export: without it
tau2's own tools fail on the file.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import TypeAdapter, ValidationError

from green_agent.engine.config import ConfigError
from green_agent.engine.fingerprint import Fingerprint
from green_agent.engine.results import AttemptResult, BattleResult
from green_agent.engine.tau.environment import fresh_environment
from green_agent.engine.tau.quiet import quiet_tau2
from green_agent.engine.tau.tasks import load_tasks
from green_agent.run_files import RunFileRefused, read_run_file
from launcher.errors import ExportError

quiet_tau2()

from tau2.config import DEFAULT_MAX_ERRORS  # noqa: E402  (quiet_tau2 must run first)
from tau2.data_model.message import Message  # noqa: E402
from tau2.data_model.simulation import (  # noqa: E402
    AgentInfo,
    Info,
    Results,
    RewardInfo,
    SimulationRun,
    TerminationReason,
    UserInfo,
)
from tau2.environment.environment import EnvironmentInfo  # noqa: E402

MAX_TRAJECTORY_BYTES = 64 * 1024 * 1024
"""Trajectory files larger than this are not read (the attempt is exported without messages, with a warning). The
green agent cuts every line at 256 KiB, so a real file is far smaller; a bigger one was not written by it."""

TERMINATIONS: dict[str, TerminationReason] = {
    "user_stop": TerminationReason.USER_STOP,
    "agent_stop": TerminationReason.AGENT_STOP,
    "max_steps": TerminationReason.MAX_STEPS,
    "deadline": TerminationReason.MAX_STEPS,
    "agent_error": TerminationReason.AGENT_ERROR,
    "user_error": TerminationReason.USER_ERROR,
    "too_many_errors": TerminationReason.TOO_MANY_ERRORS,
}
"""Arena's termination reason -> tau2's (``deadline``: see the module docstring; anything else unknown: agent_error)."""

_MESSAGE: TypeAdapter[Any] = TypeAdapter(Message)


@dataclass(frozen=True)
class Tau2Export:
    """The tau2 results JSON plus what the export had to leave out or could not read (for stderr)."""

    text: str
    simulations: int
    skipped_infra: int
    warnings: tuple[str, ...] = ()


EMPTY = "exported with empty messages"


@dataclass
class _Problems:
    """What could not be exported as it was, per (consequence, cause): one warning line each, not one per attempt."""

    by_kind: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    dropped_lines: int = 0

    def add(self, cause: str, label: str, consequence: str = EMPTY) -> None:
        self.by_kind.setdefault((consequence, cause), []).append(label)

    def warnings(self, total: int) -> list[str]:
        lines = []
        for (consequence, cause), labels in self.by_kind.items():
            shown = ", ".join(labels[:5]) + (", ..." if len(labels) > 5 else "")
            lines.append(f"{len(labels)} of {total} attempts {consequence}: {cause} ({shown})")
        if self.dropped_lines:
            lines.append(f"{self.dropped_lines} trajectory lines were not tau2 messages and were dropped")
        return lines


def _label(attempt: AttemptResult) -> str:
    return f"{attempt.task_key}#{attempt.attempt}"


def _read_trajectory_file(run_dir: Path, relative: str, limit: int) -> bytes:
    """The trajectory's bytes, read as run-directory input (:mod:`green_agent.run_files`: a regular file inside the
    run directory, symlinks out, FIFOs and devices refused, at most ``limit`` bytes); OSError otherwise."""
    return read_run_file(run_dir, PurePosixPath(relative.replace("\\", "/")), max_bytes=limit)


def _refusal(error: RunFileRefused, max_bytes: int) -> str:
    """A refused trajectory as a problem (grouped by cause in the warnings, so the cause must not name the file)."""
    if error.reason == "outside":
        return "trajectory path outside the run directory"
    if error.reason == "too_large":
        return f"trajectory file over {max_bytes // (1024 * 1024)} MiB, not read"
    return "trajectory file not a regular file, not read"


def read_messages(
    run_dir: Path, attempt: AttemptResult, problems: _Problems, *, max_bytes: int = MAX_TRAJECTORY_BYTES
) -> list[Any]:
    """The attempt's conversation as tau2 messages; ``[]`` (and a problem noted) when it cannot be read.

    The file's first line is Arena's header (``{"attempt": ...}``); it must name this attempt, so a file swapped
    between attempts is not shown as another attempt's conversation.
    """
    label = _label(attempt)
    if not attempt.trajectory_file:
        problems.add("no trajectory file recorded", label)
        return []
    try:
        data = _read_trajectory_file(run_dir, attempt.trajectory_file, max_bytes)
    except FileNotFoundError:
        problems.add("trajectory file missing", label)
        return []
    except RunFileRefused as error:
        problems.add(_refusal(error, max_bytes), label)
        return []
    except OSError:
        problems.add("trajectory file unreadable", label)
        return []
    messages: list[Any] = []
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines()):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            problems.dropped_lines += 1
            continue
        if number == 0 and isinstance(record, dict) and "attempt" in record and "role" not in record:
            header = record["attempt"] if isinstance(record["attempt"], dict) else {}
            if header.get("task_id") != attempt.task_id or header.get("attempt") != attempt.attempt:
                problems.add("trajectory header names another attempt", label)
                return []
            continue
        try:
            messages.append(_MESSAGE.validate_python(record))
        except (ValidationError, RecursionError):
            problems.dropped_lines += 1
    return messages


def _start_time(messages: list[Any], fallback: str) -> datetime:
    """When the attempt started: its first message's timestamp (the opening greeting), else ``fallback`` (the
    battle's start; Arena records no per-attempt start), else the epoch (a hand-edited summary)."""
    first = getattr(messages[0], "timestamp", None) if messages else None
    for candidate in (first, fallback):
        if isinstance(candidate, str):
            try:
                return datetime.fromisoformat(candidate)
            except ValueError:
                continue
    return datetime.fromisoformat("1970-01-01T00:00:00+00:00")


def _fingerprint_info(fingerprint: Fingerprint, attempt: AttemptResult) -> dict[str, Any]:
    """The part of the battle's fingerprint one attempt was scored under."""
    domain = fingerprint.domains.get(attempt.domain)
    return {
        "tau2": f"{fingerprint.tau2.distribution} {fingerprint.tau2.version}",
        "evaluator": fingerprint.tau2.evaluator,
        "task": fingerprint.tasks.get(attempt.task_key),
        "domain": domain.model_dump(mode="json") if domain else None,
        "user_simulator": fingerprint.user_simulator.model_dump(mode="json"),
    }


def _arena_info(attempt: AttemptResult, fingerprint: Fingerprint | None = None) -> dict[str, Any]:
    """What Arena knows about the attempt that tau2 has no field for (kept in ``reward_info.info["arena"]``)."""
    failure = attempt.failure
    extra = {"fingerprint": _fingerprint_info(fingerprint, attempt)} if fingerprint is not None else {}
    return {
        "battle_id": attempt.battle_id,
        "task_key": attempt.task_key,
        "attempt": attempt.attempt,
        "outcome": attempt.outcome,
        "termination_reason": str(attempt.termination_reason),
        "failure_category": failure.category.value if failure else None,
        "fault_author": failure.fault_author.value if failure else None,
        "failure_detail": failure.detail if failure else None,
        "steps": attempt.steps,
        **extra,
    }


def reward_info(attempt: AttemptResult, problems: _Problems, fingerprint: Fingerprint | None = None) -> Any:
    """tau2's RewardInfo for a counted attempt (``attempt.reward`` is not None).

    ``breakdown.raw`` is tau2's own RewardInfo JSON when tau2 scored the attempt; attempts stopped before scoring
    (early stop, unscored termination) get what tau2's evaluator returns for a premature termination.
    """
    raw = attempt.breakdown.raw if attempt.breakdown is not None else {}
    info: Any = None
    if "reward" in raw:
        try:
            info = RewardInfo.model_validate(raw)
        except ValidationError:
            problems.add("tau2's reward info unreadable", _label(attempt), "exported with the reward alone")
    if info is None:
        note = raw.get("note") or (
            f"Simulation terminated prematurely. Termination reason: {attempt.termination_reason}"
        )
        info = RewardInfo(reward=float(attempt.reward or 0.0), reward_basis=None, info={"note": str(note)})
    if info.reward != attempt.reward:  # Arena's number is the one its summary counted
        info.reward = float(attempt.reward or 0.0)
    info.info = {**(info.info or {}), "arena": _arena_info(attempt, fingerprint)}
    return info


def _task_for(attempt: AttemptResult) -> Any:
    """The tau2 Task the attempt played; :class:`ExportError` when the installed tau2 does not have it."""
    try:
        tasks = load_tasks(attempt.domain, attempt.split)
    except ConfigError as error:
        raise ExportError(f"{attempt.task_key}: {error}") from None
    if 0 <= attempt.task_index < len(tasks) and tasks[attempt.task_index].id == attempt.task_id:
        return tasks[attempt.task_index]
    for task in tasks:  # the split's order changed: the id still names the task
        if task.id == attempt.task_id:
            return task
    raise ExportError(
        f"{attempt.task_key}: task id {attempt.task_id!r} is not in the installed tau2's "
        f"{attempt.domain}/{attempt.split or '-'} tasks (was the battle run with another tau2 version?)"
    )


def _environment_info(domains: list[str]) -> Any:
    """tau2's EnvironmentInfo without tool definitions (as its runner records it); several domains joined."""
    infos = [fresh_environment(domain).get_info(include_tool_info=False) for domain in domains]
    if len(infos) == 1:
        return infos[0]
    policy = "\n\n".join(f"# {domain} policy\n\n{info.policy}" for domain, info in zip(domains, infos, strict=True))
    return EnvironmentInfo(domain_name="+".join(domains), policy=policy)


def _info(result: BattleResult, domains: list[str]) -> Any:
    user = result.config.user_simulator
    return Info(
        git_commit="unknown",
        num_trials=result.config.k,
        max_steps=result.config.max_steps,
        max_errors=DEFAULT_MAX_ERRORS,
        user_info=UserInfo(
            implementation=f"arena-{user.kind}-user",
            llm=user.model if user.kind == "llm" else None,
            llm_args={"temperature": user.temperature, "seed": user.seed} if user.kind == "llm" else None,
        ),
        agent_info=AgentInfo(implementation=result.white_agent_url),
        environment_info=_environment_info(domains),
        seed=result.config.seed,
    )


def build_results(result: BattleResult, run_dir: Path, *, max_bytes: int = MAX_TRAJECTORY_BYTES) -> Tau2Export:
    """The battle as tau2 ``Results`` JSON (see the module docstring); :class:`ExportError` for a missing task."""
    # A counted attempt always has a reward (the engine sets it); one without would crash tau2's to_df(): left out.
    counted = [a for a in result.attempts if a.trial_outcome is not None and a.reward is not None]
    domains = list(dict.fromkeys(attempt.domain for attempt in result.attempts)) or result.config.domains
    prefixed = len(domains) > 1

    def public_id(attempt: AttemptResult) -> str:
        return f"{attempt.domain}/{attempt.task_id}" if prefixed else attempt.task_id

    tasks: dict[str, Any] = {}
    for attempt in result.attempts:
        key = public_id(attempt)
        if key not in tasks:
            task = _task_for(attempt)
            tasks[key] = task.model_copy(update={"id": key}) if prefixed else task
    problems = _Problems()
    simulations = []
    for attempt in counted:
        messages = read_messages(run_dir, attempt, problems, max_bytes=max_bytes)
        start = _start_time(messages, result.started_at)
        reason = TERMINATIONS.get(str(attempt.termination_reason))
        if reason is None:
            problems.add("termination reason unknown to tau2", _label(attempt), "written as agent_error")
            reason = TerminationReason.AGENT_ERROR
        simulations.append(
            SimulationRun(
                id=f"{result.battle_id}/{attempt.task_key}/{attempt.attempt}",
                task_id=public_id(attempt),
                timestamp=start.isoformat(),
                start_time=start.isoformat(),
                end_time=(start + timedelta(seconds=attempt.duration_s)).isoformat(),
                duration=attempt.duration_s,
                termination_reason=reason,
                reward_info=reward_info(attempt, problems, result.fingerprint),
                messages=messages,
                trial=attempt.attempt - 1,
                seed=result.config.user_simulator.seed,
            )
        )
    results = Results(
        timestamp=result.started_at,
        info=_info(result, domains),
        tasks=list(tasks.values()),
        simulations=simulations,
    )
    skipped = len(result.attempts) - len(counted)
    warnings = problems.warnings(len(counted))
    if skipped:
        reasons = Counter(
            attempt.failure.category.value if attempt.failure else "no reward"
            for attempt in result.attempts
            if attempt.trial_outcome is None or attempt.reward is None
        )
        shown = ", ".join(f"{name} x{count}" for name, count in sorted(reasons.items()))
        warnings.insert(
            0,
            f"{skipped} infrastructure-error attempts left out ({shown}): tau2 would count them as failures, "
            "Arena excludes them from n",
        )
    if not simulations:
        warnings.append("no counted attempt: the file opens in tau2 view, but tau2's metrics need at least one")
    return Tau2Export(results.model_dump_json(indent=4) + "\n", len(simulations), skipped, tuple(warnings))

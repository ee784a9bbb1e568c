"""A battle's certification (issue 28): the seeded task order, the in-order observations, the stop, the summary.

:class:`CertifyTracker` is owned by one :class:`~green_agent.engine.battle.Battle` (no shared state). The battle
schedules its tasks in :attr:`CertifyTracker.order`, calls :meth:`CertifyTracker.decided` after each recorded
attempt (start nothing new once it is True) and puts :meth:`CertifyTracker.certification` in its result. The
statistics are :mod:`green_agent.statistics.certification`.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from green_agent.engine.config import BattleConfig, CertifyConfig, ConfigError
from green_agent.engine.results import AttemptResult, BattleResult
from green_agent.statistics.certification import (
    Certification,
    CertifyDecision,
    build_certification,
    certification_order,
    ordered_observations,
)
from green_agent.statistics.certify_design import REASONS, certify_design
from green_agent.statistics.certify_stop import first_failure_summary, stops_within_task, task_stop_record
from green_agent.statistics.sequential_binomial import BUDGET
from green_agent.statistics.summary import TrialsSummary


class CertifyTracker:
    """The certification state of one battle: order, baseline, observations so far (incremental)."""

    def __init__(self, config: BattleConfig, certify: CertifyConfig, task_keys: Sequence[str], attempts_total: int):
        self._config = config
        self._certify = certify
        keys = certification_order(task_keys, config.seed)
        self._baseline: dict[str, float] = {}
        if certify.compare is not None:
            if certify.baseline_values is None:
                raise ConfigError("certify.baseline_values: a comparison needs the baseline's per-task values")
            self._baseline = dict(certify.baseline_values)
            keys = [key for key in keys if key in self._baseline]
            if not keys:
                raise ConfigError("certify.baseline_values: the baseline has none of this battle's tasks")
        budget = attempts_total // max(1, config.k)
        if certify.max_attempts is not None:
            budget = min(budget, certify.max_attempts // config.k)
        self.order: list[str] = keys[:budget]
        """The seeded order within the budget (whole tasks): the sequence's order, recorded in run.json."""
        self.design = certify_design(
            threshold=certify.decision_threshold,
            confidence=certify.confidence,
            budget=len(self.order),
            binary=certify.compare is None and certify.j == config.k,
            comparison=certify.compare is not None,
        )
        """The sequential design: chosen from the config alone, so a resume makes the same looks."""
        self.stops_within_task = stops_within_task(config.k, certify.j, certify.compare is not None)
        """A pass^k claim: a task's attempts run in sequence and stop at its first failure (its pass^k is then 0;
        :mod:`green_agent.statistics.certify_stop`, scheduled by :mod:`green_agent.engine.certify_schedule`)."""
        self._outcomes: dict[str, list[bool | None]] = {}
        self._seen = 0
        self._prefix: list[float] = []
        self._checked = -1
        self._stopped = False
        self._lock = threading.Lock()
        """state() runs on the event loop (decided) and in the summary's thread (certification): one at a time."""

    @property
    def k(self) -> int:
        """Attempts per task of the battle."""
        return self._config.k

    def state(self, finished: Sequence[AttemptResult]) -> tuple[list[float], str | None]:
        """The observations in the sequence and the task it waits for. ``finished`` only ever grows (the battle's
        list, or a copy of a prefix of it), and a task's complete block never changes, so each call costs O(new
        attempts)."""
        with self._lock:
            for a in finished[self._seen :]:
                self._outcomes.setdefault(a.task_key, []).append(a.trial_outcome)
            self._seen = max(self._seen, len(finished))
            rest = self.order[len(self._prefix) :]
            more, waiting = ordered_observations(
                rest, self._outcomes, self._config.k, self._certify.j, stop_at_failure=self.stops_within_task
            )
            self._prefix.extend(more)
            values = list(self._prefix)
        if self._certify.compare is not None:  # paired difference d in [-1, 1] as (d + 1) / 2 in [0, 1]
            base = self._baseline
            values = [(v - base[key] + 1.0) / 2.0 for v, key in zip(values, self.order, strict=False)]
        return values, waiting

    def decided(self, finished: Sequence[AttemptResult]) -> bool:
        """Certified, refuted, stopped for futility, or every budgeted task in the sequence: start nothing new."""
        values, waiting = self.state(finished)
        if waiting is None:
            return True
        if len(values) != self._checked:  # the decision changes only when an observation enters
            _, _, reason = self.design.decisions(np.asarray([values], dtype=np.float64))
            self._checked, self._stopped = len(values), int(reason[0]) != BUDGET
        return self._stopped

    def certification(self, finished: Sequence[AttemptResult]) -> Certification:
        """The summary's ``certification``: the sequence at the stop (tasks that attempts in flight completed after
        it are in the summary, not in the sequence), or at the end of the budget (inconclusive)."""
        certify = self._certify
        values, waiting = self.state(finished)
        code, used, reason = self.design.decisions(np.asarray([values], dtype=np.float64))
        decision: CertifyDecision = "certified" if code[0] == 1 else "refuted" if code[0] == -1 else "inconclusive"
        if int(reason[0]) != BUDGET:  # decided or futile: the sequence at the stop (later tasks are in the summary)
            values, waiting = values[: int(used[0])], None
        stop = REASONS[int(reason[0])] if int(reason[0]) != BUDGET or waiting is None else "budget"
        sequence = self.design.sequence(np.asarray(values, dtype=np.float64)) if values else None
        built = build_certification(
            claim=certify.claim,
            j=certify.j,
            threshold=certify.decision_threshold,
            confidence=certify.confidence,
            values=values,
            decision=decision,
            tasks_budget=len(self.order),
            attempts_used=len(finished),
            attempts_fixed_design=len(self.order) * self._config.k,
            order_seed=self._config.seed,
            order=self.order,
            waiting_for=waiting,
            baseline=certify.baseline if certify.compare is not None else None,
            sequence=sequence,
            method=self.design.method,
            method_note=self.design.description,
            stop_reason=stop,
        )
        if not self.stops_within_task:
            return built
        return built.model_copy(update={"task_stop": task_stop_record(by_attempt(finished), self._config.k)})

    def summarize(
        self, trials: dict[str, list[bool | None]], finished: Sequence[AttemptResult], seed: int
    ) -> TrialsSummary | None:
        """The summary of a battle whose tasks stop at their first failure (pass^j from each task's leading passes,
        see :func:`~green_agent.statistics.certify_stop.first_failure_summary`); None for any other battle (the
        usual summary applies). ``trials``: task key -> outcomes in attempt order, of the ``finished`` attempts."""
        return _first_failure_summary(trials, finished, self._config.k, seed) if self.stops_within_task else None


def stopped_summary(
    config: BattleConfig, trials: dict[str, list[bool | None]], finished: Sequence[AttemptResult]
) -> TrialsSummary | None:
    """The summary of a battle with ``config`` whose tasks stopped at their first failure (a pass^k certify claim),
    as :meth:`CertifyTracker.summarize` makes it, for a reader that has the attempts but no tracker (``arena
    regrade``); None for any other battle (the usual summary applies)."""
    return _first_failure_summary(trials, finished, config.k, config.seed) if stops_each_task(config) else None


def stops_each_task(config: BattleConfig) -> bool:
    """Whether a battle with ``config`` certifies a pass^k claim, so each task stopped at its first failure."""
    certify = config.certify
    return certify is not None and stops_within_task(config.k, certify.j, certify.compare is not None)


def _first_failure_summary(
    trials: dict[str, list[bool | None]], finished: Sequence[AttemptResult], k: int, seed: int
) -> TrialsSummary:
    note = task_stop_record(by_attempt(finished), k).note
    return first_failure_summary(trials, k, seed, note)


def by_attempt(finished: Sequence[AttemptResult]) -> dict[str, dict[int, bool | None]]:
    """Task key -> attempt number -> outcome of the recorded attempts."""
    out: dict[str, dict[int, bool | None]] = {}
    for result in finished:
        out.setdefault(result.task_key, {})[result.attempt] = result.trial_outcome
    return out


def per_attempt_refusal(result: BattleResult, side: str) -> str | None:
    """Why a per-attempt comparison (``arena compare``, MCP ``compare_runs``) must not read ``result``: a pass^k
    certify battle stopped each task at its first failure, so the mean over the attempts run is biased and a stopped
    task would drop out of pass^j above its attempts. None for any other battle."""
    certify = result.config.certify
    if certify is None or not stops_each_task(result.config):
        return None
    return (
        f"{side} (battle {result.battle_id}) is a certify {certify.claim} battle that stopped each task at its first "
        "failure: its attempts are not a fixed design, and pairing them attempt by attempt would give biased pass^j "
        "and pass@j; its summary's per-task pass^j (from leading passes) is unbiased, or compare a run with a fixed "
        "number of attempts per task"
    )

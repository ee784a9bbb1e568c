"""BattleResults built through the public models, the way the battle assembles them (green_agent.engine.battle)."""

from __future__ import annotations

from collections import Counter

from green_agent.engine.config import BattleConfig
from green_agent.engine.results import (
    AttemptResult,
    BattleResult,
    Failure,
    FailureCategory,
    FaultAuthor,
    ResultStatus,
)
from green_agent.statistics import summarize_trials

OUTCOMES: dict[int, list[tuple[str, FailureCategory | None]]] = {
    3: [("success", None), ("failure", FailureCategory.FORMAT_ERROR), ("success", None), ("success", None)],
    5: [("infra_error", FailureCategory.USER_SIMULATOR_ERROR), ("failure", FailureCategory.TIMEOUT)]
    + [("success", None)] * 2,
}
"""Task index -> (outcome, failure category) per attempt: successes, agent failures and an infrastructure error."""


def battle_result(battle_id: str = "typed-1", *, status: ResultStatus = "completed") -> BattleResult:
    """Two retail tasks x k=4, with the summary computed by ``summarize_trials`` as the battle does."""
    config = BattleConfig(mode="manual", k=4, domain="retail", task_index=sorted(OUTCOMES), seed=3, calibration=True)
    attempts: list[AttemptResult] = []
    for task_index, runs in OUTCOMES.items():
        for number, (outcome, category) in enumerate(runs, start=1):
            failure = None
            if category is not None:
                author = FaultAuthor.USER_SIMULATOR if outcome == "infra_error" else FaultAuthor.WHITE_AGENT
                failure = Failure(category=category, fault_author=author, detail=f"{category.value} on purpose")
            attempts.append(
                AttemptResult(
                    battle_id=battle_id,
                    domain="retail",
                    split="test",
                    task_index=task_index,
                    task_id=str(30 + task_index),
                    attempt=number,
                    context_id=f"ctx-{task_index}-{number}",
                    outcome=outcome,
                    reward=None if outcome == "infra_error" else float(outcome == "success"),
                    steps=4 + number,
                    duration_s=0.25 * number,
                    termination_reason="user_stop",
                    failure=failure,
                    trajectory_file=f"trajectories/retail-test-{task_index}-{number}.jsonl",
                )
            )
    trials: dict[str, list[bool | None]] = {}
    for attempt in attempts:
        trials.setdefault(attempt.task_key, []).append(attempt.trial_outcome)
    failures = Counter(a.failure.category.value for a in attempts if a.failure is not None)
    return BattleResult(
        battle_id=battle_id,
        white_agent_url="http://127.0.0.1:9004",
        config=config,
        calibration=config.calibration,
        started_at="2026-11-22T00:00:00Z",
        finished_at="2026-11-22T00:00:09Z",
        duration_s=9.0,
        attempts=attempts,
        summary=summarize_trials(trials, k_max=config.k, seed=config.seed, n_bootstrap=200),
        failure_breakdown=dict(sorted(failures.items())),
        infrastructure_errors=sum(1 for a in attempts if a.outcome == "infra_error"),
        status=status,
    )

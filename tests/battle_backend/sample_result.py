"""An Arena BattleResult as the green agent posts it in a result's detail (plain JSON, as on the wire)."""

from __future__ import annotations

from typing import Any


def battle_result(battle_id: str = "b-1") -> dict[str, Any]:
    """Two tasks x 3 attempts: task 0 succeeds twice, task 1 fails once and has an infrastructure error."""
    outcomes = {
        0: ["success", "failure", "success"],
        1: ["failure", "infra_error", "success"],
    }
    attempts = []
    for task_index, runs in outcomes.items():
        for number, outcome in enumerate(runs, start=1):
            failure = None
            if outcome == "failure":
                failure = {
                    "category": "format_error",
                    "fault_author": "white_agent",
                    "detail": "no <json> block <b>x</b>",
                }
            elif outcome == "infra_error":
                failure = {"category": "user_simulator_error", "fault_author": "user_simulator", "detail": "LLM 500"}
            attempts.append(
                {
                    "battle_id": battle_id,
                    "domain": "retail",
                    "split": "test",
                    "task_index": task_index,
                    "task_id": str(task_index),
                    "attempt": number,
                    "context_id": f"ctx-{task_index}-{number}",
                    "outcome": outcome,
                    "reward": 1.0 if outcome == "success" else 0.0,
                    "failure": failure,
                }
            )
    macro = [
        {
            "j": 1,
            "pass_hat_mean": 0.667,
            "pass_hat_ci_low": 0.3,
            "pass_hat_ci_high": 0.9,
            "pass_at_mean": 0.667,
            "pass_at_ci_low": 0.3,
            "pass_at_ci_high": 0.9,
            "coverage": 2,
            "total_tasks": 2,
        },
        {
            "j": 2,
            "pass_hat_mean": 0.333,
            "pass_hat_ci_low": 0.1,
            "pass_hat_ci_high": 0.6,
            "pass_at_mean": 1.0,
            "pass_at_ci_low": 0.7,
            "pass_at_ci_high": 1.0,
            "coverage": 2,
            "total_tasks": 2,
        },
        {
            "j": 3,
            "pass_hat_mean": None,
            "pass_hat_ci_low": None,
            "pass_hat_ci_high": None,
            "pass_at_mean": None,
            "pass_at_ci_low": None,
            "pass_at_ci_high": None,
            "coverage": 1,
            "total_tasks": 2,
        },
    ]
    return {
        "battle_id": battle_id,
        "white_agent_url": "http://127.0.0.1:9004",
        "config": {"k": 3},
        "started_at": "2026-11-22T00:00:00Z",
        "finished_at": "2026-11-22T00:01:00Z",
        "duration_s": 60.0,
        "attempts": attempts,
        "summary": {"macro": macro},
        "failure_breakdown": {"format_error": 2},
        "infrastructure_errors": 1,
        "status": "completed",
    }

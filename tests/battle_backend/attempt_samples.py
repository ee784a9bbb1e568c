"""Progress events of an Arena battle as its green agent posts them (docs/design/progress-events.md, sections 1 and 2):
``battle_started`` and ``attempt_finished`` details with a failure explanation and a trajectory."""

from __future__ import annotations

from typing import Any

XSS_FLAG = "window.__pwned"
XSS_TOOL_RESULT = '{"note": "</div><script>window.__pwned = 1</script><img src=x onerror=\\"window.__pwned = 2\\">"}'
XSS_AGENT_TEXT = 'Sure! <script>window.__pwned = 3</script><img src=x onerror="window.__pwned = 4"> done'
XSS_ARGUMENT = '<svg onload="window.__pwned = 5">'
XSS_VALUE = '"<img src=x onerror=window.__pwned=6>"'


def explanation(*, hostile: bool = False) -> dict[str, Any]:
    """A database difference naming the field, a missing string, a missed action, a failed assertion."""
    return {
        "summary": "database: 1 field differs (orders #W2378156 status)",
        "db": {
            "differences": [
                {
                    "table": "orders",
                    "record": "#W2378156",
                    "field": "status",
                    "expected": '"cancelled"',
                    "actual": XSS_VALUE if hostile else '"pending"',
                    "change": "changed",
                }
            ],
            "total": 1,
            "truncated": False,
        },
        "communicate": {"missing": ["your refund of $54.04 is on its way"]},
        "actions": [
            {
                "name": "cancel_pending_order",
                "arguments": {"order_id": "#W2378156", "reason": "no longer needed"},
                "requestor": "assistant",
                "closest": {
                    "name": "cancel_pending_order",
                    "arguments": {"order_id": "#W2378156-x", "reason": "no longer needed"},
                    "step": 7,
                },
                "differing_arguments": ["order_id"],
            }
        ],
        "env_assertions": [
            {"function": "assert_mobile_data_status", "arguments": {"expected_status": True}, "message": None}
        ],
    }


def trajectory(*, hostile: bool = False) -> dict[str, Any]:
    """Five messages: greeting, user request, a tool call, its result, the agent's answer."""
    messages = [
        {"step": 0, "role": "assistant", "content": "Hi! How can I help?", "latency_s": None},
        {"step": 1, "role": "user", "content": "Please cancel order #W2378156.", "latency_s": 1.25},
        {
            "step": 2,
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_001",
                    "name": "get_order_details",
                    "arguments": {"order_id": XSS_ARGUMENT if hostile else "#W2378156"},
                    "requestor": "assistant",
                }
            ],
            "latency_s": 0.412,
        },
        {
            "step": 3,
            "role": "tool",
            "content": XSS_TOOL_RESULT if hostile else '{"status": "pending"}',
            "tool_call_id": "call_001",
            "error": hostile,
            "latency_s": 0.003,
        },
        {
            "step": 4,
            "role": "assistant",
            "content": XSS_AGENT_TEXT if hostile else "Your order is cancelled.",
            "latency_s": 2.5,
        },
    ]
    for message in messages:
        message.setdefault("tool_calls", None)
        message.setdefault("tool_call_id", None)
        message.setdefault("error", False)
        message["timestamp"] = f"2026-11-23T01:37:5{message['step']}.000000"
    return {
        "schema": "arena.trajectory/1",
        "messages": messages,
        "message_count": len(messages),
        "omitted_messages": 0,
        "truncated": False,
    }


def battle_started(tasks: list[str], k: int, *, calibration: bool = False) -> dict[str, Any]:
    """The ``battle_started`` detail."""
    return {
        "type": "battle_started",
        "attempts_total": len(tasks) * k,
        "resumed_attempts": 0,
        "tasks": tasks,
        "k": k,
        "calibration": calibration,
        "seed": 0,
        "mode": "tau2",
        "timestamp": "2026-11-23T01:37:00Z",
    }


def attempt_finished(
    task_key: str,
    attempt: int,
    outcome: str,
    *,
    done: int = 1,
    total: int = 4,
    hostile: bool = False,
    with_trajectory: bool = True,
) -> dict[str, Any]:
    """An ``attempt_finished`` detail; a failure carries the explanation."""
    failed = outcome == "failure"
    detail: dict[str, Any] = {
        "type": "attempt_finished",
        "task_key": task_key,
        "attempt": attempt,
        "outcome": outcome,
        "reward": 1.0 if outcome == "success" else 0.0,
        "category": "task_incomplete" if failed else ("user_simulator_error" if outcome == "infra_error" else None),
        "fault_author": "white_agent" if failed else None,
        "failure_detail": "task_incomplete: the database state differs from the goal state" if failed else None,
        "steps": 5,
        "duration_s": 3.25,
        "explanation": explanation(hostile=hostile) if failed else None,
        "trajectory_file": f"attempts/{task_key.replace('/', '_')}_{attempt}.jsonl",
        "done": done,
        "total": total,
        "timestamp": "2026-11-23T01:38:00Z",
    }
    if with_trajectory:
        detail["trajectory"] = trajectory(hostile=hostile)
    return detail


def progress_event(detail: dict[str, Any], message: str = "progress") -> dict[str, Any]:
    """The body the green agent posts for a progress event."""
    return {"is_result": False, "message": message, "reported_by": "green_agent", "detail": detail}

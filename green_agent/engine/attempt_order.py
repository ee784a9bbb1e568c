"""The order a battle starts its attempts in: longest expected first (issue 27).

A battle with more attempts than its concurrency runs in waves; started in task order, a long task that comes late
starts in the last wave and the battle waits for it alone (measured: 320 retail calibration attempts at 256 in flight
with a 2 s delay per agent turn took 1.73x ideal, the last attempt starting at 20.9 s and the longest taking ~28 s).
Started longest-expected-first (LPT, Graham's list-scheduling rule), the long attempts run in the first wave and the
short ones fill the slots they free.

The length estimate is cheap and known before the battle: the task's gold actions (each one an agent turn) plus the
turns the user is expected to take (one to open, one per action the user performs), read from tau2's task data; on
a resume, the most turns (``steps``) an attempt of the task actually took replaces it. For the replay (calibration)
agent it is exact: an attempt takes one A2A reply per gold action plus its final statement.

Only the order changes, never a number: an attempt's outcome depends on its task, its attempt number and the config
(seeds are derived from those, not from when the attempt starts), and the summary sorts attempts by task and attempt.
A certify battle keeps its seeded, recorded order (:attr:`~green_agent.engine.certify.CertifyTracker.order`): its
sequence needs the tasks in that order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from green_agent.engine.results import AttemptResult
from green_agent.engine.run_store import AttemptKey
from green_agent.engine.tau.tasks import TaskRef


def expected_turns(ref: TaskRef) -> int:
    """Agent turns an attempt of ``ref`` is expected to take: gold actions, plus the user's opening turn and one
    user turn per action the user performs (at least 1; a task without evaluation criteria counts its opening)."""
    criteria = getattr(ref.task, "evaluation_criteria", None)
    actions = list(getattr(criteria, "actions", None) or [])
    user_actions = sum(1 for action in actions if getattr(action, "requestor", "assistant") == "user")
    return 1 + len(actions) + user_actions


def observed_turns(carried: Iterable[AttemptResult]) -> dict[str, int]:
    """Per task, the most turns (A2A replies) one of its finished attempts took (a resume's better estimate)."""
    most: dict[str, int] = {}
    for result in carried:
        most[result.task_key] = max(most.get(result.task_key, 0), int(result.steps))
    return most


def attempt_order(
    refs: Sequence[TaskRef],
    k: int,
    carried: Mapping[AttemptKey, AttemptResult],
    *,
    mandated: Sequence[str] | None = None,
) -> list[tuple[TaskRef, int]]:
    """The (task, attempt number) pairs still to run, in the order they should start.

    ``mandated`` (certify's seeded order of task keys) is kept exactly, each task's k attempts as one block. Without
    it: longest expected first (see the module docstring), ties in task order; a task's attempts stay together (the
    progress display announces a task once, when its first attempt starts)."""
    if mandated is not None:
        by_key = {ref.key: ref for ref in refs}
        ordered = [by_key[key] for key in mandated]
    else:
        observed = observed_turns(carried.values())
        position = {ref.key: i for i, ref in enumerate(refs)}

        def longest_first(ref: TaskRef) -> tuple[int, int]:
            return -observed.get(ref.key, expected_turns(ref)), position[ref.key]

        ordered = sorted(refs, key=longest_first)
    return [(ref, attempt) for ref in ordered for attempt in range(1, k + 1) if (ref.key, attempt) not in carried]

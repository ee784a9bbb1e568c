"""Order-dependent per-task metrics kept from the seed (the tau-bench-agents guide), labelled for what they are.

- ``first_k_all_pass``: the guide's "pass^k strict": the first k attempts all succeeded. With exactly k counted
  attempts this is the observed event whose probability tau-bench's pass^k estimates; with more attempts it looks
  only at the first k, so prefer :func:`~green_agent.statistics.passk.pass_hat_k`, which uses all of them.
- ``has_success_streak``: the guide's "pass^(k/2)": some run of ``length`` consecutive successes. It depends on the
  order of the attempts and is *not* tau-bench's pass^j; reports must call it a streak and show pass^j beside it.

Infrastructure errors (``None``) are removed before anything is computed: they are not the agent's attempts, so they
neither break a streak nor count as one of the "first k". Hence ``[True, None, True]`` has a streak of 2. When fewer
than the required number of counted attempts remain the answer is ``None`` (undefined), never a pass and never a
failure the agent did not earn.
"""

from __future__ import annotations

from collections.abc import Sequence

from green_agent.statistics._validation import require_int, require_outcomes


def counted_outcomes(outcomes: Sequence[bool | None]) -> list[bool]:
    """The outcomes that count against the agent, in order: infrastructure errors (``None``) removed."""
    return [o for o in require_outcomes("outcomes", outcomes) if o is not None]


def first_k_all_pass(outcomes: Sequence[bool | None], k: int) -> bool | None:
    """True when the first ``k`` counted attempts all succeeded; ``None`` when fewer than ``k`` were counted.

    >>> first_k_all_pass([True, False, True, True], 4)
    False
    """
    k = require_int("k", k, minimum=1)
    counted = counted_outcomes(outcomes)
    if len(counted) < k:
        return None
    return all(counted[:k])


def longest_success_streak(outcomes: Sequence[bool | None]) -> int:
    """Length of the longest run of consecutive successes among the counted attempts (0 when there is none)."""
    best = run = 0
    for outcome in counted_outcomes(outcomes):
        run = run + 1 if outcome else 0
        best = max(best, run)
    return best


def has_success_streak(outcomes: Sequence[bool | None], length: int) -> bool | None:
    """True when some ``length`` consecutive counted attempts all succeeded.

    ``length`` must be >= 1: a window of length 0 would "pass" any task, including one that never succeeded.
    ``None`` when fewer than ``length`` attempts were counted (the streak could not have been observed).

    >>> has_success_streak([True, False, True, True], 2)
    True
    """
    length = require_int("length", length, minimum=1)
    counted = counted_outcomes(outcomes)
    if len(counted) < length:
        return None
    run = 0
    for outcome in counted:
        run = run + 1 if outcome else 0
        if run >= length:
            return True
    return False

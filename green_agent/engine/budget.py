"""Budgets of one battle (issue 27): ``max_cost_usd`` and ``max_wall_s`` stop it cleanly.

Where they are set: ``[pass_k_config]`` (``max_cost_usd = 5.0``, ``max_wall_s = 3600``), ``arena run --max-cost-usd
/ --max-wall-s``, a remote config or MCP ``start_battle``'s ``config`` (a remote request may lower the operator's
budget, never raise or remove it: :func:`remote_limit_problem`). :class:`BattleLimits` holds the fields;
``BattleConfig`` inherits them. They cannot change an outcome, so a resume may change them
(green_agent/engine/run_store.py, ``RESUME_NEUTRAL_FIELDS``).

How a battle stops: :class:`BudgetTracker` is asked before each attempt starts (the place where a decided
``certify`` battle starts nothing new either); once a budget is spent nothing new starts, the attempts in flight
finish and are recorded, and the summary carries ``budget_stop`` (:class:`BudgetStop`): the reason, the limit, what
was spent, attempts done of planned. summary.md and ``arena run``'s verdict say so; ``arena run`` exits 6
(inconclusive: the planned design was not measured, and the attempts that finished first are not a fair sample of
it), or 5 when nothing was measured. ``arena run SCENARIO --resume`` with a higher budget runs the missing attempts
and ends with the numbers of an uninterrupted run (a run directory whose summary has ``budget_stop`` reads as
unfinished: ``run_store.summary_status``).

What is counted:

* **cost**: the battle's known cost so far, carried attempts of a resume included: each finished attempt's agent
  and user-simulator cost as green_agent/engine/costs.py computes it (provider-reported, agent-reported or priced
  by ``config.prices``). A part whose cost is unknown (n/a) counts nothing: a budget on a battle with no price table
  and no reported costs never stops it, and the summary's ``budget_stop`` never claims more than was known. Attempts
  in flight at the stop add their cost after it (``spent`` is at the stop, the summary's usage at the end).
* **wall time**: seconds since this run of the battle started (a resume starts the clock again), on an injectable
  clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from green_agent.engine.battle_limits import BattleLimits, BudgetReason, BudgetStop
from green_agent.engine.results import AttemptResult


def known_cost_usd(attempt: AttemptResult) -> float:
    """What is known of one attempt's cost (agent and user simulator; an unknown part counts 0)."""
    usage = attempt.usage
    if usage is None:
        return 0.0
    parts = [usage.agent.cost_usd, usage.user.cost_usd if usage.user is not None else None]
    return sum(part for part in parts if part is not None)


class BudgetTracker:
    """The budgets of one battle run: asked before each attempt starts. Incremental (the battle's list of finished
    attempts only grows), so each question costs O(new attempts)."""

    def __init__(self, limits: BattleLimits, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._limits = limits
        self._clock = clock
        self._started: float | None = None
        """The clock when the battle first asked (its first attempt's start: time queued for admission is not
        counted)."""
        self._seen = 0
        self._cost = 0.0
        self.stop: BudgetStop | None = None
        """Set once a budget is spent (then it stays)."""

    def exhausted(self, finished: Sequence[AttemptResult], total: int) -> bool:
        """A budget is spent: start nothing new (the first time, :attr:`stop` records why)."""
        if self.stop is not None:
            return True
        limits = self._limits
        if limits.max_cost_usd is None and limits.max_wall_s is None:
            return False
        if self._started is None:
            self._started = self._clock()
        for attempt in finished[self._seen :]:
            self._cost += known_cost_usd(attempt)
        self._seen = len(finished)
        reason: BudgetReason | None = None
        limit = spent = 0.0
        if limits.max_cost_usd is not None and self._cost >= limits.max_cost_usd:
            reason, limit, spent = "max_cost_usd", limits.max_cost_usd, round(self._cost, 9)
        elif limits.max_wall_s is not None and (elapsed := self._clock() - self._started) >= limits.max_wall_s:
            reason, limit, spent = "max_wall_s", limits.max_wall_s, round(elapsed, 3)
        if reason is None:
            return False
        self.stop = BudgetStop(
            reason=reason, limit=limit, spent=spent, attempts_done=len(finished), attempts_total=total
        )
        return True

    def summary(self, done: int) -> BudgetStop | None:
        """The summary's ``budget_stop`` with the attempts finally recorded, or None when no budget stopped it (or
        it stopped, but every planned attempt ran all the same)."""
        if self.stop is None or done >= self.stop.attempts_total:
            return None
        return self.stop.model_copy(update={"attempts_done": done})


def budget_markdown(stop: BudgetStop | None) -> list[str]:
    """summary.md's banner for a battle stopped by its budget (no lines otherwise)."""
    return [] if stop is None else [f"> PARTIAL: {stop.text()}.", ""]

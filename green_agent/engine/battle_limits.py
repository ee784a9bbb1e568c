"""A battle's budgets and provider cap as configuration (issue 27): the fields ``BattleConfig`` inherits, the
summary's ``budget_stop`` and the rule for remote configs. Imports nothing of the engine (``config`` and ``results``
import it); how a battle enforces them is green_agent/engine/budget.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_BUDGET_USD = 1_000_000.0
"""Largest ``max_cost_usd``."""
MAX_BUDGET_WALL_S = 30 * 24 * 3600.0
"""Largest ``max_wall_s`` (30 days)."""
MAX_PROVIDER_CONCURRENCY = 4096
"""Largest ``provider_max_concurrency`` (green_agent/provider_limits.py has the same bound for the operator)."""

BudgetReason = Literal["max_cost_usd", "max_wall_s"]
LIMIT_FIELDS: tuple[str, ...] = ("max_cost_usd", "max_wall_s", "provider_max_concurrency")
"""Fields a remote config may lower, never raise above the operator's nor remove when the operator set one."""


class BattleLimits(BaseModel):
    """Budgets and the provider cap of a battle (fields of ``BattleConfig``; absent from its JSON when unset, so
    older configs hash and read as before)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_cost_usd: float | None = Field(
        default=None, gt=0, le=MAX_BUDGET_USD, allow_inf_nan=False, exclude_if=lambda v: v is None
    )
    """Stop starting attempts once the battle's known cost reaches this many US dollars."""
    max_wall_s: float | None = Field(
        default=None, gt=0, le=MAX_BUDGET_WALL_S, allow_inf_nan=False, exclude_if=lambda v: v is None
    )
    """Stop starting attempts once this run of the battle has taken this many seconds."""
    provider_max_concurrency: int | None = Field(
        default=None, ge=1, le=MAX_PROVIDER_CONCURRENCY, exclude_if=lambda v: v is None
    )
    """At most this many of the battle's LLM-user calls in flight at once (also never above the green agent's
    ``--provider-max-concurrency``, shared by all its battles)."""


class BudgetStop(BaseModel):
    """summary.json's ``budget_stop``: why a battle stopped before running every planned attempt."""

    model_config = ConfigDict(frozen=True)

    reason: BudgetReason
    limit: float
    """The budget (US dollars or seconds)."""
    spent: float
    """What was spent when the stop was decided (US dollars of known cost, or seconds of this run)."""
    attempts_done: int = Field(ge=0)
    """Attempts in the summary (those in flight at the stop included)."""
    attempts_total: int = Field(ge=0)
    """Attempts planned."""

    def text(self) -> str:
        """One sentence for summary.md and the verdict."""
        if self.reason == "max_cost_usd":
            what = f"max_cost_usd ${self.limit:g} reached (${self.spent:.4f} of known cost)"
        else:
            what = f"max_wall_s {self.limit:g} s reached ({self.spent:.1f} s in this run)"
        return (
            f"stopped by budget: {what}; {self.attempts_done} of {self.attempts_total} attempts ran. The figures "
            "cover those only (not the planned design); resume with a higher budget to finish it "
            "(`arena run SCENARIO --resume --max-cost-usd/--max-wall-s`)"
        )


def remote_limit_problem(data: Mapping[str, Any], default: BattleLimits) -> str | None:
    """Why a remote config's budget or provider cap is refused (None: it is not): above the operator's value, or
    removing (null) one the operator set. Absent fields keep the operator's value. ``data`` is the request's
    config, flat or with the fields under ``pass_k_config``."""
    inner = data.get("pass_k_config")
    if isinstance(inner, Mapping):
        data = inner
    for name in LIMIT_FIELDS:
        if name not in data:
            continue
        value, mine = data[name], getattr(default, name)
        if mine is None:
            continue
        if value is None:
            return f"{name}: this green agent's operator set {mine:g}; a remote request may lower it, not remove it"
        if isinstance(value, int | float) and not isinstance(value, bool) and value > mine:
            return (
                f"{name}: at most {mine:g} on this green agent (its operator's setting); a remote request may lower "
                "it, not raise it"
            )
    return None

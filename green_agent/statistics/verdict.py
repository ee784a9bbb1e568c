"""Agent quality labels from pass@k and pass^k: reliable / inconsistent / functional / needs_improvement.

The seed (Fair-Forge's agentic metric, "Interpreting Results" in its agentic example notebook) classifies agents by a
table on pass@1 and pass^3 computed with its plug-in formulas (c/n)^k:

    pass@1 > 90%  and pass^3 > 70%     production-ready
    pass@1 > 90%  and pass^3 30-70%    functional but inconsistent
    pass@1 70-90%                      needs improvement
    pass@1 < 70%                       not ready

with the gloss "high pass@K + low pass^K: the agent can succeed but is inconsistent; both high: reliable".

Gaps closed here:
  1. pass@1 > 90% with pass^3 < 30% matched no row. Here every input in [0, 1] x [0, 1] gets exactly one label:
     the rules are tried in order and the last one catches everything.
  2. Under the seed's own estimator pass^3 = (c/n)^3 exceeds 0.729 whenever c/n > 0.9, so its "inconsistent" row
     could never fire; with unbiased per-task estimates averaged over tasks it can, and it is reachable here.
  3. The seed judged point estimates. Here, when a lower confidence bound is supplied, the bound is what must clear
     the bar (a "reliable" agent needs its pass^k *lower bound* >= the threshold); the Verdict records which values
     were compared.
  4. The seed fixed k (1 for capability, 3 for consistency) and mixed the two. Here both inputs are at the same,
     caller-chosen k, and the k is recorded.
  5. Boundaries are explicit: every band is closed below (>=), so 0.9 and 0.7 each belong to exactly one band.

Rules, in order (thresholds configurable through :class:`VerdictThresholds`):
  reliable           pass@k >= capable_min (0.9) and pass^k >= reliable_min (0.7)
  inconsistent       pass@k >= capable_min (0.9)           (can succeed when retried, not every time)
  functional         pass@k >= functional_min (0.7)
  needs_improvement  otherwise
The seed's labels map as production-ready -> reliable, functional but inconsistent -> inconsistent,
needs improvement -> functional, not ready -> needs_improvement.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from green_agent.statistics._validation import require_int, require_probability


class VerdictLabel(StrEnum):
    """The four quality labels."""

    RELIABLE = "reliable"
    INCONSISTENT = "inconsistent"
    FUNCTIONAL = "functional"
    NEEDS_IMPROVEMENT = "needs_improvement"


class VerdictThresholds(BaseModel):
    """Bars of the verdict rules; defaults are the seed's 90% / 70% / 70%."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    capable_min: float = Field(default=0.9, ge=0.0, le=1.0, allow_inf_nan=False)
    """pass@k needed for "reliable" or "inconsistent"."""
    reliable_min: float = Field(default=0.7, ge=0.0, le=1.0, allow_inf_nan=False)
    """pass^k (its lower bound when supplied) needed for "reliable"."""
    functional_min: float = Field(default=0.7, ge=0.0, le=1.0, allow_inf_nan=False)
    """pass@k needed for "functional"."""

    @model_validator(mode="after")
    def _ordered(self) -> VerdictThresholds:
        if self.functional_min > self.capable_min:
            raise ValueError(f"functional_min ({self.functional_min}) must be <= capable_min ({self.capable_min})")
        return self


class Verdict(BaseModel):
    """A label, the numbers it was decided on, the thresholds, and a one-sentence reason."""

    model_config = ConfigDict(frozen=True)

    label: VerdictLabel
    k: int | None
    pass_at_k: float
    pass_hat_k: float
    pass_at_k_lower: float | None
    pass_hat_k_lower: float | None
    pass_at_k_used: float
    """The pass@k value compared with the thresholds (the lower bound when one was supplied)."""
    pass_hat_k_used: float
    """The pass^k value compared with the thresholds (the lower bound when one was supplied)."""
    thresholds: VerdictThresholds
    reason: str


def _bound(name: str, value: Any, point: float) -> float | None:
    if value is None:
        return None
    return min(require_probability(name, value), point)


def interpret(
    pass_at_k: float,
    pass_hat_k: float,
    *,
    pass_hat_k_lower: float | None = None,
    pass_at_k_lower: float | None = None,
    k: int | None = None,
    thresholds: VerdictThresholds | None = None,
) -> Verdict:
    """Label an agent from pass@k and pass^k at the same k (macro means, or one task's values).

    Rules, first match wins (defaults from the seed's table, see the module docstring for the original and its gaps):
    reliable when pass@k >= 0.9 and pass^k >= 0.7; inconsistent when pass@k >= 0.9; functional when pass@k >= 0.7;
    needs_improvement otherwise. Every valid input gets exactly one label.

    Supply the lower confidence bounds (e.g. ``pass_hat_ci_low`` of a
    :class:`~green_agent.statistics.summary.MacroStat`)
    to make the label conservative: the bound, not the point estimate, must clear each bar. A bound above its point
    estimate is capped at the point estimate. Raises ``ValueError`` when pass^k > pass@k (impossible for values
    computed at the same k) or when any value is outside [0, 1].
    """
    at = require_probability("pass_at_k", pass_at_k)
    hat = require_probability("pass_hat_k", pass_hat_k)
    if hat > at + 1e-9:
        raise ValueError(f"pass_hat_k must be <= pass_at_k at the same k, got pass_hat_k={hat} > pass_at_k={at}")
    at_low = _bound("pass_at_k_lower", pass_at_k_lower, at)
    hat_low = _bound("pass_hat_k_lower", pass_hat_k_lower, hat)
    if k is not None:
        k = require_int("k", k, minimum=1)
    if thresholds is not None and not isinstance(thresholds, VerdictThresholds):
        raise ValueError(f"thresholds must be a VerdictThresholds, got {type(thresholds).__name__}")
    t = thresholds or VerdictThresholds()
    at_used = at if at_low is None else at_low
    hat_used = hat if hat_low is None else hat_low
    ks = "k" if k is None else str(k)
    at_name = f"pass@{ks}" + ("" if at_low is None else " lower bound")
    hat_name = f"pass^{ks}" + ("" if hat_low is None else " lower bound")

    if at_used >= t.capable_min and hat_used >= t.reliable_min:
        label = VerdictLabel.RELIABLE
        reason = (
            f"{at_name} {at_used:.3f} >= {t.capable_min} and {hat_name} {hat_used:.3f} >= {t.reliable_min}: "
            f"succeeds on all {ks} attempts with high probability"
        )
    elif at_used >= t.capable_min:
        label = VerdictLabel.INCONSISTENT
        reason = (
            f"{at_name} {at_used:.3f} >= {t.capable_min} but {hat_name} {hat_used:.3f} < {t.reliable_min}: "
            f"usually succeeds within {ks} attempts, but not on every attempt"
        )
    elif at_used >= t.functional_min:
        label = VerdictLabel.FUNCTIONAL
        reason = (
            f"{at_name} {at_used:.3f} is in [{t.functional_min}, {t.capable_min}): solves most tasks within "
            f"{ks} attempts, too many it never solves for a higher label"
        )
    else:
        label = VerdictLabel.NEEDS_IMPROVEMENT
        reason = f"{at_name} {at_used:.3f} < {t.functional_min}: fails too many tasks even with {ks} attempts"
    return Verdict(
        label=label,
        k=k,
        pass_at_k=at,
        pass_hat_k=hat,
        pass_at_k_lower=at_low,
        pass_hat_k_lower=hat_low,
        pass_at_k_used=at_used,
        pass_hat_k_used=hat_used,
        thresholds=t,
        reason=reason,
    )

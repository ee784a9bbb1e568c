"""The certification box of the battle page: a ``certify`` battle's decision (issue 28), read from the result's
``certification`` object by the published schema's field names (docs/results.md); nothing of the green agent is
imported. Every string is posted data: cut here, escaped by the template (_result.html)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from battle_backend.battles.tolerant import int_of

MAX_CERT_TEXT = 300
"""Longest claim / baseline / task key the certification box shows (longer text is cut, then escaped)."""


class CertificationView(BaseModel):
    """summary.json's ``certification`` (docs/results.md, "Certify early"), as far as the page shows it. Read from
    the posted JSON (the published schema's field names; nothing of the green agent is imported); a value of the
    wrong shape leaves the box out rather than failing the page."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    claim: str
    metric_j: int = Field(ge=1)
    threshold: float = Field(allow_inf_nan=False)
    confidence: float = Field(gt=0.0, lt=1.0)
    decision: Literal["certified", "refuted", "inconclusive"]
    tasks_observed: int = Field(ge=0)
    tasks_budget: int = Field(ge=0)
    attempts_used: int = Field(ge=0)
    attempts_fixed_design: int = Field(ge=0)
    sequence_low: float | None = Field(allow_inf_nan=False)
    sequence_high: float | None = Field(allow_inf_nan=False)
    estimate: float | None = Field(allow_inf_nan=False)
    interval_low: float | None = Field(default=None, allow_inf_nan=False)
    interval_high: float | None = Field(default=None, allow_inf_nan=False)
    order_seed: int
    waiting_for: str | None = None
    baseline: str | None = None
    task_stop: Any = None
    """pass^k claims: the within-task stop (``attempts_skipped``, ``tasks_stopped``, ``tasks_cut``); read
    tolerantly by :attr:`task_stop_text` (a malformed one leaves only its row out)."""

    @property
    def claim_text(self) -> str:
        return _cut(self.claim)

    @property
    def baseline_text(self) -> str | None:
        return None if self.baseline is None else _cut(self.baseline)

    @property
    def waiting_text(self) -> str | None:
        return None if self.waiting_for is None else _cut(self.waiting_for)

    @property
    def task_stop_text(self) -> str | None:
        """What the within-task stop of a pass^k claim skipped, in words (None without one, or when malformed)."""
        stop = self.task_stop if isinstance(self.task_stop, dict) else {}
        skipped, stopped = int_of(stop.get("attempts_skipped"), low=0), int_of(stop.get("tasks_stopped"), low=0)
        if skipped is None or stopped is None:
            return None
        cut = int_of(stop.get("tasks_cut"), low=0) or 0
        return (
            f"{skipped} attempt(s) of {stopped} task(s) not run after the task's first failure (its pass^k was "
            "already 0; not failures of the agent); pass^j is read from each task's leading passes, pass@j for "
            "j >= 2 is not estimable"
            + (f"; {cut} task(s) cut by the battle's stop are left out of pass^j above their attempts" if cut else "")
        )

    @property
    def attempts_saved(self) -> str:
        """ "37% fewer" (or "" when the fixed design is unknown or none were saved)."""
        fixed = self.attempts_fixed_design
        if fixed <= 0 or self.attempts_used >= fixed:
            return ""
        return f"{1 - self.attempts_used / fixed:.0%} fewer"


def _cut(text: str) -> str:
    return text if len(text) <= MAX_CERT_TEXT else text[: MAX_CERT_TEXT - 1] + "…"


def certification_view(result: dict[str, Any]) -> CertificationView | None:
    """The certification box of a result with a ``certification`` object; None without one or when malformed."""
    raw = result.get("certification")
    if not isinstance(raw, dict):
        return None
    try:
        return CertificationView.model_validate(raw)
    except ValidationError:
        return None

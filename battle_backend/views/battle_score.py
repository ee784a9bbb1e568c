"""The battle list's score column: pass^k of a finished battle's result, with its interval.

Read tolerantly from the stored result's detail (an Arena BattleResult, or a foreign result of the same shape):
``summary.macro`` holds one record per j; the score is the record for the battle's k (``config.k``), else (no task
has k counted attempts) the largest j with a figure, labelled with its j. Only a few keys are read (no validation of
the whole result: the list renders every battle).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from battle_backend.battles.arena_results import find_battle_result


@dataclass(frozen=True)
class Score:
    """pass^j (j = the battle's k) and its interval, as the list shows them."""

    j: int
    value: float
    low: float | None
    high: float | None

    @property
    def text(self) -> str:
        return f"{self.value:.3f}"

    @property
    def interval_text(self) -> str:
        return "" if self.low is None or self.high is None else f"[{self.low:.2f}, {self.high:.2f}]"

    @property
    def title(self) -> str:
        interval = f", 95% interval {self.interval_text}" if self.interval_text else ""
        return f"macro pass^{self.j} over tasks{interval}"


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _j(record: Any) -> int | None:
    j = record.get("j") if isinstance(record, dict) else None
    return j if isinstance(j, int) and not isinstance(j, bool) and j >= 1 else None


def result_score(detail: Any) -> Score | None:
    """The score of a result's detail; None when it holds no pass^j figure."""
    found = find_battle_result(detail)
    if found is None:
        return None
    macro = found["summary"].get("macro")
    records = (
        [r for r in macro if _j(r) is not None and _finite(r.get("pass_hat_mean")) is not None]
        if isinstance(macro, list)
        else []
    )
    if not records:
        return None
    config = found.get("config")
    k = config.get("k") if isinstance(config, dict) else None
    record = next((r for r in records if _j(r) == k), None) or max(records, key=lambda r: _j(r) or 0)
    value, j = _finite(record.get("pass_hat_mean")), _j(record)
    assert value is not None and j is not None
    return Score(
        j=j, value=value, low=_finite(record.get("pass_hat_ci_low")), high=_finite(record.get("pass_hat_ci_high"))
    )


def battle_score(result: Any) -> Score | None:
    """The score of a battle's stored result (``BattleRecord.result``: ``winner``, ``detail``, ...); None without."""
    return result_score(result.get("detail")) if isinstance(result, dict) else None

"""interpret(): one label per input, lower bounds must clear the bar, the seed's gaps closed."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from green_agent.statistics import Verdict, VerdictLabel, VerdictThresholds, interpret, summarize_trials


@pytest.mark.parametrize(
    ("at", "hat", "label"),
    [
        (0.99, 0.9, VerdictLabel.RELIABLE),
        (0.9, 0.7, VerdictLabel.RELIABLE),  # both bars are inclusive
        (0.95, 0.5, VerdictLabel.INCONSISTENT),  # the seed's "functional but inconsistent"
        (0.95, 0.1, VerdictLabel.INCONSISTENT),  # the seed's gap: pass@1 > 90% with pass^3 < 30% had no row
        (0.9, 0.69999, VerdictLabel.INCONSISTENT),
        (0.89999, 0.85, VerdictLabel.FUNCTIONAL),  # high pass^k but too many tasks never solved
        (0.7, 0.0, VerdictLabel.FUNCTIONAL),
        (0.69999, 0.5, VerdictLabel.NEEDS_IMPROVEMENT),
        (0.0, 0.0, VerdictLabel.NEEDS_IMPROVEMENT),
        (1.0, 1.0, VerdictLabel.RELIABLE),
    ],
)
def test_labels(at: float, hat: float, label: VerdictLabel) -> None:
    verdict = interpret(at, hat, k=4)
    assert verdict.label is label
    assert verdict.reason


def test_reliable_needs_the_lower_bound_to_clear_the_bar() -> None:
    point_only = interpret(0.97, 0.8, k=4)
    with_bound = interpret(0.97, 0.8, pass_hat_k_lower=0.62, k=4)
    assert point_only.label is VerdictLabel.RELIABLE
    assert with_bound.label is VerdictLabel.INCONSISTENT
    assert with_bound.pass_hat_k_used == 0.62 and "lower bound" in with_bound.reason


def test_pass_at_k_lower_bound_is_used_for_the_capability_bars() -> None:
    verdict = interpret(0.92, 0.8, pass_at_k_lower=0.85, pass_hat_k_lower=0.75)
    assert verdict.label is VerdictLabel.FUNCTIONAL
    assert verdict.pass_at_k_used == 0.85


def test_a_bound_above_its_estimate_is_capped() -> None:
    verdict = interpret(0.95, 0.6, pass_hat_k_lower=0.9)
    assert verdict.pass_hat_k_used == 0.6 and verdict.label is VerdictLabel.INCONSISTENT


def test_custom_thresholds_are_recorded() -> None:
    thresholds = VerdictThresholds(capable_min=0.8, reliable_min=0.5, functional_min=0.4)
    verdict = interpret(0.85, 0.55, thresholds=thresholds)
    assert verdict.label is VerdictLabel.RELIABLE and verdict.thresholds == thresholds


def test_from_a_summary_with_its_confidence_bound() -> None:
    trials = {f"t{i}": [True] * 8 for i in range(60)} | {f"u{i}": [True, False] * 4 for i in range(3)}
    row = summarize_trials(trials, seed=1).macro_at(8)
    assert row is not None and row.pass_at_mean is not None and row.pass_hat_mean is not None
    verdict = interpret(
        row.pass_at_mean,
        row.pass_hat_mean,
        pass_hat_k_lower=row.pass_hat_ci_low,
        pass_at_k_lower=row.pass_at_ci_low,
        k=8,
    )
    assert verdict.label is VerdictLabel.RELIABLE
    assert Verdict.model_validate_json(verdict.model_dump_json()) == verdict


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((0.5, 0.6), {}, r"^pass_hat_k must be <= pass_at_k"),
        ((1.1, 0.5), {}, r"^pass_at_k must be a finite number in \[0.0, 1.0\]"),
        ((0.5, float("nan")), {}, r"^pass_hat_k must be a finite number"),
        ((None, 0.5), {}, r"^pass_at_k must be"),
        ((0.9, 0.5), {"pass_hat_k_lower": -0.1}, r"^pass_hat_k_lower must be"),
        ((0.9, 0.5), {"k": 0}, r"^k must be an integer >= 1"),
        ((0.9, 0.5), {"thresholds": {"capable_min": 0.9}}, r"^thresholds must be a VerdictThresholds"),
    ],
)
def test_bad_input(args: tuple[object, ...], kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        interpret(*args, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("kwargs", [{"functional_min": 0.95}, {"capable_min": 1.5}, {"reliable_min": float("nan")}])
def test_bad_thresholds(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValidationError):
        VerdictThresholds(**kwargs)

"""The public API of :mod:`green_agent.statistics`: exactly what ``__all__`` lists, each name importable, documented
and defined inside the package (a leaked helper or a forgotten export fails here)."""

from __future__ import annotations

import inspect

import green_agent.statistics as statistics

PUBLIC = {
    # per task
    "pass_at_k",
    "pass_hat_k",
    "first_k_all_pass",
    "longest_success_streak",
    "has_success_streak",
    # across tasks and between runs
    "summarize_trials",
    "TrialsSummary",
    "TaskStat",
    "MacroStat",
    "MicroStat",
    "compare_trials",
    "TrialsComparison",
    "PairedStat",
    # intervals
    "Interval",
    "wilson_interval",
    "bootstrap_mean_interval",
    "standard_error",
    "BettingInterval",
    "ConfidenceSequence",
    "betting_bounds",
    "betting_confidence_sequence",
    "betting_interval",
    "clopper_pearson_bounds",
    "Decision",
    "decide",
    "paired_differences",
    "PairedTest",
    "paired_sign_flip_test",
    "sign_flip_p_values",
    "minimum_detectable_difference",
    # labels
    "interpret",
    "Verdict",
    "VerdictLabel",
    "VerdictThresholds",
}


def test_all_is_exactly_the_public_api() -> None:
    assert sorted(statistics.__all__) == sorted(PUBLIC)
    assert len(statistics.__all__) == len(set(statistics.__all__))


def test_every_public_name_is_defined_in_the_package_and_documented() -> None:
    for name in statistics.__all__:
        obj = getattr(statistics, name)
        assert obj.__module__.startswith("green_agent.statistics."), (name, obj.__module__)
        assert inspect.getdoc(obj), f"{name} has no docstring"


def test_star_import_gives_the_public_api_and_nothing_private() -> None:
    namespace: dict[str, object] = {}
    exec("from green_agent.statistics import *", namespace)
    assert {k for k in namespace if not k.startswith("__")} == PUBLIC

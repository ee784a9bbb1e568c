"""Hypothesis properties of the summary's intervals (issue 31): every reported interval contains its estimate, lies
in [0, 1], has nonzero width, and is nested across confidence levels; the same for the pooled rate."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from green_agent.statistics import summarize_trials

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

outcome = st.sampled_from([True, False, None])
trials_strategy = st.dictionaries(
    st.text(alphabet="abcdefgh", min_size=1, max_size=4),
    st.lists(outcome, min_size=0, max_size=6),
    min_size=1,
    max_size=14,
)


@SETTINGS
@given(trials_strategy)
def test_every_interval_contains_its_estimate_and_has_width(trials: dict[str, list[bool | None]]) -> None:
    summary = summarize_trials(trials, seed=1)
    for row in summary.macro:
        for mean, low, high in (
            (row.pass_hat_mean, row.pass_hat_ci_low, row.pass_hat_ci_high),
            (row.pass_at_mean, row.pass_at_ci_low, row.pass_at_ci_high),
        ):
            if row.coverage < 2:
                assert low is None and high is None
                continue
            assert mean is not None and low is not None and high is not None
            assert 0.0 <= low <= mean + 1e-12 and mean - 1e-12 <= high <= 1.0
            assert high - low > 0.0
    micro = summary.micro
    if micro.trials:
        assert micro.rate is not None and micro.ci_low is not None and micro.ci_high is not None
        assert 0.0 <= micro.ci_low <= micro.rate + 1e-12 and micro.rate - 1e-12 <= micro.ci_high <= 1.0
        assert micro.ci_high - micro.ci_low > 0.0
    measured = sum(1 for seq in trials.values() if any(o is not None for o in seq))
    assert (summary.few_tasks_caveat is not None) == (measured < 10)


@SETTINGS
@given(trials_strategy)
def test_intervals_are_nested_across_confidence(trials: dict[str, list[bool | None]]) -> None:
    narrow = summarize_trials(trials, confidence=0.8)
    wide = summarize_trials(trials, confidence=0.99)
    for a, b in zip(narrow.macro, wide.macro, strict=True):
        if a.pass_hat_ci_low is None:
            continue
        assert b.pass_hat_ci_low is not None and b.pass_hat_ci_high is not None and a.pass_hat_ci_high is not None
        assert b.pass_hat_ci_low <= a.pass_hat_ci_low + 2e-6 and b.pass_hat_ci_high >= a.pass_hat_ci_high - 2e-6

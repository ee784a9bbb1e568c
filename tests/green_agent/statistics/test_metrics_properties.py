"""Property tests (hypothesis) for the invariants issue 2 lists, plus a few that guard the summaries."""

from __future__ import annotations

import math
import os
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from green_agent.evaluations.metrics import CanonicalOptions, ToolCall, canonicalize, match_tool_calls, values_match
from green_agent.statistics import (
    VerdictLabel,
    first_k_all_pass,
    has_success_streak,
    interpret,
    longest_success_streak,
    pass_at_k,
    pass_hat_k,
    summarize_trials,
)

SETTINGS = settings(
    max_examples=int(os.environ.get("ARENA_METRICS_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
"""150 examples per property by default; set ARENA_METRICS_EXAMPLES for a longer search."""


@st.composite
def counts(draw: st.DrawFn, max_n: int = 3000) -> tuple[int, int, int]:
    n = draw(st.integers(min_value=1, max_value=max_n))
    c = draw(st.integers(min_value=0, max_value=n))
    k = draw(st.integers(min_value=1, max_value=n))
    return n, c, k


@st.composite
def big_counts(draw: st.DrawFn) -> tuple[int, int, int]:
    """n beyond the exact-integer range, so the log-sum path is exercised."""
    n = draw(st.integers(min_value=2049, max_value=10**6))
    c = draw(st.integers(min_value=0, max_value=n))
    k = draw(st.integers(min_value=1, max_value=min(n, 4000)))
    return n, c, k


@SETTINGS
@given(st.one_of(counts(), big_counts()))
def test_pass_hat_le_rate_le_pass_at(nck: tuple[int, int, int]) -> None:
    n, c, k = nck
    hat, at = pass_hat_k(n, c, k), pass_at_k(n, c, k)
    assert hat is not None and at is not None
    assert 0.0 <= hat <= c / n <= at <= 1.0


@SETTINGS
@given(st.one_of(counts(max_n=400), big_counts()))
def test_monotone_in_k(nck: tuple[int, int, int]) -> None:
    n, c, k = nck
    assume(k < n)
    assert pass_hat_k(n, c, k + 1) <= pass_hat_k(n, c, k)  # type: ignore[operator]
    assert pass_at_k(n, c, k + 1) >= pass_at_k(n, c, k)  # type: ignore[operator]


@SETTINGS
@given(st.integers(min_value=0, max_value=500), st.integers(min_value=1, max_value=50))
def test_undefined_beyond_n(n: int, extra: int) -> None:
    assert pass_at_k(n, n // 2, n + extra) is None
    assert pass_hat_k(n, n // 2, n + extra) is None


outcome_lists = st.lists(st.one_of(st.booleans(), st.none()), max_size=24)


@SETTINGS
@given(outcome_lists, st.integers(min_value=1, max_value=8))
def test_streak_relations(outcomes: list[bool | None], length: int) -> None:
    counted = [o for o in outcomes if o is not None]
    streak = has_success_streak(outcomes, length)
    if len(counted) < length:
        assert streak is None
    else:
        assert streak == (longest_success_streak(outcomes) >= length)
    strict = first_k_all_pass(outcomes, length)
    if strict:
        assert streak is True


# --- tool calls ----------------------------------------------------------------------------------------------------

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(max_size=6),
    st.sampled_from(["7", " 7 ", "1.5e3", "Tech", " tech", "STRASSE", "straße", ".5", "-0"]),
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=4), children, max_size=4)
    ),
    max_leaves=12,
)
options_strategy = st.builds(
    CanonicalOptions,
    casefold_strings=st.booleans(),
    trim_strings=st.booleans(),
    numeric_strings=st.booleans(),
    unordered_lists=st.booleans(),
)


@SETTINGS
@given(json_values, options_strategy)
def test_canonicalisation_is_idempotent(value: Any, options: CanonicalOptions) -> None:
    once = canonicalize(value, options)
    twice = canonicalize(once, options)
    assert twice == once
    assert repr(twice) == repr(once)
    assert values_match(value, once, options)


@SETTINGS
@given(json_values, options_strategy)
def test_every_value_matches_itself(value: Any, options: CanonicalOptions) -> None:
    assert values_match(value, value, options)


small_args = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.integers(min_value=0, max_value=2), max_size=4)
calls = st.builds(lambda name, args: ToolCall(name=name, arguments=args), st.sampled_from(["s", "t", "u"]), small_args)
ORDER_FREE = ("precision", "recall", "f1", "correct_count", "expected_count", "actual_count")


@SETTINGS
@given(
    st.lists(calls, max_size=7),
    st.lists(calls, max_size=7),
    st.randoms(use_true_random=False),
    st.sampled_from(["strict", "flexible"]),
    st.sampled_from([0.0, 0.5, 0.8, 1.0]),
    st.sampled_from(["ignore", "penalize"]),
)
def test_matching_scores_are_invariant_under_permutation(
    expected: list[ToolCall], actual: list[ToolCall], rnd: Any, mode: str, threshold: float, extra: str
) -> None:
    base = match_tool_calls(expected, actual, mode=mode, argument_match_threshold=threshold, extra_arguments=extra)
    shuffled_e, shuffled_a = list(expected), list(actual)
    rnd.shuffle(shuffled_e)
    rnd.shuffle(shuffled_a)
    other = match_tool_calls(
        shuffled_e, shuffled_a, mode=mode, argument_match_threshold=threshold, extra_arguments=extra
    )
    for field in ORDER_FREE:
        assert getattr(base, field) == getattr(other, field)
    if base.mean_argument_score is None:
        assert other.mean_argument_score is None
    else:
        assert other.mean_argument_score is not None
        assert math.isclose(base.mean_argument_score, other.mean_argument_score, abs_tol=1e-12)
    for result in (base, other):
        assert 0.0 <= result.f1 <= 1.0 and 0.0 <= result.order_score <= 1.0
        assert result.correct_count <= min(len(expected), len(actual))


@SETTINGS
@given(st.lists(calls, max_size=7))
def test_matching_a_list_with_itself_is_perfect(expected: list[ToolCall]) -> None:
    result = match_tool_calls(expected, expected)
    assert result.f1 == 1.0 and result.order_score == 1.0 and result.exact_sequence


# --- summaries and verdicts ----------------------------------------------------------------------------------------

trial_maps = st.dictionaries(
    st.text(min_size=1, max_size=3), st.lists(st.one_of(st.booleans(), st.none()), max_size=6), max_size=8
)


@SETTINGS
@given(trial_maps, st.integers(min_value=0, max_value=2**31))
def test_summary_invariants(trials: dict[str, list[bool | None]], seed: int) -> None:
    summary = summarize_trials(trials, n_bootstrap=50, seed=seed)
    assert summary == summarize_trials(trials, n_bootstrap=50, seed=seed)
    for row in summary.macro:
        assert row.coverage == sum(1 for t in summary.tasks if t.n >= row.j)
        if row.coverage == 0:
            assert row.pass_hat_mean is None
            continue
        assert row.pass_hat_mean is not None and row.pass_at_mean is not None
        assert 0.0 <= row.pass_hat_mean <= row.pass_at_mean + 1e-12 <= 1.0 + 1e-12
        for low, high in ((row.pass_hat_ci_low, row.pass_hat_ci_high), (row.pass_at_ci_low, row.pass_at_ci_high)):
            if row.coverage >= 2:
                assert low is not None and high is not None and 0.0 <= low <= high <= 1.0
            else:
                assert low is None and high is None
    reordered = summarize_trials(dict(reversed(list(trials.items()))), n_bootstrap=0)
    for mine, theirs in zip(summary.macro, reordered.macro, strict=True):
        assert (mine.pass_hat_mean is None) == (theirs.pass_hat_mean is None)
        if mine.pass_hat_mean is not None:
            assert math.isclose(mine.pass_hat_mean, theirs.pass_hat_mean, abs_tol=1e-12)  # type: ignore[arg-type]


@SETTINGS
@given(
    st.floats(min_value=0, max_value=1),
    st.floats(min_value=0, max_value=1),
    st.one_of(st.none(), st.floats(min_value=0, max_value=1)),
)
def test_every_input_gets_exactly_one_consistent_label(a: float, b: float, lower: float | None) -> None:
    at, hat = max(a, b), min(a, b)
    verdict = interpret(at, hat, pass_hat_k_lower=lower)
    t = verdict.thresholds
    used_hat = hat if lower is None else min(lower, hat)
    expected = (
        VerdictLabel.RELIABLE
        if at >= t.capable_min and used_hat >= t.reliable_min
        else VerdictLabel.INCONSISTENT
        if at >= t.capable_min
        else VerdictLabel.FUNCTIONAL
        if at >= t.functional_min
        else VerdictLabel.NEEDS_IMPROVEMENT
    )
    assert verdict.label is expected

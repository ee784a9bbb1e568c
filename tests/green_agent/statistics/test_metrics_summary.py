"""summarize_trials: per-task values, macro coverage / SE / betting intervals, the task-clustered micro interval,
the few-task caveat, JSON shape, bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from pydantic import ValidationError

from green_agent.statistics import TrialsSummary, pass_at_k, pass_hat_k, summarize_trials, wilson_interval

T, F = True, False


def test_per_task_values_follow_the_vectors() -> None:
    summary = summarize_trials({"a": [T, F, T, T], "b": [T, F, T, F], "s": [T, F, T, F, F]})
    a, b, s = (summary.task(x) for x in ("a", "b", "s"))
    assert a is not None and b is not None and s is not None
    assert (a.n, a.c, a.success_rate, a.longest_success_streak) == (4, 3, 0.75, 2)
    assert list(a.pass_hat[:4]) == [0.75, 0.5, 0.25, 0.0]
    assert b.pass_hat[1] == pytest.approx(1 / 6)
    assert s.success_rate == 0.4 and s.pass_at[1] == 0.7 and s.pass_hat[1] == pytest.approx(0.1)
    assert summary.k_max == 5
    assert a.pass_hat[4] is None and a.pass_at[4] is None  # n = 4 < j = 5: undefined, not clamped


def test_infrastructure_errors_are_counted_and_excluded_from_n() -> None:
    summary = summarize_trials({"x": [None, T, None, F], "y": [None, None]})
    x, y = summary.task("x"), summary.task("y")
    assert x is not None and y is not None
    assert (x.n, x.c, x.infra_errors) == (2, 1, 2)
    assert (y.n, y.c, y.infra_errors, y.success_rate) == (0, 0, 2, None)
    assert summary.infra_errors == 4
    assert summary.micro.infra_errors == 4
    assert summary.micro.trials == 2 and summary.micro.successes == 1


def test_macro_mean_is_over_tasks_with_enough_trials_and_reports_coverage() -> None:
    trials = {"a": [T, T, F, T], "b": [F, F, T, F], "c": [T, None], "d": []}
    summary = summarize_trials(trials, k_max=3, n_bootstrap=200)
    m1, m2, m3 = summary.macro
    assert (m1.j, m1.coverage, m1.total_tasks) == (1, 3, 4)
    assert m1.pass_hat_mean == pytest.approx((0.75 + 0.25 + 1.0) / 3)
    assert (m2.coverage, m3.coverage) == (2, 2)
    assert m2.pass_hat_mean == pytest.approx((pass_hat_k(4, 3, 2) + pass_hat_k(4, 1, 2)) / 2)
    assert m3.pass_at_mean == pytest.approx((pass_at_k(4, 3, 3) + pass_at_k(4, 1, 3)) / 2)
    values = [pass_hat_k(4, 3, 2), pass_hat_k(4, 1, 2)]
    assert m2.pass_hat_se == pytest.approx(np.std(values, ddof=1) / math.sqrt(2))
    assert summary.macro_at(3) is m3 and summary.macro_at(4) is None and summary.macro_at(0) is None


def test_k_beyond_every_task_has_zero_coverage_and_no_numbers() -> None:
    summary = summarize_trials({"a": [T, T], "b": [F, T]}, k_max=3)
    top = summary.macro_at(3)
    assert top is not None and top.coverage == 0
    assert top.pass_hat_mean is None and top.pass_hat_se is None and top.pass_hat_ci_low is None


def test_single_covered_task_has_a_mean_but_no_se_or_interval() -> None:
    summary = summarize_trials({"a": [T, F, T], "b": [T]})
    m2 = summary.macro_at(2)
    assert m2 is not None and m2.coverage == 1
    assert m2.pass_hat_mean == pytest.approx(1 / 3)
    assert m2.pass_hat_se is None and m2.pass_hat_ci_low is None and m2.pass_hat_ci_high is None


def test_micro_rate_interval_treats_tasks_not_attempts_as_the_units() -> None:
    rng = np.random.default_rng(3)
    p = rng.random(20)
    trials = {f"t{i}": [bool(x) for x in rng.random(4) < p[i]] for i in range(20)}
    summary = summarize_trials(trials)
    micro = summary.micro
    wilson = wilson_interval(micro.successes, micro.trials)
    assert wilson is not None and micro.ci_low is not None and micro.ci_high is not None and micro.rate is not None
    assert micro.method == "betting_wsr2024"
    assert micro.ci_low < micro.rate < micro.ci_high
    # 80 attempts of 20 tasks are not 80 independent draws: wider than Wilson's interval on the attempts.
    assert micro.ci_low < wilson.low and micro.ci_high > wilson.high
    # Same number of counted attempts per task: the pooled rate is the mean of the success rates, same interval.
    row = summary.macro_at(1)
    assert row is not None and (row.pass_hat_ci_low, row.pass_hat_ci_high) == (micro.ci_low, micro.ci_high)


def test_micro_rate_with_unequal_attempts_is_the_pooled_ratio() -> None:
    summary = summarize_trials({"a": [T] * 5 + [F] * 2, "b": [T, T, F]})
    micro = summary.micro
    assert micro.rate == 0.7 and micro.ci_low is not None and micro.ci_high is not None
    assert 0.0 <= micro.ci_low < 0.7 < micro.ci_high <= 1.0


def test_summary_states_target_method_and_the_few_task_caveat() -> None:
    few = summarize_trials({f"t{i}": [T, F] for i in range(9)})
    enough = summarize_trials({f"t{i}": [T, F] for i in range(10)})
    assert few.interval_method == enough.interval_method == "betting_wsr2024+clopper_pearson"
    assert few.interval_target == "tasks_of_this_kind"
    assert few.interval_note is not None and "tasks of this kind" in few.interval_note and "95%" in few.interval_note
    assert few.few_tasks_caveat is not None and "Only 9 task(s)" in few.few_tasks_caveat
    assert enough.few_tasks_caveat is None
    assert "few_tasks_caveat" not in enough.model_dump(mode="json")
    assert few.model_dump(mode="json")["few_tasks_caveat"] == few.few_tasks_caveat


def test_bootstrap_is_deterministic_for_a_seed_and_changes_with_it() -> None:
    rng = np.random.default_rng(0)
    trials = {f"t{i}": [bool(x) for x in rng.random(6) < rng.random()] for i in range(60)}
    one = summarize_trials(trials, seed=11)
    two = summarize_trials(trials, seed=11)
    other = summarize_trials(trials, seed=12)
    assert one == two
    assert one.macro[2].pass_hat_ci_low != other.macro[2].pass_hat_ci_low
    assert one.macro[2].pass_hat_mean == other.macro[2].pass_hat_mean


def test_interval_brackets_the_mean_and_is_close_to_the_normal_width_at_many_tasks() -> None:
    rng = np.random.default_rng(1)
    p = rng.random(3000)
    trials = {f"t{i}": [bool(x) for x in rng.random(8) < p[i]] for i in range(3000)}
    summary = summarize_trials(trials, n_bootstrap=2000)
    for row in summary.macro:
        assert row.pass_hat_ci_low is not None and row.pass_hat_ci_high is not None
        assert 0.0 <= row.pass_hat_ci_low < row.pass_hat_mean < row.pass_hat_ci_high <= 1.0
        assert row.pass_hat_se is not None
        # Valid at any n, hence somewhat wider than the normal approximation (which it need not beat at 3,000).
        normal = 2 * 1.96 * row.pass_hat_se
        assert normal < row.pass_hat_ci_high - row.pass_hat_ci_low < 1.5 * normal


@pytest.mark.parametrize("outcome", [T, F])
def test_all_pass_or_all_fail_gives_a_one_sided_interval_of_nonzero_width(outcome: bool) -> None:
    summary = summarize_trials({f"t{i}": [outcome] * 3 for i in range(5)})
    for row in summary.macro:
        assert row.pass_hat_ci_low is not None and row.pass_hat_ci_high is not None
        assert row.pass_hat_ci_high - row.pass_hat_ci_low > 0.2
        edge = 1.0 if outcome else 0.0
        assert row.pass_hat_mean == edge and edge in (row.pass_hat_ci_low, row.pass_hat_ci_high)
    micro = summary.micro
    assert micro.ci_low is not None and micro.ci_high is not None and micro.ci_high - micro.ci_low > 0.2


def test_n_equal_to_k_binary_estimates_never_give_a_zero_width_interval() -> None:
    # k = 4 attempts: every task's pass^4 is 0 or 1; here all 0 (the offline demo's pass^4).
    summary = summarize_trials({f"t{i}": [T, F, T, T] for i in range(5)})
    row = summary.macro_at(4)
    assert row is not None and row.pass_hat_mean == 0.0
    assert row.pass_hat_ci_low == 0.0 and row.pass_hat_ci_high is not None and row.pass_hat_ci_high > 0.3


def test_n_below_k_leaves_the_task_out_and_one_task_has_no_interval() -> None:
    summary = summarize_trials({"a": [T, T], "b": [T, T, T, F]}, k_max=4)
    row = summary.macro_at(4)
    assert row is not None and row.coverage == 1 and row.pass_hat_mean == 0.0
    assert row.pass_hat_ci_low is None and row.pass_hat_ci_high is None
    one = summarize_trials({"a": [T, F, T]})
    assert one.micro.ci_low is not None and one.micro.ci_high is not None
    assert one.micro.ci_high - one.micro.ci_low > 0.5  # one task says little about tasks of this kind


def test_few_qualifying_tasks_among_many_still_get_an_interval_from_those_tasks() -> None:
    trials: dict[str, list[bool | None]] = {f"short{i}": [T] for i in range(300)}
    trials["long_a"] = [T, T, T, F]
    trials["long_b"] = [F, F, T, F]
    summary = summarize_trials(trials, k_max=4, seed=2)
    row = summary.macro_at(4)
    assert row is not None and row.coverage == 2
    assert row.pass_at_ci_low is not None and row.pass_at_ci_high is not None and row.pass_at_mean is not None
    assert row.pass_at_mean == pytest.approx((pass_at_k(4, 3, 4) + pass_at_k(4, 1, 4)) / 2)
    assert 0.0 <= row.pass_at_ci_low <= row.pass_at_mean <= row.pass_at_ci_high <= 1.0


def test_n_bootstrap_zero_disables_intervals_only() -> None:
    summary = summarize_trials({"a": [T, F], "b": [T, T]}, n_bootstrap=0)
    row = summary.macro_at(1)
    assert row is not None and row.pass_hat_ci_low is None and row.pass_hat_se is not None


def test_confidence_changes_interval_width() -> None:
    rng = np.random.default_rng(5)
    trials = {f"t{i}": [bool(x) for x in rng.random(4) < 0.5] for i in range(200)}
    narrow = summarize_trials(trials, confidence=0.5).macro[0]
    wide = summarize_trials(trials, confidence=0.99).macro[0]
    assert (wide.pass_hat_ci_high - wide.pass_hat_ci_low) > (narrow.pass_hat_ci_high - narrow.pass_hat_ci_low)
    assert summarize_trials(trials, confidence=0.5).micro.confidence == 0.5


def test_empty_input_gives_an_empty_summary() -> None:
    summary = summarize_trials({})
    assert (summary.k_max, summary.total_tasks, summary.macro, summary.tasks) == (0, 0, [], [])
    assert summary.micro.rate is None and summary.micro.ci_low is None


def test_json_round_trip_and_field_names_the_report_reads() -> None:
    summary = summarize_trials({"retail/test/1": [T, F, None, T], "retail/test/2": [F, F, T, T]})
    dumped = summary.model_dump(mode="json")
    text = json.dumps(dumped)
    assert TrialsSummary.model_validate(json.loads(text)) == summary
    row = dumped["macro"][0]
    for key in (
        "j",
        "pass_hat_mean",
        "pass_hat_ci_low",
        "pass_hat_ci_high",
        "pass_at_mean",
        "pass_at_ci_low",
        "pass_at_ci_high",
        "coverage",
        "total_tasks",
    ):
        assert key in row
    for key in ("rate", "ci_low", "ci_high"):
        assert key in dumped["micro"]
    assert isinstance(dumped["tasks"][0]["pass_hat"], list)


def test_models_are_frozen() -> None:
    summary = summarize_trials({"a": [T]})
    with pytest.raises(ValidationError):
        summary.k_max = 3  # type: ignore[misc]
    with pytest.raises(ValidationError):
        summary.tasks[0].n = 9  # type: ignore[misc]


def test_numpy_booleans_and_tuples_are_accepted() -> None:
    summary = summarize_trials({"a": (np.bool_(True), False), "b": np.array([True, True])})
    assert summary.micro.successes == 3


@pytest.mark.parametrize(
    ("trials", "message"),
    [
        ({"a": [T, 1]}, r"^trials\['a'\]\[1\] must be True, False or None"),
        ({"a": [0.0]}, r"^trials\['a'\]\[0\] must be True, False or None"),
        ({"a": "TTF"}, r"^trials\['a'\] must be an ordered sequence"),
        ({"a": {T, F}}, r"^trials\['a'\] must be an ordered sequence"),
        ({1: [T]}, r"^trials keys must be task id strings"),
        ([[T]], r"^trials must be a mapping"),
    ],
)
def test_bad_trials_are_rejected_naming_where(trials: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        summarize_trials(trials)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"k_max": 0}, "k_max"),
        ({"k_max": 2.0}, "k_max"),
        ({"n_bootstrap": -1}, "n_bootstrap"),
        ({"seed": -1}, "seed"),
        ({"confidence": 1.0}, "confidence"),
        ({"confidence": float("nan")}, "confidence"),
    ],
)
def test_bad_options_are_rejected_naming_the_argument(kwargs: dict[str, object], name: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name} must be"):
        summarize_trials({"a": [T, F]}, **kwargs)  # type: ignore[arg-type]

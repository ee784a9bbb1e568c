"""The sequential designs of certify (issue 28): the exact binomial group-sequential test holds its error exactly,
decides sooner than the betting sequence at small budgets, stops for futility, and is chosen from the config alone;
the betting sequence's futility stop never changes its decision."""

from __future__ import annotations

import numpy as np
import pytest

from green_agent.statistics.certification import sequential_decisions, threshold_capitals
from green_agent.statistics.certify_design import (
    TRUNCATION,
    betting_decisions,
    certify_design,
    futility_looks,
    predictive_chance,
)
from green_agent.statistics.sequential_binomial import (
    BUDGET,
    DECIDED,
    FUTILE,
    MAX_BINOMIAL_TASKS,
    BinomialDesign,
    binomial_decisions,
    binomial_design,
    binomial_sequence,
    boundaries,
)


def crossing_probabilities(budget: int, threshold: float, mu: float) -> tuple[float, float]:
    """Exact P(certified) and P(refuted) of the design (its monotone boundaries) without its futility stop, under
    Bernoulli(mu) values."""
    design = binomial_design(budget, threshold)
    assert np.all(design.upper[1:] >= boundaries(budget, np.array([threshold]), 0.95)[0][0, 1:])
    upper, lower = design.upper[None, :], design.lower[None, :]
    dist = np.zeros(budget + 2)
    dist[0] = 1.0
    up = down = 0.0
    counts = np.arange(budget + 2)
    for t in range(1, budget + 1):
        new = dist * (1.0 - mu)
        new[1:] += dist[:-1] * mu
        crossed_up = counts >= upper[0, t]
        crossed_down = ~crossed_up & (counts <= lower[0, t])
        up += float(new[crossed_up].sum())
        down += float(new[crossed_down].sum())
        new[crossed_up | crossed_down] = 0.0
        dist = new
    return up, down


@pytest.mark.parametrize("budget", [1, 5, 10, 16, 30, 64])
@pytest.mark.parametrize("threshold", [0.05, 0.3, 0.5, 0.8, 0.95])
def test_the_binomial_design_errs_at_most_alpha_over_two_per_side_exactly(budget: int, threshold: float) -> None:
    up, down = crossing_probabilities(budget, threshold, threshold)
    assert up <= 0.025 + 1e-12 and down <= 0.025 + 1e-12
    # Farther from the threshold on the wrong side the error only shrinks (the crossing events are monotone).
    for mu in (threshold / 2, threshold * 0.9):
        assert crossing_probabilities(budget, threshold, mu)[0] <= up + 1e-12
    for mu in (threshold + (1 - threshold) / 2, threshold + (1 - threshold) * 0.1):
        assert crossing_probabilities(budget, threshold, mu)[1] <= down + 1e-12


def test_the_binomial_design_decides_where_the_betting_sequence_cannot_at_ten_tasks() -> None:
    design = certify_design(threshold=0.5, confidence=0.95, budget=10, binary=True, comparison=False)
    code, used, reason = design.decisions(np.ones((1, 10)))
    assert (code[0], used[0], reason[0]) == (1, 6, DECIDED)  # 6 straight passes: 0.5^6 < 0.025 * (6 / 10)^0.5
    assert sequential_decisions(np.ones((1, 10)), 0.5)[1][0] == 10  # the betting sequence needs the whole budget
    low, high = design.sequence(np.ones(7))
    assert 0.5 < low < 0.6 and high == 1.0


def test_futility_stops_when_no_decision_is_reachable_and_runs_nothing_when_none_ever_is() -> None:
    design = binomial_design(10, 0.5)
    code, used, reason = binomial_sequence_free(design, [1, 0, 1, 0, 1])
    assert (code, reason) == (0, FUTILE) and used <= 4
    assert design.reach[4, 2] == 0.0  # 2 of 4: neither 9 of 10 nor at most 1 of 10 is left, whatever follows
    # Certifying pass^4 >= 0.7 needs 0.7^n <= 0.025, n >= 11; refuting needs 0.3^n <= 0.025 too: nothing at 3.
    never = binomial_design(3, 0.7)
    assert never.reach[0, 0] == 0.0
    assert binomial_sequence_free(never, []) == (0, 0, FUTILE)
    # Still undecided and reachable: it keeps going (BUDGET while observations remain).
    assert binomial_sequence_free(design, [1, 1, 1])[2] == BUDGET


def binomial_sequence_free(design: BinomialDesign, values: list[int]) -> tuple[int, int, int]:
    code, used, reason = binomial_decisions(design, np.asarray([values], dtype=np.float64).reshape(1, -1))
    return int(code[0]), int(used[0]), int(reason[0])


def test_the_sequence_at_the_stop_excludes_the_threshold_when_decided() -> None:
    rng = np.random.default_rng(5)
    for threshold in (0.2, 0.5, 0.8):
        design = binomial_design(30, threshold)
        x = (rng.random((200, 30)) < rng.uniform(0.0, 1.0, (200, 1))).astype(np.float64)
        code, used, _ = binomial_decisions(design, x)
        for row in np.flatnonzero(code != 0):
            low, high = binomial_sequence(x[row, : used[row]], 30, 0.95)
            assert low >= threshold if code[row] == 1 else high <= threshold


def test_the_design_is_chosen_from_the_config_alone() -> None:
    small = certify_design(threshold=0.8, confidence=0.95, budget=16, binary=True, comparison=False)
    assert small.method == "exact_binomial_group_sequential" and "after every task of 16" in small.description
    values = certify_design(threshold=0.8, confidence=0.95, budget=16, binary=False, comparison=False)
    big = certify_design(threshold=0.8, confidence=0.95, budget=MAX_BINOMIAL_TASKS + 1, binary=True, comparison=False)
    compare = certify_design(threshold=0.45, confidence=0.95, budget=16, binary=False, comparison=True)
    assert big.binomial is None and compare.binomial is None and values.binomial is None
    assert values.method == big.method == compare.method == "betting_cs_wsr2024_sequential"
    # Deterministic in the config: the same design (and so the same looks) on a resume.
    again = certify_design(threshold=0.8, confidence=0.95, budget=16, binary=True, comparison=False)
    assert again.binomial is not None and small.binomial is not None
    assert np.array_equal(again.binomial.upper, small.binomial.upper)
    assert np.array_equal(again.binomial.reach, small.binomial.reach)


def whole_budget_decisions(x: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """The betting design without futility stops: first look where a capital reaches 2/alpha, else the budget."""
    up, down = threshold_capitals(x, threshold, TRUNCATION)
    bar = np.log(40.0)
    n = x.shape[1]
    first_up = np.where((up >= bar).any(axis=1), (up >= bar).argmax(axis=1), n)
    first_down = np.where((down >= bar).any(axis=1), (down >= bar).argmax(axis=1), n)
    code = np.where(first_up < first_down, 1, np.where(first_down < first_up, -1, 0))
    return code, np.where(code == 0, n, np.minimum(first_up, first_down) + 1)


def test_the_betting_futility_stops_only_give_up_and_the_deterministic_one_changes_nothing() -> None:
    rng = np.random.default_rng(9)
    stopped_early = changed = 0
    for threshold in (0.2, 0.5, 0.7):
        for n in (10, 30, 60):
            x = np.clip(rng.beta(2.0, 2.0, (300, n)) + rng.uniform(-0.3, 0.3, (300, 1)), 0.0, 1.0)
            full, full_used = whole_budget_decisions(x, threshold)
            code, used, reason = betting_decisions(x, threshold, 0.95, n)
            # A decision is the betting sequence's own, at the same look; a futility stop never flips one.
            assert np.all((code == full) | (code == 0))
            assert np.all(used[code != 0] == full_used[code != 0])
            assert np.all(code[reason == FUTILE] == 0) and np.all(used <= n)
            stopped_early += int(np.sum((reason == FUTILE) & (used < n)))
            changed += int(np.sum(code != full))
            # Before the first predictive look only the deterministic stop acts: nothing decidable is given up.
            first = min(futility_looks(n))
            early = (reason == FUTILE) & (used < first)
            assert np.all(full[early] == 0)
    assert stopped_early > 0 and changed < stopped_early


def test_the_predictive_chance_is_seeded_by_the_look() -> None:
    x = np.random.default_rng(2).random((5, 6))
    assert np.array_equal(
        predictive_chance(x, 0.5, np.log(40.0), 20), predictive_chance(x.copy(), 0.5, np.log(40.0), 20)
    )
    assert futility_looks(10) == {3, 5, 8} and futility_looks(1) == set()


def test_betting_runs_nothing_when_the_budget_can_decide_nothing() -> None:
    code, used, reason = betting_decisions(np.zeros((1, 0)), 0.5, 0.95, 3)
    assert (int(code[0]), int(used[0]), int(reason[0])) == (0, 0, FUTILE)


def test_a_betting_decision_is_outside_the_sequence_reported_at_the_stop() -> None:
    rng = np.random.default_rng(4)
    x = np.clip(rng.beta(8.0, 2.0, (40, 30)), 0.0, 1.0)
    design = certify_design(threshold=0.6, confidence=0.95, budget=30, binary=False, comparison=False)
    code, used, _ = design.decisions(x)
    assert (code == 1).sum() > 10
    for row in np.flatnonzero(code == 1):
        low, _ = design.sequence(x[row, : used[row]])
        assert low >= 0.6 - 1e-5

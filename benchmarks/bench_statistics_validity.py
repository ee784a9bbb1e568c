"""Do Arena's intervals and decisions hold? Coverage, false positives and power by simulation (issue 31).

Simulates battles through the public ``green_agent.statistics`` API: T tasks with per-task success probability p
drawn from a scenario, k Bernoulli(p) attempts each, then

- coverage of the summary's pass^1..pass^k intervals and of the pooled ("micro") rate's interval, for both targets:
  "tasks of this kind" (the scenario's mean of p^j: what the intervals claim) and "these tasks" (the mean of p_i^j
  over the T tasks drawn), with the share of zero-width intervals and the mean width; the vectorised
  ``betting_bounds`` / ``clopper_pearson_bounds`` are what ``summarize_trials`` calls (checked on a few replicates);
- the false-positive rate of ``arena compare``'s decision (``paired_sign_flip_test`` on per-task pass^1
  differences of two runs of the same agent), two-sided and as the one-sided ``--fail-if worse`` gate;
- power of that test against a worse candidate, simulated through ``paired_sign_flip_test``, next to the planner's
  prediction (``green_agent.statistics.planning.simulated_power``, its own seed).

Targets (exit 1 if one is missed): no zero-width interval; coverage (tasks of this kind) >= 0.93 at 30 and 100 tasks
and >= 0.90 at 10 tasks in every scenario; false-positive rate <= 0.05 + 2 Monte-Carlo standard errors at 10 and 30
tasks; planner within 5 points of simulated power.

    .venv/bin/python benchmarks/bench_statistics_validity.py              # 1,000 replicates (a few minutes)
    .venv/bin/python benchmarks/bench_statistics_validity.py --quick      # 200 replicates, k = 4 only
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from green_agent.statistics import (
    betting_bounds,
    clopper_pearson_bounds,
    paired_sign_flip_test,
    sign_flip_p_values,
    summarize_trials,
)
from green_agent.statistics.planning import simulated_power

Draw = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]


@dataclass(frozen=True)
class Scenario:
    name: str
    draw: Draw
    moment: Callable[[int], float]
    """E[p^j] over the scenario (tasks of this kind)."""


def _beta_moment(a: float, b: float) -> Callable[[int], float]:
    return lambda j: math.prod((a + i) / (a + b + i) for i in range(j))


def _constant(p: float) -> Scenario:
    return Scenario(f"all {p:g}", lambda rng, shape: np.full(shape, p), lambda j: p**j)


def _mixture_draw(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    u = rng.random(shape)
    mid = rng.uniform(0.2, 0.8, shape)
    return np.where(u < 0.4, 1.0, np.where(u < 0.7, 0.0, mid))


def _mixture_moment(j: int) -> float:
    return 0.4 + 0.3 * (0.8 ** (j + 1) - 0.2 ** (j + 1)) / (0.6 * (j + 1))


SCENARIOS = [
    Scenario("uniform", lambda rng, shape: rng.uniform(0.0, 1.0, shape), lambda j: 1.0 / (j + 1)),
    Scenario("beta(0.5,0.5)", lambda rng, shape: rng.beta(0.5, 0.5, shape), _beta_moment(0.5, 0.5)),
    Scenario("beta(5,2)", lambda rng, shape: rng.beta(5.0, 2.0, shape), _beta_moment(5.0, 2.0)),
    _constant(0.5),
    _constant(0.9),
    _constant(0.95),
    Scenario(
        "90% at 1, 10% at 0.5",
        lambda rng, shape: np.where(rng.random(shape) < 0.9, 1.0, 0.5),
        lambda j: 0.9 + 0.1 * 0.5**j,
    ),
    Scenario("40% 1 / 30% 0 / 30% U(.2,.8)", _mixture_draw, _mixture_moment),
]
TASK_COUNTS = (5, 10, 30, 100)
COVERAGE_TARGET = {10: 0.90, 30: 0.93, 100: 0.93}
FPR_TASKS = (10, 30)
POWER_TOLERANCE = 0.05


def pass_hat_table(k: int) -> np.ndarray:
    """[c, j-1] -> pass^j of c successes in k attempts."""
    return np.array([[math.comb(c, j) / math.comb(k, j) for j in range(1, k + 1)] for c in range(k + 1)])


def interval_bounds(values: np.ndarray, j: int, k: int, seed: int) -> np.ndarray:
    """The summary's interval for pass^j over tasks of k attempts each: (replicates, 2)."""
    if j == k:
        ones = np.rint(values).sum(axis=1)
        return clopper_pearson_bounds(ones, np.full_like(ones, values.shape[1]), 0.95)
    return betting_bounds(values, confidence=0.95, seed=seed)[:, 1:]


def check_against_summary(c: np.ndarray, k: int, bounds: dict[int, np.ndarray], pooled: np.ndarray) -> None:
    """The vectorised path equals summarize_trials on the first replicates (same seed 0)."""
    for r in range(min(2, c.shape[0])):
        trials = {f"t{i}": [a < ci for a in range(k)] for i, ci in enumerate(c[r])}
        summary = summarize_trials(trials, k_max=k, seed=0)
        for j in range(1, k + 1):
            row = summary.macro[j - 1]
            assert (row.pass_hat_ci_low, row.pass_hat_ci_high) == tuple(bounds[j][r]), (j, r)
        assert (summary.micro.ci_low, summary.micro.ci_high) == tuple(pooled[r])


def coverage_rows(replicates: int, ks: tuple[int, ...], seed: int) -> tuple[list[str], list[str]]:
    lines, failures = [], []
    header = f"{'scenario':30} {'T':>3} {'k':>2} {'pass^j coverage, j = 1..k (tasks of this kind)':48} {'pooled':>6} "
    header += f"{'min these':>9} {'zero-w':>6} {'width^1':>7} {'width^k':>7}"
    lines.append(header)
    for k in ks:
        table = pass_hat_table(k)
        for scenario in SCENARIOS:
            for tasks in TASK_COUNTS:
                rng = np.random.default_rng([seed, k, tasks, SCENARIOS.index(scenario)])
                p = scenario.draw(rng, (2 * replicates, tasks))
                c = rng.binomial(k, p)
                covers, these, widths, zero = [], [], {}, 0
                bounds: dict[int, np.ndarray] = {}
                for j in range(1, k + 1):
                    values = table[c, j - 1]
                    b = interval_bounds(values, j, k, 0)
                    bounds[j] = b
                    truth = scenario.moment(j)
                    covers.append(float(np.mean((b[:, 0] <= truth) & (truth <= b[:, 1]))))
                    local = np.mean(p**j, axis=1)
                    these.append(float(np.mean((b[:, 0] <= local) & (local <= b[:, 1]))))
                    width = b[:, 1] - b[:, 0]
                    zero += int(np.sum(width <= 0.0))
                    widths[j] = float(np.mean(width))
                pooled = betting_bounds(c / k, confidence=0.95, weights=np.ones_like(c, dtype=float), seed=0)[:, 1:]
                truth = scenario.moment(1)
                pooled_cover = float(np.mean((pooled[:, 0] <= truth) & (truth <= pooled[:, 1])))
                zero += int(np.sum(pooled[:, 1] - pooled[:, 0] <= 0.0))
                check_against_summary(c, k, bounds, pooled)
                shown = " ".join(f"{v:.3f}" for v in covers)
                lines.append(
                    f"{scenario.name:30} {tasks:>3} {k:>2} {shown:48} {pooled_cover:>6.3f} {min(these):>9.3f} "
                    f"{zero:>6} {widths[1]:>7.3f} {widths[k]:>7.3f}"
                )
                target = COVERAGE_TARGET.get(tasks)
                if zero:
                    failures.append(f"{scenario.name}, T={tasks}, k={k}: {zero} zero-width interval(s)")
                if target is not None and min([*covers, pooled_cover]) < target:
                    failures.append(
                        f"{scenario.name}, T={tasks}, k={k}: coverage {min([*covers, pooled_cover]):.3f} < {target}"
                    )
    return lines, failures


def fpr_rows(replicates: int, ks: tuple[int, ...], seed: int) -> tuple[list[str], list[str]]:
    lines, failures = [], []
    bound = 0.05 + 2.0 * math.sqrt(0.05 * 0.95 / replicates)
    lines.append(f"{'scenario':30} {'T':>3} {'k':>2} {'two-sided':>9} {'worse gate':>10}   (target <= {bound:.3f})")
    for k in ks:
        for scenario in SCENARIOS:
            for tasks in FPR_TASKS:
                rng = np.random.default_rng([seed, 7, k, tasks, SCENARIOS.index(scenario)])
                p = scenario.draw(rng, (2 * replicates, tasks))
                d = (rng.binomial(k, p) - rng.binomial(k, p)) / k
                two = np.mean([paired_sign_flip_test(row, seed=r).rejected for r, row in enumerate(d)])
                gate = np.mean(
                    [paired_sign_flip_test(row, alternative="less", seed=r).rejected for r, row in enumerate(d)]
                )
                lines.append(f"{scenario.name:30} {tasks:>3} {k:>2} {two:>9.3f} {gate:>10.3f}")
                if max(two, gate) > bound:
                    failures.append(f"{scenario.name}, T={tasks}, k={k}: false-positive rate {max(two, gate):.3f}")
    return lines, failures


def power_rows(replicates: int, seed: int) -> tuple[list[str], list[str]]:
    """Simulated power from 2x ``replicates`` battles through the public test, the planner's from 4x its own (so
    the Monte-Carlo error of the difference stays near 1.4 points at 1,000)."""
    lines, failures = [], []
    lines.append(f"{'scenario':30} {'T':>3} {'k':>2} {'delta':>6} {'simulated':>9} {'planner':>7} {'diff':>6}")
    chosen = [s for s in SCENARIOS if s.name in ("uniform", "beta(5,2)", "40% 1 / 30% 0 / 30% U(.2,.8)", "all 0.5")]
    k = 4
    for scenario in chosen:
        pool = scenario.draw(np.random.default_rng([seed, 11]), (20_000,))
        for tasks in (10, 30, 60):
            for delta in (-0.1, -0.2):
                rng = np.random.default_rng([seed, 13, tasks, int(-delta * 100), chosen.index(scenario)])
                p = scenario.draw(rng, (2 * replicates, tasks))
                # The planner's model (shifted_probabilities) moves each p by delta * p / mean p of the pool; tasks
                # here are drawn from the scenario itself, so the same shift uses the pool's mean.
                cand = np.clip(p + delta * p / float(np.mean(pool)), 0.0, 1.0)
                d = (rng.binomial(k, cand) - rng.binomial(k, p)) / k
                pv = sign_flip_p_values(d, seed=tasks)
                simulated = float(np.mean(np.minimum(1.0, 2.0 * pv.min(axis=1)) <= 0.05))
                planner = simulated_power(
                    pool, tasks=tasks, k=k, delta=delta, replicates=4 * replicates, seed=seed + 99
                )
                diff = planner - simulated
                row = f"{scenario.name:30} {tasks:>3} {k:>2} {delta:>6.2f} {simulated:>9.3f} {planner:>7.3f}"
                lines.append(f"{row} {diff:>+6.3f}")
                if abs(diff) > POWER_TOLERANCE:
                    failures.append(f"power {scenario.name}, T={tasks}, delta={delta}: planner off by {diff:+.3f}")
    return lines, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicates", type=int, default=1000, help="simulated battles per cell (default 1000)")
    parser.add_argument("--quick", action="store_true", help="200 replicates and k = 4 only (a smoke run)")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument(
        "--only", choices=["coverage", "fpr", "power"], action="append", help="run these tables only (repeatable)"
    )
    args = parser.parse_args(argv)
    replicates = 200 if args.quick else args.replicates
    ks = (4,) if args.quick else (4, 8)
    failures: list[str] = []
    sections: tuple[tuple[str, str, Callable[[], tuple[list[str], list[str]]]], ...] = (
        ("coverage", "coverage of the summary's 95% intervals", lambda: coverage_rows(replicates, ks, args.seed)),
        (
            "fpr",
            "false-positive rate of arena compare (same agent twice, pass^1)",
            lambda: fpr_rows(replicates, ks, args.seed),
        ),
        ("power", "power: paired sign-flip test vs arena plan's prediction", lambda: power_rows(replicates, args.seed)),
    )
    for key, title, run in sections:
        if args.only and key not in args.only:
            continue
        started = time.perf_counter()
        lines, missed = run()
        print(f"\n== {title} ({replicates} replicates) ==")
        print("\n".join(lines))
        print(f"({time.perf_counter() - started:.1f} s)")
        failures += missed
    if args.quick and failures:
        print("\n(--quick: Monte-Carlo error is larger; rerun with --replicates 1000 before trusting a miss)")
    print("\nTARGETS MISSED:" if failures else "\nall targets met")
    for failure in failures:
        print(f"- {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

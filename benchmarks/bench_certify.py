"""Does sequential certification hold its error rate, and does it save attempts? (issue 28)

Simulates battles through the public API (``green_agent.statistics.certification``) with the scenarios of
``bench_statistics_validity.py``: T tasks (10 and 30) with per-task success probability p drawn from a scenario,
k = 4 Bernoulli(p) attempts each, tasks visited in order, the per-task unbiased pass^j estimate entering the
confidence sequence after each task's block. For every scenario, j in (1, 4) and threshold (truth, truth +- 0.1,
+- 0.2, +- 0.3, inside (0, 1)) it reports:

- err_seq: the share of battles whose certified-or-refuted decision is wrong (any decision when the truth equals
  the threshold), target <= alpha + 2 Monte-Carlo standard errors in every cell;
- err_peek: the same for "re-check the summary's fixed-sample interval (Clopper-Pearson for pass^k, betting
  otherwise) after every task and stop when it excludes the threshold", shown to exceed alpha somewhere (that is
  why the sequence is needed);
- err_fixed / dec_fixed / dec_seq: the fixed design (all T tasks, fixed-sample interval at the same alpha) and its
  decision rate, and the sequential decision rate;
- med_used: median attempts the sequential procedure used, as a share of the fixed design's T x k. Target: <= 0.70
  in every cell where the truth is >= 0.1 from the threshold and the fixed design decides there at least as often as
  its error would let a fair comparison be made (dec_fixed >= 0.8: the question is answerable at this budget;
  below that both designs mostly end inconclusive and use the whole budget).

    .venv/bin/python benchmarks/bench_certify.py            # 1,000 replicates
    .venv/bin/python benchmarks/bench_certify.py --quick    # 300 replicates

Exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_statistics_validity import SCENARIOS, pass_hat_table

from green_agent.statistics import betting_bounds, clopper_pearson_bounds
from green_agent.statistics.certification import sequential_decisions

K = 4
TASKS = (10, 30)
JS = (1, 4)
OFFSETS = (-0.3, -0.2, -0.1, 0.0, 0.1, 0.2, 0.3)
CONFIDENCE = 0.95
ALPHA = 1.0 - CONFIDENCE
EFFICIENCY_TARGET = 0.70
ANSWERABLE = 0.8


def wrong(decision: np.ndarray, truth: float, threshold: float) -> np.ndarray:
    if math.isclose(truth, threshold, abs_tol=1e-12):
        bad: np.ndarray = decision != 0
        return bad
    out: np.ndarray = decision == (-1 if truth > threshold else 1)
    return out


def fixed_decisions(x: np.ndarray, threshold: float) -> np.ndarray:
    bounds = betting_bounds(x, confidence=CONFIDENCE, permutations=4)
    out: np.ndarray = np.where(bounds[:, 1] > threshold, 1, np.where(bounds[:, 2] < threshold, -1, 0))
    return out


def summary_decisions(x: np.ndarray, threshold: float, binary: bool) -> np.ndarray:
    """The summary's fixed-sample interval: Clopper-Pearson when every value is 0 or 1 (pass^k of k attempts), else
    betting."""
    if not binary:
        return fixed_decisions(x, threshold)
    bounds = clopper_pearson_bounds(np.rint(x).sum(axis=1), np.full(x.shape[0], x.shape[1]), CONFIDENCE)
    out: np.ndarray = np.where(bounds[:, 0] > threshold, 1, np.where(bounds[:, 1] < threshold, -1, 0))
    return out


def peek_decisions(x: np.ndarray, threshold: float, binary: bool) -> np.ndarray:
    """Re-check the summary's fixed-sample interval after every task; stop at the first exclusion."""
    rows, n = x.shape
    decision = np.zeros(rows, dtype=np.int64)
    for t in range(1, n + 1):
        undecided = decision == 0
        if not undecided.any():
            break
        d = summary_decisions(x[undecided, :t], threshold, binary)
        decision[np.flatnonzero(undecided)] = d
    return decision


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="300 replicates")
    parser.add_argument("--seed", type=int, default=2028)
    args = parser.parse_args(argv)
    reps = 300 if args.quick else args.replicates
    mc = 2.0 * math.sqrt(ALPHA * (1 - ALPHA) / reps)
    table = pass_hat_table(K)
    t0 = time.perf_counter()
    misses: list[str] = []
    worst_peek = 0.0
    print(f"alpha={ALPHA:.2f} replicates={reps} error target <= {ALPHA + mc:.3f}")
    header = "scenario                          T  j  truth  thr    err_seq err_peek err_fix dec_seq dec_fix med_used"
    print(header)
    for si, scenario in enumerate(SCENARIOS):
        for tasks in TASKS:
            rng = np.random.default_rng([args.seed, si, tasks])
            p = scenario.draw(rng, (reps, tasks))
            c = rng.binomial(K, p)
            for j in JS:
                truth = scenario.moment(j)
                x = table[c, j - 1]
                for off in OFFSETS:
                    thr = round(truth + off, 10)
                    if not 0.02 <= thr <= 0.98:
                        continue
                    dec, used = sequential_decisions(x, thr, CONFIDENCE)
                    err_seq = float(wrong(dec, truth, thr).mean())
                    peek = peek_decisions(x, thr, binary=j == K)
                    err_peek = float(wrong(peek, truth, thr).mean())
                    fixed = fixed_decisions(x, thr)
                    err_fix = float(wrong(fixed, truth, thr).mean())
                    dec_fix = float((fixed != 0).mean())
                    med = float(np.median(used)) / tasks
                    worst_peek = max(worst_peek, err_peek)
                    line = (
                        f"{scenario.name:32s} {tasks:2d} {j:2d} {truth:6.3f} {thr:6.3f} {err_seq:8.3f} {err_peek:8.3f}"
                        f" {err_fix:7.3f} {float((dec != 0).mean()):7.3f} {dec_fix:7.3f} {med:8.2f}"
                    )
                    print(line, flush=True)
                    if err_seq > ALPHA + mc:
                        misses.append(f"error {err_seq:.3f} > {ALPHA + mc:.3f}: {line}")
                    if abs(off) >= 0.1 - 1e-9 and dec_fix >= ANSWERABLE and med > EFFICIENCY_TARGET:
                        misses.append(f"median attempts {med:.2f} > {EFFICIENCY_TARGET} of fixed: {line}")
    print(f"worst error of peeking at the fixed-sample interval after each task: {worst_peek:.3f}")
    if worst_peek <= ALPHA + mc:
        misses.append(f"peeking never exceeded alpha ({worst_peek:.3f}): the benchmark shows nothing")
    print(f"{time.perf_counter() - t0:.1f} s")
    for miss in misses:
        print("MISSED", miss)
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())

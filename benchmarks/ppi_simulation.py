"""Prediction-powered net harm by simulation: coverage and width against labels and judge alone.

Usage::

    nice -n 5 .venv/bin/python benchmarks/ppi_simulation.py --reps 500
    nice -n 5 .venv/bin/python benchmarks/ppi_simulation.py --reps 3 --pairs 400   # tiny

Each run is one unit of ``--pairs`` pairs (default 4,000), of which a share changed beyond
the noise (45%); unchanged pairs are ties. Two task types (60% / 40% of the pairs) with
different truths: among changed pairs, P(worse) / P(better) = 0.30 / 0.24 and
0.22 / 0.28, so the net harm differs by stratum. On every changed pair a **biased judge**
predicts (the issue's judge):

* a true tie is called "candidate better" 15% of the time (the judge favours the candidate);
* 30% of pairs flip when the two answers are swapped: the two orders disagree and the pair
  is recorded as a tie, whatever the truth (shadow-eval's judge makes a disagreement a tie);
* otherwise the judge agrees with the truth 85% of the time, else picks one of the two
  other outcomes at random.

A random sample of ``--fraction`` of each task type's changed pairs (5%, 10%, 20%) carries
the analyst's label (the truth). Three 95% two-sided intervals of the unit's net harm
``Δ = P(worse) − P(better)`` over the *traffic* (the known population value) are built per
run: **PPI++** (:func:`shadoweval.stats.net_harm.ppi.ppi_net_harm`, its t interval), the
**labels alone** (λ = 0, the same stratified estimator and t quantile), and the **judge
alone** (the judge's mean over every changed pair, as if it were the truth). Printed: one
row per label share with each interval's coverage (Wilson 95% interval of the coverage
over the runs) and mean width.

The judge alone must fail coverage (it is biased); PPI must keep ≥ 95% and be narrower than
the labels alone when the judge agrees with people. Results: docs/gate-simulation.md,
section "Prediction-powered net harm".
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import numpy as np
from statsmodels.stats.proportion import proportion_confint

from shadoweval.stats.net_harm.ppi import ppi_net_harm

STRATA = (("chat", 0.6, 0.30, 0.24), ("extract", 0.4, 0.22, 0.28))
"""(task type, share of pairs, P(worse | changed), P(better | changed))."""

CHANGED_SHARE = 0.45
TIE_TO_BETTER = 0.15
FLIP_RATE = 0.30
AGREE = 0.85
Z_95 = 1.959963984540054


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def true_net_harm() -> float:
    """Δ over the traffic: Σ share·P(changed)·(P(worse) − P(better))."""
    return sum(share * CHANGED_SHARE * (w - b) for _, share, w, b in STRATA)


def judge(truth: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The biased judge's predictions of ``truth`` (module doc)."""
    n = truth.size
    pred = truth.copy()
    wrong = rng.random(n) > AGREE
    shift = rng.choice((1.0, 2.0), size=n)
    pred[wrong] = ((truth[wrong] + 1.0 + shift[wrong]) % 3.0) - 1.0
    ties = truth == 0.0
    pred[ties & (rng.random(n) < TIE_TO_BETTER)] = -1.0
    pred[rng.random(n) < FLIP_RATE] = 0.0
    return pred


def one_run(
    pairs: int, fraction: float, rng: np.random.Generator
) -> dict[str, tuple[float, float]]:
    """One unit: the three intervals ``{name: (low, high)}``."""
    names, truth, changed = [], [], []
    for name, share, p_worse, p_better in STRATA:
        k = round(pairs * share)
        names += [name] * k
        ch = rng.random(k) < CHANGED_SHARE
        u = rng.random(k)
        y = np.where(u < p_worse, 1.0, np.where(u < p_worse + p_better, -1.0, 0.0))
        y[~ch] = 0.0
        truth.append(y)
        changed.append(ch)
    y = np.concatenate(truth)
    c = np.concatenate(changed)
    stratum = np.asarray(names, dtype=object)
    pred = judge(y, rng)
    pred[~c] = 0.0
    label = np.full(y.size, math.nan)
    for name, *_ in STRATA:
        rows = np.flatnonzero(c & (stratum == name))
        take = rng.choice(rows, size=max(2, math.ceil(fraction * rows.size)), replace=False)
        label[take] = y[take]
    est = ppi_net_harm(label, pred, c, stratum)
    assert not isinstance(est, str), est
    t = est.quantile(0.025)
    return {
        "ppi": est.interval(0.025),
        "labels": (
            est.labels_estimate - t * est.labels_se,
            est.labels_estimate + t * est.labels_se,
        ),
        "judge": (
            est.predictor_estimate - Z_95 * est.predictor_se,
            est.predictor_estimate + Z_95 * est.predictor_se,
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=500)
    parser.add_argument("--pairs", type=int, default=4000)
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.05, 0.10, 0.20])
    parser.add_argument("--seed", type=int, default=20261207)
    args = parser.parse_args()
    delta = true_net_harm()
    start = time.process_time()
    print(f"# PPI simulation: {args.reps} runs x {args.pairs} pairs, true net harm {delta:+.4f}")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"# CPU {_cpu_model()} ({os.cpu_count()} cores), load average {load}; seed {args.seed}")
    print("| label share | labels | estimator | coverage | 95% CI of coverage | mean width |")
    print("|---|---|---|---|---|---|")
    for fraction in args.fractions:
        rng = np.random.default_rng([args.seed, int(fraction * 1000)])
        hits = {"ppi": 0, "labels": 0, "judge": 0}
        width = {"ppi": 0.0, "labels": 0.0, "judge": 0.0}
        for _ in range(args.reps):
            for key, (low, high) in one_run(args.pairs, fraction, rng).items():
                hits[key] += int(low <= delta <= high)
                width[key] += high - low
        labels = math.ceil(fraction * args.pairs * CHANGED_SHARE)
        for key, name in (("ppi", "PPI++"), ("labels", "labels alone"), ("judge", "judge alone")):
            low, high = proportion_confint(hits[key], args.reps, method="wilson")
            print(
                f"| {fraction:.0%} | ~{labels} | {name} | {hits[key] / args.reps:.1%} | "
                f"{low:.1%}–{high:.1%} | {width[key] / args.reps * 100:.2f} pp |"
            )
    print(f"# {time.process_time() - start:.1f} CPU-seconds")


if __name__ == "__main__":
    main()

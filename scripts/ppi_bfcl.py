"""Prediction-powered net harm on a real BFCL pair: 10% random labels, tool checks as predictor.

Usage (after the BFCL pair is evaluated and its official scores imported as the reference,
docs/real-data.md §1c; the database holds one run)::

    .venv/bin/python scripts/ppi_bfcl.py --database-url sqlite:///W/se.db --run RUN \
        --fraction 0.1 --draws 500

Per category (task type) of the run, with the product's own functions:

* **the truth**: the official per-item correctness imported as ``reference`` judgements
  (+1 only the candidate fails, −1 only the baseline fails, 0 otherwise) on every pair; the
  full net harm is their mean over the category's pairs without an infrastructure error, and
  its significance is the exact McNemar test on the discordant pairs (Holm over categories,
  α 0.05) — the official difference;
* **changed pairs**: :func:`shadoweval.stats.change.classify_changes` on the pairs table
  built *without* the reference (the labels may not choose the population);
* **the predictor**: :func:`shadoweval.stats.gate.ppi_net_harm.detector_prediction` — the
  harm detectors and tool-call checks (no judge);
* **the labels**: a seeded random ``--fraction`` of each category's changed pairs carries its
  official correctness; :func:`shadoweval.stats.net_harm.ppi.ppi_net_harm` gives the
  prediction-powered net harm and its 95% interval (t, two-sided).

Printed: one row per category for the first draw (estimate, interval, λ, labels, the full
net harm and whether the interval covers it, the sign check where the official difference is
significant), then the coverage over ``--draws`` draws. Unchanged pairs whose reference
differs break the "unchanged is a tie" premise; they are counted and printed.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from scipy import stats as scipy_stats

from shadoweval.application.database import open_repository
from shadoweval.stats.change import classify_changes
from shadoweval.stats.checks.pair_arrays import PairArrays
from shadoweval.stats.frame import pairs_frame
from shadoweval.stats.gate.ppi_net_harm import detector_prediction
from shadoweval.stats.judgements import resolve_judgements
from shadoweval.stats.multiplicity import holm
from shadoweval.stats.net_harm.ppi import ppi_net_harm
from shadoweval.stats.policy import parse_policy_yaml


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--run", required=True)
    parser.add_argument("--fraction", type=float, default=0.1)
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--seed", type=int, default=31)
    args = parser.parse_args()
    with open_repository(args.database_url, upgrade=False) as repo:
        run = repo.get_run(args.run)
        if run is None:
            raise SystemExit(f"--run {args.run!r}: run not found")
        policy = parse_policy_yaml(run.policy_yaml)
        scores = repo.load_pair_scores(args.run)
        judgements = repo.list_judgements(args.run)
    bare = pairs_frame(scores, policy)
    changed_all = classify_changes(bare, policy).changed
    resolved = resolve_judgements([j for j in judgements if j.source == "reference"], [])
    truth_frame = pairs_frame(scores, policy, judgements=resolved)
    assert list(truth_frame["exchange_id"]) == list(bare["exchange_id"])
    arrays = PairArrays.from_frame(bare)
    keep = ~arrays.infra
    truth = truth_frame["quality"].to_numpy(dtype=float)
    prediction = detector_prediction(arrays)
    task = bare["task_type"].astype(str).to_numpy()
    rows = []
    for name in sorted(set(task)):
        unit = keep & (task == name) & ~np.isnan(truth)
        y, c, f = truth[unit], changed_all[unit], prediction[unit]
        worse, better = int(np.sum(y > 0)), int(np.sum(y < 0))
        p = scipy_stats.binomtest(worse, worse + better).pvalue if worse + better else 1.0
        rows.append((name, y, c, f, worse, better, p))
    adjusted = holm([r[6] for r in rows])
    print(f"# run {args.run}: {len(bare)} pairs; fraction {args.fraction:.0%}; draws {args.draws}")
    print(
        "| category | pairs | changed | labels | λ | PPI net harm (95% CI) | full net harm | "
        "covers | official Holm p | sign | coverage over draws | unchanged pairs truth ≠ 0 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (name, y, c, f, worse, better, _), p_adj in zip(rows, adjusted, strict=True):
        full = float(y.mean()) if y.size else math.nan
        stray = int(np.count_nonzero(~c & (y != 0)))
        label_rows = np.flatnonzero(c)
        if label_rows.size < 2:
            print(f"| {name} | {y.size} | {label_rows.size} | – | – | too few changed | "
                  f"{100 * full:+.1f} pp | – | {p_adj:.3g} | – | – | {stray} |")  # fmt: skip
            continue
        covered, first = 0, None
        for draw in range(args.draws):
            rng = np.random.default_rng([args.seed, draw])
            k = max(2, math.ceil(args.fraction * label_rows.size))
            label = np.full(y.size, math.nan)
            take = rng.choice(label_rows, size=k, replace=False)
            label[take] = y[take]
            e = ppi_net_harm(label, f, c, np.full(y.size, name, dtype=object))
            if isinstance(e, str):
                continue
            low, high = e.interval(0.025)
            covered += int(low <= full <= high)
            if first is None:
                first = (e, low, high, k)
        if first is None:
            continue
        e, low, high, k = first
        significant = p_adj <= 0.05
        sign = (
            ("right" if np.sign(e.estimate) == np.sign(full) else "WRONG") if significant else "–"
        )
        print(
            f"| {name} | {y.size} | {int(c.sum())} | {k} | {e.lam:.2f} | "
            f"{100 * e.estimate:+.1f} pp ({100 * low:+.1f} to {100 * high:+.1f}) | "
            f"{100 * full:+.1f} pp ({worse} worse, {better} better) | "
            f"{'yes' if low <= full <= high else 'NO'} | {p_adj:.3g} | {sign} | "
            f"{covered / args.draws:.1%} | {stray} |"
        )


if __name__ == "__main__":
    main()

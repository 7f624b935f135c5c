"""The statistical gate of shadow-eval: policy, paired tests, quantile intervals, verdict.

Pure computation (numpy, scipy, pandas, statsmodels, pydantic, yaml); it never touches
storage, the message bus or the network. Methods, pitfalls and test vectors are in
gate-statistics.md; each module cites its sources.

* :mod:`stats.policy` — :class:`GatePolicy`, :func:`load_policy`, :func:`policy_hash`.
* :mod:`stats.paired_binary` — McNemar (exact, mid-p, asymptotic), Tango's score test/CI.
* :mod:`stats.multiplicity` — Holm adjustment of the harm family.
* :mod:`stats.means` — one-sided t test of a mean against an absolute margin.
* :mod:`stats.quantiles` — linear quantiles, order-statistic CIs, quantile-ratio intervals
  (paired Poisson bootstrap for the gate; the unpaired resampling-free one for reference).
* :mod:`stats.frame` — :func:`pairs_frame`, PairScore records to the gate's table.
* :mod:`stats.checks` — one check per metric and task type (infrastructure errors apart).
* :mod:`stats.gate` — :func:`evaluate_gate`, the PROMOTE / HOLD / ROLLBACK verdict.
"""

from __future__ import annotations

from stats.frame import PAIRS_COLUMNS, pairs_frame
from stats.gate import evaluate_gate
from stats.inputs import InvalidDataError
from stats.means import MeanNonInferiorityResult, mean_noninferiority
from stats.multiplicity import holm
from stats.paired_binary import (
    McNemarResult,
    TangoInterval,
    TangoTestResult,
    mcnemar,
    tango_score_ci,
    tango_score_test,
)
from stats.policy import (
    DEFAULT_POLICY_FILE,
    GatePolicy,
    InfraErrorPolicy,
    TaskTypePolicy,
    effective,
    load_policy,
    parse_policy,
    parse_policy_yaml,
    policy_hash,
    policy_to_yaml,
)
from stats.quantiles import (
    OrderStatisticRanks,
    QuantileCI,
    QuantileRatioResult,
    order_statistic_ranks,
    paired_quantile_ratio_ci,
    quantile_ci,
    quantile_ratio_ci,
    sample_quantile,
)

__all__ = [
    "DEFAULT_POLICY_FILE",
    "PAIRS_COLUMNS",
    "GatePolicy",
    "InfraErrorPolicy",
    "InvalidDataError",
    "McNemarResult",
    "MeanNonInferiorityResult",
    "OrderStatisticRanks",
    "QuantileCI",
    "QuantileRatioResult",
    "TangoInterval",
    "TangoTestResult",
    "TaskTypePolicy",
    "effective",
    "evaluate_gate",
    "holm",
    "load_policy",
    "mcnemar",
    "mean_noninferiority",
    "order_statistic_ranks",
    "paired_quantile_ratio_ci",
    "pairs_frame",
    "parse_policy",
    "parse_policy_yaml",
    "policy_hash",
    "policy_to_yaml",
    "quantile_ci",
    "quantile_ratio_ci",
    "sample_quantile",
    "tango_score_ci",
    "tango_score_test",
]

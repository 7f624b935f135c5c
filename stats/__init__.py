"""The statistical gate of shadow-eval: policy, paired tests, quantile intervals, verdict.

Pure computation (numpy, scipy, pandas, statsmodels, pydantic, yaml); it never touches
storage, the message bus or the network. Methods, pitfalls and test vectors are in
gate-statistics.md; each module cites its sources.

* :mod:`stats.policy` — :class:`GatePolicy`, :func:`load_policy`, :func:`policy_hash`.
* :mod:`stats.paired_binary` — McNemar (exact, mid-p, asymptotic), Tango's score test/CI.
* :mod:`stats.multiplicity` — Holm adjustment of the harm family.
* :mod:`stats.quantiles` — linear quantiles, order-statistic CIs, and the gate's
  quantile-ratio interval (the resampling-free paired Poisson bootstrap).
* :mod:`stats.sequential` — checkpoints, confidence sequences, α spending, sequential
  McNemar.
* :mod:`stats.noise_floor`, :mod:`stats.power`, :mod:`stats.validity`,
  :mod:`stats.report_only` — noise-floor linearisation and tail report, sample sizes,
  task-mix and coverage checks, Mann–Whitney / Hodges–Lehmann / CLES.
* :mod:`stats.frame` — :func:`pairs_frame`, PairScore records to the gate's table.
* :mod:`stats.checks` — one check per metric and analysis unit (infrastructure apart).
* :mod:`stats.looks` — :func:`look_levels` (a look's spent levels), :func:`design_sample_size`.
* :mod:`stats.checkpoints` — :func:`evaluate_poll`: the verdict of a poll, on the prefix
  of the latest checkpoint.
* :mod:`stats.gate` — :func:`evaluate_gate`, the PROMOTE / HOLD / ROLLBACK verdict.
* :mod:`stats.summary` — :func:`task_type_summary`, descriptive and report-only numbers.
* :mod:`stats.labels` — :func:`label_summary`, human labels as win / loss rates with Wilson
  intervals per task type.
* :mod:`stats.judgements` — one quality judgement per pair (human > reference > judge) and
  judge–human agreement (Cohen's κ).
* :mod:`stats.net_harm` — divergence strata, the stratified net-harm estimator and the
  ``net_harm`` check.
"""

from __future__ import annotations

from stats.checkpoints import evaluate_poll
from stats.frame import PAIRS_COLUMNS, pairs_frame
from stats.gate import evaluate_gate
from stats.inputs import InvalidDataError
from stats.labels import LABEL_SUMMARY_COLUMNS, label_summary
from stats.looks import LookLevels, design_sample_size, look_levels
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
    OutputTokensPolicy,
    SequentialPolicy,
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
    paired_quantile_ratios_rf,
    quantile_ci,
    sample_quantile,
)

__all__ = [
    "DEFAULT_POLICY_FILE",
    "LABEL_SUMMARY_COLUMNS",
    "PAIRS_COLUMNS",
    "GatePolicy",
    "InfraErrorPolicy",
    "InvalidDataError",
    "LookLevels",
    "McNemarResult",
    "OrderStatisticRanks",
    "OutputTokensPolicy",
    "QuantileCI",
    "QuantileRatioResult",
    "SequentialPolicy",
    "TangoInterval",
    "TangoTestResult",
    "TaskTypePolicy",
    "design_sample_size",
    "effective",
    "evaluate_gate",
    "evaluate_poll",
    "holm",
    "label_summary",
    "load_policy",
    "look_levels",
    "mcnemar",
    "order_statistic_ranks",
    "paired_quantile_ratios_rf",
    "pairs_frame",
    "parse_policy",
    "parse_policy_yaml",
    "policy_hash",
    "policy_to_yaml",
    "quantile_ci",
    "sample_quantile",
    "tango_score_ci",
    "tango_score_test",
]

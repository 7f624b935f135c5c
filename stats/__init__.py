"""The statistical gate of shadow-eval: policy, paired tests, quantile intervals, verdict.

Pure computation (numpy, scipy, pandas, statsmodels, pydantic, yaml); it never touches
storage, the message bus or the network. Methods, pitfalls and test vectors are in
gate-statistics.md; each module cites its sources.

* :mod:`shadoweval.stats.policy` — :class:`GatePolicy`, :func:`load_policy`, :func:`policy_hash`.
* :mod:`shadoweval.stats.paired_binary` — McNemar (exact, mid-p, asymptotic), Tango's score test/CI.
* :mod:`shadoweval.stats.multiplicity` — Holm adjustment of the harm family.
* :mod:`shadoweval.stats.quantiles` — linear quantiles, order-statistic CIs, and the gate's
  quantile-ratio interval (the resampling-free paired Poisson bootstrap).
* :mod:`shadoweval.stats.sequential` — checkpoints, confidence sequences, α spending, sequential
  McNemar.
* :mod:`shadoweval.stats.noise_floor`, :mod:`shadoweval.stats.power`,
:mod:`shadoweval.stats.validity`,
  :mod:`shadoweval.stats.report_only` — noise-floor linearisation and tail report, sample sizes,
  task-mix and coverage checks, Mann–Whitney / Hodges–Lehmann / CLES.
* :mod:`shadoweval.stats.frame` — :func:`pairs_frame`, PairScore records to the gate's table.
* :mod:`shadoweval.stats.checks` — one check per metric and analysis unit (infrastructure apart).
* :mod:`shadoweval.stats.looks` — :func:`look_levels` (a look's spent levels),
:func:`design_sample_size`.
* :mod:`shadoweval.stats.checkpoints` — :func:`evaluate_poll`: the verdict of a poll, on the prefix
  of the latest checkpoint.
* :mod:`shadoweval.stats.engine` — the verdict engine both the gate and the canary step decide
  through: check families, the decision rule, the reason ranking.
* :mod:`shadoweval.stats.gate` — :func:`evaluate_gate`, the PROMOTE / HOLD / ROLLBACK verdict.
* :mod:`shadoweval.stats.canary` — the live canary's two-arm checks and its step verdict.
* :mod:`shadoweval.stats.summary` — :func:`task_type_summary`, descriptive and report-only numbers.
* :mod:`shadoweval.stats.labels` — :func:`label_summary`, human labels as win / loss rates with
Wilson
  intervals per task type.
* :mod:`shadoweval.stats.judgements` — one quality judgement per pair (human > reference > judge)
and
  judge–human agreement (Cohen's κ).
* :mod:`shadoweval.stats.net_harm` — divergence strata, the stratified net-harm estimator and the
  ``net_harm`` check.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# The names below are imported on first use (PEP 562), so that importing one light module
# of the package (the policy schema: pydantic and YAML) does not import pandas, SciPy and
# statsmodels: `replay run` freezes a run's policy in the light install (no `evaluate`
# extra). `from shadoweval.stats import evaluate_gate` works as before.
if TYPE_CHECKING:
    from shadoweval.stats.checkpoints import evaluate_poll
    from shadoweval.stats.frame import PAIRS_COLUMNS, pairs_frame
    from shadoweval.stats.gate import evaluate_gate
    from shadoweval.stats.inputs import InvalidDataError
    from shadoweval.stats.labels import LABEL_SUMMARY_COLUMNS, label_summary
    from shadoweval.stats.looks import LookLevels, design_sample_size, look_levels
    from shadoweval.stats.multiplicity import holm
    from shadoweval.stats.paired_binary import (
        McNemarResult,
        TangoInterval,
        TangoTestResult,
        mcnemar,
        tango_score_ci,
        tango_score_test,
    )
    from shadoweval.stats.policy import (
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
    from shadoweval.stats.quantiles import (
        OrderStatisticRanks,
        QuantileCI,
        QuantileRatioResult,
        order_statistic_ranks,
        paired_quantile_ratios_rf,
        quantile_ci,
        sample_quantile,
    )

_SOURCES: dict[str, str] = {
    "DEFAULT_POLICY_FILE": "shadoweval.stats.policy",
    "GatePolicy": "shadoweval.stats.policy",
    "InfraErrorPolicy": "shadoweval.stats.policy",
    "InvalidDataError": "shadoweval.stats.inputs",
    "LABEL_SUMMARY_COLUMNS": "shadoweval.stats.labels",
    "LookLevels": "shadoweval.stats.looks",
    "McNemarResult": "shadoweval.stats.paired_binary",
    "OrderStatisticRanks": "shadoweval.stats.quantiles",
    "OutputTokensPolicy": "shadoweval.stats.policy",
    "PAIRS_COLUMNS": "shadoweval.stats.frame",
    "QuantileCI": "shadoweval.stats.quantiles",
    "QuantileRatioResult": "shadoweval.stats.quantiles",
    "SequentialPolicy": "shadoweval.stats.policy",
    "TangoInterval": "shadoweval.stats.paired_binary",
    "TangoTestResult": "shadoweval.stats.paired_binary",
    "TaskTypePolicy": "shadoweval.stats.policy",
    "design_sample_size": "shadoweval.stats.looks",
    "effective": "shadoweval.stats.policy",
    "evaluate_gate": "shadoweval.stats.gate",
    "evaluate_poll": "shadoweval.stats.checkpoints",
    "holm": "shadoweval.stats.multiplicity",
    "label_summary": "shadoweval.stats.labels",
    "load_policy": "shadoweval.stats.policy",
    "look_levels": "shadoweval.stats.looks",
    "mcnemar": "shadoweval.stats.paired_binary",
    "order_statistic_ranks": "shadoweval.stats.quantiles",
    "paired_quantile_ratios_rf": "shadoweval.stats.quantiles",
    "pairs_frame": "shadoweval.stats.frame",
    "parse_policy": "shadoweval.stats.policy",
    "parse_policy_yaml": "shadoweval.stats.policy",
    "policy_hash": "shadoweval.stats.policy",
    "policy_to_yaml": "shadoweval.stats.policy",
    "quantile_ci": "shadoweval.stats.quantiles",
    "sample_quantile": "shadoweval.stats.quantiles",
    "tango_score_ci": "shadoweval.stats.paired_binary",
    "tango_score_test": "shadoweval.stats.paired_binary",
}
"""Each public name and the module it comes from (imported when the name is first read)."""


def __getattr__(name: str) -> Any:
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(source), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_SOURCES})


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

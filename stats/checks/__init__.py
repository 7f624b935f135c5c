"""One gate check per metric and analysis unit: statistic, sequential interval, plain reason.

The gate evaluates each analysis unit (the pooled pairs and each task type) on numpy
columns (:class:`PairArrays`, built once per evaluation and sliced per task type, so a
verdict over 1,000,000 pairs stays a few vectorised passes). Each builder returns a
:class:`~shadoweval.records.Check` whose ``reason`` is a sentence an operator can act on,
with the numbers, and whose ``statistic`` names the method, the look and the look's
levels. The rules (gate-statistics.md §2.2–§2.4):

* a check **FAIL**s when harm is significant (critical paired-binary metrics: McNemar
  mid-p, Holm-adjusted across task types × critical metrics, at the look's spent
  ``α_RB,k``) or its sequential interval lies wholly beyond the margin on the harmful
  side — whatever the number of pairs;
* it **PASS**es when non-inferiority is shown by the look's sequential test on at least
  its minimum pairs: ``max(min_pairs, power calculation at the observed discordance —
  and difference, where it favours the candidate — or spread)``
  (:mod:`shadoweval.stats.power`, reported in the reason);
* otherwise it is **INCONCLUSIVE** with the reason (too few pairs, NaN values, margin not
  yet cleared). No data is never a pass.

Metrics and methods:

==================  ===========================================  ==========================
check               statistic                                    sequential validity
==================  ===========================================  ==========================
error_rate,         δ = p_cand_fail − p_base_fail. NI: mean of   no cap: confidence
format_parse,       d_i ∈ {−1, 0, 1} with sd ≥ √(m(1 − m)) (the  sequence on d; cap:
infra_error_rate    score-test variance under H0 at margin m),   Tango at α_k. Harm:
                    or Tango's score test; harm: McNemar mid-p   mid-p at α_RB,k after Holm
similarity          with baseline-repeat: e = D_c − (1+r)·D_n    confidence sequence
                    against δ_abs; else mean D against a limit   (spending with n_max)
latency p50/95/99   quantile ratio, resampling-free paired       α_k (union bound)
                    Poisson bootstrap (log-normal interval)
output_tokens       e = c − k·b (k = ratio_max) against 0        confidence sequence
                                                                 (spending with n_max)
harm_<kind>         as error_rate on a harm detector's per-side  as error_rate
                    flag (pairs where both sides answered)
tool_text_answer    as error_rate on "answered in text, no       as error_rate
                    call" where tools were offered
==================  ===========================================  ==========================

``similarity`` is report-only under ``change.mode: judge`` (the default): divergence
selects pairs for a quality judgement (:mod:`shadoweval.stats.change`) and never fails; the
direction comes from the harm checks and the gate's ``net_harm`` check
(:mod:`shadoweval.stats.net_harm`).

Infrastructure errors (reference failure case 11): a pair with an infrastructure error on
either side (timeout, connection failure, HTTP 408/429/5xx, undecodable body, cancelled
live request) says nothing about the model, so every quality check leaves it out and
counts it in its reason; ``infra_error_rate`` gates them instead (its FAIL means HOLD,
never ROLLBACK: :mod:`shadoweval.stats.gate`).

Modules, by metric family:

* :mod:`shadoweval.stats.checks.pair_arrays` — :class:`PairArrays`, the typed columns;
  :func:`infra_pairs`.
* :mod:`shadoweval.stats.checks.reasons` — what every check shares: its numbers and record, number
  formats, the minimum-pairs and infrastructure notes.
* :mod:`shadoweval.stats.checks.sequential_interval` — the look's interval of a mean and the
  decision of a mean-type check on it.
* :mod:`shadoweval.stats.checks.binary` — ``infra_error_rate``, ``error_rate``, ``format_parse``.
* :mod:`shadoweval.stats.checks.similarity` — ``similarity`` (noise floor or absolute limit;
  report-only in ``change.mode: judge``).
* :mod:`shadoweval.stats.checks.harms` — ``harm_<kind>``, one per harm detector.
* :mod:`shadoweval.stats.checks.tools` — ``tool_text_answer`` and the tool-change counts.
* :mod:`shadoweval.stats.checks.latency` — ``latency_<metric>_p50/p95/p99``.
* :mod:`shadoweval.stats.checks.cost` — ``output_tokens``.

This package re-exports the names the gate, the dashboard and the tests use.
"""

from __future__ import annotations

from shadoweval.stats.checks.binary import (
    BINARY_STATISTIC,
    BINARY_STATISTIC_CAPPED,
    BinaryAnalysis,
    analyse_binary,
    binary_analyses,
    binary_check,
)
from shadoweval.stats.checks.cost import COST_STATISTIC, cost_check
from shadoweval.stats.checks.harms import (
    HARM_LABELS,
    HARM_METRIC_PREFIX,
    harm_analyses,
    harm_metric,
)
from shadoweval.stats.checks.latency import (
    LATENCY_NOT_CO_TIMED,
    LATENCY_REPORT_ONLY,
    LATENCY_STATISTIC,
    MIN_LATENCY_PAIRS,
    STREAM_ONLY_METRICS,
    latency_checks,
    latency_gated,
)
from shadoweval.stats.checks.pair_arrays import PairArrays, infra_pairs
from shadoweval.stats.checks.reasons import (
    INFRA_CONSEQUENCE,
    INFRA_FAILED,
    INFRA_METRIC,
    infra_note,
)
from shadoweval.stats.checks.sequential_interval import SequentialInterval, sequential_mean_interval
from shadoweval.stats.checks.similarity import (
    NO_NOISE_FLOOR,
    REPORT_ONLY,
    SIMILARITY_NOISE_STATISTIC,
    SIMILARITY_STATISTIC,
    BaselineRepeats,
    UnitChanges,
    scoring_faults,
    similarity_check,
)
from shadoweval.stats.checks.tools import TOOL_METRIC, ToolAnalysis, tool_analysis, tool_check

__all__ = [
    "BINARY_STATISTIC",
    "BINARY_STATISTIC_CAPPED",
    "COST_STATISTIC",
    "HARM_LABELS",
    "HARM_METRIC_PREFIX",
    "INFRA_CONSEQUENCE",
    "INFRA_FAILED",
    "INFRA_METRIC",
    "LATENCY_NOT_CO_TIMED",
    "LATENCY_REPORT_ONLY",
    "LATENCY_STATISTIC",
    "MIN_LATENCY_PAIRS",
    "NO_NOISE_FLOOR",
    "REPORT_ONLY",
    "SIMILARITY_NOISE_STATISTIC",
    "SIMILARITY_STATISTIC",
    "STREAM_ONLY_METRICS",
    "TOOL_METRIC",
    "BaselineRepeats",
    "BinaryAnalysis",
    "PairArrays",
    "SequentialInterval",
    "ToolAnalysis",
    "UnitChanges",
    "analyse_binary",
    "binary_analyses",
    "binary_check",
    "cost_check",
    "harm_analyses",
    "harm_metric",
    "infra_note",
    "infra_pairs",
    "latency_checks",
    "latency_gated",
    "scoring_faults",
    "sequential_mean_interval",
    "similarity_check",
    "tool_analysis",
    "tool_check",
]

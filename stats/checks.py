"""One gate check per metric and task type: the statistic, its interval and a plain reason.

Each builder takes the rows of one task type (or all rows, for the pooled analysis) and
the policy as applied there, and returns a :class:`~shadoweval.records.Check` whose
``reason`` is a sentence an operator can act on, with the numbers. The rules
(gate-statistics.md §2.2–§2.3):

* a check **FAIL**s when harm is significant (critical paired-binary metrics, McNemar
  mid-p after Holm at ``alpha_harm``) or its interval lies wholly beyond the margin on
  the harmful side — whatever the number of pairs;
* it **PASS**es when non-inferiority is shown at ``alpha`` on at least ``min_pairs``
  pairs with clean data;
* otherwise it is **INCONCLUSIVE** with the reason (too few pairs, NaN values, margin not
  yet cleared). No data is never a pass.

Infrastructure errors (reference failure case 11): a pair with an infrastructure error on
either side (:func:`infra_pairs`: timeout, connection failure, HTTP 408/429/5xx,
undecodable body, cancelled live request) says nothing about the model, so every quality
check (``error_rate``, ``format_parse``, ``similarity``, latency) leaves it out and counts
it in its reason. The paired binary check ``infra_error_rate`` (:data:`INFRA_METRIC`,
fail = infrastructure error) gates them instead; its FAIL means HOLD, never ROLLBACK
(:mod:`stats.gate`).

Paired binary checks are built in two steps (:func:`analyse_binary`, then
:func:`binary_check`) because the harm p-values are Holm-adjusted across all task types
and critical metrics before any check is decided.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from shadoweval.errors import DegenerateDataWarning, ShadowEvalError
from shadoweval.records import Check, CheckOutcome
from stats.means import mean_noninferiority
from stats.paired_binary import (
    TangoInterval,
    TangoTestResult,
    mcnemar,
    tango_score_ci,
    tango_score_test,
)
from stats.policy import BinaryMetricPolicy, InfraErrorPolicy, LatencyPolicy, SimilarityPolicy
from stats.quantiles import paired_quantile_ratio_ci

__all__ = [
    "BINARY_STATISTIC",
    "INFRA_CONSEQUENCE",
    "INFRA_FAILED",
    "INFRA_METRIC",
    "LATENCY_STATISTIC",
    "SIMILARITY_STATISTIC",
    "UNEQUAL_LOAD",
    "BinaryAnalysis",
    "analyse_binary",
    "binary_check",
    "infra_note",
    "infra_pairs",
    "latency_checks",
    "similarity_check",
]

BINARY_STATISTIC = "tango_score_ni+mcnemar_midp"
SIMILARITY_STATISTIC = "ttest_1samp_ni"
LATENCY_STATISTIC = "paired_poisson_bootstrap_quantile_ratio"
UNEQUAL_LOAD = (
    "unequal load: baseline latencies were not measured on the shadow under the same load"
)
INFRA_METRIC = "infra_error_rate"
"""Name of the paired binary check of infrastructure errors (its FAIL means HOLD)."""
INFRA_FAILED = "the candidate's serving infrastructure failed"
INFRA_CONSEQUENCE = "model quality could not be judged on those pairs (HOLD, never ROLLBACK)"
INFRA_COLUMNS = ("baseline_infra_error", "candidate_infra_error")


def infra_pairs(rows: pd.DataFrame) -> pd.Series:
    """Mask of pairs with an infrastructure error on either side.

    A missing (NaN) flag counts as an infrastructure error here, so the pair is left out
    of the quality checks; ``infra_error_rate`` then reports the missing flags and cannot
    pass.
    """
    mask = pd.Series(False, index=rows.index)
    for column in INFRA_COLUMNS:
        flags = rows[column]
        mask |= flags.isna() | flags.eq(True)
    return mask


def infra_note(count: int) -> str:
    """The reason suffix of a quality check that left ``count`` infrastructure pairs out."""
    if not count:
        return ""
    return (
        f" ({count} pairs with an infrastructure error on either side were left out: "
        f"see {INFRA_METRIC})"
    )


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


def _pp(x: float) -> str:
    return f"{100.0 * x:+.1f} pp"


def _p(x: float) -> str:
    return f"{x:.2g}" if x < 0.01 else f"{x:.3f}"


def _level(alpha: float) -> str:
    return f"{100.0 * (1.0 - 2.0 * alpha):g}%"


# ------------------------------------------------------------------ paired binary


@dataclass(frozen=True)
class BinaryAnalysis:
    """Statistics of one paired binary metric before the harm family is adjusted.

    ``fail`` means a model error/empty output (error_rate), a format-parse failure
    (format_parse) or an infrastructure error (infra_error_rate). ``b`` counts pairs where
    only the candidate fails, ``c`` pairs where only the baseline fails; ``harm_p`` is the
    one-sided McNemar mid-p that the candidate fails more (``None`` when not computed).
    ``excluded`` counts pairs not scored on both sides, ``infra_excluded`` pairs left out
    for an infrastructure error. ``problem`` says why no test could be run.
    """

    metric: str
    task_type: str
    label: str
    n: int
    baseline_fails: int
    candidate_fails: int
    b: int
    c: int
    margin: float
    critical: bool
    min_pairs: int
    alpha: float
    excluded: int
    infra_excluded: int
    harm_p: float | None
    ni: TangoTestResult | None
    interval: TangoInterval | None
    problem: str | None


def analyse_binary(
    baseline_fail: pd.Series,
    candidate_fail: pd.Series,
    *,
    metric: str,
    task_type: str,
    label: str,
    block: BinaryMetricPolicy | InfraErrorPolicy,
    min_pairs: int,
    alpha: float,
    excluded: int = 0,
    infra_excluded: int = 0,
) -> BinaryAnalysis:
    """Count the 2×2 table and run Tango's NI test and McNemar's harm test.

    Args:
        baseline_fail: per-pair baseline failure (bool, or 1/0), shape ``(n,)``.
        candidate_fail: per-pair candidate failure, aligned with ``baseline_fail``.
        metric: check name (``error_rate``, ``format_parse``, ``infra_error_rate``).
        task_type: task type or ``POOLED``.
        label: what a failure is, for reasons (``"error/empty"``).
        block: the metric's policy (margin, critical).
        min_pairs: pairs needed to pass.
        alpha: one-sided NI level.
        excluded: pairs the caller left out (not scored on both sides), for the reason.
        infra_excluded: pairs the caller left out because either side had an
            infrastructure error, for the reason.
    """
    n = len(baseline_fail)

    def analysis(
        base: np.ndarray | None = None, cand: np.ndarray | None = None, problem: str | None = None
    ) -> BinaryAnalysis:
        if base is None or cand is None:
            b = c = base_fails = cand_fails = 0
            harm_p, ni, interval = None, None, None
        else:
            b = int(np.count_nonzero(cand & ~base))
            c = int(np.count_nonzero(base & ~cand))
            base_fails, cand_fails = int(base.sum()), int(cand.sum())
            harm_p = mcnemar(b, c, method="midp", alternative="greater").pvalue
            ni = tango_score_test(b, c, n, block.margin, alternative="less")
            interval = tango_score_ci(b, c, n, confidence=1.0 - 2.0 * alpha)
        return BinaryAnalysis(
            metric=metric,
            task_type=task_type,
            label=label,
            n=n,
            baseline_fails=base_fails,
            candidate_fails=cand_fails,
            b=b,
            c=c,
            margin=block.margin,
            critical=block.critical,
            min_pairs=min_pairs,
            alpha=alpha,
            excluded=excluded,
            infra_excluded=infra_excluded,
            harm_p=harm_p,
            ni=ni,
            interval=interval,
            problem=problem,
        )

    if n == 0:
        return analysis(problem="no pairs")
    missing = int(baseline_fail.isna().sum() + candidate_fail.isna().sum())
    if missing:
        return analysis(problem=f"{missing} {label} flags of {n} pairs are missing (NaN)")
    return analysis(baseline_fail.to_numpy(dtype=bool), candidate_fail.to_numpy(dtype=bool))


def binary_check(a: BinaryAnalysis, *, harm_adjusted: float | None, alpha_harm: float) -> Check:
    """Decide a paired binary check from its analysis and its Holm-adjusted harm p-value.

    ``harm_adjusted`` is ``None`` when the metric's harm test is in no family (a quality
    metric that is not critical). For ``infra_error_rate`` it is the p-value adjusted
    within the infrastructure family, and a FAIL reason says that the candidate's serving
    infrastructure failed and quality could not be judged (the gate holds, never rolls
    back, on it).
    """

    excluded = f" ({a.excluded} pairs not scored on both sides were left out)" if a.excluded else ""
    excluded += infra_note(a.infra_excluded)
    infra = a.metric == INFRA_METRIC
    harm_lead = f"{INFRA_FAILED}, significant harm" if infra else "significant harm"
    margin_lead = f"{INFRA_FAILED}, worse than the margin" if infra else "worse than the margin"
    consequence = f"; {INFRA_CONSEQUENCE}" if infra else ""

    def check(outcome: CheckOutcome, reason: str) -> Check:
        return Check(
            metric=a.metric,
            task_type=a.task_type,
            statistic=BINARY_STATISTIC,
            estimate=a.ni.estimate if a.ni else None,
            ci_low=a.interval.low if a.interval else None,
            ci_high=a.interval.high if a.interval else None,
            margin=a.margin,
            n=a.n,
            p_value=a.ni.pvalue if a.ni else None,
            outcome=outcome,
            reason=reason + excluded,
            critical=a.critical,
        )

    if a.problem is not None or a.ni is None or a.interval is None or a.harm_p is None:
        return check(CheckOutcome.INCONCLUSIVE, f"{a.problem or 'not computed'}; cannot judge")
    rates = (
        f"candidate {a.label} rate {_pct(a.candidate_fails / a.n)} vs baseline "
        f"{_pct(a.baseline_fails / a.n)} on {a.n} pairs"
    )
    diff = (
        f"difference {_pp(a.ni.estimate)}, {_level(a.alpha)} CI {_pp(a.interval.low)} "
        f"to {_pp(a.interval.high)}, margin {_pp(a.margin)}"
    )
    if harm_adjusted is not None and harm_adjusted <= alpha_harm:
        return check(
            CheckOutcome.FAIL,
            f"{harm_lead}: {rates}; {a.b} pairs fail only on the candidate vs {a.c} only "
            f"on the baseline (McNemar mid-p {_p(a.harm_p)}, Holm-adjusted "
            f"{_p(harm_adjusted)} <= alpha_harm {alpha_harm:g}){consequence}",
        )
    if a.interval.low > a.margin:
        return check(
            CheckOutcome.FAIL,
            f"{margin_lead}: {rates}; {diff}: the interval lies wholly above the margin"
            f"{consequence}",
        )
    if a.baseline_fails == a.n:
        return check(
            CheckOutcome.INCONCLUSIVE,
            f"the baseline failed ({a.label}) on all {a.n} pairs: nothing to compare against",
        )
    if a.n < a.min_pairs:
        return check(
            CheckOutcome.INCONCLUSIVE, f"too few pairs: {a.n} < min_pairs {a.min_pairs}; {rates}"
        )
    if a.ni.pvalue < a.alpha:
        return check(
            CheckOutcome.PASS,
            f"non-inferior: {rates}; {diff} (Tango p {_p(a.ni.pvalue)} < alpha {a.alpha:g})",
        )
    return check(
        CheckOutcome.INCONCLUSIVE,
        f"non-inferiority not shown yet: {rates}; {diff} "
        f"(Tango p {_p(a.ni.pvalue)} >= alpha {a.alpha:g})",
    )


# ------------------------------------------------------------------ similarity


@dataclass(frozen=True)
class _Numbers:
    """The numeric fields of a check."""

    estimate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n: int = 0
    p_value: float | None = None


def _check(
    metric: str,
    task_type: str,
    statistic: str,
    margin: float,
    outcome: CheckOutcome,
    reason: str,
    numbers: _Numbers,
) -> Check:
    return Check(
        metric=metric,
        task_type=task_type,
        statistic=statistic,
        estimate=numbers.estimate,
        ci_low=numbers.ci_low,
        ci_high=numbers.ci_high,
        margin=margin,
        n=numbers.n,
        p_value=numbers.p_value,
        outcome=outcome,
        reason=reason,
        critical=False,
    )


def similarity_check(
    rows: pd.DataFrame,
    *,
    task_type: str,
    block: SimilarityPolicy,
    min_pairs: int,
    alpha: float,
) -> Check:
    """Mean divergence D = 1 − similarity against ``max_mean_divergence`` (one-sided t).

    Uses the rows with a similarity, leaving out pairs with an infrastructure error on
    either side (counted in the reason). A pair where both outputs are present (neither
    side failed) but the similarity is NaN is a scoring fault: the check is INCONCLUSIVE
    rather than silently dropping it. FAIL when the (1 − 2α) interval of E[D] lies wholly
    above the margin. Similarities must lie in [−1, 1].
    """
    margin = block.max_mean_divergence
    infra = infra_pairs(rows)
    left_out = infra_note(int(infra.sum()))
    rows = rows[~infra]

    def check(outcome: CheckOutcome, reason: str, numbers: _Numbers) -> Check:
        return _check(
            "similarity",
            task_type,
            SIMILARITY_STATISTIC,
            margin,
            outcome,
            reason + left_out,
            numbers,
        )

    similarity = rows["similarity"].astype(float)
    both_present = ~(rows["baseline_fail"].astype(bool) | rows["candidate_fail"].astype(bool))
    unscored = int((similarity.isna() & both_present).sum())
    values = similarity[similarity.notna()].to_numpy(dtype=float)
    n = int(values.size)
    if unscored:
        return check(
            CheckOutcome.INCONCLUSIVE,
            f"{unscored} of {int(both_present.sum())} pairs with both outputs present have no "
            "similarity (NaN); the scorer must be fixed before this can be judged",
            _Numbers(n=n),
        )
    if n == 0:
        return check(CheckOutcome.INCONCLUSIVE, "no pairs with a similarity score", _Numbers())
    out_of_range = int(np.count_nonzero(~np.isfinite(values) | (np.abs(values) > 1.0 + 1e-6)))
    if out_of_range:
        return check(
            CheckOutcome.INCONCLUSIVE,
            f"{out_of_range} of {n} similarities are infinite or outside [-1, 1]",
            _Numbers(n=n),
        )
    if n < 2:
        return check(
            CheckOutcome.INCONCLUSIVE, f"too few pairs: {n} < min_pairs {min_pairs}", _Numbers(n=n)
        )
    divergence = 1.0 - np.clip(values, -1.0, 1.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DegenerateDataWarning)
        result = mean_noninferiority(divergence, margin, alpha=alpha)
    note = "".join(
        f" (note: {w.message})" for w in caught if issubclass(w.category, DegenerateDataWarning)
    )
    for other in caught:
        if not issubclass(other.category, DegenerateDataWarning):
            warnings.warn(other.message, other.category, stacklevel=2)
    numbers = _Numbers(result.estimate, result.ci_low, result.ci_high, n, result.pvalue)
    summary = (
        f"mean divergence (1 - similarity) {result.estimate:.3f}, {_level(alpha)} CI "
        f"{result.ci_low:.3f} to {result.ci_high:.3f} on {n} pairs, limit {margin:g}{note}"
    )
    if result.ci_low > margin:
        return check(
            CheckOutcome.FAIL,
            f"outputs diverge more than allowed: {summary}: the interval lies wholly above "
            "the limit",
            numbers,
        )
    if n < min_pairs:
        return check(
            CheckOutcome.INCONCLUSIVE,
            f"too few pairs: {n} < min_pairs {min_pairs}; {summary}",
            numbers,
        )
    test = f"t test p {_p(result.pvalue)}"
    if result.pvalue < alpha:
        return check(
            CheckOutcome.PASS, f"non-inferior: {summary} ({test} < alpha {alpha:g})", numbers
        )
    return check(
        CheckOutcome.INCONCLUSIVE,
        f"non-inferiority not shown yet: {summary} ({test} >= alpha {alpha:g})",
        numbers,
    )


# ------------------------------------------------------------------ latency


_QUANTILES: tuple[tuple[str, float], ...] = (("p50", 0.5), ("p95", 0.95))

STREAM_ONLY_METRICS: frozenset[str] = frozenset({"ttft_ms"})
"""Latency metrics that only streamed responses have."""


def _latency_rows(rows: pd.DataFrame, metric: str) -> tuple[pd.Series, str, str]:
    """Mask of usable latency rows, a note on exclusions, a note on unequal load."""
    warmup = rows["candidate_warmup"].astype(bool)
    source = rows["latency_baseline_source"].astype(str)
    present = rows[f"baseline_{metric}"].notna() & rows[f"candidate_{metric}"].notna()
    infra = infra_pairs(rows)
    failed = (rows["baseline_fail"].astype(bool) | rows["candidate_fail"].astype(bool)) & ~infra
    used = present & ~warmup & (source != "missing") & ~failed & ~infra
    present &= ~infra
    excluded = []
    if n_infra := int(infra.sum()):
        excluded.append(f"{n_infra} with an infrastructure error, see {INFRA_METRIC}")
    if n_failed := int((present & failed).sum()):
        excluded.append(f"{n_failed} with a failed side (gated by error_rate)")
    if n_warm := int((present & warmup & ~failed).sum()):
        excluded.append(f"{n_warm} warm-up")
    if n_nosource := int((present & ~warmup & ~failed & (source == "missing")).sum()):
        excluded.append(f"{n_nosource} without a baseline latency source")
    excluded_note = f" (excluded: {', '.join(excluded)})" if excluded else ""
    unequal = int(source[used].isin(["live", "recorded"]).sum())
    load_note = f"; {UNEQUAL_LOAD} ({unequal} of {int(used.sum())} pairs)" if unequal else ""
    return used, excluded_note, load_note


def latency_checks(
    rows: pd.DataFrame, *, task_type: str, block: LatencyPolicy, min_pairs: int
) -> list[Check]:
    """p50 and p95 ratio checks (candidate / baseline) for each metric in ``block.metrics``.

    Rows used: both latencies present, neither side failed nor had an infrastructure
    error, not a warm-up replay, and a baseline latency source other than ``missing``. The
    ratio's interval is the **paired** Poisson bootstrap
    (:func:`~stats.quantiles.paired_quantile_ratio_ci`: a pair's two latencies share each
    replicate's weight), seeded with ``block.seed``. PASS when the interval's upper limit
    is at most the limit; FAIL when its lower limit is above it (p95 only with at least
    ``min_pairs_p95`` pairs); otherwise INCONCLUSIVE. A baseline measured live or copied
    from a table (``live``/``recorded``) is flagged as unequal load in the reason.

    TTFT (:data:`STREAM_ONLY_METRICS`) exists only for streamed requests: it is computed on
    streamed pairs, and a group without any streamed request has no TTFT check at all (a
    streamed group without TTFT data is INCONCLUSIVE "no latency pairs", as any metric).
    """
    checks: list[Check] = []
    for metric in block.metrics:
        if metric in STREAM_ONLY_METRICS and not rows["streamed"].astype(bool).any():
            continue  # no streamed request here: the metric does not exist, not "no data"
        metric_rows = rows[rows["streamed"].astype(bool)] if metric in STREAM_ONLY_METRICS else rows
        used, excluded_note, load_note = _latency_rows(metric_rows, metric)
        n = int(used.sum())
        cand = metric_rows.loc[used, f"candidate_{metric}"].to_numpy(dtype=float)
        base = metric_rows.loc[used, f"baseline_{metric}"].to_numpy(dtype=float)
        for name, q in _QUANTILES:
            limit = block.p50_ratio_max if name == "p50" else block.p95_ratio_max
            outcome, reason, numbers = _latency_outcome(
                cand, base, q, name, metric, limit, block, min_pairs
            )
            reason += excluded_note + (load_note if n else "")
            checks.append(
                _check(
                    f"latency_{metric}_{name}",
                    task_type,
                    LATENCY_STATISTIC,
                    limit,
                    outcome,
                    reason,
                    numbers,
                )
            )
    return checks


def _latency_outcome(
    cand: np.ndarray,
    base: np.ndarray,
    q: float,
    name: str,
    metric: str,
    limit: float,
    block: LatencyPolicy,
    min_pairs: int,
) -> tuple[CheckOutcome, str, _Numbers]:
    n = int(cand.size)
    if n == 0:
        return CheckOutcome.INCONCLUSIVE, "no latency pairs", _Numbers()
    try:
        r = paired_quantile_ratio_ci(
            cand,
            base,
            q,
            confidence=block.confidence,
            replicates=block.bootstrap_replicates,
            rng=np.random.default_rng(block.seed),
        )
    except ShadowEvalError as exc:
        return CheckOutcome.INCONCLUSIVE, f"invalid latencies: {exc}", _Numbers(n=n)
    numbers = _Numbers(r.estimate, r.ci_low, r.ci_high, n)
    summary = (
        f"{name} {metric} ratio candidate/baseline {r.estimate:.3f} "
        f"({r.candidate_quantile:.1f} vs {r.baseline_quantile:.1f} ms), "
        f"{100 * block.confidence:g}% paired CI {r.ci_low:.3f} to {r.ci_high:.3f} on {n} pairs, "
        f"limit {limit:g}"
    )
    too_few_p95 = name == "p95" and n < block.min_pairs_p95
    if too_few_p95:
        return (
            CheckOutcome.INCONCLUSIVE,
            f"too few latency pairs for p95: {n} < min_pairs_p95 {block.min_pairs_p95}; {summary}",
            numbers,
        )
    if r.ci_low > limit:
        return (
            CheckOutcome.FAIL,
            f"slower than allowed: {summary}: the interval lies wholly above the limit",
            numbers,
        )
    if n < min_pairs:
        return (
            CheckOutcome.INCONCLUSIVE,
            f"too few pairs: {n} < min_pairs {min_pairs}; {summary}",
            numbers,
        )
    if r.ci_high <= limit:
        return CheckOutcome.PASS, f"within the limit: {summary}", numbers
    return (
        CheckOutcome.INCONCLUSIVE,
        f"limit not cleared yet: {summary}: the interval reaches above the limit",
        numbers,
    )

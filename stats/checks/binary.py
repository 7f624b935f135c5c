"""Paired binary checks: ``infra_error_rate``, ``error_rate``, ``format_parse``.

Each compares failure proportions on the same pairs, δ = p_cand_fail − p_base_fail
(gate-statistics.md §2.2):

* **Non-inferiority** of δ against the margin m: without a sample cap, the confidence
  sequence of the mean of ``d_i ∈ {−1, 0, 1}`` with the standard deviation floored at
  ``√(m(1 − m))`` (the score-test variance under H0: δ = m); with a cap, Tango's score
  test and interval at the look's spent ``α_k`` (Tango 1998).
* **Harm**: the one-sided McNemar mid-p (Fagerland, Lydersen & Laake 2013), Holm-adjusted
  by the gate across task types × critical metrics and compared with ``α_RB,k``; the
  Beta-mixture sequential McNemar p-value is reported beside it.

``infra_error_rate`` is in its own Holm family and its FAIL means HOLD, never ROLLBACK
(:mod:`shadoweval.stats.gate`); ``error_rate`` and ``format_parse`` leave out the pairs with an
infrastructure error on either side and count them in their reasons.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shadoweval.records import Check, CheckOutcome
from shadoweval.stats.checks.pair_arrays import FloatArray, PairArrays
from shadoweval.stats.checks.reasons import (
    INFRA_CONSEQUENCE,
    INFRA_FAILED,
    INFRA_METRIC,
    CheckNumbers,
    fmt_g,
    fmt_p,
    fmt_pct,
    fmt_pp,
    infra_note,
    make_check,
    margin_words,
    min_pairs_note,
)
from shadoweval.stats.checks.sequential_interval import (
    SequentialInterval,
    pairs_to_clear,
    sequential_mean_interval,
)
from shadoweval.stats.looks import LookLevels
from shadoweval.stats.paired_binary import mcnemar, tango_score_ci, tango_score_test
from shadoweval.stats.policy import BinaryMetricPolicy, InfraErrorPolicy
from shadoweval.stats.power import paired_binary_min_pairs
from shadoweval.stats.sequential import sequential_mcnemar

__all__ = [
    "BINARY_STATISTIC",
    "BINARY_STATISTIC_CAPPED",
    "BinaryAnalysis",
    "analyse_binary",
    "binary_analyses",
    "binary_check",
]

BINARY_STATISTIC = "cs_mean_d+mcnemar_midp"
"""Paired binary check without a sample cap: confidence sequence on d_i, McNemar harm."""
BINARY_STATISTIC_CAPPED = "tango_score_ni+mcnemar_midp"
"""Paired binary check with a sample cap: Tango's score test at α_k, McNemar harm."""


def _clip_unit(x: float) -> float:
    """A bound of a difference of proportions, clipped to [-1, 1] (NaN stays NaN)."""
    return x if math.isnan(x) else min(1.0, max(-1.0, x))


@dataclass(frozen=True)
class BinaryAnalysis:
    """Statistics of one paired binary metric before the harm family is adjusted.

    ``fail`` means a model error/empty output (error_rate), a format-parse failure
    (format_parse) or an infrastructure error (infra_error_rate). ``b`` counts pairs where
    only the candidate fails, ``c`` pairs where only the baseline fails; ``harm_p`` is the
    one-sided McNemar mid-p that the candidate fails more (``None`` when not computed),
    ``harm_bf_p`` the always-valid p-value of the Beta-mixture sequential McNemar test
    (reported). ``interval`` is the look's sequential interval of δ, ``ni_p`` Tango's
    one-sided p-value against the margin (the test with a sample cap, at ``levels.alpha_k``;
    reported without one); ``min_pairs``
    is the effective minimum (floor or power calculation). ``excluded`` counts pairs not
    scored on both sides, ``infra_excluded`` pairs left out for an infrastructure
    error. ``problem`` says why no test could be run. ``event`` is the verb of a
    discordant pair in the reason ("8 pairs *fail* only on the candidate"; a harm check
    says "degenerate") and ``excluded_what`` what the ``excluded`` pairs were.
    ``overruled`` says how many candidate flags ground truth overruled before the table
    was counted (:class:`~shadoweval.stats.checks.truth.Overruled`; ``""`` none).
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
    min_pairs_text: str
    levels: LookLevels
    excluded: int
    infra_excluded: int
    harm_p: float | None
    harm_bf_p: float | None
    ni_p: float | None
    interval: SequentialInterval | None
    problem: str | None
    event: str = "fail"
    excluded_what: str = "pairs not scored on both sides"
    overruled: str = ""


def analyse_binary(
    base_fail: FloatArray,
    cand_fail: FloatArray,
    *,
    metric: str,
    task_type: str,
    label: str,
    block: BinaryMetricPolicy | InfraErrorPolicy,
    min_pairs: int,
    levels: LookLevels,
    alpha: float,
    power: float,
    excluded: int = 0,
    infra_excluded: int = 0,
    event: str = "fail",
    excluded_what: str = "pairs not scored on both sides",
) -> BinaryAnalysis:
    """Count the 2×2 table; run the sequential NI interval, Tango's test and McNemar's.

    Non-inferiority of δ = p_cand − p_base against ``block.margin`` m: without a sample
    cap, the confidence sequence of the mean of ``d_i = cand_i − base_i`` with the
    standard deviation floored at ``√(m(1 − m))`` (under H0: δ = m the variance of d is
    ψ − m² ≥ m(1 − m), Tango's score variance; without the floor no discordant pair would
    collapse the sequence); with a cap, Tango's score test and interval at ``α_k``
    (Tango 1998, finite with zero discordant pairs). Harm: one-sided McNemar mid-p
    (Fagerland et al. 2013), adjusted later with Holm.

    Args:
        base_fail: per-pair baseline failure, 1.0 / 0.0 / NaN (missing), shape ``(n,)``.
        cand_fail: per-pair candidate failure, aligned with ``base_fail``.
        metric: check name (``error_rate``, ``format_parse``, ``infra_error_rate``).
        task_type: task type or ``POOLED``.
        label: what a failure is, for reasons (``"error/empty"``).
        block: the metric's policy (margin, critical).
        min_pairs: the floor on the pairs needed to pass.
        levels: the look's levels.
        alpha: the policy's one-sided NI level (of the power calculation).
        power: the policy's design power (of the power calculation).
        excluded: pairs the caller left out (not scored on both sides), for the reason.
        infra_excluded: pairs left out for an infrastructure error, for the reason.
        event: the verb of a discordant pair in the reason (default ``fail``).
        excluded_what: what the ``excluded`` pairs were, for the reason.
    """
    n = int(base_fail.size)
    margin = block.margin

    def analysis(
        counts: tuple[int, int, int, int] | None = None,
        problem: str | None = None,
        interval: SequentialInterval | None = None,
        need: tuple[int, str] = (min_pairs, f"min_pairs {min_pairs}"),
    ) -> BinaryAnalysis:
        harm_p = harm_bf_p = ni_p = None
        b = c = base_fails = cand_fails = 0
        if counts is not None:
            b, c, base_fails, cand_fails = counts
            harm_p = mcnemar(b, c, method="midp", alternative="greater").pvalue
            harm_bf_p = sequential_mcnemar(c, b, side="greater").p_value
            ni_p = tango_score_test(b, c, n, margin, alternative="less").pvalue
        return BinaryAnalysis(
            metric=metric,
            task_type=task_type,
            label=label,
            n=n,
            baseline_fails=base_fails,
            candidate_fails=cand_fails,
            b=b,
            c=c,
            margin=margin,
            critical=block.critical,
            min_pairs=need[0],
            min_pairs_text=need[1],
            levels=levels,
            excluded=excluded,
            infra_excluded=infra_excluded,
            harm_p=harm_p,
            harm_bf_p=harm_bf_p,
            ni_p=ni_p,
            interval=interval,
            problem=problem,
            event=event,
            excluded_what=excluded_what,
        )

    if n == 0:
        return analysis(problem="no pairs")
    missing = int(np.count_nonzero(np.isnan(base_fail)) + np.count_nonzero(np.isnan(cand_fail)))
    if missing:
        return analysis(problem=f"{missing} {label} flags of {n} pairs are missing (NaN)")
    base = base_fail == 1.0
    cand = cand_fail == 1.0
    b = int(np.count_nonzero(cand & ~base))
    c = int(np.count_nonzero(base & ~cand))
    counts = (b, c, int(np.count_nonzero(base)), int(np.count_nonzero(cand)))
    need = _needed_pairs(b, c, n, margin, min_pairs, alpha, power)
    if n < 2:
        return analysis(counts, interval=None, need=need)
    interval = _ni_interval(b, c, n, margin, levels)
    return analysis(counts, interval=interval, need=need)


def _needed_pairs(
    b: int, c: int, n: int, margin: float, min_pairs: int, alpha: float, power: float
) -> tuple[int, str]:
    """The pairs needed to pass: ``min_pairs`` or the power calculation at the observed
    discordance ψ̂ = (b + c) / n, whichever is larger, with its words.

    The power calculation (Nam's score formula, :func:`paired_binary_min_pairs`) assumes
    the true difference is the observed δ̂ = (b − c) / n where that favours the candidate
    (δ̂ < 0), else 0 (no change, never a worse one). Issue 29: at 0 a candidate whose
    format-parse failures fell from 17.5% to 7.2% (BFCL ``java``) needed 12,969 pairs, the
    more the better it was, since its improvement is discordance. The floor only gates
    when a PASS may be taken; the PASS itself is the look's interval below the margin,
    valid at any n, so a data-dependent floor keeps the level.
    """
    psi = (b + c) / n
    delta = min((b - c) / n, 0.0)
    computed = paired_binary_min_pairs(
        max(psi, 1e-9), delta, margin, alpha=alpha, power=power, method="score"
    )
    basis = f"{100 * power:g}% at the observed discordance {fmt_pct(psi)}"
    if delta < 0.0:
        basis += f" and difference {100 * delta:+.1f} pp"
    return min_pairs_note(min_pairs, computed, basis)


def _ni_interval(b: int, c: int, n: int, margin: float, levels: LookLevels) -> SequentialInterval:
    """The look's interval of δ: Tango's score interval at α_k with a sample cap
    (``spending``), else the confidence sequence of the mean of d."""
    if levels.mean_method == "spending":
        tango = tango_score_ci(b, c, n, confidence=1.0 - 2.0 * levels.alpha_k)
        described = f"Tango score interval (alpha_k {fmt_g(levels.alpha_k)} per side)"
        return SequentialInterval(
            (b - c) / n, tango.low, tango.high, math.nan, n, math.nan, described
        )
    d = np.zeros(n, dtype=np.float64)
    d[:b] = 1.0
    d[b : b + c] = -1.0
    # Under H0 (δ = m) the variance of d is ψ − m² ≥ m(1 − m): the floor of Tango's score
    # variance, so that few or no discordant pairs cannot make the sequence collapse.
    return sequential_mean_interval(d, levels, sd_floor=math.sqrt(margin * (1.0 - margin)))


def _reach(a: BinaryAnalysis) -> tuple[int | None, str]:
    """The pairs at which ``a`` would pass, its rates as observed, and at what: the larger
    of its power minimum and the pairs where its interval clears the margin
    (:func:`~shadoweval.stats.checks.sequential_interval.pairs_to_clear` on the same
    interval). Without a cap only (the capped check decides on Tango's test)."""
    interval = a.interval
    if interval is None or a.levels.mean_method != "cs" or a.baseline_fails == a.n:
        return None, ""
    cleared = pairs_to_clear(interval.mean, interval.sd, a.margin, a.levels)
    if cleared is None:
        return None, ""
    psi = (a.b + a.c) / a.n
    at = "zero discordance" if psi == 0 else f"the observed discordance {fmt_pct(psi)}"
    if a.b != a.c:
        at += f" and difference {fmt_pp(interval.mean)}"
    return max(cleared, a.min_pairs), f"{margin_words(a.margin)} margin at {at} ({interval.label})"


def binary_check(a: BinaryAnalysis, *, harm_adjusted: float | None) -> Check:
    """Decide a paired binary check from its analysis and its Holm-adjusted harm p-value.

    ``harm_adjusted`` is ``None`` when the metric's harm test is in no family (a quality
    metric that is not critical). Harm is significant when ``harm_adjusted ≤
    levels.alpha_harm_k``. For ``infra_error_rate`` the family is the infrastructure
    family, and a FAIL reason says that the candidate's serving infrastructure failed
    and quality could not be judged (the gate holds, never rolls back, on it).
    """
    levels = a.levels
    excluded = f" ({a.excluded} {a.excluded_what} were left out)" if a.excluded else ""
    excluded += infra_note(a.infra_excluded) + (f"; {a.overruled}" if a.overruled else "")
    infra = a.metric == INFRA_METRIC
    harm_lead = f"{INFRA_FAILED}, significant harm" if infra else "significant harm"
    margin_lead = f"{INFRA_FAILED}, worse than the margin" if infra else "worse than the margin"
    consequence = f"; {INFRA_CONSEQUENCE}" if infra else ""
    capped = levels.mean_method == "spending"
    method = BINARY_STATISTIC_CAPPED if capped else BINARY_STATISTIC
    statistic = f"{method}; {levels.describe()}"
    interval = a.interval
    # δ is a difference of proportions: the interval shown and stored is clipped to
    # [-1, 1] (a confidence sequence's half-width can reach past ±1); the decisions below
    # read the unclipped bounds, which give the same answers for any margin in (0, 1).
    shown_low = _clip_unit(interval.low) if interval else None
    shown_high = _clip_unit(interval.high) if interval else None

    def check(outcome: CheckOutcome, reason: str) -> Check:
        estimate = (a.b - a.c) / a.n if a.n else None
        return make_check(
            a.metric,
            a.task_type,
            statistic,
            a.margin,
            outcome,
            reason + excluded,
            CheckNumbers(estimate, shown_low, shown_high, a.n, a.ni_p),
            critical=a.critical,
            reach=_reach(a) if outcome is CheckOutcome.INCONCLUSIVE else (None, ""),
        )

    if a.problem is not None or a.harm_p is None or a.ni_p is None:
        return check(CheckOutcome.INCONCLUSIVE, f"{a.problem or 'not computed'}; cannot judge")
    rates = (
        f"candidate {a.label} rate {fmt_pct(a.candidate_fails / a.n)} vs baseline "
        f"{fmt_pct(a.baseline_fails / a.n)} on {a.n} pairs"
    )
    if interval is None:
        return check(CheckOutcome.INCONCLUSIVE, f"too few pairs: {a.n} < min_pairs; {rates}")
    diff = (
        f"difference {fmt_pp(interval.mean)}, {interval.label} {fmt_pp(_clip_unit(interval.low))} "
        f"to {fmt_pp(_clip_unit(interval.high))}, margin {fmt_pp(a.margin)}"
    )
    if interval.note:
        diff += f" (note: {interval.note})"
    if capped:
        tango = f"Tango p {fmt_p(a.ni_p)} vs alpha_k {fmt_g(levels.alpha_k)} at look {levels.look}"
    else:
        tango = f"fixed-n Tango p {fmt_p(a.ni_p)} (reported; decided on the sequence)"
    if harm_adjusted is not None and a.b > a.c and harm_adjusted > levels.alpha_harm_k:
        tango += (
            f"; harm not significant at this look: {a.b} pairs {a.event} only on the "
            f"candidate vs "
            f"{a.c} only on the baseline, McNemar mid-p {fmt_p(a.harm_p)}, Holm-adjusted "
            f"{fmt_p(harm_adjusted)} > alpha_RB_k {fmt_g(levels.alpha_harm_k)}"
        )
    if harm_adjusted is not None and harm_adjusted <= levels.alpha_harm_k:
        return check(
            CheckOutcome.FAIL,
            f"{harm_lead}: {rates}; {a.b} pairs {a.event} only on the candidate vs {a.c} only "
            f"on the baseline (McNemar mid-p {fmt_p(a.harm_p)}, Holm-adjusted "
            f"{fmt_p(harm_adjusted)} <= alpha_RB_k {fmt_g(levels.alpha_harm_k)} at look "
            f"{levels.look}; sequential McNemar p {fmt_p(a.harm_bf_p or 1.0)}){consequence}",
        )
    if interval.low > a.margin:
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
            CheckOutcome.INCONCLUSIVE,
            f"too few pairs: {a.n} < {a.min_pairs_text}; {rates}; {diff}; {tango}",
        )
    shown = a.ni_p < levels.alpha_k if capped else interval.high < a.margin
    if shown:
        return check(
            CheckOutcome.PASS,
            f"non-inferior: {rates}; {diff}; {tango} (on >= {a.min_pairs_text})",
        )
    return check(
        CheckOutcome.INCONCLUSIVE,
        f"non-inferiority not shown yet: {rates}; {diff}; {tango}",
    )


def binary_analyses(
    arrays: PairArrays,
    *,
    task_type: str,
    error_block: BinaryMetricPolicy,
    infra_block: InfraErrorPolicy,
    format_block: BinaryMetricPolicy,
    min_pairs: int,
    levels: LookLevels,
    alpha: float,
    power: float,
) -> list[BinaryAnalysis]:
    """``infra_error_rate``, ``error_rate`` and (where a format was expected) ``format_parse``.

    ``error_rate`` and ``format_parse`` leave out pairs with an infrastructure error on
    either side (counted in their reasons); ``format_parse`` uses the pairs where a
    format was expected and both sides were scored.
    """
    infra = arrays.infra
    n_infra = int(np.count_nonzero(infra))
    keep = ~infra

    def run(
        base: FloatArray,
        cand: FloatArray,
        metric: str,
        label: str,
        block: BinaryMetricPolicy | InfraErrorPolicy,
        *,
        excluded: int = 0,
        infra_excluded: int = 0,
    ) -> BinaryAnalysis:
        return analyse_binary(
            base,
            cand,
            metric=metric,
            task_type=task_type,
            label=label,
            block=block,
            min_pairs=min_pairs,
            levels=levels,
            alpha=alpha,
            power=power,
            excluded=excluded,
            infra_excluded=infra_excluded,
        )

    analyses = [
        run(
            arrays.base_infra, arrays.cand_infra, INFRA_METRIC, "infrastructure error", infra_block
        ),
        run(
            arrays.base_fail[keep],
            arrays.cand_fail[keep],
            "error_rate",
            "error/empty",
            error_block,
            infra_excluded=n_infra,
        ),
    ]
    expected = arrays.format_expected & keep
    if np.any(expected):
        base_ok = arrays.base_format_ok[expected]
        cand_ok = arrays.cand_format_ok[expected]
        scored = ~np.isnan(base_ok) & ~np.isnan(cand_ok)
        analyses.append(
            run(
                (base_ok[scored] == 0.0).astype(np.float64),
                (cand_ok[scored] == 0.0).astype(np.float64),
                "format_parse",
                "format-parse failure",
                format_block,
                excluded=int(np.count_nonzero(~scored)),
                infra_excluded=int(np.count_nonzero(arrays.format_expected & infra)),
            )
        )
    return analyses

"""Latency checks: p50, p95 and p99 quantile ratios candidate / baseline, per metric.

Latency is gated on quantile ratios, not on a location test (gate-statistics.md §1.5),
with the resampling-free paired Poisson bootstrap interval
(:func:`shadoweval.stats.quantiles.paired_quantile_ratios_rf`) at the look's spent ``α_k`` on each
side. Latency under equal conditions (issue 29 item 2): a latency check is *gated* only on
the pairs co-timed with the baseline replica (``latency_baseline_source = co_timed``: the
replica's replay sent together with the candidate's, :mod:`shadoweval.replay.co_timed`),
where a unit has at least ``min_pairs`` of them or no other pair. Otherwise the check is
*report only* (:func:`latency_gated` is false: never ROLLBACK, never blocking PROMOTE; a
FAIL reads INCONCLUSIVE) and its reason says why: the live or recorded baseline, or a
replica replay sent apart from the candidate, was not timed under the same conditions.
Every reason accounts for all the unit's pairs. When every used pair carries the candidate's
send time (``candidate_sent_at_s``), the pairs are put in replay order and the interval is
widened for the serial dependence of pairs in flight together (Newey–West,
:func:`shadoweval.stats.quantiles.paired_quantile_ratios_rf` with ``ordered``); without
it the pairs are taken as independent, as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shadoweval.errors import ShadowEvalError
from shadoweval.records import Check, CheckOutcome
from shadoweval.stats.checks.pair_arrays import (
    LATENCY_BASELINE_SOURCES,
    BoolArray,
    FloatArray,
    PairArrays,
)
from shadoweval.stats.checks.reasons import INFRA_METRIC, CheckNumbers, fmt_g, make_check
from shadoweval.stats.looks import LookLevels
from shadoweval.stats.policy import LatencyPolicy
from shadoweval.stats.quantiles import QuantileRatioResult, paired_quantile_ratios_rf

__all__ = [
    "LATENCY_NOT_CO_TIMED",
    "LATENCY_REPORT_ONLY",
    "LATENCY_STATISTIC",
    "MIN_LATENCY_PAIRS",
    "STREAM_ONLY_METRICS",
    "latency_checks",
    "latency_gated",
]

LATENCY_STATISTIC = "quantile_ratio_rf_paired_poisson"
"""Statistic of a latency check: the resampling-free paired quantile-ratio interval."""
LATENCY_REPORT_ONLY = "report only"
"""How the reason of a report-only latency check begins (:func:`latency_gated`)."""
LATENCY_NOT_CO_TIMED = "not timed under the same conditions as the candidate"
"""Why a latency check is report only, in every such reason."""
_ADD_REPLICA = (
    f"latency compared with the live/recorded baseline, {LATENCY_NOT_CO_TIMED}: report only; "
    "add a baseline replica (--baseline-repeat-url) for a gated latency check"
)

_QUANTILES: tuple[tuple[str, float], ...] = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))

STREAM_ONLY_METRICS: frozenset[str] = frozenset({"ttft_ms", "ttfc_ms"})
"""Latency metrics gated on streamed requests only: TTFT exists only for a stream, and a
non-streamed response's TTFC equals its e2e (already gated as ``e2e_ms``; counting it
twice would gate the same numbers in two checks)."""

_NOT_STREAMED = {
    "ttft_ms": "not streamed (no TTFT)",
    "ttfc_ms": "not streamed (TTFC = e2e, gated as e2e_ms)",
}

MIN_LATENCY_PAIRS = 30
"""No latency decision (PASS or FAIL) on fewer pairs: the log-normal interval of a
quantile ratio is not trusted below this (its coverage was checked from 30 pairs on)."""

_REPEAT = LATENCY_BASELINE_SOURCES.index("baseline_repeat")
_MISSING = LATENCY_BASELINE_SOURCES.index("missing")
_CO_TIMED = LATENCY_BASELINE_SOURCES.index("co_timed")


def latency_gated(check: Check) -> bool:
    """A latency check that gates (its control co-timed with the candidate); ``False``:
    report only (its reason begins with :data:`LATENCY_REPORT_ONLY`)."""
    return not check.reason.startswith(f"{LATENCY_REPORT_ONLY}:")


def _report_only_why(n_co: int, n_apart: int, min_pairs: int) -> str:
    """Why a unit's latency is report only: ``n_co`` co-timed pairs (fewer than
    ``min_pairs``), ``n_apart`` replica pairs replayed apart from the candidate."""
    if n_co:
        return (
            f"only {n_co} pairs co-timed with the baseline replica (< min_pairs {min_pairs}): "
            f"latency compared with the live/recorded baseline, {LATENCY_NOT_CO_TIMED}: "
            "report only; raise --baseline-repeat-share for a gated latency check"
        )
    if n_apart:
        return (
            f"latency compared with baseline-replica replays sent apart from the candidate's "
            f"({n_apart} pairs: replays sent alone, e.g. stored before co-timing) or the "
            f"live/recorded baseline, {LATENCY_NOT_CO_TIMED}: report only; replay the capture "
            "log into a new run with --baseline-repeat-url for a gated latency check"
        )
    return _ADD_REPLICA


@dataclass(frozen=True)
class _LatencyPairs:
    """The pairs a latency metric uses in one unit, and an account of all the others.

    ``used`` is the mask of pairs used; ``accounting`` says how many of the unit's pairs
    were used and why each other pair was left out (every pair counted once, under its
    first reason); ``report_only`` says why the check is report only (``""``: gated, on
    co-timed pairs); ``no_baseline`` is set when no pair of the unit has a baseline
    latency for the metric at all.
    """

    used: BoolArray
    accounting: str
    report_only: str
    no_baseline: bool


def _latency_pairs(arrays: PairArrays, metric: str, min_pairs: int) -> _LatencyPairs:
    """The latency pairs used and the account of every pair of the unit.

    Usable: neither side failed nor had an infrastructure error, not a warm-up replay,
    neither side's answer served from a cache, both latencies present, a baseline
    latency source (and, for TTFT and TTFC, a streamed request). Gated on the pairs
    co-timed with the baseline replica when the unit has at least ``min_pairs`` of them,
    or no other usable pair; otherwise report only, on every usable pair. Every other
    pair of the unit is counted under the first reason that applies, in this order: not
    streamed (TTFT, TTFC), an infrastructure error, a failed side, warm-up, a cache hit on
    either side (with the count per side), no baseline latency, no candidate latency, no
    baseline latency source, not co-timed (when the co-timed pairs are used); so used +
    excluded = the unit's pairs.
    """
    cand, base = arrays.latency[metric]
    n_all = arrays.n
    left = np.ones(n_all, dtype=bool)
    excluded: list[str] = []

    def drop(mask: BoolArray, what: str) -> None:
        nonlocal left
        hit = int(np.count_nonzero(left & mask))
        if hit:
            excluded.append(f"{hit} {what}")
        left = left & ~mask

    if metric in STREAM_ONLY_METRICS:
        drop(~arrays.streamed, _NOT_STREAMED[metric])
    rows = left.copy()
    drop(arrays.infra, f"with an infrastructure error (see {INFRA_METRIC})")
    drop(arrays.model_failed, "with a failed side (gated by error_rate)")
    drop(arrays.warmup, "warm-up")
    cached = left & arrays.cache_hit
    if np.any(cached):
        sides = (
            f"{int(np.count_nonzero(cached & arrays.base_cache_hit))} baseline, "
            f"{int(np.count_nonzero(cached & arrays.cand_cache_hit))} candidate"
        )
        drop(arrays.cache_hit, f"served from a cache ({sides})")
    unmeasured = bool(np.any(left & np.isnan(base)))
    drop(np.isnan(base), f"without a baseline {metric}")
    drop(np.isnan(cand), f"without a candidate {metric}")
    drop(arrays.source == _MISSING, "without a baseline latency source")
    usable = left
    # Not one baseline latency in the unit, and pairs the baseline did answer lack it:
    # the baseline's latency was not measured (not a failure on every pair).
    no_baseline = unmeasured and not bool(np.any(rows & ~np.isnan(base)))
    co_timed = usable & (arrays.source == _CO_TIMED)
    n_co = int(np.count_nonzero(co_timed))
    n_usable = int(np.count_nonzero(usable))
    report_only = ""
    control = ""
    if n_co and (n_co >= min_pairs or n_co == n_usable):
        other = n_usable - n_co
        if other:
            excluded.append(f"{other} not co-timed with the baseline replica (co-timed pairs used)")
        usable = co_timed
        control = "; control: pairs co-timed with the baseline replica"
    elif n_usable:
        n_apart = int(np.count_nonzero(usable & (arrays.source == _REPEAT)))
        report_only = _report_only_why(n_co, n_apart, min_pairs)
    n_used = int(np.count_nonzero(usable))
    if excluded:
        accounting = f" ({n_used} of {n_all} pairs used; excluded: {', '.join(excluded)})"
    else:
        accounting = f" (all {n_all} pairs used)"
    accounting += control
    return _LatencyPairs(usable, accounting, report_only, no_baseline)


def _no_baseline_latency(metric: str) -> str:
    """The reason of a latency check whose unit has no baseline latency at all."""
    if metric == "ttft_ms":
        why = "recorded data without TTFT, or non-streamed baseline requests"
    elif metric == "ttfc_ms":
        why = "recorded data without TTFC, or baseline streams without visible content"
    else:
        why = "no live or recorded timing, and no baseline repeat that answered with timings"
    return (
        f"no latency pairs: no pair has a baseline {metric}: the baseline's latency was not "
        f"measured ({why}); this check cannot be judged on this run's data"
    )


def latency_checks(
    arrays: PairArrays,
    *,
    task_type: str,
    block: LatencyPolicy,
    min_pairs: int,
    levels: LookLevels,
    load_note: str = "",
) -> list[Check]:
    """p50, p95 (and p99 with enough tail pairs) ratio checks per metric in ``block.metrics``.

    ``load_note`` (the replay ran below its asked rate, e.g. ``measured under a different
    load than asked: measured at 13.9 req/s of 500 asked``) ends every reason.

    The ratio candidate / baseline has the resampling-free paired interval
    (:func:`shadoweval.stats.quantiles.paired_quantile_ratios_rf`) at the look's spent level
    ``α_k`` on each side. PASS when its upper limit is at most the limit (on at least
    ``min_pairs`` pairs, ``min_pairs_p95`` for p95); FAIL when its lower limit is above
    the limit; otherwise INCONCLUSIVE. p99 is gated only when at least
    ``min_tail_observations`` pairs lie above it (``n·0.01 ≥``); below that it is not a
    check. Gated on the pairs co-timed with the baseline replica; without enough of them
    the check is report only (:func:`latency_gated`; a FAIL reads INCONCLUSIVE) and its
    reason ends with why (the live/recorded baseline, or replica replays sent apart, were
    :data:`LATENCY_NOT_CO_TIMED`). TTFT and TTFC (:data:`STREAM_ONLY_METRICS`) are gated on
    streamed requests only: a unit without any streamed request has no TTFT or TTFC
    check at all. Pairs with an answer served from a cache (either side) are left out
    of every latency metric and counted in the reason.

    Every reason accounts for all the unit's pairs: how many were used and how many were
    left out for each reason (:func:`_latency_pairs`); when no pair of the unit has a
    baseline latency for the metric, the reason says that the baseline's latency was
    not measured.
    """
    checks: list[Check] = []
    statistic = f"{LATENCY_STATISTIC}; {levels.describe()}"
    limits = {"p50": block.p50_ratio_max, "p95": block.p95_ratio_max, "p99": block.p99_ratio_max}
    for metric in block.metrics:
        if metric in STREAM_ONLY_METRICS and not np.any(arrays.streamed):
            continue
        pairs = _latency_pairs(arrays, metric, min_pairs)
        used = pairs.used
        n = int(np.count_nonzero(used))
        cand_all, base_all = arrays.latency[metric]
        cand, base, ordered = _in_replay_order(cand_all[used], base_all[used], arrays, used)
        names = [
            (name, q)
            for name, q in _QUANTILES
            if name != "p99" or n * (1.0 - q) >= block.min_tail_observations
        ]
        results: list[QuantileRatioResult] | str = (
            _no_baseline_latency(metric) if pairs.no_baseline else "no latency pairs"
        )
        if n:
            try:
                results = paired_quantile_ratios_rf(
                    cand, base, [q for _, q in names], alpha=levels.alpha_k, ordered=ordered
                )
            except ShadowEvalError as exc:
                results = f"invalid latencies: {exc}"
        for i, (name, _) in enumerate(names):
            limit = limits[name]
            outcome, reason, numbers = _latency_outcome(
                results if isinstance(results, str) else results[i],
                n,
                name,
                metric,
                limit,
                (min_pairs, block.min_pairs_p95),
                levels,
            )
            outcome, reason = _role(outcome, reason + pairs.accounting, pairs.report_only)
            checks.append(
                make_check(
                    f"latency_{metric}_{name}",
                    task_type,
                    statistic,
                    limit,
                    outcome,
                    reason + (f"; {load_note}" if load_note else ""),
                    numbers,
                )
            )
    return checks


def _in_replay_order(
    cand: FloatArray, base: FloatArray, arrays: PairArrays, used: BoolArray
) -> tuple[FloatArray, FloatArray, bool]:
    """The used pairs' latencies in the order the candidate's replays were sent, and
    ``True``, when every used pair has its send time (``cand_sent_at_s``); else as given
    and ``False`` (order unknown: the interval takes the pairs as independent)."""
    sent = arrays.cand_sent_at_s[used]
    if sent.size < 2 or not bool(np.all(np.isfinite(sent))):
        return cand, base, False
    order = np.argsort(sent, kind="stable")
    return cand[order], base[order], True


def _role(outcome: CheckOutcome, reason: str, report_only: str) -> tuple[CheckOutcome, str]:
    """A gated check as decided; a report-only one (``report_only`` says why) never FAILs
    (INCONCLUSIVE: it cannot roll back or block) and its reason begins with
    :data:`LATENCY_REPORT_ONLY` and ends with why."""
    if not report_only:
        return outcome, reason
    if outcome == CheckOutcome.FAIL:
        outcome = CheckOutcome.INCONCLUSIVE
    return outcome, f"{LATENCY_REPORT_ONLY}: {reason}; {report_only}"


def _latency_outcome(
    result: QuantileRatioResult | str,
    n: int,
    name: str,
    metric: str,
    limit: float,
    min_pairs: tuple[int, int],
    levels: LookLevels,
) -> tuple[CheckOutcome, str, CheckNumbers]:
    """FAIL wholly above the limit (p95/p99 only from ``min_pairs_p95`` pairs), PASS
    wholly below it on enough pairs, else INCONCLUSIVE. ``min_pairs`` is (the unit's
    floor, ``min_pairs_p95``)."""
    if isinstance(result, str):
        return CheckOutcome.INCONCLUSIVE, result, CheckNumbers(n=n)
    r = result
    numbers = CheckNumbers(r.estimate, r.ci_low, r.ci_high, n)
    serial = (
        f", variance ×{r.serial_factor:.2f} for serial dependence in replay order "
        f"(Newey–West, {r.serial_lags} lags)"
        if r.serial_lags
        else ""
    )
    summary = (
        f"{name} {metric} ratio candidate/baseline {r.estimate:.3f} "
        f"({r.candidate_quantile:.1f} vs {r.baseline_quantile:.1f} ms), "
        f"paired CI {r.ci_low:.3f} to {r.ci_high:.3f} on {n} pairs (resampling-free{serial}, "
        f"alpha_k {fmt_g(levels.alpha_k)} per side at look {levels.look}), limit {limit:g}"
    )
    floor, tail = min_pairs
    if n < MIN_LATENCY_PAIRS:
        return (
            CheckOutcome.INCONCLUSIVE,
            f"too few latency pairs: {n} < {MIN_LATENCY_PAIRS} (no latency decision on fewer); "
            f"{summary}",
            numbers,
        )
    if name != "p50" and n < tail:
        return (
            CheckOutcome.INCONCLUSIVE,
            f"too few latency pairs for {name}: {n} < min_pairs_p95 {tail}; {summary}",
            numbers,
        )
    if r.ci_low > limit:
        return (
            CheckOutcome.FAIL,
            f"slower than allowed: {summary}: the interval lies wholly above the limit",
            numbers,
        )
    if n < floor:
        return (
            CheckOutcome.INCONCLUSIVE,
            f"too few pairs: {n} < min_pairs {floor}; {summary}",
            numbers,
        )
    if r.ci_high <= limit:
        return CheckOutcome.PASS, f"within the limit: {summary}", numbers
    return (
        CheckOutcome.INCONCLUSIVE,
        f"limit not cleared yet: {summary}: the interval reaches above the limit",
        numbers,
    )

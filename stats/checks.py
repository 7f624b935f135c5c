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
  its minimum pairs: ``max(min_pairs, power calculation at the observed discordance or
  spread)`` (:mod:`stats.power`, reported in the reason);
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
==================  ===========================================  ==========================

Infrastructure errors (reference failure case 11): a pair with an infrastructure error on
either side (timeout, connection failure, HTTP 408/429/5xx, undecodable body, cancelled
live request) says nothing about the model, so every quality check leaves it out and
counts it in its reason; ``infra_error_rate`` gates them instead (its FAIL means HOLD,
never ROLLBACK: :mod:`stats.gate`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pandas as pd
from scipy import stats as scipy_stats

from shadoweval.errors import DegenerateDataWarning, ShadowEvalError
from shadoweval.records import Check, CheckOutcome
from stats.looks import LookLevels
from stats.noise_floor import noise_floor_values, tail_rate_split
from stats.paired_binary import mcnemar, tango_score_ci, tango_score_test
from stats.policy import (
    BinaryMetricPolicy,
    InfraErrorPolicy,
    LatencyPolicy,
    OutputTokensPolicy,
    SimilarityPolicy,
)
from stats.power import mean_min_pairs, paired_binary_min_pairs
from stats.quantiles import QuantileRatioResult, paired_quantile_ratios_rf
from stats.sequential import confidence_sequence, sequential_mcnemar

__all__ = [
    "BINARY_STATISTIC",
    "BINARY_STATISTIC_CAPPED",
    "COST_STATISTIC",
    "INFRA_CONSEQUENCE",
    "INFRA_FAILED",
    "INFRA_METRIC",
    "LATENCY_STATISTIC",
    "MIN_LATENCY_PAIRS",
    "NO_NOISE_FLOOR",
    "SIMILARITY_NOISE_STATISTIC",
    "SIMILARITY_STATISTIC",
    "UNEQUAL_LOAD",
    "BaselineRepeats",
    "BinaryAnalysis",
    "PairArrays",
    "analyse_binary",
    "binary_analyses",
    "binary_check",
    "cost_check",
    "infra_note",
    "infra_pairs",
    "latency_checks",
    "similarity_check",
]

BINARY_STATISTIC = "cs_mean_d+mcnemar_midp"
"""Paired binary check without a sample cap: confidence sequence on d_i, McNemar harm."""
BINARY_STATISTIC_CAPPED = "tango_score_ni+mcnemar_midp"
"""Paired binary check with a sample cap: Tango's score test at α_k, McNemar harm."""
SIMILARITY_STATISTIC = "seq_mean_divergence"
SIMILARITY_NOISE_STATISTIC = "seq_mean_noise_floor"
LATENCY_STATISTIC = "quantile_ratio_rf_paired_poisson"
COST_STATISTIC = "seq_mean_token_linearisation"
UNEQUAL_LOAD = (
    "unequal load: baseline latencies were not measured on the shadow under the same load"
)
NO_NOISE_FLOOR = "no baseline-repeat outcomes in this run: absolute limit, no noise floor"
INFRA_METRIC = "infra_error_rate"
"""Name of the paired binary check of infrastructure errors (its FAIL means HOLD)."""
INFRA_FAILED = "the candidate's serving infrastructure failed"
INFRA_CONSEQUENCE = "model quality could not be judged on those pairs (HOLD, never ROLLBACK)"
INFRA_COLUMNS = ("baseline_infra_error", "candidate_infra_error")

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]


def infra_pairs(rows: pd.DataFrame) -> pd.Series:
    """Mask of pairs with an infrastructure error on either side (a DataFrame view).

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


def _g(x: float) -> str:
    return f"{x:.3g}"


def _clip_unit(x: float) -> float:
    """A bound of a difference of proportions, clipped to [-1, 1] (NaN stays NaN)."""
    return x if math.isnan(x) else min(1.0, max(-1.0, x))


# ------------------------------------------------------------------ columns


def _flags(series: pd.Series) -> FloatArray:
    """A boolean column as floats: 1.0 true, 0.0 false, NaN missing."""
    if series.dtype == bool:
        return series.to_numpy(dtype=np.float64)
    return pd.to_numeric(series.astype(object).map(_flag_value), errors="coerce").to_numpy(
        dtype=np.float64
    )


def _flag_value(value: object) -> float:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return math.nan
    return 1.0 if bool(value) else 0.0


_SOURCES = ("baseline_repeat", "live", "recorded", "missing")


@dataclass(frozen=True)
class PairArrays:
    """The gate's columns as numpy arrays, for one analysis unit (shape ``(n,)`` each).

    Flags are float arrays (1.0, 0.0, NaN = missing); latencies in ms and token counts
    are floats with NaN when unknown; ``source`` codes index :data:`_SOURCES`
    (``latency_baseline_source``). Build with :meth:`from_frame`; :meth:`slice` gives a
    task type's rows when the frame was ordered by task type.
    """

    n: int
    base_fail: FloatArray
    cand_fail: FloatArray
    base_infra: FloatArray
    cand_infra: FloatArray
    format_expected: BoolArray
    base_format_ok: FloatArray
    cand_format_ok: FloatArray
    similarity: FloatArray
    noise_similarity: FloatArray
    streamed: BoolArray
    warmup: BoolArray
    source: npt.NDArray[np.int8]
    latency: dict[str, tuple[FloatArray, FloatArray]]
    base_tokens: FloatArray
    cand_tokens: FloatArray
    infra: BoolArray = field(init=False)

    def __post_init__(self) -> None:
        infra = (
            np.isnan(self.base_infra)
            | (self.base_infra == 1.0)
            | np.isnan(self.cand_infra)
            | (self.cand_infra == 1.0)
        )
        object.__setattr__(self, "infra", infra)

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> PairArrays:
        """Columns of a pairs table (:data:`stats.frame.PAIRS_COLUMNS`) as arrays."""
        source = frame["latency_baseline_source"].astype(str).to_numpy()
        codes = np.full(len(frame), _SOURCES.index("missing"), dtype=np.int8)
        for i, name in enumerate(_SOURCES):
            codes[source == name] = i

        def floats(column: str) -> FloatArray:
            return pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64)

        def bools(column: str) -> BoolArray:
            flags: BoolArray = _flags(frame[column]) == 1.0
            return flags

        return cls(
            n=len(frame),
            base_fail=_flags(frame["baseline_fail"]),
            cand_fail=_flags(frame["candidate_fail"]),
            base_infra=_flags(frame["baseline_infra_error"]),
            cand_infra=_flags(frame["candidate_infra_error"]),
            format_expected=bools("format_expected"),
            base_format_ok=floats("baseline_format_ok"),
            cand_format_ok=floats("candidate_format_ok"),
            similarity=floats("similarity"),
            noise_similarity=floats("noise_similarity"),
            streamed=bools("streamed"),
            warmup=bools("candidate_warmup"),
            source=codes,
            latency={
                metric: (floats(f"candidate_{metric}"), floats(f"baseline_{metric}"))
                for metric in ("e2e_ms", "ttft_ms")
            },
            base_tokens=floats("baseline_output_tokens"),
            cand_tokens=floats("candidate_output_tokens"),
        )

    def slice(self, start: int, stop: int) -> PairArrays:
        """Rows ``start:stop`` (views, no copies)."""
        part = slice(start, stop)
        return PairArrays(
            n=stop - start,
            base_fail=self.base_fail[part],
            cand_fail=self.cand_fail[part],
            base_infra=self.base_infra[part],
            cand_infra=self.cand_infra[part],
            format_expected=self.format_expected[part],
            base_format_ok=self.base_format_ok[part],
            cand_format_ok=self.cand_format_ok[part],
            similarity=self.similarity[part],
            noise_similarity=self.noise_similarity[part],
            streamed=self.streamed[part],
            warmup=self.warmup[part],
            source=self.source[part],
            latency={m: (c[part], b[part]) for m, (c, b) in self.latency.items()},
            base_tokens=self.base_tokens[part],
            cand_tokens=self.cand_tokens[part],
        )

    def take(self, index: npt.NDArray[np.intp]) -> PairArrays:
        """Rows at ``index`` (copies), e.g. to reorder by task type."""
        return PairArrays(
            n=int(index.size),
            base_fail=self.base_fail[index],
            cand_fail=self.cand_fail[index],
            base_infra=self.base_infra[index],
            cand_infra=self.cand_infra[index],
            format_expected=self.format_expected[index],
            base_format_ok=self.base_format_ok[index],
            cand_format_ok=self.cand_format_ok[index],
            similarity=self.similarity[index],
            noise_similarity=self.noise_similarity[index],
            streamed=self.streamed[index],
            warmup=self.warmup[index],
            source=self.source[index],
            latency={m: (c[index], b[index]) for m, (c, b) in self.latency.items()},
            base_tokens=self.base_tokens[index],
            cand_tokens=self.cand_tokens[index],
        )

    @property
    def model_failed(self) -> BoolArray:
        """Either side failed for a model reason (NaN flags count as failed)."""
        failed: BoolArray = ~((self.base_fail == 0.0) & (self.cand_fail == 0.0))
        return failed


# ------------------------------------------------------------------ sequential means


@dataclass(frozen=True)
class SequentialInterval:
    """A sequential interval of a mean: each side one-sided at level α (CS) or α_k.

    ``low``/``high`` bound the mean at every look simultaneously (confidence sequence)
    or at this look with the look's spent level (spending). ``sd`` is the standard
    deviation used (after any floor); ``multiplier`` is the half-width in units of
    ``sd/√n`` (≈ z for a fixed-n interval); ``note`` records degenerate data.
    """

    mean: float
    low: float
    high: float
    sd: float
    n: int
    multiplier: float
    label: str
    note: str = ""


@contextmanager
def _degenerate_notes(notes: list[str]) -> Iterator[None]:
    """Collect :class:`DegenerateDataWarning` messages as notes; re-raise other warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        if issubclass(w.category, DegenerateDataWarning):
            notes.append(str(w.message))
        else:
            warnings.warn(w.message, w.category, stacklevel=3)


def sequential_mean_interval(
    values: FloatArray, levels: LookLevels, *, sd_floor: float = 0.0
) -> SequentialInterval:
    """The look's interval of the mean of ``values`` (shape ``(n,)``, n ≥ 2, finite).

    Without a sample cap: the asymptotic confidence sequence
    (:func:`stats.sequential.confidence_sequence`, Waudby-Smith et al. 2021) tuned at
    ``levels.n_star``, one-sided at ``levels.alpha`` on each side, valid at every look.
    With a cap: the z interval at the look's spent level ``α_k`` (group-sequential α
    spending, valid over the planned looks by the union bound). ``sd_floor`` bounds the
    standard deviation used from below.
    """
    notes: list[str] = []
    n = int(values.size)
    if levels.mean_method == "cs":
        with _degenerate_notes(notes):
            upper = confidence_sequence(
                values, alpha=levels.alpha, n_star=levels.n_star, side="upper", sd_floor=sd_floor
            )
            lower = confidence_sequence(
                values, alpha=levels.alpha, n_star=levels.n_star, side="lower", sd_floor=sd_floor
            )
        sd = upper.sd
        mult = (upper.high - upper.mean) * math.sqrt(n) / sd if sd > 0 else math.nan
        label = f"{100 * (1 - 2 * levels.alpha):g}% confidence sequence (N* {levels.n_star})"
        return SequentialInterval(
            upper.mean, lower.low, upper.high, sd, n, mult, label, "; ".join(notes)
        )
    mean = float(np.mean(values))
    sd = max(float(np.std(values, ddof=1)), sd_floor)
    if sd == 0.0:
        notes.append(f"all {n} values equal {mean:.6g} (no variance)")
    z = float(scipy_stats.norm.isf(levels.alpha_k))
    half = z * sd / math.sqrt(n)
    label = f"interval at alpha_k {_g(levels.alpha_k)} per side (spent at look {levels.look})"
    return SequentialInterval(mean, mean - half, mean + half, sd, n, z, label, "; ".join(notes))


# ------------------------------------------------------------------ checks


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
    critical: bool = False,
) -> Check:
    def finite(x: float | None) -> float | None:
        return None if x is None or not math.isfinite(x) else float(x)

    return Check(
        metric=metric,
        task_type=task_type,
        statistic=statistic,
        estimate=finite(numbers.estimate),
        ci_low=finite(numbers.ci_low),
        ci_high=finite(numbers.ci_high),
        margin=margin,
        n=numbers.n,
        p_value=finite(numbers.p_value),
        outcome=outcome,
        reason=reason,
        critical=critical,
    )


def _min_pairs_note(floor: int, computed: int | None, basis: str) -> tuple[int, str]:
    """The effective minimum and its explanation for a reason."""
    if computed is None or computed <= floor:
        return floor, f"min_pairs {floor}"
    return computed, f"min pairs {computed} (power {basis}; floor {floor})"


# ------------------------------------------------------------------ paired binary


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
    error. ``problem`` says why no test could be run.
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
    psi = (b + c) / n
    computed = paired_binary_min_pairs(
        max(psi, 1e-9), 0.0, margin, alpha=alpha, power=power, method="score"
    )
    need = _min_pairs_note(
        min_pairs, computed, f"{100 * power:g}% at the observed discordance {_pct(psi)}"
    )
    if n < 2:
        return analysis(counts, interval=None, need=need)
    if levels.mean_method == "spending":
        tango = tango_score_ci(b, c, n, confidence=1.0 - 2.0 * levels.alpha_k)
        described = f"Tango score interval (alpha_k {_g(levels.alpha_k)} per side)"
        interval = SequentialInterval(
            (b - c) / n, tango.low, tango.high, math.nan, n, math.nan, described
        )
        return analysis(counts, interval=interval, need=need)
    d = np.zeros(n, dtype=np.float64)
    d[:b] = 1.0
    d[b : b + c] = -1.0
    # Under H0 (δ = m) the variance of d is ψ − m² ≥ m(1 − m): the floor of Tango's score
    # variance, so that few or no discordant pairs cannot make the sequence collapse.
    interval = sequential_mean_interval(d, levels, sd_floor=math.sqrt(margin * (1.0 - margin)))
    return analysis(counts, interval=interval, need=need)


def binary_check(a: BinaryAnalysis, *, harm_adjusted: float | None) -> Check:
    """Decide a paired binary check from its analysis and its Holm-adjusted harm p-value.

    ``harm_adjusted`` is ``None`` when the metric's harm test is in no family (a quality
    metric that is not critical). Harm is significant when ``harm_adjusted ≤
    levels.alpha_harm_k``. For ``infra_error_rate`` the family is the infrastructure
    family, and a FAIL reason says that the candidate's serving infrastructure failed
    and quality could not be judged (the gate holds, never rolls back, on it).
    """
    levels = a.levels
    excluded = f" ({a.excluded} pairs not scored on both sides were left out)" if a.excluded else ""
    excluded += infra_note(a.infra_excluded)
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
        return _check(
            a.metric,
            a.task_type,
            statistic,
            a.margin,
            outcome,
            reason + excluded,
            _Numbers(estimate, shown_low, shown_high, a.n, a.ni_p),
            critical=a.critical,
        )

    if a.problem is not None or a.harm_p is None or a.ni_p is None:
        return check(CheckOutcome.INCONCLUSIVE, f"{a.problem or 'not computed'}; cannot judge")
    rates = (
        f"candidate {a.label} rate {_pct(a.candidate_fails / a.n)} vs baseline "
        f"{_pct(a.baseline_fails / a.n)} on {a.n} pairs"
    )
    if interval is None:
        return check(CheckOutcome.INCONCLUSIVE, f"too few pairs: {a.n} < min_pairs; {rates}")
    diff = (
        f"difference {_pp(interval.mean)}, {interval.label} {_pp(_clip_unit(interval.low))} "
        f"to {_pp(_clip_unit(interval.high))}, margin {_pp(a.margin)}"
    )
    if interval.note:
        diff += f" (note: {interval.note})"
    if capped:
        tango = f"Tango p {_p(a.ni_p)} vs alpha_k {_g(levels.alpha_k)} at look {levels.look}"
    else:
        tango = f"fixed-n Tango p {_p(a.ni_p)} (reported; decided on the sequence)"
    if harm_adjusted is not None and a.b > a.c and harm_adjusted > levels.alpha_harm_k:
        tango += (
            f"; harm not significant at this look: {a.b} pairs fail only on the candidate vs "
            f"{a.c} only on the baseline, McNemar mid-p {_p(a.harm_p)}, Holm-adjusted "
            f"{_p(harm_adjusted)} > alpha_RB_k {_g(levels.alpha_harm_k)}"
        )
    if harm_adjusted is not None and harm_adjusted <= levels.alpha_harm_k:
        return check(
            CheckOutcome.FAIL,
            f"{harm_lead}: {rates}; {a.b} pairs fail only on the candidate vs {a.c} only "
            f"on the baseline (McNemar mid-p {_p(a.harm_p)}, Holm-adjusted "
            f"{_p(harm_adjusted)} <= alpha_RB_k {_g(levels.alpha_harm_k)} at look "
            f"{levels.look}; sequential McNemar p {_p(a.harm_bf_p or 1.0)}){consequence}",
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
        base: FloatArray, cand: FloatArray, metric: str, label: str, block: object, **kw: int
    ) -> BinaryAnalysis:
        assert isinstance(block, BinaryMetricPolicy | InfraErrorPolicy)
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
            **kw,
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


# ------------------------------------------------------------------ mean-type checks


def _mean_outcome(
    interval: SequentialInterval,
    margin: float,
    min_pairs: tuple[int, str],
    summary: str,
    harmful: str,
) -> tuple[CheckOutcome, str]:
    """PASS below the margin (upper bound), FAIL wholly above it, else INCONCLUSIVE."""
    if interval.low > margin:
        return CheckOutcome.FAIL, f"{harmful}: {summary}: the interval lies wholly above the limit"
    if interval.n < min_pairs[0]:
        return (
            CheckOutcome.INCONCLUSIVE,
            f"too few pairs: {interval.n} < {min_pairs[1]}; {summary}",
        )
    if interval.high < margin:
        return CheckOutcome.PASS, f"non-inferior: {summary} (on >= {min_pairs[1]})"
    return CheckOutcome.INCONCLUSIVE, f"non-inferiority not shown yet: {summary}"


def _mean_min_pairs(
    interval: SequentialInterval, margin: float, floor: int, alpha: float, power: float
) -> tuple[int, str]:
    computed = None
    if interval.sd > 0 and interval.mean < margin:
        computed = mean_min_pairs(interval.sd, interval.mean, margin, alpha=alpha, power=power)
    basis = f"{100 * power:g}% at the observed mean {interval.mean:.3g} and sd {interval.sd:.3g}"
    return _min_pairs_note(floor, computed, basis)


@dataclass(frozen=True)
class BaselineRepeats:
    """The run's baseline-repeat replays, as the similarity reasons report them.

    ``sent`` counts the baseline-repeat outcomes that were sent (not skipped) and
    ``failed`` those with an error (:class:`~shadoweval.records.Coverage`
    ``baseline_repeat_replayed`` / ``baseline_repeat_errored``). ``from_coverage`` is
    False when the coverage record carried no such counts (0) but the pairs have
    baseline-repeat similarities: ``sent`` then counts those pairs and ``failed`` is
    unknown (0).
    """

    sent: int
    failed: int = 0
    from_coverage: bool = True

    def describe(self) -> str:
        """``the run sent 800 baseline repeats, 800 of them failed``."""
        if not self.from_coverage:
            return f"{self.sent} pairs of the run have a baseline-repeat similarity"
        return f"the run sent {self.sent} baseline repeats, {self.failed} of them failed"

    def failed_note(self) -> str:
        """A reason suffix counting the failed repeats ('' when none failed)."""
        if not self.failed:
            return ""
        return (
            f"; {self.failed} of the {self.sent} baseline repeats the run sent failed "
            "(counted, not dropped: their pairs have no noise similarity)"
        )


def similarity_check(
    arrays: PairArrays,
    *,
    task_type: str,
    block: SimilarityPolicy,
    min_pairs: int,
    levels: LookLevels,
    alpha: float,
    power: float,
    noise_floor: bool,
    repeats: BaselineRepeats | None = None,
) -> Check:
    """Output divergence ``D = 1 − similarity``: against the noise floor, or a limit.

    Pairs with an infrastructure error on either side are left out (counted). A pair
    where both outputs are present (neither side failed) but the similarity is NaN is a
    scoring fault: INCONCLUSIVE rather than a silent drop. Similarities must lie in
    [−1, 1].

    * ``noise_floor`` (the run's design has baseline repeats: it sent some, whether or
      not they answered): on the pairs with both a similarity and a noise similarity,
      ``e_i = D_cand_i − (1 + r)·D_noise_i``
      (:func:`stats.noise_floor.noise_floor_values`) must have a mean below
      ``noise_margin``; PASS when the sequential upper bound is below it, FAIL when the
      lower bound is above it. The reason adds the split-sample tail-rate report
      (:func:`stats.noise_floor.tail_rate_split`, report only). A unit without any such
      pair is INCONCLUSIVE — never judged against the looser absolute limit — and its
      reason counts the repeats the run sent and how many failed (``repeats``); failed
      repeats are counted in every similarity reason.
    * otherwise (no baseline repeat was sent): mean ``D`` against
      ``max_mean_divergence``, and the reason says that no noise floor was available
      (:data:`NO_NOISE_FLOOR`).
    """
    keep = ~arrays.infra
    left_out = infra_note(int(np.count_nonzero(arrays.infra)))
    failed_repeats = repeats.failed_note() if noise_floor and repeats is not None else ""
    similarity = arrays.similarity[keep]
    noise = arrays.noise_similarity[keep]
    both_present = ~arrays.model_failed[keep]
    margin = block.noise_margin if noise_floor else block.max_mean_divergence
    statistic = f"{SIMILARITY_NOISE_STATISTIC if noise_floor else SIMILARITY_STATISTIC}; "
    statistic += levels.describe()

    def check(
        outcome: CheckOutcome, reason: str, numbers: _Numbers, *, repeats_counted: bool = False
    ) -> Check:
        # A reason that already counts the repeats sent and failed does not repeat them.
        tail = left_out if repeats_counted else failed_repeats + left_out
        return _check("similarity", task_type, statistic, margin, outcome, reason + tail, numbers)

    unscored = int(np.count_nonzero(np.isnan(similarity) & both_present))
    if unscored:
        return check(
            CheckOutcome.INCONCLUSIVE,
            f"{unscored} of {int(np.count_nonzero(both_present))} pairs with both outputs "
            "present have no similarity (NaN); the scorer must be fixed before this can be "
            "judged",
            _Numbers(n=int(np.count_nonzero(~np.isnan(similarity)))),
        )
    scored = ~np.isnan(similarity)
    if noise_floor:
        scored &= ~np.isnan(noise)
    values = similarity[scored]
    n = int(values.size)
    n_scored = int(np.count_nonzero(~np.isnan(similarity)))
    if n == 0:
        if not noise_floor:
            return check(CheckOutcome.INCONCLUSIVE, "no pairs with a similarity score", _Numbers())
        sent = f"{repeats.describe()}; " if repeats is not None else ""
        return check(
            CheckOutcome.INCONCLUSIVE,
            f"no pairs with a similarity and a baseline-repeat similarity ({n_scored} pairs "
            f"with a similarity, none with a usable baseline repeat): no noise floor for "
            f"this unit ({sent}a run with baseline repeats is judged against the noise "
            "floor only, never the absolute limit); fix the baseline-repeat replica or its "
            "share and replay again",
            _Numbers(),
            repeats_counted=repeats is not None and repeats.from_coverage,
        )
    bad = int(np.count_nonzero(~np.isfinite(values) | (np.abs(values) > 1.0 + 1e-6)))
    if noise_floor:
        noise_values = noise[scored]
        bad += int(
            np.count_nonzero(~np.isfinite(noise_values) | (np.abs(noise_values) > 1.0 + 1e-6))
        )
    if bad:
        return check(
            CheckOutcome.INCONCLUSIVE,
            f"{bad} of {n} similarities are infinite or outside [-1, 1]",
            _Numbers(n=n),
        )
    if n < 2:
        return check(
            CheckOutcome.INCONCLUSIVE, f"too few pairs: {n} < min_pairs {min_pairs}", _Numbers(n=n)
        )
    d_cand = 1.0 - np.clip(values, -1.0, 1.0)
    tail = ""
    if noise_floor:
        d_noise = 1.0 - np.clip(noise[scored], -1.0, 1.0)
        e = noise_floor_values(d_cand, d_noise, block.noise_ratio)
        interval = sequential_mean_interval(e, levels)
        report = tail_rate_split(
            d_cand, d_noise, quantile=block.tail_quantile, seed=block.tail_seed
        )
        tail = (
            f"; tail (report only): {_pct(report.cand_rate)} of candidate vs "
            f"{_pct(report.noise_rate)} of noise divergences above the noise "
            f"p{100 * block.tail_quantile:g} {report.threshold:.3f} (split sample, "
            f"{report.n_eval} pairs, McNemar mid-p {_p(report.p_value)})"
        )
        summary = (
            f"noise-floor difference e = D_cand - {1 + block.noise_ratio:g}*D_noise: mean "
            f"{interval.mean:.4f} (candidate divergence {float(d_cand.mean()):.3f}, "
            f"baseline-repeat {float(d_noise.mean()):.3f}), {interval.label} "
            f"{interval.low:.4f} to {interval.high:.4f} on {n} pairs with a baseline "
            f"repeat, limit {margin:g}"
        )
        if n_scored > n:
            summary += (
                f" ({n_scored - n} pairs with a similarity but no baseline-repeat "
                "similarity are not in the noise floor)"
            )
    else:
        interval = sequential_mean_interval(d_cand, levels)
        summary = (
            f"mean divergence (1 - similarity) {interval.mean:.3f}, {interval.label} "
            f"{interval.low:.3f} to {interval.high:.3f} on {n} pairs, limit {margin:g}; "
            f"{NO_NOISE_FLOOR}"
        )
    if interval.note:
        summary += f" (note: {interval.note})"
    need = _mean_min_pairs(interval, margin, min_pairs, alpha, power)
    outcome, reason = _mean_outcome(
        interval, margin, need, summary, "outputs diverge more than allowed"
    )
    numbers = _Numbers(interval.mean, interval.low, interval.high, n)
    return check(outcome, reason + tail, numbers)


def cost_check(
    arrays: PairArrays,
    *,
    task_type: str,
    block: OutputTokensPolicy,
    min_pairs: int,
    levels: LookLevels,
    alpha: float,
    power: float,
) -> Check:
    """Output tokens: ``E[c]/E[b] < ratio_max`` through ``e_i = c_i − ratio_max·b_i``.

    Pairs: no infrastructure error on either side, both token counts known (a failed
    side has none; an empty answer has 0). PASS when the sequential upper bound of
    ``E[e]`` is below 0, FAIL when its lower bound is above 0 (gate-statistics.md §1.6,
    :mod:`stats.cost`). The reported ratio ``Σc/Σb`` has a delta-method interval
    (``sd(c − R·b)/(√n·b̄)``) with the same width multiplier as the decision's interval.
    """
    k = block.ratio_max
    statistic = f"{COST_STATISTIC}; {levels.describe()}"
    keep = ~arrays.infra
    left_out = infra_note(int(np.count_nonzero(arrays.infra)))
    cand = arrays.cand_tokens[keep]
    base = arrays.base_tokens[keep]
    known = ~np.isnan(cand) & ~np.isnan(base)
    unknown = int(np.count_nonzero(~known & ~arrays.model_failed[keep]))
    note = (
        f" ({unknown} pairs with both outputs present have no token counts and were left out)"
        if unknown
        else ""
    )
    c, b = cand[known], base[known]
    n = int(c.size)

    def check(outcome: CheckOutcome, reason: str, numbers: _Numbers) -> Check:
        return _check(
            "output_tokens", task_type, statistic, k, outcome, reason + note + left_out, numbers
        )

    if n == 0:
        return check(CheckOutcome.INCONCLUSIVE, "no pairs with output token counts", _Numbers())
    bad = int(np.count_nonzero(~np.isfinite(c) | ~np.isfinite(b) | (c < 0) | (b < 0)))
    if bad:
        return check(
            CheckOutcome.INCONCLUSIVE,
            f"{bad} of {n} pairs have invalid (negative or infinite) token counts",
            _Numbers(n=n),
        )
    if n < 2 or float(b.sum()) <= 0.0:
        return check(
            CheckOutcome.INCONCLUSIVE,
            f"too few pairs with baseline output tokens: {n} pairs, baseline total "
            f"{float(b.sum()):g}",
            _Numbers(n=n),
        )
    e = c - k * b
    interval = sequential_mean_interval(e, levels)
    ratio = float(c.sum() / b.sum())
    ratio_sd = float(np.std(c - ratio * b, ddof=1))
    mult = interval.multiplier if math.isfinite(interval.multiplier) else 0.0
    half = mult * ratio_sd / (math.sqrt(n) * float(b.mean()))
    summary = (
        f"mean output tokens ratio candidate/baseline {ratio:.3f} ({float(c.mean()):.1f} vs "
        f"{float(b.mean()):.1f}), {interval.label} {ratio - half:.3f} to {ratio + half:.3f} on "
        f"{n} pairs, limit {k:g}; decided on e = c - {k:g}*b: mean {interval.mean:.2f}, bound "
        f"{interval.low:.2f} to {interval.high:.2f} tokens against 0"
    )
    if interval.note:
        summary += f" (note: {interval.note})"
    need = _mean_min_pairs(interval, 0.0, min_pairs, alpha, power)
    outcome, reason = _mean_outcome(interval, 0.0, need, summary, "more output tokens than allowed")
    return check(outcome, reason, _Numbers(ratio, ratio - half, ratio + half, n))


# ------------------------------------------------------------------ latency

_QUANTILES: tuple[tuple[str, float], ...] = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))

STREAM_ONLY_METRICS: frozenset[str] = frozenset({"ttft_ms"})
"""Latency metrics that only streamed responses have."""

MIN_LATENCY_PAIRS = 30
"""No latency decision (PASS or FAIL) on fewer pairs: the log-normal interval of a
quantile ratio is not trusted below this (its coverage was checked from 30 pairs on)."""

_REPEAT = _SOURCES.index("baseline_repeat")
_MISSING = _SOURCES.index("missing")


@dataclass(frozen=True)
class _LatencyPairs:
    """The pairs a latency metric uses in one unit, and an account of all the others.

    ``used`` is the mask of pairs used; ``accounting`` says how many of the unit's pairs
    were used and why each other pair was left out (every pair counted once, under its
    first reason); ``load_note`` flags an unequal-load control; ``no_baseline`` is set
    when no pair of the unit has a baseline latency for the metric at all.
    """

    used: BoolArray
    accounting: str
    load_note: str
    no_baseline: bool


def _latency_pairs(arrays: PairArrays, metric: str, min_pairs: int) -> _LatencyPairs:
    """The latency pairs used and the account of every pair of the unit.

    Used: neither side failed nor had an infrastructure error, not a warm-up replay,
    both latencies present, a baseline latency source (and, for TTFT, a streamed
    request). The control is the baseline-repeat latency (same shadow hardware and
    load) when at least ``min_pairs`` such pairs exist; otherwise all sources, flagged
    as unequal load when any is live/recorded. Every other pair of the unit is counted
    under the first reason that applies, in this order: not streamed (TTFT), an
    infrastructure error, a failed side, warm-up, no baseline latency, no candidate
    latency, no baseline latency source, only a live baseline latency (when the
    baseline repeat is the control); so used + excluded = the unit's pairs.
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
        drop(~arrays.streamed, "not streamed (no TTFT)")
    rows = left.copy()
    drop(arrays.infra, f"with an infrastructure error (see {INFRA_METRIC})")
    drop(arrays.model_failed, "with a failed side (gated by error_rate)")
    drop(arrays.warmup, "warm-up")
    unmeasured = bool(np.any(left & np.isnan(base)))
    drop(np.isnan(base), f"without a baseline {metric}")
    drop(np.isnan(cand), f"without a candidate {metric}")
    drop(arrays.source == _MISSING, "without a baseline latency source")
    usable = left
    # Not one baseline latency in the unit, and pairs the baseline did answer lack it:
    # the baseline's latency was not measured (not a failure on every pair).
    no_baseline = unmeasured and not bool(np.any(rows & ~np.isnan(base)))
    repeat = usable & (arrays.source == _REPEAT)
    n_repeat = int(np.count_nonzero(repeat))
    load_note = ""
    if n_repeat >= min_pairs:
        other = int(np.count_nonzero(usable & ~repeat))
        if other:
            excluded.append(f"{other} with only a live baseline latency (baseline repeat used)")
        usable = repeat
    else:
        unequal = int(np.count_nonzero(usable & ~repeat))
        if unequal:
            load_note = f"; {UNEQUAL_LOAD} ({unequal} of {int(np.count_nonzero(usable))} pairs)"
    n_used = int(np.count_nonzero(usable))
    if excluded:
        accounting = f" ({n_used} of {n_all} pairs used; excluded: {', '.join(excluded)})"
    else:
        accounting = f" (all {n_all} pairs used)"
    return _LatencyPairs(usable, accounting, load_note, no_baseline)


def _no_baseline_latency(metric: str) -> str:
    """The reason of a latency check whose unit has no baseline latency at all."""
    if metric in STREAM_ONLY_METRICS:
        why = "recorded data without TTFT, or non-streamed baseline requests"
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
) -> list[Check]:
    """p50, p95 (and p99 with enough tail pairs) ratio checks per metric in ``block.metrics``.

    The ratio candidate / baseline has the resampling-free paired interval
    (:func:`stats.quantiles.paired_quantile_ratios_rf`) at the look's spent level
    ``α_k`` on each side. PASS when its upper limit is at most the limit (on at least
    ``min_pairs`` pairs, ``min_pairs_p95`` for p95); FAIL when its lower limit is above
    the limit; otherwise INCONCLUSIVE. p99 is gated only when at least
    ``min_tail_observations`` pairs lie above it (``n·0.01 ≥``); below that it is not a
    check. A baseline latency measured live or copied from a table is flagged as unequal
    load in the reason. TTFT (:data:`STREAM_ONLY_METRICS`) exists only for streamed
    requests: a unit without any streamed request has no TTFT check at all.

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
        cand, base = cand_all[used], base_all[used]
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
                    cand, base, [q for _, q in names], alpha=levels.alpha_k
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
            checks.append(
                _check(
                    f"latency_{metric}_{name}",
                    task_type,
                    statistic,
                    limit,
                    outcome,
                    reason + pairs.accounting + (pairs.load_note if n else ""),
                    numbers,
                )
            )
    return checks


def _latency_outcome(
    result: QuantileRatioResult | str,
    n: int,
    name: str,
    metric: str,
    limit: float,
    min_pairs: tuple[int, int],
    levels: LookLevels,
) -> tuple[CheckOutcome, str, _Numbers]:
    """FAIL wholly above the limit (p95/p99 only from ``min_pairs_p95`` pairs), PASS
    wholly below it on enough pairs, else INCONCLUSIVE. ``min_pairs`` is (the unit's
    floor, ``min_pairs_p95``)."""
    if isinstance(result, str):
        return CheckOutcome.INCONCLUSIVE, result, _Numbers(n=n)
    r = result
    numbers = _Numbers(r.estimate, r.ci_low, r.ci_high, n)
    summary = (
        f"{name} {metric} ratio candidate/baseline {r.estimate:.3f} "
        f"({r.candidate_quantile:.1f} vs {r.baseline_quantile:.1f} ms), "
        f"paired CI {r.ci_low:.3f} to {r.ci_high:.3f} on {n} pairs (resampling-free, "
        f"alpha_k {_g(levels.alpha_k)} per side at look {levels.look}), limit {limit:g}"
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

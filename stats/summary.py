"""Descriptive per-task-type summary of a run's pairs (for tables, reports, dashboards).

These numbers describe; they decide nothing. The gate's decisions and intervals are in the
:class:`~shadoweval.records.Verdict`; :func:`task_type_summary` puts the worst check
outcome of each task type beside the descriptive numbers so a table shows both.

Like the gate, the summary keeps infrastructure errors apart from quality: the
``*_infra_error_rate`` columns are over all pairs, and every quality number (fail rates,
format, similarity, latency, tokens) is over the pairs without an infrastructure error on
either side — the pairs the quality checks judge.

Report-only statistics (never gated; gate-statistics.md §2.2 and pitfalls 4–6): the
Mann–Whitney test of candidate against baseline end-to-end latency with a pinned method
(``asymptotic``: normal approximation with tie correction and continuity correction) and
alternative (``two-sided``), the Hodges–Lehmann shift and the common-language effect size
(:mod:`shadoweval.stats.report_only`). They are what Kayenta judges on; they are shown so that an
operator can compare, and they are computed on the first :data:`REPORT_ONLY_PAIRS` latency
pairs of each row (capture order) so that the summary stays cheap at a million pairs.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from shadoweval.errors import ShadowEvalError
from shadoweval.records import NOT_POWERED, POOLED, REPORT_ONLY, CheckOutcome, Verdict
from shadoweval.stats.checks import infra_pairs
from shadoweval.stats.report_only import cles, hodges_lehmann_shift, mann_whitney

__all__ = ["LATENCY_COLUMNS", "REPORT_ONLY_PAIRS", "SUMMARY_COLUMNS", "task_type_summary"]

REPORT_ONLY_PAIRS = 20_000
"""Latency pairs per row used by the report-only statistics (the first, by capture time)."""

SUMMARY_COLUMNS = (
    "task_type",
    "n",
    "similarity_mean",
    "similarity_p10",
    "noise_similarity_mean",
    "baseline_fail_rate",
    "candidate_fail_rate",
    "baseline_infra_error_rate",
    "candidate_infra_error_rate",
    "format_n",
    "baseline_format_ok_rate",
    "candidate_format_ok_rate",
    "e2e_p50_ratio",
    "e2e_p95_ratio",
    "ttft_p50_ratio",
    "ttfc_p50_ratio",
    "output_tokens_ratio",
    "e2e_mann_whitney_p",
    "e2e_hodges_lehmann_ms",
    "e2e_cles",
    "outcome",
)
"""Columns of :func:`task_type_summary` (rates in [0, 1], ratios candidate / baseline).

``n`` counts all pairs; ``*_infra_error_rate`` is over all pairs; ``*_fail_rate`` (an
error that is not an infrastructure error, or an empty answer) and the other quality
columns are over the pairs without an infrastructure error on either side (NaN when there
are none). ``noise_similarity_mean`` is the mean baseline-vs-baseline-repeat similarity (the
noise floor; NaN without baseline repeats). ``e2e_mann_whitney_p`` (two-sided, asymptotic),
``e2e_hodges_lehmann_ms`` (candidate − baseline shift, ms) and ``e2e_cles``
(P(candidate > baseline) + ½·P(tie)) are report only, on the first
:data:`REPORT_ONLY_PAIRS` latency pairs. The latency columns (``e2e_*``, ``ttft_p50_ratio``,
``ttfc_p50_ratio``: time to first visible content) leave out failed sides, warm-up
replays and pairs with an answer served from a cache, as the gate does."""

_SHOWN_ORDER = {
    CheckOutcome.FAIL.value: 0,
    CheckOutcome.INCONCLUSIVE.value: 1,
    NOT_POWERED: 2,
    REPORT_ONLY: 3,
    CheckOutcome.PASS.value: 4,
}
"""Worst first: the order of what a task type's checks show (:meth:`Verdict.check_status`)."""


def _latency_rows(rows: pd.DataFrame) -> pd.Series:
    """Pairs whose latencies describe the models: no failed side, not warm-up, and no
    answer served from a cache (as the gate's latency checks)."""
    return ~(
        rows["baseline_fail"]
        | rows["candidate_fail"]
        | rows["candidate_warmup"]
        | rows["baseline_cache_hit"]
        | rows["candidate_cache_hit"]
    )


def _quantile_ratio(rows: pd.DataFrame, metric: str, q: float) -> float:
    ok = _latency_rows(rows)
    base = rows.loc[ok, f"baseline_{metric}"].dropna().to_numpy(dtype=float)
    cand = rows.loc[ok, f"candidate_{metric}"].dropna().to_numpy(dtype=float)
    if base.size == 0 or cand.size == 0:
        return math.nan
    denominator = float(np.quantile(base, q))
    return float(np.quantile(cand, q)) / denominator if denominator > 0 else math.nan


def _report_only(rows: pd.DataFrame) -> tuple[float, float, float]:
    """Mann–Whitney p, Hodges–Lehmann shift and CLES of candidate vs baseline e2e latency."""
    ok = _latency_rows(rows)
    used = rows.loc[ok, ["candidate_e2e_ms", "baseline_e2e_ms"]].dropna().head(REPORT_ONLY_PAIRS)
    if len(used) < 2:
        return math.nan, math.nan, math.nan
    cand = used["candidate_e2e_ms"].to_numpy(dtype=float)
    base = used["baseline_e2e_ms"].to_numpy(dtype=float)
    try:
        mw = mann_whitney(cand, base, alternative="two-sided", method="asymptotic")
        return mw.p_value, hodges_lehmann_shift(cand, base), cles(cand, base)
    except ShadowEvalError:
        return math.nan, math.nan, math.nan


def _rate(values: pd.Series) -> float:
    return float(values.astype(float).mean()) if len(values) else math.nan


LATENCY_COLUMNS = (
    "e2e_p50_ratio",
    "e2e_p95_ratio",
    "ttft_p50_ratio",
    "ttfc_p50_ratio",
    "e2e_mann_whitney_p",
    "e2e_hodges_lehmann_ms",
    "e2e_cles",
)
"""The latency columns of :data:`SUMMARY_COLUMNS` (NaN with ``latency=False``)."""


def _row(
    task_type: str, all_rows: pd.DataFrame, outcome: str, *, latency: bool = True
) -> dict[str, object]:
    n = len(all_rows)
    infra = infra_pairs(all_rows)
    rows = all_rows[~infra]
    sim = rows["similarity"].dropna().to_numpy(dtype=float)
    fmt = rows[rows["format_expected"]]
    fmt = fmt[fmt["baseline_format_ok"].notna() & fmt["candidate_format_ok"].notna()]
    noise = rows["noise_similarity"].dropna().to_numpy(dtype=float)
    mw_p, hl_shift, effect = _report_only(rows) if latency else (math.nan,) * 3
    base_tok = rows["baseline_output_tokens"].sum(min_count=1)
    cand_tok = rows.loc[rows["baseline_output_tokens"].notna(), "candidate_output_tokens"].sum(
        min_count=1
    )
    return {
        "task_type": task_type,
        "n": n,
        "similarity_mean": float(sim.mean()) if sim.size else math.nan,
        "similarity_p10": float(np.quantile(sim, 0.1)) if sim.size else math.nan,
        "noise_similarity_mean": float(noise.mean()) if noise.size else math.nan,
        "baseline_fail_rate": _rate(rows["baseline_fail"]),
        "candidate_fail_rate": _rate(rows["candidate_fail"]),
        "baseline_infra_error_rate": _rate(all_rows["baseline_infra_error"]),
        "candidate_infra_error_rate": _rate(all_rows["candidate_infra_error"]),
        "format_n": len(fmt),
        "baseline_format_ok_rate": float(fmt["baseline_format_ok"].mean())
        if len(fmt)
        else math.nan,
        "candidate_format_ok_rate": (
            float(fmt["candidate_format_ok"].mean()) if len(fmt) else math.nan
        ),
        "e2e_p50_ratio": _quantile_ratio(rows, "e2e_ms", 0.5) if latency else math.nan,
        "e2e_p95_ratio": _quantile_ratio(rows, "e2e_ms", 0.95) if latency else math.nan,
        "ttft_p50_ratio": _quantile_ratio(rows, "ttft_ms", 0.5) if latency else math.nan,
        "ttfc_p50_ratio": _quantile_ratio(rows, "ttfc_ms", 0.5) if latency else math.nan,
        "output_tokens_ratio": (
            float(cand_tok / base_tok) if pd.notna(base_tok) and base_tok > 0 else math.nan
        ),
        "e2e_mann_whitney_p": mw_p,
        "e2e_hodges_lehmann_ms": hl_shift,
        "e2e_cles": effect,
        "outcome": outcome,
    }


def _worst(verdict: Verdict | None, task_type: str) -> str:
    if verdict is None:
        return ""
    checks = [c for c in verdict.checks if c.task_type == task_type]
    if not checks:
        return ""
    # A check that cannot decide (every open check of a PROMOTE, a non-blocking check of
    # any verdict) shows as report only or not powered yet, never as a hold
    # (Verdict.check_status); the worst of what the checks show.
    return min((verdict.check_status(c) for c in checks), key=_SHOWN_ORDER.__getitem__)


def task_type_summary(
    pairs: pd.DataFrame, verdict: Verdict | None = None, *, latency: bool = True
) -> pd.DataFrame:
    """One row per task type plus a pooled row (``task_type = POOLED``), last.

    Args:
        pairs: the table from :func:`shadoweval.stats.frame.pairs_frame`.
        verdict: when given, ``outcome`` holds the worst check outcome of each task type
            as every face shows it (:meth:`~shadoweval.records.Verdict.check_status`: in a
            PROMOTE, ``report only`` or ``not powered yet`` rather than ``inconclusive``).
        latency: ``False`` leaves the :data:`LATENCY_COLUMNS` NaN and skips computing
            them (the report-only statistics cost about half a second at 200,000
            pairs; the dashboard's overview shows none of them); every other column is
            the same.

    Returns:
        A DataFrame with :data:`SUMMARY_COLUMNS`; quantile ratios use linear quantiles over
        pairs where neither side failed or had an infrastructure error and the candidate
        was not warming up.
    """
    rows = [
        _row(str(task), group, _worst(verdict, str(task)), latency=latency)
        for task, group in pairs.groupby("task_type", sort=True)
    ]
    rows.append(_row(POOLED, pairs, _worst(verdict, POOLED), latency=latency))
    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))

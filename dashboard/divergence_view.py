"""Divergence page: candidate similarity against the noise floor, and the lowest pairs.

Values are those of :func:`stats.summary.task_type_summary`: per task type, the pairs
without an infrastructure error on either side, known values only. ``similarity`` is
baseline vs candidate; ``noise_similarity`` is baseline vs a baseline repeat (the noise
floor: how much the baseline diverges from itself). Both histograms share their bins,
and heights are shares of each series so a small repeat sample compares with the whole.
"""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import numpy as np
import numpy.typing as npt
import pandas as pd

from dashboard.latency_view import task_type_rows
from shadoweval.storage.samples import Sample
from stats.checks import infra_pairs

__all__ = [
    "HISTOGRAM_BINS",
    "SERIES",
    "histogram_chart",
    "lowest_table",
    "similarity_histogram",
    "similarity_values",
]

HISTOGRAM_BINS = 40
SERIES: dict[str, str] = {
    "similarity": "candidate vs baseline",
    "noise_similarity": "baseline vs repeat (noise floor)",
}
"""Pairs-frame column → series name shown."""

TEXT_PREVIEW_CHARS = 160


def similarity_values(pairs: pd.DataFrame, task_type: str) -> dict[str, npt.NDArray[np.float64]]:
    """Known ``similarity`` and ``noise_similarity`` of one task type's judged pairs."""
    rows = task_type_rows(pairs, task_type)
    rows = rows[~infra_pairs(rows)]
    return {column: rows[column].dropna().to_numpy(dtype=np.float64) for column in SERIES}


def similarity_histogram(
    pairs: pd.DataFrame, task_type: str, *, bins: int = HISTOGRAM_BINS
) -> pd.DataFrame:
    """Histograms of both series on shared bins.

    Returns:
        Columns ``series``, ``bin_start``, ``bin_end``, ``count``, ``share`` (count / the
        series' values); ``bins`` rows per series that has values, none otherwise. The
        bin edges are ``numpy.histogram_bin_edges`` of both series together.
    """
    values = similarity_values(pairs, task_type)
    present = [v for v in values.values() if v.size]
    columns = ["series", "bin_start", "bin_end", "count", "share"]
    if not present:
        return pd.DataFrame(columns=columns)
    edges = np.histogram_bin_edges(np.concatenate(present), bins=bins)
    parts = []
    for column, name in SERIES.items():
        series = values[column]
        if not series.size:
            continue
        counts, _ = np.histogram(series, bins=edges)
        parts.append(
            pd.DataFrame(
                {
                    "series": name,
                    "bin_start": edges[:-1],
                    "bin_end": edges[1:],
                    "count": counts,
                    "share": counts / series.size,
                }
            )
        )
    return pd.concat(parts, ignore_index=True)[columns]


def histogram_chart(histogram: pd.DataFrame, title: str) -> alt.Chart:
    """Overlaid bars of :func:`similarity_histogram` (x: similarity, y: share of pairs)."""
    chart: alt.Chart = (
        alt.Chart(histogram, title=title)
        .mark_bar(opacity=0.55)
        .encode(
            x=alt.X("bin_start:Q", title="cosine similarity", bin="binned"),
            x2="bin_end:Q",
            y=alt.Y("share:Q", title="share of pairs", stack=None, axis=alt.Axis(format="%")),
            color=alt.Color(
                "series:N",
                scale=alt.Scale(domain=list(SERIES.values()), range=["#f58518", "#4c78a8"]),
            ),
            tooltip=[
                alt.Tooltip("series:N"),
                alt.Tooltip("bin_start:Q", format=".3f", title="from"),
                alt.Tooltip("bin_end:Q", format=".3f", title="to"),
                alt.Tooltip("count:Q"),
                alt.Tooltip("share:Q", format=".1%"),
            ],
        )
    )
    return chart


def _preview(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= TEXT_PREVIEW_CHARS else flat[: TEXT_PREVIEW_CHARS - 1] + "…"


def lowest_table(samples: Sequence[Sample]) -> pd.DataFrame:
    """One row per sample (in the order given): id, similarity, noise floor, flags, texts."""
    return pd.DataFrame(
        [
            {
                "exchange id": s.exchange_id,
                "similarity": s.similarity,
                "noise floor": s.noise_similarity,
                "flags": ", ".join(f.value for f in s.flags),
                "baseline": _preview(s.baseline_text),
                "candidate": _preview(s.candidate_text),
                "label": "" if s.label is None else s.label.label.value,
            }
            for s in samples
        ],
        columns=[
            "exchange id",
            "similarity",
            "noise floor",
            "flags",
            "baseline",
            "candidate",
            "label",
        ],
    )

"""Divergence page: candidate similarity against the noise floor, and the lowest pairs.

Values are those of the summary (:func:`shadoweval.application.run_views.task_summary`): per task
type, the pairs without an infrastructure error on either side
(:func:`shadoweval.application.run_views.judged_pairs`), known values only. ``similarity`` is
baseline vs candidate; ``noise_similarity`` is baseline vs a baseline repeat (the noise
floor: how much the baseline diverges from itself). Both histograms share fixed bins
inside the cosine range (up to 1.0), drawn side by side in each bin, and heights are
shares of each series so a small repeat sample compares with the whole.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import altair as alt
import numpy as np
import numpy.typing as npt
import pandas as pd

from shadoweval.application.run_views import judged_pairs
from shadoweval.storage.samples import Sample

__all__ = [
    "EDGE_STEP",
    "HISTOGRAM_BINS",
    "SERIES",
    "SERIES_COLOURS",
    "histogram_chart",
    "histogram_edges",
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
SERIES_COLOURS: tuple[str, str] = ("#f58518", "#4c78a8")
"""Bar colours of the :data:`SERIES`, in order: candidate orange, noise floor blue."""
EDGE_STEP = 0.05
"""The histogram's lowest edge is the smallest value floored to a multiple of this."""

TEXT_PREVIEW_CHARS = 160


def similarity_values(pairs: pd.DataFrame, task_type: str) -> dict[str, npt.NDArray[np.float64]]:
    """Known ``similarity`` and ``noise_similarity`` of one task type's judged pairs."""
    rows = judged_pairs(pairs, task_type)
    return {column: rows[column].dropna().to_numpy(dtype=np.float64) for column in SERIES}


def histogram_edges(
    values: Sequence[npt.NDArray[np.float64]], *, bins: int = HISTOGRAM_BINS
) -> npt.NDArray[np.float64]:
    """Fixed bin edges inside the cosine range: ``bins`` equal bins from the smallest
    value of all series floored to :data:`EDGE_STEP` (never below -1, at most
    ``1 - EDGE_STEP``) to 1.0 inclusive.

    So a task type whose similarities are all 1.0 gets the bins 0.95 … 1.0, never an axis
    running past 1 (``numpy.histogram_bin_edges`` of one value spans value ± 0.5).

    Raises:
        ValueError: ``bins`` < 1 (the message names it) or no values at all.
    """
    if bins < 1:
        raise ValueError(f"bins={bins!r}: give at least 1 bin")
    present = [v for v in values if v.size]
    if not present:
        raise ValueError("histogram_edges: no similarity values to bin")
    smallest = float(np.clip(np.concatenate(present), -1.0, 1.0).min())
    low = round(math.floor(round(smallest / EDGE_STEP, 9)) * EDGE_STEP, 10)
    if low > smallest:
        low = round(low - EDGE_STEP, 10)
    low = min(max(low, -1.0), 1.0 - EDGE_STEP)
    edges: npt.NDArray[np.float64] = np.linspace(low, 1.0, bins + 1)
    return edges


def similarity_histogram(
    pairs: pd.DataFrame, task_type: str, *, bins: int = HISTOGRAM_BINS
) -> pd.DataFrame:
    """Histograms of both series on shared, fixed bins (:func:`histogram_edges`).

    Returns:
        Columns ``series``, ``bin_start``, ``bin_end``, ``count``, ``share`` (count / the
        series' values), ``bar_start`` and ``bar_end``; ``bins`` rows per series that has
        values, none otherwise. Values are clipped to [-1, 1] (rounding can put a cosine
        a hair above 1); the last bin includes 1.0. ``bar_start``/``bar_end`` are where
        the series' bar is drawn: the candidate in the left half of its bin, the noise
        floor in the right half, so the two series never overlap.
    """
    values = similarity_values(pairs, task_type)
    columns = ["series", "bin_start", "bin_end", "count", "share", "bar_start", "bar_end"]
    if not any(v.size for v in values.values()):
        return pd.DataFrame(columns=columns)
    edges = histogram_edges(list(values.values()), bins=bins)
    middles = (edges[:-1] + edges[1:]) / 2.0
    parts = []
    for position, (column, name) in enumerate(SERIES.items()):
        series = np.clip(values[column], -1.0, 1.0)
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
                    "bar_start": edges[:-1] if position == 0 else middles,
                    "bar_end": middles if position == 0 else edges[1:],
                }
            )
        )
    return pd.concat(parts, ignore_index=True)[columns]


def histogram_chart(histogram: pd.DataFrame, title: str) -> alt.Chart:
    """Side-by-side bars of :func:`similarity_histogram` (x: similarity, y: share of pairs).

    Each bin holds the candidate's bar (left half, :data:`SERIES_COLOURS`) and the noise
    floor's (right half); opaque colours with a legend, the x axis from the first bin edge
    to 1.0.
    """
    low = float(histogram["bin_start"].min()) if not histogram.empty else -1.0
    chart: alt.Chart = (
        alt.Chart(histogram, title=title)
        .mark_bar(opacity=0.9)
        .encode(
            x=alt.X(
                "bar_start:Q",
                title="cosine similarity",
                scale=alt.Scale(domain=[low, 1.0], nice=False),
            ),
            x2="bar_end:Q",
            y=alt.Y("share:Q", title="share of pairs", stack=None, axis=alt.Axis(format="%")),
            y2=alt.datum(0),
            color=alt.Color(
                "series:N",
                title="series",
                scale=alt.Scale(domain=list(SERIES.values()), range=list(SERIES_COLOURS)),
                legend=alt.Legend(orient="top", labelLimit=0),
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

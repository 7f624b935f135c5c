"""What the dashboard must show, computed straight from storage and the stats module.

Nothing here imports the dashboard's views: each expectation is built from
:class:`~shadoweval.storage.Repository` reads and :mod:`stats` (the pairs frame, the
summary, the label summary) or written out in plain Python, so a test compares the app's
numbers with an independent computation.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd
from streamlit.testing.v1 import AppTest

from shadoweval.records import PairScore
from shadoweval.storage import Repository
from stats.checks import infra_pairs
from stats.frame import pairs_frame
from stats.policy import parse_policy_yaml

_ESCAPED = re.compile(r"\\(.)")
NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def unescape(markdown: str) -> str:
    """Markdown with backslash escapes removed (``infra\\_error`` → ``infra_error``)."""
    return _ESCAPED.sub(r"\1", markdown)


def frame_with(app: AppTest, column: str) -> pd.DataFrame:
    """The first ``st.dataframe`` shown whose data has ``column``."""
    for element in app.dataframe:
        value = element.value
        if column in value.columns:
            return value
    raise AssertionError(f"no dataframe with column {column!r} on the page")


def rows_by(frame: pd.DataFrame, *keys: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The rows of ``frame`` as dicts, by the values of its ``keys`` columns."""
    return {
        tuple(row[k] for k in keys): {str(c): v for c, v in row.items()}
        for row in frame.to_dict(orient="records")
    }


def pairs_of(repo: Repository, run_id: str) -> pd.DataFrame:
    """:func:`stats.frame.pairs_frame` of the run under its frozen policy."""
    run = repo.get_run(run_id)
    assert run is not None
    return pairs_frame(repo.load_pair_scores(run_id), parse_policy_yaml(run.policy_yaml))


def summary_latency_rows(pairs: pd.DataFrame) -> pd.DataFrame:
    """The summary's latency selection, written out: no infra error, no failed side, no
    warm-up (``stats.summary._quantile_ratio``)."""
    rows = pairs[~infra_pairs(pairs)]
    ok = ~(rows["baseline_fail"] | rows["candidate_fail"] | rows["candidate_warmup"])
    return rows[ok]


def quantile(values: pd.Series, q: float) -> float:
    """Linear quantile of the known values (NaN when there are none)."""
    known = values.dropna().to_numpy(dtype=float)
    return float(np.quantile(known, q)) if known.size else float("nan")


def page_order(scores: list[PairScore]) -> list[str]:
    """Exchange ids in the samples' page order: no similarity first (by id), then by
    (similarity, id)."""
    missing = sorted(s.exchange_id for s in scores if s.similarity is None)
    known = sorted(
        ((s.similarity, s.exchange_id) for s in scores if s.similarity is not None),
    )
    return missing + [exchange_id for _, exchange_id in known]


def shown_exchange_ids(app: AppTest, prefix: str = "dx") -> list[str]:
    """Exchange ids in the sample headers on the page, in order."""
    pattern = re.compile(rf"`({prefix}\d+)`")
    ids = []
    for element in app.markdown:
        found = pattern.search(element.value)
        if found and element.value.startswith("**"):
            ids.append(found.group(1))
    return ids

"""What the dashboard must show, computed straight from storage and the stats module.

Nothing here imports the dashboard's views: each expectation is built from
:class:`~shadoweval.storage.Repository` reads and :mod:`shadoweval.stats` (the pairs frame, the
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
from shadoweval.stats.checks import infra_pairs
from shadoweval.stats.frame import pairs_frame
from shadoweval.stats.policy import parse_policy_yaml
from shadoweval.storage import Repository

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
    """:func:`shadoweval.stats.frame.pairs_frame` of the run under its frozen policy."""
    run = repo.get_run(run_id)
    assert run is not None
    return pairs_frame(repo.load_pair_scores(run_id), parse_policy_yaml(run.policy_yaml))


def summary_latency_rows(pairs: pd.DataFrame) -> pd.DataFrame:
    """The summary's latency selection, written out: no infra error, no failed side, no
    warm-up (``shadoweval.stats.summary._quantile_ratio``)."""
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


def direction_expected(repo: Repository, run_id: str) -> dict[str, dict[str, Any]]:
    """Per task type and pooled: the counts of the direction table and the net harm,
    computed from the change classification, the stored judgements and labels.

    The resolved judgement of a pair is written out here: the latest label (by
    ``labelled_at``) wins, then a successful reference check, then a successful judge
    judgement; a pair whose judgements all failed is ``failed``.
    """
    from shadoweval.records import POOLED
    from shadoweval.stats.change import classify_changes
    from shadoweval.stats.net_harm import estimate_net_harm, pooled_strata

    run = repo.get_run(run_id)
    assert run is not None
    policy = parse_policy_yaml(run.policy_yaml)
    pairs = pairs_frame(repo.load_pair_scores(run_id), policy)
    worse = {"candidate_worse": 1.0, "candidate_better": -1.0, "tie": 0.0, "same": 0.0}
    worse["both_bad"] = 0.0
    outcome: dict[str, tuple[float, str]] = {}
    failed: set[str] = set()
    by_source: dict[str, dict[str, float]] = {"judge": {}, "reference": {}}
    for judgement in repo.list_judgements(run_id):
        if judgement.outcome is None:
            failed.add(judgement.exchange_id)
        else:
            by_source[judgement.source.value][judgement.exchange_id] = worse[judgement.outcome]
    latest: dict[str, Any] = {}
    for label in repo.load_labels(run_id):
        held = latest.get(label.exchange_id)
        if held is None or label.labelled_at > held.labelled_at:
            latest[label.exchange_id] = label
    for name in ("judge", "reference"):
        for exchange_id, value in by_source[name].items():
            outcome[exchange_id] = (value, name)
    for exchange_id, label in latest.items():
        outcome[exchange_id] = (worse[label.label.value], "human")
    ids = list(pairs["exchange_id"])
    quality = np.array([outcome.get(i, (np.nan, ""))[0] for i in ids])
    source = np.array([outcome.get(i, (np.nan, ""))[1] for i in ids], dtype=object)
    is_failed = np.array([i in failed and i not in outcome for i in ids])
    # Ground truth (reference, labels) marks a pair changed whatever its similarity (issue 29).
    changes = classify_changes(pairs.assign(quality=quality, quality_source=source), policy)
    task_types = pairs["task_type"].to_numpy(dtype=object)
    expected: dict[str, dict[str, Any]] = {}
    for unit in [*sorted(set(task_types)), POOLED]:
        mask = np.ones(len(ids), bool) if unit == POOLED else task_types == unit
        changed = changes.changed[mask]
        judged = changed & ~np.isnan(quality[mask])
        stratum = changes.stratum[mask]
        if unit == POOLED:
            stratum, _ = pooled_strata(task_types, changes.stratum, (0.1, 0.2, 0.35))
        estimate = estimate_net_harm(quality[mask], changed, stratum)
        q = quality[mask]
        expected[str(unit)] = {
            "pairs": int(mask.sum()),
            "changed": int(changed.sum()),
            "judged": int(judged.sum()),
            "by judge": int((judged & (source[mask] == "judge")).sum()),
            "by human": int((judged & (source[mask] == "human")).sum()),
            "by reference": int((judged & (source[mask] == "reference")).sum()),
            "to judge": int((changed & ~judged).sum()),
            "failed": int((changed & is_failed[mask]).sum()),
            "better": int((judged & (q < 0)).sum()),
            "tie": int((judged & (q == 0)).sum()),
            "worse": int((judged & (q > 0)).sum()),
            "net_harm": estimate.estimate,
            "net_harm_interval": estimate.interval(0.025),
        }
    return expected

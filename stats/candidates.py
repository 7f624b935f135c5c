"""Several candidates on one shadow sample: which are no worse, and which is best.

Each candidate was replayed on the same captured requests and gated against the same
baseline (live) answers by its own run's gate, unchanged (:mod:`shadoweval.stats.gate`).
This module compares the candidates' evidence; it never changes a verdict.

**No worse** (one family, family-wise error ≤ ``alpha``). The null hypothesis of
candidate ``i`` is "``i`` is worse than the baseline beyond a margin". Its gate PROMOTEs
only when every blocking non-inferiority check passes: an intersection–union test, whose
p-value is the largest of its component p-values (Berger, "Multiparameter hypothesis
testing and acceptance sampling", Technometrics 24:295–300, 1982). Over the K candidates
these p-values are adjusted with Holm's step-down procedure (Holm, "A simple sequentially
rejective multiple test procedure", Scand. J. Statist. 6:65–70, 1979;
:func:`shadoweval.stats.multiplicity.holm`). A candidate is *no worse* when its own gate
said PROMOTE **and** its Holm-adjusted p-value is ≤ ``alpha``: the chance that any
candidate that is in truth worse gets into the no-worse set is at most ``alpha`` (as far
as the checks carry p-values: checks with only an interval — latency ratios, cost,
similarity — enter at the level the gate judged them, and are listed in
:attr:`CandidateResult.unadjusted_checks`).

**Best** (a second family, family-wise error ≤ ``alpha``). Among the no-worse candidates,
every pair ``(A, B)`` is compared on the requests both answered (paired: the same
requests), by each request's direction against the baseline (:func:`request_direction`:
+1 worse, 0 tie, −1 better): the exact two-sided sign test on the requests where the two
directions differ (Dixon & Mood, "The statistical sign test", JASA 41:557–566, 1946; on
binary outcomes it is McNemar's exact test, McNemar 1947). The m(m − 1)/2 pairwise tests
are Bonferroni-adjusted (each at ``alpha`` / (m(m − 1)/2); Dunn, "Multiple comparisons
among means", JASA 56:52–64, 1961): a two-sided test at that level also bounds the error
of the direction claimed, so "A beats B" is wrong with probability ≤ ``alpha`` over all
claims together, whichever candidate the data made the leader. A candidate is *best* only
when it beats every other no-worse candidate; otherwise no best is named and the
candidates not beaten by anyone are reported as tied. One no-worse candidate is the pick
without a test.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import binomtest

from shadoweval.records import CheckOutcome, Decision, Verdict
from shadoweval.stats.frame import BASELINE_HARM_COLUMNS, CANDIDATE_HARM_COLUMNS
from shadoweval.stats.multiplicity import holm

__all__ = [
    "CANDIDATES_METHOD",
    "DIRECTION_NOTE",
    "CandidateComparison",
    "CandidateEvidence",
    "CandidateResult",
    "PairwiseTest",
    "compare_candidates",
    "noninferiority_p",
    "request_direction",
]

DIRECTION_NOTE = (
    "direction: mean per-request quality against the baseline on the candidate's requests "
    "(+ worse, \u2212 better; judgements where present, else failures, format and harm "
    "flags), in points; not the gate's net harm (each candidate's own verdict reads that)"
)
"""The footnote of a side-by-side table's ``direction`` column
(:attr:`CandidateResult.direction_pp`): it is not the gate's net harm."""

CANDIDATES_METHOD = (
    "no worse: own gate PROMOTE and Holm (1979) step-down over the candidates' "
    "intersection-union non-inferiority p-values (Berger 1982); best: exact two-sided sign "
    "test per pair of no-worse candidates on their shared requests (Dixon & Mood 1946), "
    "Bonferroni over all pairs (Dunn 1961)"
)
"""The method in one line, as the report and the faces name it."""


@dataclass(frozen=True, slots=True)
class CandidateEvidence:
    """One candidate's evidence.

    Attributes:
        name: the candidate's name (unique among those compared).
        verdict: its run's verdict, as its own gate decided it.
        direction: per request (index: exchange id), the candidate's direction against
            the baseline: +1 worse, 0 tie, −1 better, NaN not comparable
            (:func:`request_direction`).
    """

    name: str
    verdict: Verdict
    direction: pd.Series


@dataclass(frozen=True, slots=True)
class CandidateResult:
    """One candidate in the comparison.

    Attributes:
        name: the candidate's name.
        decision: its own gate's decision.
        p_value: its intersection–union non-inferiority p-value (:func:`noninferiority_p`;
            1.0 when its gate did not PROMOTE).
        adjusted_p: ``p_value`` Holm-adjusted over the candidates.
        no_worse: own gate PROMOTE and ``adjusted_p`` ≤ alpha.
        requests: requests with a direction (not NaN).
        mean_direction: mean direction over them (P(worse) − P(better) per request on
            this sample, lower is better; NaN without requests) — not the gate's
            stratified net harm.
        unadjusted_checks: the passed blocking checks without a p-value
            (``metric/task_type``), taken at the gate's own level.
    """

    name: str
    decision: Decision
    p_value: float
    adjusted_p: float
    no_worse: bool
    requests: int
    mean_direction: float
    unadjusted_checks: tuple[str, ...] = ()

    @property
    def direction_pp(self) -> float:
        """``mean_direction`` in percentage points (×100; NaN without requests)."""
        return 100.0 * self.mean_direction


@dataclass(frozen=True, slots=True)
class PairwiseTest:
    """The sign test of two no-worse candidates on their shared requests.

    ``first_better`` / ``second_better``: shared requests where that candidate's
    direction is the lower (better); ``shared``: requests both have a direction on;
    ``p_value``: exact two-sided binomial p (NaN with no differing request);
    ``level``: the Bonferroni level it is compared with; ``winner``: the better one's
    name when ``p_value`` ≤ ``level``, else ``None``.
    """

    first: str
    second: str
    shared: int
    first_better: int
    second_better: int
    p_value: float
    level: float
    winner: str | None


@dataclass(frozen=True, slots=True)
class CandidateComparison:
    """Which candidates are no worse, and which is best.

    Attributes:
        candidates: one result per candidate, in the order given.
        no_worse: names of the no-worse candidates, in the order given.
        best: the pick (see the module docstring), ``None`` when there is none.
        tied: with no best, the no-worse candidates no other one beats.
        pairwise: the pairwise tests among the no-worse candidates.
        alpha: the family-wise level of each family.
        method: :data:`CANDIDATES_METHOD`.
        summary: one sentence: the pick and its error control, or why there is none.
    """

    candidates: tuple[CandidateResult, ...]
    no_worse: tuple[str, ...]
    best: str | None
    tied: tuple[str, ...]
    pairwise: tuple[PairwiseTest, ...]
    alpha: float
    method: str = CANDIDATES_METHOD
    summary: str = ""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: every field, the results and tests as objects (NaN as ``None``)."""

        def clean(row: dict[str, object]) -> dict[str, object]:
            return {
                k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()
            }

        return {
            "no_worse": list(self.no_worse),
            "best": self.best,
            "tied": list(self.tied),
            "alpha": self.alpha,
            "method": self.method,
            "summary": self.summary,
            "candidates": [
                clean(
                    {
                        **asdict(r),
                        "decision": r.decision.value,
                        "unadjusted_checks": list(r.unadjusted_checks),
                    }
                )
                for r in self.candidates
            ],
            "pairwise": [clean(asdict(t)) for t in self.pairwise],
        }


def request_direction(pairs: pd.DataFrame) -> pd.Series:
    """Each request's direction of the candidate against the baseline, from a run's
    pairs table (:func:`shadoweval.stats.frame.pairs_frame` columns).

    A pair with an infrastructure error on either side says nothing about the models:
    NaN. A judged pair (``quality`` not NaN: judge, reference or human) has its
    judgement (+1 candidate worse, −1 better, 0 tie). Any other pair compares the sides'
    failures: a side is *bad* when it failed (error or empty answer), its expected format
    did not parse, or a harm detector fired on it; direction = bad(candidate) −
    bad(baseline).

    Returns:
        float64 Series indexed by exchange id (values −1, 0, +1 or NaN).
    """
    if pairs.empty:
        return pd.Series([], dtype="float64", index=pd.Index([], dtype=object))

    def bad(side: str, harms: Sequence[str]) -> np.ndarray:
        failed = pairs[f"{side}_fail"].to_numpy(dtype=bool)
        expected = pairs["format_expected"].to_numpy(dtype=bool)
        format_bad = expected & (pairs[f"{side}_format_ok"].to_numpy(dtype=float) == 0.0)
        harmed = pairs[list(harms)].to_numpy(dtype=bool).any(axis=1)
        return np.asarray(failed | format_bad | harmed, dtype=bool)

    direction = bad("candidate", CANDIDATE_HARM_COLUMNS).astype(float) - bad(
        "baseline", BASELINE_HARM_COLUMNS
    ).astype(float)
    quality = pairs["quality"].to_numpy(dtype=float)
    direction = np.where(np.isnan(quality), direction, quality)
    infra = pairs["candidate_infra_error"].to_numpy(dtype=bool) | pairs[
        "baseline_infra_error"
    ].to_numpy(dtype=bool)
    direction[infra] = np.nan
    return pd.Series(direction, index=pd.Index(pairs["exchange_id"].astype(str)))


def noninferiority_p(verdict: Verdict) -> tuple[float, tuple[str, ...]]:
    """A verdict's intersection–union non-inferiority p-value (Berger 1982): the largest
    p-value of its blocking checks that passed, with the passed blocking checks that
    carry none (``metric/task_type``).

    1.0 when the verdict is not PROMOTE (its gate did not find it no worse). A PROMOTE
    whose passed checks carry no p-value at all gets 0.0: only the gate's own level
    stands behind it, and the second element names those checks.
    """
    if verdict.decision is not Decision.PROMOTE:
        return 1.0, ()
    passed = [c for c in verdict.checks if c.blocking and c.outcome is CheckOutcome.PASS]
    with_p = [c.p_value for c in passed if c.p_value is not None]
    without = tuple(f"{c.metric}/{c.task_type}" for c in passed if c.p_value is None)
    return (max(with_p) if with_p else 0.0), without


def _sign_test(first: CandidateEvidence, second: CandidateEvidence, level: float) -> PairwiseTest:
    joined = pd.concat([first.direction, second.direction], axis=1, join="inner").dropna()
    a = joined.iloc[:, 0].to_numpy(dtype=float)
    b = joined.iloc[:, 1].to_numpy(dtype=float)
    first_better = int(np.count_nonzero(a < b))
    second_better = int(np.count_nonzero(b < a))
    n = first_better + second_better
    p = float(binomtest(first_better, n, 0.5).pvalue) if n else math.nan
    winner = None
    if n and p <= level and first_better != second_better:
        winner = first.name if first_better > second_better else second.name
    return PairwiseTest(
        first.name, second.name, len(joined), first_better, second_better, p, level, winner
    )


def _result(evidence: CandidateEvidence, adjusted: float, alpha: float) -> CandidateResult:
    p, without = noninferiority_p(evidence.verdict)
    values = evidence.direction.dropna()
    return CandidateResult(
        name=evidence.name,
        decision=evidence.verdict.decision,
        p_value=p,
        adjusted_p=adjusted,
        no_worse=evidence.verdict.decision is Decision.PROMOTE and adjusted <= alpha,
        requests=len(values),
        mean_direction=float(values.mean()) if len(values) else math.nan,
        unadjusted_checks=without,
    )


def compare_candidates(
    candidates: Sequence[CandidateEvidence], *, alpha: float
) -> CandidateComparison:
    """Which of ``candidates`` are no worse than the baseline, and which is best (the
    method and sources: the module docstring).

    Args:
        candidates: at least one; names unique.
        alpha: family-wise level of each family, in (0, 0.5) (the policy's ``alpha``).

    Raises:
        ValueError: no candidate, a repeated name, or ``alpha`` outside (0, 0.5).
    """
    names = [c.name for c in candidates]
    if not candidates:
        raise ValueError("candidates: at least one is needed")
    if len(set(names)) != len(names):
        raise ValueError(f"candidates: names must be unique, got {names}")
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must lie in (0, 0.5), got {alpha!r}")
    adjusted = holm([noninferiority_p(c.verdict)[0] for c in candidates])
    results = tuple(_result(c, float(a), alpha) for c, a in zip(candidates, adjusted, strict=True))
    kept = [c for c, r in zip(candidates, results, strict=True) if r.no_worse]
    pairs = [(a, b) for i, a in enumerate(kept) for b in kept[i + 1 :]]
    level = alpha / len(pairs) if pairs else alpha
    tests = tuple(_sign_test(a, b, level) for a, b in pairs)
    return _decide(results, tuple(c.name for c in kept), tests, alpha)


def _decide(
    results: tuple[CandidateResult, ...],
    kept: tuple[str, ...],
    tests: tuple[PairwiseTest, ...],
    alpha: float,
) -> CandidateComparison:
    best: str | None = None
    tied: tuple[str, ...] = ()
    if len(kept) == 1:
        best = kept[0]
        summary = f"{best} is the only candidate no worse than the baseline (Holm, alpha {alpha:g})"
    elif not kept:
        summary = f"no candidate is no worse than the baseline (Holm, alpha {alpha:g})"
    else:
        beaten = {t.second if t.winner == t.first else t.first for t in tests if t.winner}
        wins: Mapping[str, int] = {n: sum(1 for t in tests if t.winner == n) for n in kept}
        champions = [n for n in kept if wins[n] == len(kept) - 1]
        level = tests[0].level
        if champions:
            best = champions[0]
            summary = (
                f"{best} is best: it beats each other no-worse candidate in a paired sign "
                f"test at {level:.3g} (Bonferroni over {len(tests)} pairs, family-wise "
                f"alpha {alpha:g})"
            )
        else:
            tied = tuple(n for n in kept if n not in beaten)
            summary = (
                f"no significant best; tied: {', '.join(tied)} (paired sign tests at "
                f"{level:.3g}, Bonferroni over {len(tests)} pairs, family-wise alpha {alpha:g})"
            )
    return CandidateComparison(
        candidates=results,
        no_worse=kept,
        best=best,
        tied=tied,
        pairwise=tests,
        alpha=alpha,
        summary=summary,
    )

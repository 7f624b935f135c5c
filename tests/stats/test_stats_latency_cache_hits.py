"""Time to first content is gated like TTFT; cached answers leave every latency check.

* A candidate that thinks before it answers (its first token as early as the baseline's,
  its first visible content much later) fails the TTFC checks and passes the TTFT ones.
* Pairs with an answer served from a cache (either side) are left out of every latency
  quantile, counted in each latency reason per side, in the verdict's
  ``latency_cache_hits`` (JSON) and in its trailer text; the quality checks still use them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime

import numpy as np
import pandas as pd

from shadoweval.records import Check, CheckOutcome, Coverage, PairScore, SidePair, Verdict
from shadoweval.stats.frame import pairs_frame
from shadoweval.stats.gate import evaluate_gate
from shadoweval.stats.policy import GatePolicy
from shadoweval.stats.summary import task_type_summary

Simulate = Callable[..., list[PairScore]]
DECIDED = datetime(2024, 6, 2, tzinfo=UTC)
CLEAN = {"n": 800, "base_error": 0.0, "cand_error": 0.0}


def _coverage(n: int) -> Coverage:
    return Coverage(captured=n, replayed=n, paired=n, errored=0, warmup=0, skipped=0, share=1.0)


def _gate(scores: list[PairScore]) -> tuple[pd.DataFrame, Verdict]:
    policy = GatePolicy()
    frame = pairs_frame(scores, policy)
    verdict = evaluate_gate(
        frame, policy, run_id="r", coverage=_coverage(len(frame)), decided_at=DECIDED
    )
    return frame, verdict


def _check(verdict: Verdict, metric: str, unit: str = "chat") -> Check:
    [check] = [c for c in verdict.checks if c.metric == metric and c.task_type == unit]
    return check


def test_a_thinking_candidate_fails_ttfc_and_passes_ttft(simulate: Simulate) -> None:
    scores = simulate({"chat": CLEAN})
    thinking = [
        s.model_copy(
            update={
                "ttfc_ms": SidePair(
                    baseline=s.ttfc_ms.baseline,
                    # 800 ms of reasoning before the first visible token
                    candidate=None if s.ttfc_ms.candidate is None else s.ttfc_ms.candidate + 800,
                )
            }
        )
        for s in scores
    ]
    _, verdict = _gate(thinking)
    assert _check(verdict, "latency_ttft_ms_p50").outcome == CheckOutcome.PASS
    ttfc = _check(verdict, "latency_ttfc_ms_p50")
    assert ttfc.outcome == CheckOutcome.FAIL, ttfc.reason
    assert ttfc.reason.startswith("slower than allowed: p50 ttfc_ms ratio")
    assert ttfc.estimate is not None
    assert ttfc.estimate > 3


def test_non_streamed_pairs_have_no_ttfc_check(simulate: Simulate) -> None:
    # TTFC of a non-streamed answer is its e2e: gated once, as e2e_ms.
    _, verdict = _gate(simulate({"chat": CLEAN | {"streamed": False}}))
    metrics = {c.metric for c in verdict.checks if c.task_type == "chat"}
    assert "latency_e2e_ms_p50" in metrics
    assert not {m for m in metrics if m.startswith(("latency_ttfc", "latency_ttft"))}


def test_cached_pairs_leave_the_latency_quantiles_and_are_counted(simulate: Simulate) -> None:
    scores = simulate({"chat": CLEAN})
    # 60 baseline answers and 40 candidate answers (10 of the same pairs) came from a
    # cache: near-instant, so they would drag the candidate's quantiles down if used.
    base_hit = set(range(0, 60))
    cand_hit = set(range(50, 100))
    fast = SidePair(baseline=2.0, candidate=2.0)
    cached: list[PairScore] = []
    for i, s in enumerate(scores):
        update: dict[str, object] = {}
        if i in base_hit:
            update["baseline_cache_hit"] = True
        if i in cand_hit:
            update |= {"candidate_cache_hit": True, "e2e_ms": fast, "ttfc_ms": fast}
            update["ttft_ms"] = fast
        cached.append(s.model_copy(update=update))
    frame, verdict = _gate(cached)
    _, reference = _gate([s for i, s in enumerate(scores) if i not in base_hit | cand_hit])

    assert verdict.latency_cache_hits.model_dump() == {
        "pairs": 100,
        "baseline": 60,
        "candidate": 50,
    }
    as_json = json.loads(verdict.model_dump_json())
    assert as_json["latency_cache_hits"] == {"pairs": 100, "baseline": 60, "candidate": 50}
    assert (
        "100 pairs left out of latency because an answer was served from a cache "
        "(60 baseline, 50 candidate; quality checks still use them)"
    ) in verdict.reasons[-1]

    for metric in ("e2e_ms", "ttft_ms", "ttfc_ms"):
        for q in ("p50", "p95"):
            check = _check(verdict, f"latency_{metric}_{q}")
            assert check.n == 700, check.reason
            assert (
                "(700 of 800 pairs used; excluded: 100 served from a cache "
                "(60 baseline, 50 candidate))"
            ) in check.reason
            # The same quantile ratio and interval as without the cached pairs at all.
            same = _check(reference, f"latency_{metric}_{q}")
            assert (check.estimate, check.ci_low, check.ci_high) == (
                same.estimate,
                same.ci_low,
                same.ci_high,
            )
    # Quality checks still judge every pair.
    assert _check(verdict, "error_rate").n == 800

    # The descriptive summary leaves them out of its latency ratios too.
    summary = task_type_summary(frame).set_index("task_type")
    without = task_type_summary(frame[~(frame.baseline_cache_hit | frame.candidate_cache_hit)])
    np.testing.assert_allclose(
        summary.loc["chat", ["e2e_p50_ratio", "ttft_p50_ratio", "ttfc_p50_ratio"]].to_numpy(
            dtype=float
        ),
        without.set_index("task_type")
        .loc["chat", ["e2e_p50_ratio", "ttft_p50_ratio", "ttfc_p50_ratio"]]
        .to_numpy(dtype=float),
    )


def test_a_verdict_without_cache_hits_says_nothing_of_them(simulate: Simulate) -> None:
    _, verdict = _gate(simulate({"chat": CLEAN}))
    assert verdict.latency_cache_hits.pairs == 0
    assert "cache" not in verdict.reasons[-1]
    assert all("cache" not in c.reason for c in verdict.checks)

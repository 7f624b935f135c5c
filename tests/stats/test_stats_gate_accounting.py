"""The run's design picks the similarity method; latency reasons account for every pair.

* A run that sent baseline repeats is judged against the noise floor in every unit, even
  when every repeat failed: a unit without a usable repeat is INCONCLUSIVE (HOLD, never
  PROMOTE) and its reason counts the repeats sent and failed. Only a run without any
  baseline repeat uses the absolute divergence limit.
* Each latency reason says how many of the unit's pairs were used and why each other
  pair was left out (warm-up, failed side, infrastructure error, no baseline or
  candidate latency, not streamed); a unit whose baseline latency was never measured
  says so plainly.
* Bounds of a difference of proportions are shown and stored within [-1, 1].

The similarity rules here are those of the similarity guardrail: these tests run under
``change.mode: no_change`` (:data:`NO_CHANGE`), where a divergence beyond the noise fails
the run; under the default ``judge`` mode the same check is reported only
(tests/stats/test_change.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest

from shadoweval.records import POOLED, Check, CheckOutcome, Coverage, Decision, PairScore, Verdict
from shadoweval.stats.checks import (
    NO_NOISE_FLOOR,
    SIMILARITY_NOISE_STATISTIC,
    SIMILARITY_STATISTIC,
    analyse_binary,
    binary_check,
)
from shadoweval.stats.frame import pairs_frame
from shadoweval.stats.gate import evaluate_gate
from shadoweval.stats.looks import look_levels
from shadoweval.stats.policy import GatePolicy, parse_policy

Simulate = Callable[..., list[PairScore]]
DECIDED = datetime(2024, 6, 2, tzinfo=UTC)
NO_USABLE_REPEAT = "no pairs with a similarity and a baseline-repeat similarity"

NO_CHANGE = parse_policy({"change": {"mode": "no_change"}})
"""The similarity check as a guardrail (``change.mode: no_change``)."""

# Candidate divergence ≈ 0.22: well inside the absolute limit 0.35, far above a noise floor.
DIVERGING = {"n": 1500, "similarity_mean": 0.78, "base_error": 0.0, "cand_error": 0.0}


def coverage(frame: pd.DataFrame, *, repeats_sent: int = 0, repeats_failed: int = 0) -> Coverage:
    n = len(frame)
    return Coverage(
        captured=n,
        replayed=n,
        paired=n,
        errored=0,
        warmup=0,
        skipped=0,
        share=1.0,
        per_task_type={str(t): int(c) for t, c in frame["task_type"].value_counts().items()},
        baseline_repeat_replayed=repeats_sent,
        baseline_repeat_errored=repeats_failed,
    )


def gate(frame: pd.DataFrame, cov: Coverage, policy: GatePolicy | None = None) -> Verdict:
    return evaluate_gate(
        frame, policy or NO_CHANGE, run_id="run-acct", coverage=cov, decided_at=DECIDED
    )


def check(verdict: Verdict, task_type: str, metric: str) -> Check:
    [found] = [c for c in verdict.checks if c.task_type == task_type and c.metric == metric]
    return found


# ------------------------------------------------------------------ (a) repeats all failed


def test_failed_baseline_repeats_never_fall_back_to_the_absolute_limit(
    simulate: Simulate,
) -> None:
    # The baseline-repeat replica answered HTTP 500 to every request: no pair has a
    # noise similarity and the baseline latency is the live one.
    frame = pairs_frame(simulate({"chat": {**DIVERGING, "latency_source": "live"}}), GatePolicy())
    assert frame["noise_similarity"].isna().all()
    v = gate(frame, coverage(frame, repeats_sent=1500, repeats_failed=1500))
    assert v.decision == Decision.HOLD
    for unit in (POOLED, "chat"):
        sim = check(v, unit, "similarity")
        assert sim.outcome == CheckOutcome.INCONCLUSIVE
        assert sim.statistic.startswith(SIMILARITY_NOISE_STATISTIC)
        assert sim.margin == GatePolicy().similarity.noise_margin
        assert sim.reason.startswith(NO_USABLE_REPEAT)
        assert "the run sent 1500 baseline repeats, 1500 of them failed" in sim.reason
        assert "never the absolute limit" in sim.reason
        assert NO_NOISE_FLOOR not in sim.reason
        assert "limit 0.35" not in sim.reason
    # The similarity problem leads the reasons; the trailer counts the repeats.
    assert v.reasons[0].startswith(f"pooled, similarity: {NO_USABLE_REPEAT}")
    assert v.reasons[-1].endswith("baseline repeats: 1500 sent, 1500 failed")

    # The same pairs from a run that never sent a repeat: the absolute limit, PROMOTE.
    without = gate(frame, coverage(frame))
    sim = check(without, POOLED, "similarity")
    assert sim.statistic.startswith(SIMILARITY_STATISTIC)
    assert sim.outcome == CheckOutcome.PASS
    assert NO_NOISE_FLOOR in sim.reason
    assert without.decision == Decision.PROMOTE, without.reasons
    assert "baseline repeats:" not in without.reasons[-1]


def test_some_failed_repeats_are_counted_in_the_similarity_reasons(simulate: Simulate) -> None:
    frame = pairs_frame(
        simulate({"chat": {**DIVERGING, "noise_similarity_mean": 0.80}}), GatePolicy()
    )
    # 300 of the repeats failed: their pairs carry no noise similarity.
    frame.loc[frame.index[:300], "noise_similarity"] = np.nan
    v = gate(frame, coverage(frame, repeats_sent=1500, repeats_failed=300))
    sim = check(v, "chat", "similarity")
    assert sim.statistic.startswith(SIMILARITY_NOISE_STATISTIC)
    assert sim.n == 1200
    assert "on 1200 pairs with a baseline repeat" in sim.reason
    assert "300 pairs with a similarity but no baseline-repeat similarity" in sim.reason
    assert "300 of the 1500 baseline repeats the run sent failed (counted, not dropped" in (
        sim.reason
    )
    assert v.reasons[-1].endswith("baseline repeats: 1500 sent, 300 failed")


def test_failed_repeats_hold_even_on_identical_outputs(simulate: Simulate) -> None:
    # Divergence near 0 would pass any limit: without a noise floor it is still no promote.
    spec = {"n": 1500, "similarity_mean": 0.99, "similarity_sd": 0.005}
    frame = pairs_frame(simulate({"chat": spec}), GatePolicy())
    v = gate(frame, coverage(frame, repeats_sent=10, repeats_failed=10))
    assert v.decision == Decision.HOLD
    assert check(v, "chat", "similarity").outcome == CheckOutcome.INCONCLUSIVE


# ------------------------------------------------------------------ (b) no repeats at all


def test_a_run_without_repeats_uses_the_absolute_limit(simulate: Simulate) -> None:
    frame = pairs_frame(simulate({"chat": {**DIVERGING, "similarity_mean": 0.6}}), GatePolicy())
    v = gate(frame, coverage(frame))
    sim = check(v, "chat", "similarity")
    assert sim.statistic.startswith(SIMILARITY_STATISTIC)
    assert sim.margin == GatePolicy().similarity.max_mean_divergence
    assert sim.outcome == CheckOutcome.FAIL
    assert NO_NOISE_FLOOR in sim.reason
    assert "baseline repeats" not in sim.reason
    assert v.decision == Decision.ROLLBACK


def test_repeat_similarities_without_coverage_counts_still_use_the_noise_floor(
    simulate: Simulate,
) -> None:
    # A coverage record from before the repeat counts existed (0) cannot hide repeats the
    # pairs show: the stricter noise floor applies.
    frame = pairs_frame(
        simulate({"chat": {**DIVERGING, "noise_similarity_mean": 0.97}}), GatePolicy()
    )
    v = gate(frame, coverage(frame))
    assert check(v, "chat", "similarity").statistic.startswith(SIMILARITY_NOISE_STATISTIC)
    assert v.decision == Decision.ROLLBACK


# ------------------------------------------------------------------ (c) repeats in some types


def test_task_types_without_repeats_are_inconclusive_with_the_counts(simulate: Simulate) -> None:
    specs = {
        "chat": {**DIVERGING, "similarity_mean": 0.85, "noise_similarity_mean": 0.85},
        "code": {**DIVERGING, "similarity_mean": 0.85},
    }
    frame = pairs_frame(simulate(specs), GatePolicy())
    v = gate(frame, coverage(frame, repeats_sent=1500, repeats_failed=0))
    assert check(v, "chat", "similarity").outcome == CheckOutcome.PASS
    code = check(v, "code", "similarity")
    assert code.outcome == CheckOutcome.INCONCLUSIVE
    assert code.statistic.startswith(SIMILARITY_NOISE_STATISTIC)
    assert code.reason.startswith(NO_USABLE_REPEAT)
    assert "the run sent 1500 baseline repeats, 0 of them failed" in code.reason
    assert NO_NOISE_FLOOR not in code.reason
    assert v.decision == Decision.HOLD
    assert any(r.startswith(f"task type 'code', similarity: {NO_USABLE_REPEAT}") for r in v.reasons)


# ------------------------------------------------------------------ latency accounting


def account(reason: str) -> tuple[int, int, dict[str, int]]:
    """(used, pairs of the unit, excluded count by reason) from a latency reason."""
    match = re.search(r"\((\d+) of (\d+) pairs used; excluded: (.*?)\)(?:;|$)", reason)
    if match is None:
        whole = re.search(r"\(all (\d+) pairs used\)", reason)
        assert whole is not None, reason
        return int(whole.group(1)), int(whole.group(1)), {}
    parts = re.findall(r"(\d+) ([^,]+?(?:\([^)]*\))?)(?:, |$)", match.group(3))
    return int(match.group(1)), int(match.group(2)), {what: int(k) for k, what in parts}


def latency(verdict: Verdict, unit: str) -> list[Check]:
    return [c for c in verdict.checks if c.task_type == unit and c.metric.startswith("latency_")]


def assert_accounted(verdict: Verdict) -> None:
    for c in verdict.checks:
        if c.metric.startswith("latency_"):
            used, total, excluded = account(c.reason)
            assert used + sum(excluded.values()) == total, c.reason
            assert c.n == used, c.reason


def test_warmup_pairs_without_a_baseline_latency_are_counted(simulate: Simulate) -> None:
    # The demo run: 8 warm-up replays whose baseline e2e is null.
    frame = pairs_frame(
        simulate({"chat": {"n": 800, "base_error": 0.0, "cand_error": 0.0}}), GatePolicy()
    )
    frame.loc[frame.index[:8], "candidate_warmup"] = True
    frame.loc[frame.index[:8], "baseline_e2e_ms"] = np.nan
    v = gate(frame, coverage(frame))
    for c in latency(v, "chat"):
        assert "(792 of 800 pairs used; excluded: 8 warm-up)" in c.reason, c.reason
        assert c.n == 792
    assert_accounted(v)


def test_pairs_without_a_baseline_latency_are_counted(simulate: Simulate) -> None:
    # Repeat share 0.5: only the repeated half has a baseline latency.
    frame = pairs_frame(
        simulate({"chat": {"n": 800, "base_error": 0.0, "cand_error": 0.0}}), GatePolicy()
    )
    half = frame.index[frame.index % 2 == 1]
    frame.loc[half, ["baseline_e2e_ms", "baseline_ttft_ms"]] = np.nan
    frame.loc[half, "latency_baseline_source"] = "missing"
    v = gate(frame, coverage(frame))
    [p50] = [c for c in latency(v, "chat") if c.metric == "latency_e2e_ms_p50"]
    assert "(400 of 800 pairs used; excluded: 400 without a baseline e2e_ms)" in p50.reason
    [ttft] = [c for c in latency(v, "chat") if c.metric == "latency_ttft_ms_p50"]
    assert "excluded: 400 without a baseline ttft_ms" in ttft.reason
    assert_accounted(v)


def test_every_exclusion_is_counted_once(simulate: Simulate) -> None:
    spec = {
        "n": 600,
        "base_error": 0.02,
        "cand_error": 0.02,
        "cand_infra": 0.03,
        "cand_empty": 0.01,
    }
    frame = pairs_frame(simulate({"chat": spec, "code": {"n": 400}}), GatePolicy())
    frame.loc[frame.index[:5], "candidate_warmup"] = True
    frame.loc[frame.index[10:14], "candidate_e2e_ms"] = np.nan
    frame.loc[frame.index[20:40], "streamed"] = False
    frame.loc[frame.index[20:40], ["baseline_ttft_ms", "candidate_ttft_ms"]] = np.nan
    frame.loc[frame.index[50:53], "latency_baseline_source"] = "missing"
    v = gate(frame, coverage(frame))
    assert_accounted(v)
    [ttft] = [c for c in latency(v, POOLED) if c.metric == "latency_ttft_ms_p50"]
    _, total, excluded = account(ttft.reason)
    assert total == 1000
    assert excluded["not streamed (no TTFT)"] == 20
    assert any(k.startswith("with an infrastructure error") for k in excluded)
    assert "with a failed side (gated by error_rate)" in excluded
    [e2e] = [c for c in latency(v, POOLED) if c.metric == "latency_e2e_ms_p50"]
    _, _, excluded = account(e2e.reason)
    assert "not streamed (no TTFT)" not in excluded
    assert excluded["without a baseline latency source"] == 3
    # Pairs 10-13 lost their candidate e2e unless they were already counted otherwise.
    assert 0 < excluded.get("without a candidate e2e_ms", 0) <= 4


def test_a_clean_unit_says_all_pairs_were_used(simulate: Simulate) -> None:
    spec = {"n": 300, "base_error": 0.0, "cand_error": 0.0}
    frame = pairs_frame(simulate({"chat": spec}), GatePolicy())
    v = gate(frame, coverage(frame))
    for c in latency(v, "chat"):
        assert "(all 300 pairs used)" in c.reason


def test_unmeasured_baseline_ttft_is_said_plainly(simulate: Simulate) -> None:
    # An import whose recorded baseline has no TTFT (nor TTFC): the candidate's is measured.
    frame = pairs_frame(simulate({"chat": {"n": 400, "latency_source": "recorded"}}), GatePolicy())
    frame["baseline_ttft_ms"] = np.nan
    frame["baseline_ttfc_ms"] = np.nan
    v = gate(frame, coverage(frame))
    for metric, name in (("ttft_ms", "TTFT"), ("ttfc_ms", "TTFC")):
        checks = [c for c in latency(v, "chat") if c.metric.startswith(f"latency_{metric}")]
        assert checks
        for c in checks:
            assert c.outcome == CheckOutcome.INCONCLUSIVE
            assert c.reason.startswith(
                f"no latency pairs: no pair has a baseline {metric}: the baseline's latency "
                f"was not measured (recorded data without {name}"
            ), c.reason
    e2e = [c for c in latency(v, "chat") if c.metric.startswith("latency_e2e_ms")]
    assert all("no pair has a baseline" not in c.reason for c in e2e)
    assert_accounted(v)
    # Neither live nor repeat timings: the e2e checks say so too.
    frame["baseline_e2e_ms"] = np.nan
    v = gate(frame, coverage(frame))
    for c in latency(v, "chat"):
        metric = c.metric.removeprefix("latency_").rsplit("_", 1)[0]
        assert c.reason.startswith(f"no latency pairs: no pair has a baseline {metric}")
        assert c.reason.endswith(f"(0 of 400 pairs used; excluded: {failed_or(frame, metric)})")


def failed_or(frame: pd.DataFrame, metric: str) -> str:
    """The expected exclusions of a unit whose baseline latencies are all missing."""
    failed = int((frame["baseline_fail"] | frame["candidate_fail"]).sum())
    lead = f"{failed} with a failed side (gated by error_rate), " if failed else ""
    return f"{lead}{len(frame) - failed} without a baseline {metric}"


def test_baselines_failing_everywhere_are_not_called_unmeasured(simulate: Simulate) -> None:
    spec = {"n": 200, "base_error": 1.0, "cand_error": 0.0}
    frame = pairs_frame(simulate({"chat": spec}), GatePolicy())
    v = gate(frame, coverage(frame))
    for c in latency(v, "chat"):
        assert c.reason.startswith("no latency pairs (0 of 200 pairs used; excluded: 200 with a")
        assert "not measured" not in c.reason


def test_no_latency_source_is_counted(simulate: Simulate) -> None:
    frame = pairs_frame(simulate({"chat": {"n": 300, "latency_source": "missing"}}), GatePolicy())
    v = gate(frame, coverage(frame))
    for c in latency(v, "chat"):
        assert c.reason.startswith("no latency pairs (0 of 300 pairs used; excluded: ")
        assert "without a baseline latency source" in c.reason
    assert_accounted(v)


# ------------------------------------------------------------------ clipped rate differences


@pytest.mark.parametrize("metric", ["error_rate", "infra_error_rate"])
def test_rate_difference_bounds_stay_within_one(simulate: Simulate, metric: str) -> None:
    infra = metric == "infra_error_rate"
    spec: dict[str, object] = {"n": 300, "base_error": 0.0, "cand_error": 0.0 if infra else 1.0}
    if infra:
        spec["cand_infra"] = 1.0
    frame = pairs_frame(simulate({"chat": spec}), GatePolicy())
    v = gate(frame, coverage(frame))
    c = check(v, "chat", metric)
    assert c.outcome == CheckOutcome.FAIL
    assert c.ci_low is not None
    assert c.ci_high is not None
    assert -1.0 <= c.ci_low <= c.ci_high <= 1.0
    assert c.ci_high == 1.0  # the unclipped confidence sequence reaches past +1 here


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_rate_difference_interval_is_printed_within_one(sign: float) -> None:
    policy = GatePolicy()
    ones, zeros = np.ones(300), np.zeros(300)
    # sign -1: the baseline fails on all pairs but one (on all of them there would be
    # nothing to compare against).
    base, cand = (zeros, ones) if sign > 0 else (np.concatenate([[0.0], ones[1:]]), zeros)
    analysis = analyse_binary(
        base,
        cand,
        metric="error_rate",
        task_type="chat",
        label="error/empty",
        block=policy.error_rate,
        min_pairs=50,
        levels=look_levels(policy, 1),
        alpha=policy.alpha,
        power=policy.power,
    )
    assert analysis.interval is not None
    # The confidence sequence itself reaches past ±1 (its sd is floored) ...
    assert abs(analysis.interval.high if sign > 0 else analysis.interval.low) > 1.0
    c = binary_check(analysis, harm_adjusted=None)
    # ... the check shows and stores it clipped, and decides as before.
    assert (c.outcome == CheckOutcome.FAIL) == (sign > 0)
    assert c.ci_low is not None
    assert c.ci_high is not None
    assert -1.0 <= c.ci_low <= c.ci_high <= 1.0
    shown = "to +100.0 pp" if sign > 0 else "-100.0 pp to"
    assert shown in c.reason, c.reason
    assert not re.search(r"[+-]10[0-9]\.[1-9] pp|[+-]10[1-9]\.\d pp", c.reason), c.reason

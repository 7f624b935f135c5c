"""The canary step verdict: PROMOTE / HOLD / ROLLBACK on seeded live traffic."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import numpy as np
import pandas as pd
import pytest
from pydantic import JsonValue

from shadoweval.records import Decision
from shadoweval.stats.canary.looks import promote_look, rollback_look
from shadoweval.stats.canary.policy import (
    CanaryPolicy,
    CanaryStep,
    PromoteChecks,
    RollbackConditions,
)
from shadoweval.stats.canary.verdict import (
    StepVerdict,
    step_verdict,
)
from shadoweval.stats.inputs import InvalidDataError
from shadoweval.stats.sequential import checkpoint_schedule
from tests.stats.canary_sim import (
    START,
    ArmSpec,
    empty_observations,
    empty_ratings,
    ratings,
    traffic,
)
from tests.stats.reference import canary_verdict_reference as vref

WINDOW_S = 3600.0
AFTER = START + timedelta(seconds=WINDOW_S + 1)

POLICY = CanaryPolicy(
    steps=(
        CanaryStep(share=0.5, min_window_s=WINDOW_S, min_requests_per_arm=200),
        CanaryStep(share=1.0, min_window_s=WINDOW_S, min_requests_per_arm=200),
    ),
    allow_short_windows=True,
    rollback=RollbackConditions(
        error_rate_max_increase=0.03,
        error_rate_sustained_s=600.0,
        harm_rate_max_increase=0.03,
        latency_limits_ms={"e2e_p99": 60000.0},
    ),
    promote=PromoteChecks(
        error_rate_margin=0.03,
        harm_rate_margin=0.03,
        format_failure_margin=0.05,
        latency_ratio_margins={"e2e_p95": 1.3},
        spot_check_bad_margin=0.2,
        min_ratings_per_arm=30,
    ),
)
"""A rehearsal policy: one-hour windows and margins a few thousand requests can show."""


def _verdict(
    obs: pd.DataFrame,
    rated: pd.DataFrame | None = None,
    *,
    step_index: int = 0,
    now: object = AFTER,
    since: object = None,
    policy: CanaryPolicy = POLICY,
) -> StepVerdict:
    return step_verdict(
        obs,
        empty_ratings() if rated is None else rated,
        policy,
        step_index=step_index,
        step_started_at=START,
        now=now,  # type: ignore[arg-type]
        error_breach_since=since,  # type: ignore[arg-type]
    )


def _check(v: StepVerdict, name: str, role: str) -> dict[str, JsonValue]:
    found = [c for c in v.checks if c.name == name and c.role == role]
    assert len(found) == 1, (name, role, [c.name for c in v.checks])
    return found[0].to_json()


def _good(seed: int = 1, sessions: int = 3000) -> pd.DataFrame:
    return traffic(np.random.default_rng(seed), sessions=sessions, share=0.5, duration_s=WINDOW_S)


def test_good_candidate_promotes_after_window_and_counts() -> None:
    obs = _good()
    rated = ratings(np.random.default_rng(2), candidate=60, baseline=60, bad_c=0.05, bad_b=0.05)
    v = _verdict(obs, rated)
    assert v.decision == Decision.PROMOTE, v.reasons
    assert v.reasons[0].startswith("all promote checks passed at promote look")
    assert v.look == promote_look(v.n_candidate, 200, POLICY.alpha).k
    assert v.look >= 3
    promote = [c for c in v.checks if c.role == "promote"]
    assert {c.name for c in promote} == {
        "error_rate",
        "harm_rate",
        "format_failure",
        "latency_ratio.e2e_p95",
        "spot_check_bad",
    }
    assert all(c.status == "pass" for c in v.checks if c.role != "rollback")
    assert all(c.status in ("pass", "not_enough_data") for c in v.checks if c.role == "rollback")
    assert v.n_candidate + v.n_baseline == len(obs)
    assert v.sessions_candidate + v.sessions_baseline == 3000
    assert v.error_breach_since is None
    text = json.dumps(v.to_json(), allow_nan=False)
    assert json.loads(text)["decision"] == "promote"


def test_window_not_passed_holds_with_reason() -> None:
    v = _verdict(_good(), now=START + timedelta(seconds=1800))
    assert v.decision == Decision.HOLD
    assert any(r.startswith("window not passed: the step has run 1800 s") for r in v.reasons)
    assert _check(v, "window", "validity")["status"] == "fail"
    # the statistics alone would promote: only the window holds it
    assert [r for r in v.reasons if not r.startswith("window")] == []


def test_min_requests_not_met_holds() -> None:
    obs = traffic(np.random.default_rng(3), sessions=100, share=0.5, duration_s=WINDOW_S)
    v = _verdict(obs)
    assert v.decision == Decision.HOLD
    assert any(r.startswith("not enough requests") for r in v.reasons)
    assert v.look == 0
    assert any(r.startswith("waiting for the first promote checkpoint") for r in v.reasons)


def test_error_excess_rolls_back_only_once_sustained() -> None:
    obs = traffic(
        np.random.default_rng(4),
        sessions=3000,
        share=0.5,
        duration_s=WINDOW_S,
        candidate=ArmSpec(error=0.15),
    )
    first = _verdict(obs, now=AFTER)
    assert _check(first, "error_rate", "rollback")["status"] == "breach"
    assert first.decision == Decision.HOLD
    assert first.error_breach_since == AFTER
    assert first.reasons[0].startswith(f"error-rate excess breaching since {AFTER.isoformat()}")
    later = AFTER + timedelta(seconds=599)
    second = _verdict(obs, now=later, since=first.error_breach_since)
    assert second.decision == Decision.HOLD
    assert second.error_breach_since == AFTER
    third = _verdict(obs, now=AFTER + timedelta(seconds=600), since=second.error_breach_since)
    assert third.decision == Decision.ROLLBACK
    assert third.error_breach_since == AFTER
    assert third.reasons[0].startswith("rollback: the error-rate excess has breached")
    # a poll that no longer breaches resets the breach
    calm = _verdict(_good(), now=AFTER + timedelta(seconds=900), since=AFTER)
    assert calm.error_breach_since is None
    assert calm.decision == Decision.PROMOTE


def test_error_excess_rolls_back_at_once_with_zero_sustain() -> None:
    policy = POLICY.model_copy(
        update={"rollback": POLICY.rollback.model_copy(update={"error_rate_sustained_s": 0.0})}
    )
    obs = traffic(
        np.random.default_rng(4),
        sessions=3000,
        share=0.5,
        duration_s=WINDOW_S,
        candidate=ArmSpec(error=0.15),
    )
    assert _verdict(obs, policy=policy).decision == Decision.ROLLBACK


def test_planted_harm_rolls_back_at_once() -> None:
    obs = traffic(
        np.random.default_rng(5),
        sessions=3000,
        share=0.5,
        duration_s=WINDOW_S,
        candidate=ArmSpec(harm=0.12),
    )
    # even before the window has passed: rollback does not wait for the window
    v = _verdict(obs, now=START + timedelta(seconds=60))
    assert v.decision == Decision.ROLLBACK
    harm = _check(v, "harm_rate", "rollback")
    assert harm["status"] == "breach"
    assert isinstance(harm["low"], float)
    assert harm["low"] > 0.03
    assert v.reasons == (f"rollback: {harm['detail']}",)
    assert v.error_breach_since is None


def test_session_split_mismatch_holds() -> None:
    obs = traffic(
        np.random.default_rng(6),
        sessions=3000,
        share=0.5,
        duration_s=WINDOW_S,
        candidate_sessions=2100,  # 70/30 at share 0.5
    )
    v = _verdict(obs)
    assert v.decision == Decision.HOLD
    srm = _check(v, "srm", "validity")
    assert srm["status"] == "fail"
    assert srm["estimate"] == pytest.approx(0.7)
    assert v.reasons[0].startswith("the session split does not match the step's share (SRM)")
    assert v.sessions_candidate == 2100
    # only the split holds it: every required statistical check passes (no ratings:
    # the spot check is not required)
    assert v.reasons[1:] == ()
    assert all(
        c.status == "pass" for c in v.checks if c.role == "promote" and c.name != "spot_check_bad"
    )


def test_latency_limit_rolls_back() -> None:
    obs = traffic(
        np.random.default_rng(7),
        sessions=3000,
        share=0.5,
        duration_s=WINDOW_S,
        candidate=ArmSpec(e2e_median_ms=45000.0, e2e_sigma=0.5),
    )
    v = _verdict(obs, now=START + timedelta(seconds=60))
    assert v.decision == Decision.ROLLBACK
    limit = _check(v, "latency_limit.e2e_p99", "rollback")
    assert limit["status"] == "breach"
    assert isinstance(limit["low"], float)
    assert limit["low"] > 60000.0


def test_repeated_polls_at_one_checkpoint_repeat_the_same_tests() -> None:
    obs = _good(seed=8).sort_values("observed_at", kind="mergesort").reset_index(drop=True)
    cand_pos = np.flatnonzero(obs["arm"].to_numpy() == "candidate")
    n_c = 1700
    p, r = promote_look(n_c, 200, POLICY.alpha), rollback_look(n_c, 200, POLICY.alpha)
    nxt_p, nxt_r = 2 * p.n_k, int(np.ceil(r.n_k * 1.5))
    early = max(p.n_k, r.n_k)
    late = min(nxt_p, nxt_r) - 1
    assert late > early + 20
    rated = ratings(np.random.default_rng(9), candidate=60, baseline=60, bad_c=0.05, bad_b=0.05)
    polls = [
        _verdict(obs.iloc[: cand_pos[k - 1] + 1], rated, now=AFTER + timedelta(seconds=s))
        for k, s in ((early, 0), (early + 7, 30), (late, 60), (late, 60))
    ]
    decisions = {v.decision for v in polls}
    assert decisions == {Decision.PROMOTE}
    looks = {(v.look, v.rollback_look) for v in polls}
    assert len(looks) == 1
    tested = [tuple(c for c in v.checks if c.role != "validity") for v in polls]
    assert all(t == tested[0] for t in tested)
    assert polls[2] == polls[3]


def test_empty_frames_hold() -> None:
    v = _verdict(empty_observations())
    assert v.decision == Decision.HOLD
    assert (v.n_candidate, v.n_baseline, v.look) == (0, 0, 0)
    assert any(r.startswith("not enough requests: 0 candidate and 0 baseline") for r in v.reasons)
    assert _check(v, "srm", "validity")["status"] == "pass"
    json.dumps(v.to_json(), allow_nan=False)
    last = _verdict(empty_observations(), step_index=1)
    assert last.decision == Decision.HOLD


def test_missing_column_names_it() -> None:
    with pytest.raises(InvalidDataError, match="observations lacks column: harmed") as err:
        _verdict(_good(sessions=10).drop(columns=["harmed"]))
    assert err.value.name == "harmed"
    with pytest.raises(InvalidDataError, match="ratings lacks column: rating"):
        _verdict(_good(sessions=10), empty_ratings().drop(columns=["rating"]))


def test_bad_values_are_refused() -> None:
    obs = _good(sessions=10)
    obs.loc[0, "arm"] = "shadow"
    with pytest.raises(InvalidDataError, match=r"observations\.arm must be"):
        _verdict(obs)
    naive = _good(sessions=10)
    naive["observed_at"] = naive["observed_at"].map(lambda t: t.replace(tzinfo=None))
    with pytest.raises(InvalidDataError, match="timezone-aware"):
        _verdict(naive)
    with pytest.raises(InvalidDataError, match="step_index"):
        _verdict(_good(sessions=10), step_index=2)
    bad = pd.DataFrame({"arm": ["candidate"], "rating": [11.0], "exchange_id": ["x"]})
    with pytest.raises(InvalidDataError, match=r"ratings.rating must be a number in \[1, 10\]"):
        _verdict(_good(sessions=10), bad)


def test_spot_checks_below_min_ratings_do_not_block_and_bad_ratings_roll_back() -> None:
    few = ratings(np.random.default_rng(10), candidate=29, baseline=80, bad_c=0.5, bad_b=0.0)
    v = _verdict(_good(), few)
    assert v.decision == Decision.PROMOTE
    assert _check(v, "spot_check_bad", "promote")["status"] == "not_enough_data"
    bad = ratings(np.random.default_rng(11), candidate=120, baseline=120, bad_c=0.45, bad_b=0.05)
    v = _verdict(_good(), bad)
    assert v.decision == Decision.ROLLBACK
    assert _check(v, "spot_check_bad", "rollback")["status"] == "breach"


def test_last_step_is_judged_on_the_candidate_alone() -> None:
    obs = traffic(np.random.default_rng(12), sessions=800, share=1.0, duration_s=WINDOW_S)
    assert set(obs["arm"]) == {"candidate"}
    v = _verdict(obs, step_index=1)
    assert v.decision == Decision.PROMOTE
    assert v.reasons[0].startswith("complete: window")
    assert {c.name for c in v.checks} == {"window", "min_requests", "latency_limit.e2e_p99"}
    assert _verdict(obs, step_index=1, now=START + timedelta(seconds=60)).decision == (
        Decision.HOLD
    )
    slow = traffic(
        np.random.default_rng(13),
        sessions=800,
        share=1.0,
        duration_s=WINDOW_S,
        candidate=ArmSpec(e2e_median_ms=50000.0),
    )
    assert _verdict(slow, step_index=1).decision == Decision.ROLLBACK


def test_false_rollback_rate_under_repeated_looks() -> None:
    # H0 at the boundary: candidate error rate exactly error_rate_max_increase above the
    # baseline's. Each canary is polled at every rollback checkpoint (a poll between two
    # checkpoints repeats the previous test, so this is every distinct test a controller
    # polling at every request could see); the sustain rule is off (0 s).
    policy = POLICY.model_copy(
        update={"rollback": POLICY.rollback.model_copy(update={"error_rate_sustained_s": 0.0})}
    )
    rng = np.random.default_rng(20261203)
    reps, alpha = 80, policy.alpha
    falsely = 0
    for _ in range(reps):
        obs = traffic(
            rng,
            sessions=1500,
            share=0.5,
            duration_s=WINDOW_S,
            requests_per_session=2,
            baseline=ArmSpec(error=0.05, harm=0.03),
            candidate=ArmSpec(error=0.08, harm=0.03),
        ).sort_values("observed_at", kind="mergesort")
        cand_pos = np.flatnonzero(obs["arm"].to_numpy() == "candidate")
        for n in checkpoint_schedule(50, 1.5, limit=20):
            if n > cand_pos.size:
                break
            v = _verdict(obs.iloc[: cand_pos[n - 1] + 1], policy=policy)
            assert v.rollback_look == rollback_look(n, 200, alpha).k
            if _check(v, "error_rate", "rollback")["status"] == "breach":
                falsely += 1
                break
    assert falsely / reps <= alpha + 2 * np.sqrt(alpha * (1 - alpha) / reps)


def test_srm_counts_only_sessions_first_seen_in_the_step() -> None:
    """Sessions pinned at an earlier, smaller share keep their arm: counted with the step's
    new sessions they would look like a broken split; ``session_new`` leaves them out."""
    from datetime import UTC, datetime, timedelta

    import pandas as pd

    from shadoweval.stats.canary.policy import parse_canary_policy
    from shadoweval.stats.canary.verdict import step_verdict

    policy = parse_canary_policy(
        {
            "steps": [
                {"share": 0.1, "min_window_s": 1, "min_requests_per_arm": 10},
                {"share": 0.5, "min_window_s": 1, "min_requests_per_arm": 10},
                {"share": 1.0, "min_window_s": 1},
            ],
            "allow_short_windows": True,
        }
    )
    start = datetime(2026, 12, 1, tzinfo=UTC)
    rows = []
    # 1000 new sessions split 50/50, plus 1000 inherited sessions, 90 % on the baseline
    for i in range(2000):
        new = i < 1000
        arm = (
            ("candidate" if i % 2 else "baseline")
            if new
            else ("candidate" if i % 10 == 0 else "baseline")
        )
        rows.append(
            {
                "arm": arm,
                "observed_at": start + timedelta(milliseconds=i),
                "session": f"s{i}",
                "error": False,
                "format_expected": False,
                "format_ok": None,
                "harmed": False,
                "cache_hit": False,
                "e2e_ms": 100.0,
                "ttft_ms": float("nan"),
                "session_new": new,
            }
        )
    frame = pd.DataFrame(rows)
    ratings = pd.DataFrame(columns=["arm", "rating", "exchange_id"])
    kwargs = {
        "step_index": 1,
        "step_started_at": start,
        "now": start + timedelta(seconds=5),
        "error_breach_since": None,
    }
    with_flag = step_verdict(frame, ratings, policy, **kwargs)  # type: ignore[arg-type]
    srm = next(c for c in with_flag.checks if c.name == "srm")
    assert srm.status == "pass"
    assert (with_flag.sessions_baseline, with_flag.sessions_candidate) == (500, 500)
    without = step_verdict(frame.drop(columns=["session_new"]), ratings, policy, **kwargs)  # type: ignore[arg-type]
    assert next(c for c in without.checks if c.name == "srm").status == "fail"


def test_numbers_match_an_independent_recomputation() -> None:
    obs = _good(seed=14)
    v = _verdict(obs)
    rows: list[dict[str, Any]] = [{str(k): v for k, v in r.items()} for r in obs.to_dict("records")]
    n_c = sum(r["arm"] == "candidate" for r in rows)
    k, n_k = vref.checkpoint_look(n_c, 200, 2.0)
    assert (v.look, k) == (k, v.look)
    cut = vref.truncate(rows, n_k)
    alpha_k = vref.level(k, POLICY.alpha)
    margins = {
        "error_rate": POLICY.promote.error_rate_margin,
        "harm_rate": POLICY.promote.harm_rate_margin,
        "format_failure": POLICY.promote.format_failure_margin,
    }
    for metric, margin in margins.items():
        check = _check(v, metric, "promote")
        x_c, m_c = vref.counts(cut, "candidate")[metric]
        x_b, m_b = vref.counts(cut, "baseline")[metric]
        assert check["estimate"] == pytest.approx(x_c / m_c - x_b / m_b, abs=1e-12)
        assert check["level"] == pytest.approx(alpha_k, rel=1e-12)
        p = vref.proportion_p(cut, metric, margin, "smaller")
        assert (check["status"] == "pass") == (p <= alpha_k)
        assert f"score p = {p:.3g}" in str(check["detail"])
    ratio = _check(v, "latency_ratio.e2e_p95", "promote")
    assert ratio["high"] == pytest.approx(vref.latency_ratio_high(cut, "e2e_ms", 0.95, alpha_k))
    kr, nr = vref.checkpoint_look(n_c, 50, 1.5)
    assert v.rollback_look == kr
    rcut = vref.truncate(rows, nr)
    err = _check(v, "error_rate", "rollback")
    p = vref.proportion_p(rcut, "error_rate", POLICY.rollback.error_rate_max_increase, "larger")
    assert f"score p = {p:.3g}" in str(err["detail"])
    assert err["level"] == pytest.approx(vref.level(kr, POLICY.alpha), rel=1e-12)


def test_small_arms_use_the_exact_test() -> None:
    # 1 % step, errors rare: ~2 candidate errors expected at the first checkpoints
    obs = traffic(
        np.random.default_rng(15),
        sessions=300,
        share=0.5,
        duration_s=WINDOW_S,
        candidate=ArmSpec(error=0.004),
        baseline=ArmSpec(error=0.004),
    )
    v = _verdict(obs)
    err = _check(v, "error_rate", "promote")
    assert "exact unconditional p (an expected count < 5)" in str(err["detail"])
    fmt = _check(v, "format_failure", "promote")  # ~3 % of ~150 answers: the score test
    assert "score p" in str(fmt["detail"])

"""shadoweval.stats.change: which pairs changed, the noise thresholds, the degenerate noise floor.

Also the similarity check and the verdict under a degenerate floor (issue 11: a recorded
baseline replica returns the captured answers, so its noise floor is 0 on every pair and
every changed answer used to be "beyond the noise" — ROLLBACK on every similarity check).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from shadoweval.records import (
    POOLED,
    CheckOutcome,
    Coverage,
    Decision,
    FormatFlags,
    HarmKind,
    PairJudgement,
    PairScore,
    ToolChange,
)
from shadoweval.stats.change import MIN_NOISE_THRESHOLD, DegenerateNoise, classify_changes
from shadoweval.stats.frame import pairs_frame
from shadoweval.stats.gate import evaluate_gate
from shadoweval.stats.inputs import InvalidDataError
from shadoweval.stats.net_harm import divergence_strata
from shadoweval.stats.policy import GatePolicy, parse_policy

Simulate = Callable[..., list[PairScore]]
Ties = Callable[[list[PairScore]], dict[str, PairJudgement]]
T0 = datetime(2024, 6, 1, tzinfo=UTC)
DECIDED = datetime(2024, 6, 3, tzinfo=UTC)


def score(i: int, **fields: object) -> PairScore:
    values: dict[str, object] = {
        "run_id": "r",
        "exchange_id": f"ex{i:05d}",
        "task_type": "chat",
        "captured_at": T0 + timedelta(minutes=i),
    }
    values.update(fields)
    return PairScore.model_validate(values)


def coverage(frame: pd.DataFrame, repeats: int = 0) -> Coverage:
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
        baseline_repeat_replayed=repeats,
    )


# ------------------------------------------------------------------ changed pairs


def test_each_kind_of_difference_marks_a_pair_changed() -> None:
    ok = FormatFlags(strict=True, fence_stripped=True, extracted=True)
    bad = FormatFlags(strict=False, fence_stripped=False, extracted=False)
    scores = [
        score(0, similarity=0.95),  # D 0.05 < 0.1: unchanged
        score(1, similarity=0.7),  # D 0.3: changed by divergence
        score(2, similarity=0.99, candidate_harms=(HarmKind.REFUSAL,)),
        score(3, similarity=0.99, baseline_harms=(HarmKind.DEGENERATION,)),  # either side
        score(
            4,
            similarity=0.99,
            format_expected=True,
            baseline_format=ok,
            candidate_format=bad,
        ),
        score(5, similarity=0.99, tool_changes=(ToolChange.ARGUMENTS_CHANGED,)),
        score(6, candidate_error=True),  # a model failure on one side, no similarity
        score(7, candidate_error=True, candidate_infra_error=True),  # infrastructure: never
        score(8, baseline_error=True, candidate_error=True),  # both failed: no difference
        score(
            9,
            similarity=0.99,
            baseline_harms=(HarmKind.REFUSAL,),
            candidate_harms=(HarmKind.REFUSAL,),
        ),
    ]
    frame = pairs_frame(scores, GatePolicy())
    result = classify_changes(frame, GatePolicy())
    assert result.changed.tolist() == [
        False,
        True,
        True,
        True,
        True,
        True,
        True,
        False,
        False,
        False,
    ]
    # Strata by D with the default edges (0.1, 0.2, 0.35); 4 = no similarity; -1 unchanged.
    assert result.stratum.tolist() == [-1, 2, 0, 0, 0, 0, 4, -1, -1, -1]
    assert result.noise_threshold == {POOLED: 0.1, "chat": 0.1}
    assert result.threshold_source[POOLED] == "divergence_threshold"
    assert result.degenerate is None


def test_order_changes_count_only_where_order_matters() -> None:
    scores = [score(0, similarity=0.99, tool_changes=(ToolChange.ORDER_CHANGED,))]
    frame = pairs_frame(scores, GatePolicy())
    assert classify_changes(frame, GatePolicy()).changed.tolist() == [True]
    free = parse_policy({"tool_calls": {"order_free": True}})
    assert classify_changes(frame, free).changed.tolist() == [False]


def test_noise_threshold_per_task_type_or_pooled(simulate: Simulate) -> None:
    # chat has 200 baseline repeats of its own; code only 20 (< min_noise_pairs 30): it
    # uses the pooled noise quantile; a run-wide threshold exists because the pooled
    # repeats are enough.
    policy = GatePolicy()
    frame = pairs_frame(
        simulate(
            {
                "chat": {"n": 200, "noise_similarity_mean": 0.8},
                "code": {"n": 300, "noise_similarity_mean": 0.95},
            }
        ),
        policy,
    )
    code = frame.index[frame["task_type"] == "code"]
    frame.loc[code[20:], "noise_similarity"] = np.nan
    result = classify_changes(frame, policy)
    usable = ~(frame["baseline_infra_error"] | frame["candidate_infra_error"])
    d_noise = 1.0 - frame["noise_similarity"].clip(-1, 1)
    has = usable & d_noise.notna()
    chat = frame["task_type"] == "chat"
    assert result.noise_pairs["chat"] == int((has & chat).sum())
    assert result.noise_pairs["code"] == 20
    assert result.threshold_source == {POOLED: "noise", "chat": "noise", "code": "pooled noise"}
    assert result.noise_threshold["chat"] == pytest.approx(np.quantile(d_noise[has & chat], 0.95))
    pooled = np.quantile(d_noise[has], 0.95)
    assert result.noise_threshold[POOLED] == pytest.approx(pooled)
    assert result.noise_threshold["code"] == pytest.approx(pooled)
    d = 1.0 - frame["similarity"].clip(-1, 1)
    threshold = np.where(chat, result.noise_threshold["chat"], pooled)
    by_divergence = (d > threshold).to_numpy()
    assert np.all(result.changed[by_divergence & usable.to_numpy()])
    # The changed pairs' strata are the net-harm strata of their divergence.
    scored = result.changed & np.isfinite(result.divergence)
    expected = divergence_strata(result.divergence[scored], (0.1, 0.2, 0.35))
    assert result.stratum[scored].tolist() == expected.tolist()


def test_too_few_repeats_anywhere_fall_back_to_divergence_threshold(simulate: Simulate) -> None:
    policy = parse_policy({"change": {"divergence_threshold": 0.25}})
    frame = pairs_frame(simulate({"chat": {"n": 100, "noise_similarity_mean": 0.9}}), policy)
    frame.loc[frame.index[10:], "noise_similarity"] = np.nan
    result = classify_changes(frame, policy)
    assert result.noise_threshold == {POOLED: 0.25, "chat": 0.25}
    assert result.threshold_source["chat"] == "divergence_threshold"


def test_identical_repeats_at_temperature_zero_keep_a_floor_of_their_own() -> None:
    # Deterministic requests (temperature 0): the repeat equals the capture, which is what
    # they should give — not degenerate. The threshold is the (floored) noise quantile.
    scores = [
        score(
            i,
            similarity=1.0 if i % 2 else 0.9,
            noise_similarity=1.0,
            sampled=False,
            noise_identical=True,
        )
        for i in range(100)
    ]
    result = classify_changes(pairs_frame(scores, GatePolicy()), GatePolicy())
    assert result.degenerate is None
    assert result.noise_threshold["chat"] == MIN_NOISE_THRESHOLD
    assert int(result.changed.sum()) == 50


def test_classify_changes_needs_the_columns() -> None:
    frame = pairs_frame([score(0, similarity=0.9)], GatePolicy())
    with pytest.raises(InvalidDataError, match="lacks columns: quality"):
        classify_changes(frame.drop(columns=["quality"]), GatePolicy())


# ------------------------------------------------------------------ degenerate floor


def _recorded_replica(n: int, *, sampled: bool | None, identical: bool | None) -> list[PairScore]:
    """A candidate that changed a third of the answers; a baseline repeat that returned the
    captured answer (similarity 1.0) — a recorded replica."""
    return [
        score(
            i,
            similarity=0.6 if i % 3 == 0 else 0.97,
            noise_similarity=1.0,
            sampled=sampled,
            noise_identical=identical,
        )
        for i in range(n)
    ]


@pytest.mark.parametrize(
    ("sampled", "identical"),
    [(True, True), (None, True), (True, None)],  # None: unknown temperature / old score
)
def test_a_recorded_replica_is_a_degenerate_noise_floor(
    sampled: bool | None, identical: bool | None
) -> None:
    scores = _recorded_replica(805, sampled=sampled, identical=identical)
    result = classify_changes(pairs_frame(scores, GatePolicy()), GatePolicy())
    assert result.degenerate is not None
    assert (result.degenerate.identical, result.degenerate.sampled_with_repeat) == (805, 805)
    assert result.degenerate.describe() == (
        "degenerate noise floor: the baseline replica is deterministic: it repeated the "
        "captured answer word for word on 805 of 805 sampled requests (100%), as a fixed seed "
        "does (llama-cpp-python reseeds every request from one fixed chain) or a server "
        "replaying stored answers; a second draw of the same request is then the same draw, "
        "so it shows no sampling noise to measure changes against; changes are measured "
        "against divergence_threshold 0.1 instead"
    )
    # Changes are measured against divergence_threshold, not against a floor of 0.
    assert result.noise_threshold == {POOLED: 0.1, "chat": 0.1}
    assert int(result.changed.sum()) == 269  # the third with D 0.4; D 0.03 is no change


@pytest.mark.parametrize(
    ("identical", "n", "threshold", "share", "shown"),
    [
        (799, 800, 1 - 0.7, "99.8%", "0.3"),  # 1 - 0.7 == 0.30000000000000004
        (95, 100, 0.1 + 0.2, "95%", "0.3"),
        (800, 800, 0.125, "100%", "0.125"),
        (2999, 3000, 1 / 3, "99.9%", "0.333"),
    ],
)
def test_the_degenerate_sentence_has_no_float_noise(
    identical: int, n: int, threshold: float, share: str, shown: str
) -> None:
    sentence = DegenerateNoise(
        identical=identical,
        sampled_with_repeat=n,
        share=identical / n,
        limit=0.95,
        divergence_threshold=threshold,
    ).describe()
    assert f"on {identical} of {n} sampled requests ({share})," in sentence
    assert sentence.endswith(f"divergence_threshold {shown} instead")
    assert "0000000" not in sentence
    assert "9999999" not in sentence


def test_unsampled_requests_do_not_make_a_floor_degenerate() -> None:
    scores = _recorded_replica(300, sampled=False, identical=True)
    scores += [
        score(1000 + i, similarity=0.8, noise_similarity=0.85, sampled=True, noise_identical=False)
        for i in range(100)
    ]
    result = classify_changes(pairs_frame(scores, GatePolicy()), GatePolicy())
    assert result.degenerate is None
    # 94 of 100 identical among sampled requests is below the 95% share; 95 is at it.
    few = _recorded_replica(94, sampled=True, identical=True) + [
        score(1000 + i, similarity=0.8, noise_similarity=0.85, sampled=True, noise_identical=False)
        for i in range(6)
    ]
    assert classify_changes(pairs_frame(few, GatePolicy()), GatePolicy()).degenerate is None
    at = _recorded_replica(95, sampled=True, identical=True) + [
        score(1000 + i, similarity=0.8, noise_similarity=0.85, sampled=True, noise_identical=False)
        for i in range(5)
    ]
    degenerate = classify_changes(pairs_frame(at, GatePolicy()), GatePolicy()).degenerate
    assert degenerate is not None
    assert degenerate.share == pytest.approx(0.95)


def _degenerate_run(simulate: Simulate) -> list[PairScore]:
    """1,500 simulated pairs whose baseline repeat is a recording of the capture."""
    scores = simulate({"chat": {"n": 1500, "noise_similarity_mean": 0.85}})
    return [
        s.model_copy(update={"noise_similarity": 1.0, "noise_identical": True, "sampled": True})
        if s.noise_similarity is not None
        else s
        for s in scores
    ]


@pytest.mark.parametrize("mode", ["judge", "no_change"])
def test_a_degenerate_floor_never_rolls_back_and_leads_the_reasons(
    simulate: Simulate, mode: str
) -> None:
    policy = parse_policy({"change": {"mode": mode}})
    frame = pairs_frame(_degenerate_run(simulate), policy)
    v = evaluate_gate(
        frame, policy, run_id="r", coverage=coverage(frame, repeats=1500), decided_at=DECIDED
    )
    assert v.decision == Decision.HOLD
    assert v.reasons[0].startswith("degenerate noise floor: the baseline replica is deterministic")
    assert "recording" not in v.reasons[0]
    for unit in (POOLED, "chat"):
        [sim] = [c for c in v.checks if c.task_type == unit and c.metric == "similarity"]
        assert sim.outcome == CheckOutcome.INCONCLUSIVE
        assert sim.reason.startswith("degenerate noise floor:")
        assert "cannot judge divergence against a deterministic replica" in sim.reason
        assert "changed beyond the noise: " in sim.reason


def test_a_degenerate_floor_can_still_promote_on_judged_ties(
    simulate: Simulate, ties: Ties
) -> None:
    scores = _degenerate_run(simulate)
    policy = GatePolicy()
    frame = pairs_frame(scores, policy, ties(scores))
    v = evaluate_gate(
        frame, policy, run_id="r", coverage=coverage(frame, repeats=1500), decided_at=DECIDED
    )
    assert v.decision == Decision.PROMOTE, v.reasons
    assert v.reasons[0].startswith("all ")
    assert any(r.startswith("degenerate noise floor:") for r in v.reasons)

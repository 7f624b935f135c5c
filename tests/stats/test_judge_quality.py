"""The judge's agreement with labels, flip rate and first-position rate, by hand.

Chat: ten judge pairs. 0–4 judged better in both orders; 5 preferred the answer shown first
in each order (a flip, stored as a tie); 6 candidate then tie (a flip); 7 failed in one
order; 8–9 worse in both orders. Labels: analysts say better on 0–2, same on 3 and 5, better
on 7 (no judge outcome: not counted); a reference says worse on 4. Extraction: three pairs
judged better in both orders, analysts say same, same, better.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Literal

import pytest

from shadoweval.records import (
    POOLED,
    Check,
    CheckOutcome,
    HumanLabel,
    JudgementSource,
    JudgeVote,
    LabelValue,
    PairJudgement,
    QualityOutcome,
)
from shadoweval.stats.judge_quality import (
    apply_judge_floor,
    held_by_judge_floor,
    judge_quality,
    judge_standings,
    not_voting_notes,
    voting_judgements,
    wilson_share,
)
from shadoweval.stats.policy import JudgePolicy

RUN = "run-q"
T0 = datetime(2026, 5, 4, 8, 0, tzinfo=UTC)
Side = Literal["candidate", "baseline", "tie"] | None
_OUTCOME = {
    "candidate": QualityOutcome.CANDIDATE_BETTER,
    "baseline": QualityOutcome.CANDIDATE_WORSE,
    "tie": QualityOutcome.TIE,
}


def judged(n: int, task_type: str, first: Side, second: Side) -> PairJudgement:
    """A judge judgement: ``first`` the baseline-first vote, ``second`` the candidate-first."""
    outcome = None
    if first is not None and second is not None:
        outcome = _OUTCOME[first] if first == second else QualityOutcome.TIE
    return PairJudgement(
        run_id=RUN,
        exchange_id=f"ex-{n}",
        task_type=task_type,
        source=JudgementSource.JUDGE,
        outcome=outcome,
        votes=(
            JudgeVote(order="baseline_first", preferred=first, error=None if first else "x"),
            JudgeVote(order="candidate_first", preferred=second, error=None if second else "x"),
        ),
        error=None if outcome else "one order failed",
    )


def label(n: int, task_type: str, value: LabelValue) -> HumanLabel:
    return HumanLabel(
        run_id=RUN,
        exchange_id=f"ex-{n}",
        task_type=task_type,
        label=value,
        labeller="ana",
        source="dashboard",
        labelled_at=T0 + timedelta(minutes=n),
    )


def data() -> tuple[list[PairJudgement], list[HumanLabel]]:
    c: Side = "candidate"
    b: Side = "baseline"
    t: Side = "tie"
    judgements = [judged(n, "chat", c, c) for n in range(5)]
    judgements += [judged(5, "chat", b, c), judged(6, "chat", c, t), judged(7, "chat", None, c)]
    judgements += [judged(n, "chat", b, b) for n in (8, 9)]
    judgements += [judged(n, "extraction", c, c) for n in (10, 11, 12)]
    judgements.append(
        PairJudgement(
            run_id=RUN,
            exchange_id="ex-4",
            task_type="chat",
            source=JudgementSource.REFERENCE,
            outcome=QualityOutcome.CANDIDATE_WORSE,
            baseline_pass=True,
            candidate_pass=False,
            checker="test",
        )
    )
    better, same = LabelValue.CANDIDATE_BETTER, LabelValue.SAME
    labels = [label(n, "chat", better) for n in (0, 1, 2, 7)]
    labels += [label(3, "chat", same), label(5, "chat", same)]
    labels += [label(10, "extraction", same), label(11, "extraction", same)]
    labels.append(label(12, "extraction", better))
    return judgements, labels


def wilson(count: int, n: int) -> tuple[float, float]:
    """Wilson's (1927) score interval at 95%, written out."""
    z = 1.959963984540054
    p = count / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return centre - half, centre + half


def test_agreement_flip_and_first_position_per_task_type_and_pooled() -> None:
    quality = judge_quality(*data())
    assert list(quality) == ["chat", "extraction", POOLED]
    chat, extraction, pooled = quality["chat"], quality["extraction"], quality[POOLED]
    # chat: 0, 1, 2 and 5 agree; 3 (better vs same) and 4 (better vs reference worse) do not
    assert (chat.agreement.count, chat.agreement.n) == (4, 6)
    assert (chat.labels_human, chat.labels_reference) == (5, 1)
    assert (chat.agreement.low, chat.agreement.high) == pytest.approx(wilson(4, 6), abs=1e-9)
    assert (chat.agreement.low, chat.agreement.high) == pytest.approx((0.2999, 0.9032), abs=1e-4)
    # rows judge, columns label (better, tie, worse); κ = (24/36 − 17/36)/(1 − 17/36) = 7/19
    assert chat.kappa.table == ((3, 1, 1), (0, 1, 0), (0, 0, 0))
    assert chat.kappa.kappa == pytest.approx(7 / 19)
    # both votes parsed on all but 7; 5 and 6 flip
    assert (chat.flip.count, chat.flip.n) == (2, 9)
    # non-tie votes: 0–4 give 5 of 10 first, 5 gives 2 of 2, 6 0 of 1, 7 1 of 1, 8–9 2 of 4
    assert (chat.first_position.count, chat.first_position.n) == (10, 18)
    assert chat.judged == 9
    assert (extraction.agreement.count, extraction.agreement.n) == (1, 3)
    assert (extraction.flip.count, extraction.flip.n) == (0, 3)
    assert (extraction.first_position.count, extraction.first_position.n) == (3, 6)
    assert (pooled.agreement.count, pooled.agreement.n) == (5, 9)
    assert (pooled.flip.count, pooled.flip.n) == (2, 12)
    assert (pooled.first_position.count, pooled.first_position.n) == (13, 24)
    assert (pooled.first_position.low, pooled.first_position.high) == pytest.approx(
        wilson(13, 24), abs=1e-9
    )
    text = chat.agreement.describe("labelled pairs")
    assert text == "67% (95% CI 30–90%, 6 labelled pairs)"


def test_no_judge_judgement_gives_no_figures_and_runs_must_not_mix() -> None:
    judgements, labels = data()
    assert judge_quality([j for j in judgements if j.source != "judge"], labels) == {}
    other = labels[0].model_copy(update={"run_id": "other"})
    with pytest.raises(ValueError, match="one run"):
        judge_quality(judgements, [*labels, other])
    with pytest.raises(ValueError, match=r"count must be in \[0, n\]"):
        wilson_share(3, 2)
    assert math.isnan(wilson_share(0, 0).share)


def test_the_floor_reads_the_task_type_then_pooled_then_nothing() -> None:
    quality = judge_quality(*data())
    standings = judge_standings(quality, JudgePolicy(min_agreement=0.6, min_agreement_labels=5))
    chat, extraction = standings["chat"], standings["extraction"]
    assert (chat.votes, chat.read) == (True, "task_type")
    assert chat.describe() == (
        "judge votes in 'chat': agreement with labels 67% (95% CI 30–90%, 6 labelled pairs) "
        "at or above the floor 60%"
    )
    # extraction has 3 < 5 labelled pairs: pooled 5 of 9 = 56% < 60%
    assert (extraction.votes, extraction.read) == (False, "pooled")
    assert extraction.describe() == (
        "judge does not vote in 'extraction': agreement with labels pooled 56% (95% CI 27–81%, "
        "9 labelled pairs; 3 here, fewer than judge.min_agreement_labels 5) below the floor 60%"
    )
    assert not_voting_notes(standings) == {"extraction": extraction.describe()}
    unread = judge_standings(quality, JudgePolicy(min_agreement_labels=10))
    assert all(s.votes and s.read == "not_read" for s in unread.values())
    assert unread["chat"].describe() == (
        "judge votes in 'chat': agreement with labels not read (6 labelled pairs here, fewer "
        "than judge.min_agreement_labels 10 here and pooled)"
    )
    strict = judge_standings(quality, JudgePolicy(min_agreement=0.7, min_agreement_labels=5))
    assert strict["chat"].describe() == (
        "judge does not vote in 'chat': agreement with labels 67% (95% CI 30–90%, 6 labelled "
        "pairs) below the floor 70%"
    )
    off = judge_standings(quality, JudgePolicy(min_agreement=0.0, min_agreement_labels=1))
    assert all(s.votes for s in off.values())


def test_the_judges_judgements_are_left_out_only_where_it_does_not_vote() -> None:
    judgements, labels = data()
    floor = apply_judge_floor(judgements, labels, JudgePolicy(min_agreement_labels=5))
    kept = voting_judgements(judgements, floor.standings)
    assert kept == floor.voting
    dropped = [j for j in judgements if j not in kept]
    assert {(j.task_type, j.source) for j in dropped} == {("extraction", JudgementSource.JUDGE)}
    assert len(dropped) == 3
    report = floor.as_dict()
    assert report["floor"] == {
        "min_agreement": 0.6,
        "min_agreement_labels": 5,
        "max_flip_rate": 0.5,
        "read_on": "point estimate",
    }
    assert report["per_task_type"]["extraction"]["standing"]["votes"] is False
    assert report["per_task_type"]["chat"]["flip"] == {
        "count": 2,
        "n": 9,
        "share": pytest.approx(2 / 9),
        "low": pytest.approx(wilson(2, 9)[0]),
        "high": pytest.approx(wilson(2, 9)[1]),
    }
    assert report["pooled"]["agreement"]["n"] == 9


def _check(outcome: CheckOutcome) -> Check:
    return Check(
        metric="net_harm", task_type="chat", statistic="s", outcome=outcome, reason="the reason"
    )


def test_a_unit_where_the_judge_does_not_vote_cannot_pass() -> None:
    note = "judge does not vote in 'chat': …"
    held = held_by_judge_floor(_check(CheckOutcome.PASS), note, changed=4)
    assert held.outcome == CheckOutcome.INCONCLUSIVE
    assert held.reason == (
        f"{note}: net harm holds (label more pairs or judge again with a better judge); on "
        "the labels and references alone: the reason"
    )
    failed = held_by_judge_floor(_check(CheckOutcome.FAIL), note, changed=4)
    assert (failed.outcome, failed.reason) == (CheckOutcome.FAIL, f"{note}; the reason")
    assert held_by_judge_floor(_check(CheckOutcome.PASS), "", changed=4).outcome == "pass"
    unchanged = held_by_judge_floor(_check(CheckOutcome.PASS), note, changed=0)
    assert unchanged == _check(CheckOutcome.PASS)


def test_a_judge_whose_verdict_follows_the_order_does_not_vote_even_without_labels() -> None:
    """The SmolLM2-135M judge of docs/real-data.md §1e answers "A" every time: shown the
    baseline first it prefers the baseline, shown the candidate first the candidate. Every
    pair flips and is recorded as a tie — which "agrees" with every "same" label. The flip
    ceiling silences it whatever the labels say."""
    flips = [judged(n, "chat", "baseline", "candidate") for n in range(30)]
    steady = [judged(n, "code", "candidate", "candidate") for n in range(100, 130)]
    same = [label(n, "chat", LabelValue.SAME) for n in range(30)]
    block = JudgePolicy()
    standings = judge_standings(judge_quality(flips + steady, same), block)
    chat, code = standings["chat"], standings["code"]
    assert chat.agreement.share == 1.0  # every flip-tie "agrees" with "same"
    assert not chat.votes
    assert chat.describe().startswith(
        "judge does not vote in 'chat': its verdict changes when the two answers are swapped "
        "on 100% (95% CI 89–100%, 30 pairs judged in both orders)"
    )
    assert "above judge.max_flip_rate 50%" in chat.describe()
    assert code.votes  # consistent, no labels: the floor is not read
    off = judge_standings(judge_quality(flips, same), JudgePolicy(max_flip_rate=1.0))
    assert off["chat"].votes


def test_the_votes_cell_names_the_flip_ceiling_first() -> None:
    from shadoweval.application.judging import judge_quality_rows

    flips = [judged(n, "chat", "baseline", "candidate") for n in range(30)]
    same = [label(n, "chat", LabelValue.SAME) for n in range(30)]
    report = apply_judge_floor(flips, same, JudgePolicy()).as_dict()
    [chat, _pooled] = judge_quality_rows(report)
    assert chat["votes"] == "NO (flips 100% > 50%)"

"""A seeded export run with unchanged pairs and judgements of every source.

:func:`judge_pairs` rewrites three pairs of :func:`tests.export.seed.seed_run` to be
unchanged (same tools, same finish reason, similarity 0.99: every other seeded pair is
changed) and stores a successful judge judgement, a judge judgement that failed, a
reference check, two human labels (one on a pair whose judge call failed) and a judgement
of an unchanged pair. :data:`LEFT_OUT` is what the "changed, not yet judged" selection
must leave out; the pair judged only by a failed judgement stays in.
"""

from __future__ import annotations

from datetime import timedelta

from shadoweval.records import (
    FinishReason,
    HumanLabel,
    JudgementSource,
    JudgeVote,
    LabelValue,
    PairJudgement,
    QualityOutcome,
)
from shadoweval.storage import Repository
from tests.export.seed import Seeded
from tests.storage.factories import T0

UNCHANGED = ("ex-00006", "ex-00013", "ex-00016")
JUDGED_OK = "ex-00001"  # chat, the judge says candidate worse
JUDGED_FAILED = "ex-00002"  # chat, the judge's calls failed: still unjudged
REFERENCED = "ex-00012"  # extract, a reference check
LABELLED = "ex-00019"  # summarize, an analyst's label
FAILED_THEN_LABELLED = "ex-00020"  # summarize: a failed judge call, then a label
JUDGED_UNCHANGED = "ex-00016"  # an unchanged pair with a judgement (never exported)


LEFT_OUT = frozenset({JUDGED_OK, REFERENCED, LABELLED, FAILED_THEN_LABELLED, *UNCHANGED})
"""Pairs that are unchanged or have a successful judgement of some source."""


def _judgement(
    seeded: Seeded, exchange_id: str, source: JudgementSource, outcome: QualityOutcome | None
) -> PairJudgement:
    score = next(s for s in seeded.scores if s.exchange_id == exchange_id)
    votes: tuple[JudgeVote, ...] = ()
    if source is JudgementSource.JUDGE:
        preferred = None if outcome is None else "baseline"
        error = "connection refused" if outcome is None else None
        votes = (
            JudgeVote(order="baseline_first", preferred=preferred, error=error),
            JudgeVote(order="candidate_first", preferred=preferred, error=error),
        )
    return PairJudgement(
        run_id=seeded.run.run_id,
        exchange_id=exchange_id,
        task_type=score.task_type,
        source=source,
        outcome=outcome,
        votes=votes,
        error="connection refused" if outcome is None else None,
        baseline_pass=True if source is JudgementSource.REFERENCE else None,
        candidate_pass=False if source is JudgementSource.REFERENCE else None,
        checker="bfcl" if source is JudgementSource.REFERENCE else None,
        judged_at=T0 + timedelta(days=2),
    )


def judge_pairs(repo: Repository, seeded: Seeded) -> set[str]:
    """Store the unchanged pairs, judgements and labels; return the exchange ids the
    selection must hold (changed, no successful judgement)."""
    by_id = {s.exchange_id: s for s in seeded.scores}
    repo.save_pair_scores(
        [
            by_id[i].model_copy(
                update={
                    "candidate_tools": by_id[i].baseline_tools,
                    "candidate_finish_reason": FinishReason.STOP,
                    "template_leaks": (),
                    "similarity": 0.99,
                }
            )
            for i in UNCHANGED
        ]
    )
    worse = QualityOutcome.CANDIDATE_WORSE
    repo.save_judgements(
        [
            _judgement(seeded, JUDGED_OK, JudgementSource.JUDGE, worse),
            _judgement(seeded, JUDGED_FAILED, JudgementSource.JUDGE, None),
            _judgement(seeded, REFERENCED, JudgementSource.REFERENCE, worse),
            _judgement(seeded, FAILED_THEN_LABELLED, JudgementSource.JUDGE, None),
            _judgement(seeded, JUDGED_UNCHANGED, JudgementSource.JUDGE, QualityOutcome.TIE),
        ]
    )
    repo.save_labels(
        [
            HumanLabel(
                run_id=seeded.run.run_id,
                exchange_id=exchange_id,
                task_type=by_id[exchange_id].task_type,
                label=LabelValue.SAME,
                labeller="ana",
                source="import",
                labelled_at=T0 + timedelta(days=3),
            )
            for exchange_id in (LABELLED, FAILED_THEN_LABELLED)
        ]
    )
    return {s.exchange_id for s in seeded.scores} - LEFT_OUT

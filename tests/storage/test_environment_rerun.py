"""A re-run replays the environment's failures (issue 29, item 1), on SQLite and PostgreSQL.

``replace_failed_outcomes`` (a tuple ``IN`` and ``ON CONFLICT … DO UPDATE … WHERE``)
replaces a stored outcome only when it failed, never a stored answer; the pair score of a
replaced outcome is kept and marked for rescoring (the compare stage picks it as
unscored), so the labels and judgements of that pair — the user's ground truth — survive
the re-run and the rescore.
"""

from __future__ import annotations

from shadoweval.records import (
    HumanLabel,
    JudgementSource,
    LabelValue,
    PairJudgement,
    QualityOutcome,
    ReplayErrorKind,
    ReplayTarget,
)
from shadoweval.storage import Repository

from .factories import BASELINE, CANDIDATE, T0, make_exchange, make_outcome, make_pair_score

RUN = "run-env-rerun"
ANSWERED, REFUSED, TIMED_OUT = "ex-00001", "ex-00002", "ex-00003"


def seed(repo: Repository) -> None:
    repo.create_run(
        run_id=RUN,
        name=RUN,
        baseline=BASELINE,
        candidate=CANDIDATE,
        policy_hash="sha256:policy",
        policy_yaml="alpha: 0.05\n",
    )
    exchanges = [make_exchange(n) for n in (1, 2, 3)]
    repo.save_exchanges(RUN, exchanges)
    repo.save_outcomes(
        [
            make_outcome(RUN, ANSWERED, text="the first real answer"),
            make_outcome(RUN, REFUSED, error_kind=ReplayErrorKind.CONNECT),
            make_outcome(RUN, TIMED_OUT, error_kind=ReplayErrorKind.TIMEOUT),
        ]
    )
    repo.save_pair_scores(
        [
            make_pair_score(RUN, exchanges[0]),
            make_pair_score(RUN, exchanges[1], similarity=None, candidate_error=True),
            make_pair_score(RUN, exchanges[2], similarity=None, candidate_error=True),
        ]
    )
    repo.save_labels([label(ANSWERED), label(REFUSED)])
    repo.save_judgements([reference(REFUSED)])


def label(exchange_id: str) -> HumanLabel:
    return HumanLabel(
        run_id=RUN,
        exchange_id=exchange_id,
        task_type="chat",
        label=LabelValue.CANDIDATE_WORSE,
        note="checked by hand",
        labeller="ana",
        labelled_at=T0,
        source="dashboard",
    )


def reference(exchange_id: str) -> PairJudgement:
    return PairJudgement(
        run_id=RUN,
        exchange_id=exchange_id,
        task_type="chat",
        source=JudgementSource.REFERENCE,
        outcome=QualityOutcome.CANDIDATE_WORSE,
        baseline_pass=True,
        candidate_pass=False,
        checker="official",
    )


def ground_truth(repo: Repository) -> tuple[list[str], list[str]]:
    labels = sorted(lbl.exchange_id for lbl in repo.load_labels(RUN))
    judged = sorted(j.exchange_id for j in repo.list_judgements(RUN))
    return labels, judged


def test_a_rerun_replaces_only_failures_and_keeps_labels_and_judgements(
    repo: Repository,
) -> None:
    seed(repo)
    assert repo.environment_failed_ids(RUN, ReplayTarget.CANDIDATE) == {REFUSED, TIMED_OUT}
    assert repo.pair_exchange_ids(RUN, only_unscored=True) == []

    rerun = [
        make_outcome(RUN, ex, text=f"re-run answer of {ex}")
        for ex in (ANSWERED, REFUSED, TIMED_OUT)
    ]
    assert repo.replace_failed_outcomes(rerun) == 2

    stored = repo.load_outcomes_of(RUN, ReplayTarget.CANDIDATE, [ANSWERED, REFUSED, TIMED_OUT])
    texts = {ex: o.response.text if o.response else None for ex, o in stored.items()}
    assert texts[ANSWERED] == "the first real answer"  # an answer is kept
    for ex in (REFUSED, TIMED_OUT):
        assert stored[ex].error_kind is None
        assert texts[ex] == f"re-run answer of {ex}"
    assert repo.environment_failed_ids(RUN, ReplayTarget.CANDIDATE) == set()
    # The replaced pairs are scored again; their ground truth stays.
    assert repo.pair_exchange_ids(RUN, only_unscored=True) == [REFUSED, TIMED_OUT]
    assert ground_truth(repo) == ([ANSWERED, REFUSED], [REFUSED])

    exchanges = {ex.exchange_id: ex for ex in (make_exchange(n) for n in (2, 3))}
    repo.save_pair_scores(make_pair_score(RUN, exchanges[ex]) for ex in (REFUSED, TIMED_OUT))
    assert repo.pair_exchange_ids(RUN, only_unscored=True) == []
    assert ground_truth(repo) == ([ANSWERED, REFUSED], [REFUSED])


def test_a_failure_never_replaces_an_answer_nor_marks_its_score(repo: Repository) -> None:
    seed(repo)
    failed = make_outcome(RUN, ANSWERED, error_kind=ReplayErrorKind.HTTP_STATUS)
    assert repo.replace_failed_outcomes([failed]) == 0
    stored = repo.load_outcomes_of(RUN, ReplayTarget.CANDIDATE, [ANSWERED])[ANSWERED]
    assert stored.error_kind is None
    assert repo.pair_exchange_ids(RUN, only_unscored=True) == []
    # A failure replaced by another failure is written (the latest environment failure).
    again = make_outcome(RUN, REFUSED, error_kind=ReplayErrorKind.TIMEOUT)
    assert repo.replace_failed_outcomes([again]) == 1
    assert ground_truth(repo) == ([ANSWERED, REFUSED], [REFUSED])

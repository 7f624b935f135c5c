"""Exchanges, replay outcomes, pair scores, pair inputs and coverage."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from shadoweval.errors import StorageError
from shadoweval.records import Coverage, ReplayErrorKind, ReplayTarget, RouteCoverage
from shadoweval.storage import Repository
from shadoweval.storage.statements import CHUNK_ROWS

from .factories import (
    BASELINE,
    CANDIDATE,
    T0,
    as_stored,
    make_exchange,
    make_outcome,
    make_pair_score,
)

CAND = ReplayTarget.CANDIDATE
REPEAT = ReplayTarget.BASELINE_REPEAT


@pytest.fixture
def run_id(repo: Repository) -> str:
    run = repo.create_run(
        run_id="run-1",
        name="r",
        baseline=BASELINE,
        candidate=CANDIDATE,
        policy_hash="sha256:policy",
        policy_yaml="alpha: 0.05\n",
    )
    return run.run_id


def count(repo: Repository, table: str) -> int:
    with repo.database.connect() as conn:
        return int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())


# ------------------------------------------------------------------- exchanges


def test_save_exchanges_is_insert_or_ignore(repo: Repository, run_id: str) -> None:
    first = [make_exchange(i) for i in range(3)]
    assert repo.save_exchanges(run_id, first) == 3
    changed = make_exchange(1, text="a different text for the same id")
    assert repo.save_exchanges(run_id, [changed, make_exchange(2), make_exchange(3)]) == 1
    assert count(repo, "exchange") == 4
    assert count(repo, "run_exchange") == 4
    assert repo.get_exchange("ex-00001") == first[1]  # the first write is kept
    assert repo.get_exchange("missing") is None


def test_duplicates_inside_one_batch_are_stored_once(repo: Repository, run_id: str) -> None:
    assert repo.save_exchanges(run_id, [make_exchange(7), make_exchange(7)]) == 1
    assert count(repo, "exchange") == 1
    assert count(repo, "run_exchange") == 1


def test_membership_is_recorded_for_already_stored_exchanges(repo: Repository, run_id: str) -> None:
    repo.create_run(
        run_id="run-2",
        name="again",
        baseline=BASELINE,
        candidate=CANDIDATE,
        policy_hash="h",
        policy_yaml="",
    )
    exchanges = [make_exchange(i) for i in range(4)]
    assert repo.save_exchanges(None, exchanges) == 4
    assert count(repo, "run_exchange") == 0
    assert repo.save_exchanges(run_id, exchanges[:3]) == 0
    assert repo.save_exchanges("run-2", exchanges) == 0
    assert repo.coverage_counts(run_id).captured == 3
    assert repo.coverage_counts("run-2").captured == 4


def test_save_exchanges_for_unknown_run_fails_as_a_whole(repo: Repository) -> None:
    with pytest.raises(StorageError):
        repo.save_exchanges("ghost", [make_exchange(1)])
    assert count(repo, "exchange") == 0  # one transaction per call


def test_large_batches_are_chunked(repo: Repository, run_id: str) -> None:
    n = CHUNK_ROWS * 2 + 17
    exchanges = [make_exchange(i) for i in range(n)]
    assert repo.save_exchanges(run_id, exchanges) == n
    assert repo.save_exchanges(run_id, exchanges) == 0
    outcomes = [make_outcome(run_id, ex.exchange_id) for ex in exchanges]
    assert repo.save_outcomes(outcomes) == n
    assert repo.save_outcomes(outcomes) == 0
    scores = [make_pair_score(run_id, ex) for ex in exchanges]
    assert repo.save_pair_scores(scores) == n
    assert repo.coverage_counts(run_id).paired == n


def test_empty_inputs_write_nothing(repo: Repository, run_id: str) -> None:
    assert repo.save_exchanges(run_id, []) == 0
    assert repo.save_outcomes([]) == 0
    assert repo.save_pair_scores([]) == 0


# -------------------------------------------------------------------- outcomes


def test_outcomes_are_idempotent_and_the_first_write_wins(repo: Repository, run_id: str) -> None:
    repo.save_exchanges(run_id, [make_exchange(1), make_exchange(2)])
    first = make_outcome(run_id, "ex-00001", text="first")
    assert repo.save_outcomes([first, make_outcome(run_id, "ex-00001", target=REPEAT)]) == 2
    again = make_outcome(run_id, "ex-00001", attempt=2, text="second, redelivered")
    assert repo.save_outcomes([again, make_outcome(run_id, "ex-00002")]) == 1
    assert repo.save_outcomes([again]) == 0
    assert count(repo, "replay_outcome") == 3
    stored = repo.load_outcomes(run_id, CAND)
    assert stored[0] == as_stored(first)
    assert [o.exchange_id for o in stored] == ["ex-00001", "ex-00002"]
    assert len(repo.load_outcomes(run_id)) == 3


def test_completed_exchange_ids_per_target(repo: Repository, run_id: str) -> None:
    repo.save_exchanges(run_id, [make_exchange(i) for i in range(4)])
    repo.save_outcomes(
        [
            make_outcome(run_id, "ex-00000"),
            make_outcome(run_id, "ex-00001", error_kind=ReplayErrorKind.TIMEOUT),
            make_outcome(run_id, "ex-00002", target=REPEAT),
        ]
    )
    assert repo.completed_exchange_ids(run_id, CAND) == {"ex-00000", "ex-00001"}
    assert repo.completed_exchange_ids(run_id, REPEAT) == {"ex-00002"}
    assert repo.completed_exchange_ids("other", CAND) == set()


def test_outcome_for_unknown_exchange_is_a_storage_error(repo: Repository, run_id: str) -> None:
    with pytest.raises(StorageError):
        repo.save_outcomes([make_outcome(run_id, "never-captured")])


# ----------------------------------------------------------------- pair scores


def test_pair_scores_upsert_rescoring_replaces(repo: Repository, run_id: str) -> None:
    exchanges = [make_exchange(i) for i in range(3)]
    repo.save_exchanges(run_id, exchanges)
    assert repo.save_pair_scores([make_pair_score(run_id, ex) for ex in exchanges]) == 3
    rescored = make_pair_score(run_id, exchanges[1], similarity=0.25, candidate_error=True)
    assert repo.save_pair_scores([rescored]) == 1
    scores = repo.load_pair_scores(run_id)
    assert len(scores) == 3
    assert scores[1] == rescored
    assert count(repo, "pair_score") == 3
    with repo.database.connect() as conn:
        similarity, error = conn.execute(
            sa.text("SELECT similarity, candidate_error FROM pair_score WHERE exchange_id = :e"),
            {"e": "ex-00001"},
        ).one()
    assert (similarity, bool(error)) == (0.25, True)


def test_pair_score_repeated_in_one_batch_keeps_the_last(repo: Repository, run_id: str) -> None:
    ex = make_exchange(1)
    repo.save_exchanges(run_id, [ex])
    last = make_pair_score(run_id, ex, similarity=None)
    assert repo.save_pair_scores([make_pair_score(run_id, ex), last]) == 1
    assert repo.load_pair_scores(run_id) == [last]


def test_load_pair_scores_orders_by_capture_time(repo: Repository, run_id: str) -> None:
    late = make_exchange(1, captured_at=T0 + timedelta(days=1))
    early = make_exchange(2, captured_at=T0 - timedelta(days=1))
    repo.save_exchanges(run_id, [late, early])
    repo.save_pair_scores([make_pair_score(run_id, late), make_pair_score(run_id, early)])
    assert [s.exchange_id for s in repo.load_pair_scores(run_id)] == ["ex-00002", "ex-00001"]


# ----------------------------------------------------------------- pair inputs


def test_iter_pair_inputs_joins_candidate_and_baseline_repeat(
    repo: Repository, run_id: str
) -> None:
    # Captured out of id order, in two time zones, one timestamp shared by two exchanges.
    times = {
        0: T0 + timedelta(seconds=30),
        1: T0,
        2: T0 + timedelta(seconds=10),
        3: T0 + timedelta(seconds=10),
        4: T0 - timedelta(hours=3),
        5: T0 + timedelta(seconds=1),  # no candidate outcome: not a pair input
    }
    exchanges = {i: make_exchange(i, captured_at=t) for i, t in times.items()}
    repo.save_exchanges(run_id, exchanges.values())
    candidates = {i: make_outcome(run_id, exchanges[i].exchange_id) for i in range(5)}
    repeats = {i: make_outcome(run_id, exchanges[i].exchange_id, target=REPEAT) for i in (1, 3)}
    repo.save_outcomes([*candidates.values(), *repeats.values()])
    repo.save_outcomes([make_outcome(run_id, exchanges[5].exchange_id, target=REPEAT)])

    batches = list(repo.iter_pair_inputs(run_id, batch_size=2))
    assert [len(b) for b in batches] == [2, 2, 1]
    flat = [item for batch in batches for item in batch]
    assert [ex.exchange_id for ex, _, _ in flat] == [
        "ex-00004",
        "ex-00001",
        "ex-00002",
        "ex-00003",
        "ex-00000",
    ]
    for ex, candidate, repeat in flat:
        n = int(ex.exchange_id[-1])
        assert ex == exchanges[n]
        assert candidate == as_stored(candidates[n])
        assert repeat == (None if n not in repeats else as_stored(repeats[n]))


def test_iter_pair_inputs_only_unscored_while_scoring(repo: Repository, run_id: str) -> None:
    exchanges = [make_exchange(i) for i in range(7)]
    repo.save_exchanges(run_id, exchanges)
    repo.save_outcomes([make_outcome(run_id, ex.exchange_id) for ex in exchanges])
    repo.save_pair_scores([make_pair_score(run_id, exchanges[2])])

    seen: list[str] = []
    for batch in repo.iter_pair_inputs(run_id, only_unscored=True, batch_size=3):
        seen.extend(ex.exchange_id for ex, _, _ in batch)
        # Scoring between batches must neither skip nor repeat anything.
        repo.save_pair_scores([make_pair_score(run_id, ex) for ex, _, _ in batch])
    assert seen == [ex.exchange_id for i, ex in enumerate(exchanges) if i != 2]
    assert list(repo.iter_pair_inputs(run_id, only_unscored=True)) == []
    assert sum(len(b) for b in repo.iter_pair_inputs(run_id)) == 7


def test_iter_pair_inputs_of_an_empty_run(repo: Repository, run_id: str) -> None:
    assert list(repo.iter_pair_inputs(run_id)) == []
    with pytest.raises(ValueError, match="batch_size"):
        repo.iter_pair_inputs(run_id, batch_size=0)


# -------------------------------------------------------------------- coverage


def test_coverage_counts(repo: Repository, run_id: str) -> None:
    exchanges = [make_exchange(i, task_type="chat") for i in range(6)]
    exchanges += [make_exchange(i, task_type="summarize") for i in range(6, 10)]
    repo.save_exchanges(run_id, exchanges)
    repo.save_exchanges(None, [make_exchange(99)])  # stored but not in the run
    ids = [ex.exchange_id for ex in exchanges]
    repo.save_outcomes(
        [
            make_outcome(run_id, ids[0], warmup=True),
            make_outcome(run_id, ids[1], warmup=True, error_kind=ReplayErrorKind.CONNECT),
            make_outcome(run_id, ids[2], error_kind=ReplayErrorKind.TIMEOUT),
            make_outcome(run_id, ids[3], error_kind=ReplayErrorKind.HTTP_STATUS),
            make_outcome(run_id, ids[4], error_kind=ReplayErrorKind.SKIPPED),
            make_outcome(run_id, ids[5]),
            make_outcome(run_id, ids[6]),
            make_outcome(run_id, ids[6], target=REPEAT, error_kind=ReplayErrorKind.TIMEOUT),
            make_outcome(run_id, ids[7], target=REPEAT),
        ]
    )
    repo.save_pair_scores([make_pair_score(run_id, ex) for ex in exchanges[:4]])
    assert repo.coverage_counts(run_id) == Coverage(
        captured=10,
        replayed=7,
        paired=4,
        errored=3,
        warmup=2,
        skipped=1,
        share=0.4,
        per_task_type={"chat": 6, "summarize": 4},
        baseline_repeat_replayed=2,
        baseline_repeat_errored=1,
        # by route (issue 13): the candidate's sent and skipped outcomes (with the skip
        # detail, read from the stored record), the pairs
        per_route={
            "/v1/chat/completions": RouteCoverage(
                captured=10,
                replayed=6,
                skipped=1,
                paired=4,
                skip_reasons={"skipped: ⏱ nach 30 s": 1},
            )
        },
        paired_per_task_type={"chat": 4},
        # members by the baseline model their exchange recorded (issue 29)
        per_baseline_model={"llama-3.1-8b-instruct": 10},
    )


def test_coverage_counts_baseline_repeats_sent_and_failed(repo: Repository, run_id: str) -> None:
    """Baseline repeats are counted apart from the candidate's outcomes: sent (not
    skipped) and failed (any error but skipped), on SQLite and PostgreSQL."""
    exchanges = [make_exchange(i) for i in range(8)]
    repo.save_exchanges(run_id, exchanges)
    ids = [ex.exchange_id for ex in exchanges]
    repo.save_outcomes([make_outcome(run_id, i) for i in ids])  # every candidate answered
    repeat_errors = [
        None,
        None,
        ReplayErrorKind.HTTP_STATUS,
        ReplayErrorKind.HTTP_STATUS,
        ReplayErrorKind.TIMEOUT,
        ReplayErrorKind.SKIPPED,
    ]
    repo.save_outcomes(
        [
            make_outcome(run_id, i, target=REPEAT, error_kind=kind, warmup=n == 0)
            for n, (i, kind) in enumerate(zip(ids, repeat_errors, strict=False))
        ]
    )
    coverage = repo.coverage_counts(run_id)
    assert (coverage.baseline_repeat_replayed, coverage.baseline_repeat_errored) == (5, 3)
    # The candidate's counts are the candidate's alone.
    assert (coverage.replayed, coverage.errored, coverage.skipped, coverage.warmup) == (8, 0, 0, 0)


def test_coverage_without_baseline_repeats_counts_none(repo: Repository, run_id: str) -> None:
    exchanges = [make_exchange(i) for i in range(3)]
    repo.save_exchanges(run_id, exchanges)
    repo.save_outcomes(
        [
            make_outcome(run_id, ex.exchange_id, error_kind=ReplayErrorKind.TIMEOUT)
            for ex in exchanges
        ]
    )
    coverage = repo.coverage_counts(run_id)
    assert (coverage.errored, coverage.baseline_repeat_replayed) == (3, 0)
    assert coverage.baseline_repeat_errored == 0


def test_coverage_records_without_repeat_counts_still_load() -> None:
    """Coverage stored before the baseline-repeat counts existed reads them as 0."""
    old = {
        "captured": 4,
        "replayed": 4,
        "paired": 4,
        "errored": 0,
        "warmup": 0,
        "skipped": 0,
        "share": 1.0,
        "per_task_type": {"chat": 4},
        "rejected": 0,
    }
    coverage = Coverage.model_validate(old)
    assert (coverage.baseline_repeat_replayed, coverage.baseline_repeat_errored) == (0, 0)


def test_coverage_of_an_unknown_or_empty_run_is_zero(repo: Repository, run_id: str) -> None:
    empty = Coverage(captured=0, replayed=0, paired=0, errored=0, warmup=0, skipped=0, share=0.0)
    assert repo.coverage_counts(run_id) == empty
    assert repo.coverage_counts("nobody") == empty


def test_undecodable_capture_log_lines_count_as_captured(repo: Repository, run_id: str) -> None:
    exchanges = [make_exchange(i) for i in range(4)]
    repo.save_exchanges(run_id, exchanges)
    repo.save_pair_scores([make_pair_score(run_id, ex) for ex in exchanges])
    for i in range(4):
        repo.save_rejected(
            run_id=run_id, stage="capture_log", reason="invalid_json", location=f"log:{i}"
        )
    repo.save_rejected(run_id=run_id, stage="compare", reason="score_failed")  # not a log line
    coverage = repo.coverage_counts(run_id)
    assert (coverage.captured, coverage.rejected, coverage.paired) == (8, 4, 4)
    assert coverage.share == 0.5
    assert coverage.per_task_type == {"chat": 4}


def test_skipped_replays_are_not_pairs(repo: Repository, run_id: str) -> None:
    exchanges = [make_exchange(i) for i in range(3)]
    repo.save_exchanges(run_id, exchanges)
    repo.save_outcomes(
        [
            make_outcome(run_id, exchanges[0].exchange_id),
            make_outcome(run_id, exchanges[1].exchange_id, error_kind=ReplayErrorKind.SKIPPED),
            make_outcome(run_id, exchanges[2].exchange_id, error_kind=ReplayErrorKind.TIMEOUT),
        ]
    )
    batches = list(repo.iter_pair_inputs(run_id))
    ids = [exchange.exchange_id for batch in batches for exchange, _, _ in batch]
    assert ids == [exchanges[0].exchange_id, exchanges[2].exchange_id]


def test_conflicting_exchange_ids_are_found_identical_redeliveries_are_not(
    repo: Repository, run_id: str
) -> None:
    original = make_exchange(1)
    repo.save_exchanges(run_id, [original])
    same = make_exchange(1)
    edited = original.model_copy(update={"task_type": "edited"})
    nul = make_exchange(2, text="a\x00b")
    repo.save_exchanges(run_id, [nul])
    assert repo.conflicting_exchanges([same, nul, make_exchange(3)]) == {}
    conflicts = repo.conflicting_exchanges([edited])
    assert list(conflicts) == [original.exchange_id]
    assert "different content" in conflicts[original.exchange_id]
    assert repo.get_exchange(original.exchange_id) == original

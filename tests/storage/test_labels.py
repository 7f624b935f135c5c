"""Human labels: upsert per labeller, load, validation against pair scores, latest on samples."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from shadoweval.errors import StorageError
from shadoweval.records import HumanLabel, LabelValue, PairScore
from shadoweval.storage import Repository, SampleFilter

from .factories import T0
from .sample_data import seed_run

RUN = "run-labels"


@pytest.fixture
def scores(repo: Repository) -> list[PairScore]:
    stored = seed_run(repo, RUN, 12)
    seed_run(repo, "run-b", 3, first=20)
    return stored


def label(
    score: PairScore,
    value: LabelValue,
    *,
    labeller: str = "ana",
    minutes: int = 0,
    note: str = "",
    source: str = "dashboard",
) -> HumanLabel:
    return HumanLabel.model_validate(
        {
            "run_id": score.run_id,
            "exchange_id": score.exchange_id,
            "task_type": score.task_type,
            "label": value,
            "note": note,
            "labeller": labeller,
            "labelled_at": T0 + timedelta(minutes=minutes),
            "source": source,
        }
    )


def label_rows(repo: Repository) -> int:
    with repo.database.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM human_label")).scalar_one())


def test_save_and_load_round_trip(repo: Repository, scores: list[PairScore]) -> None:
    given = [
        label(scores[0], LabelValue.CANDIDATE_BETTER, note="klarer ✅ «gut»"),
        label(scores[1], LabelValue.BOTH_BAD, labeller="bo", minutes=1, source="import"),
        label(scores[2], LabelValue.SAME, minutes=2),
    ]
    assert repo.save_labels(given) == 3
    assert repo.load_labels(RUN) == given
    assert repo.load_labels("run-b") == []
    assert repo.save_labels([]) == 0


def test_relabelling_replaces_that_labellers_label_only(
    repo: Repository, scores: list[PairScore]
) -> None:
    first = label(scores[0], LabelValue.CANDIDATE_WORSE, labeller="ana")
    other = label(scores[0], LabelValue.SAME, labeller="bo", minutes=1)
    assert repo.save_labels([first, other]) == 2
    again = label(scores[0], LabelValue.CANDIDATE_BETTER, labeller="ana", minutes=5, note="n")
    assert repo.save_labels([again]) == 1
    assert label_rows(repo) == 2
    assert repo.load_labels(RUN) == [other, again]


def test_a_key_repeated_in_one_call_keeps_its_last_occurrence(
    repo: Repository, scores: list[PairScore]
) -> None:
    a = label(scores[3], LabelValue.SAME)
    b = label(scores[3], LabelValue.CANDIDATE_WORSE, minutes=1)
    assert repo.save_labels([a, b]) == 1
    assert repo.load_labels(RUN) == [b]


def test_label_without_a_pair_score_names_run_and_exchange(
    repo: Repository, scores: list[PairScore]
) -> None:
    ok = label(scores[0], LabelValue.SAME)
    unknown = ok.model_copy(update={"exchange_id": "ex-77777"})
    with pytest.raises(StorageError) as info:
        repo.save_labels([ok, unknown])
    assert "'ex-77777'" in str(info.value)
    assert "'run-labels'" in str(info.value)
    assert label_rows(repo) == 0  # all or nothing
    # An exchange scored only in another run is not a pair of this one.
    elsewhere = ok.model_copy(update={"exchange_id": "ex-00020"})
    with pytest.raises(StorageError, match="no pair score in that run"):
        repo.save_labels([elsewhere])
    unknown_run = ok.model_copy(update={"run_id": "no-such-run"})
    with pytest.raises(StorageError, match="'no-such-run'"):
        repo.save_labels([unknown_run])


def test_label_with_another_task_type_is_refused(repo: Repository, scores: list[PairScore]) -> None:
    wrong = label(scores[0], LabelValue.SAME).model_copy(update={"task_type": "poetry"})
    with pytest.raises(StorageError, match=r"task_type 'poetry'.*task type is 'code'"):
        repo.save_labels([wrong])


def test_labels_of_several_runs_in_one_call(repo: Repository, scores: list[PairScore]) -> None:
    (b_score,) = seed_run(repo, "run-c", 1, first=40)
    assert repo.save_labels([label(b_score, LabelValue.SAME), label(scores[5], LabelValue.SAME)])
    assert [lbl.exchange_id for lbl in repo.load_labels("run-c")] == ["ex-00040"]
    assert [lbl.exchange_id for lbl in repo.load_labels(RUN)] == [scores[5].exchange_id]


def test_sample_shows_the_latest_label_of_any_labeller(
    repo: Repository, scores: list[PairScore]
) -> None:
    target = scores[4]
    repo.save_labels(
        [
            label(target, LabelValue.CANDIDATE_WORSE, labeller="ana", minutes=10),
            label(target, LabelValue.CANDIDATE_BETTER, labeller="bo", minutes=30, note="newest"),
            label(target, LabelValue.SAME, labeller="cy", minutes=20),
        ]
    )
    (sample,) = repo.samples_by_ids(RUN, [target.exchange_id])
    assert sample.label is not None
    assert sample.label.labeller == "bo"
    assert sample.label.label is LabelValue.CANDIDATE_BETTER
    assert sample.label.note == "newest"
    page = repo.sample_page(RUN, SampleFilter(), limit=100)
    labelled = {s.exchange_id: s.label for s in page.samples if s.label is not None}
    assert list(labelled) == [target.exchange_id]
    assert labelled[target.exchange_id] == sample.label


def test_labels_go_with_their_pair_score(repo: Repository, scores: list[PairScore]) -> None:
    repo.save_labels([label(scores[0], LabelValue.SAME)])
    with repo.database.connect() as conn:
        conn.execute(
            sa.text("DELETE FROM pair_score WHERE run_id = :r AND exchange_id = :e"),
            {"r": RUN, "e": scores[0].exchange_id},
        )
    assert repo.load_labels(RUN) == []


def test_labeller_must_be_named() -> None:
    with pytest.raises(ValueError, match="labeller"):
        HumanLabel(
            run_id="r",
            exchange_id="e",
            task_type="chat",
            label=LabelValue.SAME,
            labeller="",
            source="dashboard",
        )


def test_the_random_sample_id_is_stored_loaded_and_kept_by_the_latest_label(
    repo: Repository, scores: list[PairScore]
) -> None:
    """``sample`` round-trips (None = chosen by hand), a relabel keeps it (the pair was
    drawn in the sample whoever labels it again), and the latest-label query behind the
    samples page returns it."""
    sampled = label(scores[0], LabelValue.CANDIDATE_WORSE, source="import").model_copy(
        update={"sample": "ppi-seed-7-fraction-0.1"}
    )
    by_hand = label(scores[1], LabelValue.SAME, minutes=1)
    assert repo.save_labels([sampled, by_hand]) == 2
    loaded = repo.load_labels(RUN)
    assert loaded == [sampled, by_hand]
    assert [lbl.sample for lbl in loaded] == ["ppi-seed-7-fraction-0.1", None]
    (shown,) = repo.samples_by_ids(RUN, [scores[0].exchange_id])
    assert shown.label is not None
    assert shown.label.sample == "ppi-seed-7-fraction-0.1"
    again = label(scores[0], LabelValue.SAME, minutes=5)  # relabelled on the dashboard
    repo.save_labels([again])
    by_pair = {lbl.exchange_id: lbl for lbl in repo.load_labels(RUN)}
    assert by_pair[scores[0].exchange_id].label == LabelValue.SAME
    assert by_pair[scores[0].exchange_id].sample == "ppi-seed-7-fraction-0.1"
    assert by_pair[scores[1].exchange_id].sample is None


@pytest.mark.parametrize("bad", ["", "   ", "x" * 201])
def test_a_blank_or_overlong_sample_id_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="sample"):
        HumanLabel(
            run_id="r",
            exchange_id="e",
            task_type="chat",
            label=LabelValue.SAME,
            labeller="ana",
            source="import",
            sample=bad,
        )
    assert (
        HumanLabel(
            run_id="r",
            exchange_id="e",
            task_type="chat",
            label=LabelValue.SAME,
            labeller="ana",
            source="import",
            sample="x" * 200,
        ).sample
        == "x" * 200
    )

"""Sample paging, filters, counts and ids against a Python reference, on SQLite and PostgreSQL."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlalchemy as sa

from shadoweval.errors import InvalidDataError, RecordDecodeError, StorageError
from shadoweval.pair_flags import PairFlag, pair_flags
from shadoweval.records import PairScore
from shadoweval.storage import (
    Database,
    Repository,
    SampleCursor,
    SampleFilter,
    SamplePage,
)
from shadoweval.storage import queries as queries_
from shadoweval.storage.samples import SampleStore

from .sample_data import TASK_TYPES, reference_order, seed_run, similarity_of

RUN = "run-samples"
N_PAIRS = 150


@pytest.fixture
def scores(repo: Repository) -> list[PairScore]:
    """150 pairs in RUN, plus a second run sharing some exchanges (must never leak in)."""
    stored = seed_run(repo, RUN, N_PAIRS)
    seed_run(repo, "run-other", 40, first=100)
    return stored


def matches(score: PairScore, flt: SampleFilter) -> bool:
    """The filter written out in Python (the reference)."""
    if flt.task_types and score.task_type not in flt.task_types:
        return False
    if not set(flt.flags) <= set(pair_flags(score)):
        return False
    if flt.has_similarity_bound:
        if score.similarity is None:
            return False
        if flt.min_similarity is not None and score.similarity < flt.min_similarity:
            return False
        if flt.max_similarity is not None and score.similarity > flt.max_similarity:
            return False
    return True


def expected_ids(scores: list[PairScore], flt: SampleFilter) -> list[str]:
    return [s.exchange_id for s in reference_order([s for s in scores if matches(s, flt)])]


def all_pages(repo: Repository, flt: SampleFilter, limit: int) -> list[SamplePage]:
    """Follow next_cursor to the end, passing it through its token each time."""
    pages = [repo.sample_page(RUN, flt, limit=limit)]
    while pages[-1].next_cursor is not None:
        cursor = pages[-1].next_cursor
        assert cursor is not None
        again = SampleCursor.from_token(cursor.to_token())
        assert again == cursor
        pages.append(repo.sample_page(RUN, flt, after=again, limit=limit))
        assert len(pages) < 1000, "paging does not end"
    return pages


FILTERS = [
    SampleFilter(),
    SampleFilter(task_types=("code",)),
    SampleFilter(task_types=("chat", "summarize")),
    SampleFilter(flags=(PairFlag.TEMPLATE_LEAK,)),
    SampleFilter(flags=(PairFlag.NO_SIMILARITY,)),
    SampleFilter(flags=(PairFlag.TEMPLATE_LEAK, PairFlag.FINISH_REASON_CHANGED)),
    SampleFilter(flags=(PairFlag.FORMAT_REGRESSION,), task_types=("code", "chat")),
    SampleFilter(flags=(PairFlag.BELOW_NOISE_FLOOR,)),
    SampleFilter(min_similarity=0.1, max_similarity=0.5),
    SampleFilter(max_similarity=0.0),
    SampleFilter(min_similarity=0.8),
    SampleFilter(min_similarity=0.3, max_similarity=0.3, task_types=("chat",)),
    SampleFilter(task_types=("nonexistent",)),
    SampleFilter(flags=(PairFlag.CANDIDATE_ERROR, PairFlag.BASELINE_ERROR)),
]


def test_the_seeded_data_covers_both_phases_and_ties(scores: list[PairScore]) -> None:
    similarities = [s.similarity for s in scores]
    assert similarities.count(None) >= 10
    known = [x for x in similarities if x is not None]
    assert len(set(known)) == 13 < len(known)
    every_flag = {flag for s in scores for flag in pair_flags(s)}
    assert every_flag >= {
        PairFlag.CANDIDATE_ERROR,
        PairFlag.BASELINE_ERROR,
        PairFlag.CANDIDATE_INFRA_ERROR,
        PairFlag.FORMAT_REGRESSION,
        PairFlag.TEMPLATE_LEAK,
        PairFlag.FINISH_REASON_CHANGED,
        PairFlag.BELOW_NOISE_FLOOR,
        PairFlag.NO_SIMILARITY,
    }


@pytest.mark.parametrize("limit", [1, 7, 11, 50, 1000])
def test_paging_visits_every_pair_once_in_order(
    repo: Repository, scores: list[PairScore], limit: int
) -> None:
    flt = SampleFilter()
    pages = all_pages(repo, flt, limit)
    seen = [sample.exchange_id for page in pages for sample in page.samples]
    assert seen == expected_ids(scores, flt)
    assert len(seen) == len(set(seen)) == N_PAIRS
    assert all(len(page.samples) == limit for page in pages[:-1])
    assert 1 <= len(pages[-1].samples) <= limit
    # The NULL phase comes first, then similarity ascending.
    similarities = [s.similarity for page in pages for s in page.samples]
    nulls = similarities.count(None)
    assert similarities[:nulls] == [None] * nulls
    known = [x for x in similarities[nulls:] if x is not None]
    assert known == sorted(known)
    assert len(known) == N_PAIRS - nulls


@pytest.mark.parametrize("flt", FILTERS, ids=repr)
def test_filters_agree_with_the_python_reference(
    repo: Repository, scores: list[PairScore], flt: SampleFilter
) -> None:
    wanted = expected_ids(scores, flt)
    pages = all_pages(repo, flt, limit=9)
    seen = [sample.exchange_id for page in pages for sample in page.samples]
    assert seen == wanted
    assert repo.count_samples(RUN, flt) == len(wanted)
    by_type = {t: repo.sample_ids(RUN, flt, t) for t in TASK_TYPES}
    for task_type, ids in by_type.items():
        reference = [
            (s.exchange_id, s.similarity)
            for s in reference_order([s for s in scores if matches(s, flt)])
            if s.task_type == task_type
        ]
        assert ids == reference, task_type
    for page in pages:
        for sample in page.samples:
            assert set(flt.flags) <= set(sample.flags)


def test_empty_result_has_no_cursor(repo: Repository, scores: list[PairScore]) -> None:
    page = repo.sample_page(RUN, SampleFilter(task_types=("nonexistent",)))
    assert page == SamplePage(samples=(), next_cursor=None)
    assert repo.sample_page("no-such-run", SampleFilter()).samples == ()


def test_an_exactly_full_last_page_ends_the_paging(
    repo: Repository, scores: list[PairScore]
) -> None:
    page = repo.sample_page(RUN, SampleFilter(), limit=N_PAIRS)
    assert len(page.samples) == N_PAIRS
    assert page.next_cursor is None
    nulls = sum(1 for s in scores if s.similarity is None)
    at_boundary = repo.sample_page(RUN, SampleFilter(), limit=nulls)
    assert [s.similarity for s in at_boundary.samples] == [None] * nulls
    assert at_boundary.next_cursor is not None
    assert at_boundary.next_cursor.phase == "no_similarity"
    rest = repo.sample_page(RUN, SampleFilter(), after=at_boundary.next_cursor, limit=3)
    assert all(s.similarity is not None for s in rest.samples)
    assert rest.next_cursor is not None
    assert rest.next_cursor.phase == "similarity"


def test_sample_content(repo: Repository, scores: list[PairScore]) -> None:
    by_id = {s.exchange_id: s for s in scores}
    (errored,) = repo.samples_by_ids(RUN, ["ex-00022"])
    assert errored.similarity is None
    assert errored.candidate_error_kind == "timeout"
    assert errored.candidate_text == ""
    assert errored.candidate_tool_calls == []
    assert errored.flags == pair_flags(by_id["ex-00022"])

    (sample,) = repo.samples_by_ids(RUN, ["ex-00005"])
    score = by_id["ex-00005"]
    assert sample.run_id == RUN
    assert sample.task_type == TASK_TYPES[5 % 3]
    assert sample.captured_at == score.captured_at
    assert sample.similarity == similarity_of(5)
    assert sample.noise_similarity == 0.6
    assert sample.flags == pair_flags(score)
    assert PairFlag.TEMPLATE_LEAK in sample.flags
    assert sample.request_messages == [{"role": "user", "content": "Sag hallo 👋"}]
    assert sample.request_params == {"model": "m", "temperature": 0.2}
    assert sample.baseline_text.endswith("#5")
    assert sample.candidate_text == "Kandidat 5 ✅"
    (call,) = sample.baseline_tool_calls
    assert call == {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "name": "lookup",
        "arguments": '{"q":"Zürich"}',
    }
    assert sample.candidate_error_kind is None
    assert sample.label is None


def test_samples_by_ids_keeps_the_order_given_and_names_missing_ids(
    repo: Repository, scores: list[PairScore]
) -> None:
    ids = ["ex-00101", "ex-00003", "ex-00077", "ex-00003"]
    assert [s.exchange_id for s in repo.samples_by_ids(RUN, ids)] == ids
    assert repo.samples_by_ids(RUN, []) == []
    many = [s.exchange_id for s in scores][::-1]
    assert [s.exchange_id for s in repo.samples_by_ids(RUN, many)] == many
    with pytest.raises(StorageError, match=r"run 'run-samples' has no pair score for .*ex-99999"):
        repo.samples_by_ids(RUN, ["ex-00001", "ex-99999"])
    # An exchange scored only in the other run is not a pair of this one.
    with pytest.raises(StorageError, match="ex-00170"):
        repo.samples_by_ids(RUN, ["ex-00170"])


def test_task_types(repo: Repository, scores: list[PairScore]) -> None:
    assert repo.task_types(RUN) == sorted(TASK_TYPES)
    assert repo.task_types("no-such-run") == []


def test_other_runs_never_leak_in(repo: Repository, scores: list[PairScore]) -> None:
    other = repo.sample_page("run-other", SampleFilter(), limit=1000).samples
    assert {s.exchange_id for s in other} == {f"ex-{n:05d}" for n in range(100, 140)}
    assert all(s.run_id == "run-other" for s in other)
    assert repo.count_samples("run-other", SampleFilter()) == 40


def test_rescoring_updates_flags(repo: Repository, scores: list[PairScore]) -> None:
    score = next(s for s in scores if not pair_flags(s))
    leaked = score.model_copy(update={"template_leaks": ("[INST]",)})
    repo.save_pair_scores([leaked])
    (sample,) = repo.samples_by_ids(RUN, [score.exchange_id])
    assert sample.flags == (PairFlag.TEMPLATE_LEAK,)


def test_limit_must_be_positive(repo: Repository) -> None:
    with pytest.raises(ValueError, match="limit must be >= 1, got 0"):
        repo.sample_page(RUN, SampleFilter(), limit=0)


# ------------------------------------------------------------------- pure parts


@pytest.mark.parametrize(
    "cursor",
    [
        SampleCursor(phase="no_similarity", exchange_id="01JABCDEF"),
        SampleCursor(phase="similarity", exchange_id="ex-1", similarity=0.30000000000000004),
        SampleCursor(phase="similarity", exchange_id="ü/+=?", similarity=-1.0),
        SampleCursor(phase="similarity", exchange_id="", similarity=1e-300),
    ],
)
def test_cursor_token_round_trip(cursor: SampleCursor) -> None:
    token = cursor.to_token()
    assert token.isascii()
    assert not set(token) & set("=/+")
    assert SampleCursor.from_token(token) == cursor


@pytest.mark.parametrize(
    "token",
    [
        "",
        "not base64 at all!",
        "eyJ2IjoxfQ",  # {"v":1}: no exchange id
        "eyJ2IjoyLCJwIjoic2ltaWxhcml0eSIsImUiOiJ4IiwicyI6MC41fQ",  # version 2
        "eyJ2IjoxLCJwIjoic2ltaWxhcml0eSIsImUiOiJ4In0",  # similarity phase, no similarity
        "eyJ2IjoxLCJwIjoibm9wZSIsImUiOiJ4In0",  # unknown phase
        "WzEsMiwzXQ",  # [1,2,3]
    ],
)
def test_bad_cursor_token_names_the_token(token: str) -> None:
    with pytest.raises(RecordDecodeError) as info:
        SampleCursor.from_token(token)
    assert f"invalid sample cursor token {token!r}" in str(info.value)
    assert info.value.reason == "invalid_cursor"


def test_long_bad_token_is_cut_in_the_message() -> None:
    with pytest.raises(RecordDecodeError, match="…"):
        SampleCursor.from_token("x" * 500)


def test_filter_validation_and_normalisation() -> None:
    flt = SampleFilter(task_types=["chat"], flags=["template_leak"])  # type: ignore[arg-type]
    assert flt.task_types == ("chat",)
    assert flt.flags == (PairFlag.TEMPLATE_LEAK,)
    assert hash(flt) == hash(SampleFilter(task_types=("chat",), flags=(PairFlag.TEMPLATE_LEAK,)))
    with pytest.raises(InvalidDataError, match="unknown pair flag 'sparkly'"):
        SampleFilter(flags=("sparkly",))  # type: ignore[arg-type]
    with pytest.raises(
        InvalidDataError, match=r"min_similarity=0.9 is greater than max_similarity=0.1"
    ):
        SampleFilter(min_similarity=0.9, max_similarity=0.1)
    with pytest.raises(InvalidDataError, match="max_similarity is NaN"):
        SampleFilter(max_similarity=float("nan"))


# ------------------------------------------------------------------- query plans


def _plan(db: Database, stmt: sa.Select[tuple[object, ...]]) -> str:
    compiled = stmt.compile(db.engine, compile_kwargs={"literal_binds": True})
    with db.connect() as conn:
        rows = conn.execute(sa.text(f"EXPLAIN QUERY PLAN {compiled}")).all()
    return "\n".join(str(row[-1]) for row in rows)


BY_RUN = "ix_pair_score_run_id_similarity_exchange_id_flags"
BY_TYPE = "ix_pair_score_run_id_task_type_similarity_exchange_id_flags"


@pytest.mark.parametrize(
    ("flt", "index"),
    [
        (SampleFilter(), BY_RUN),
        (SampleFilter(flags=(PairFlag.TEMPLATE_LEAK,)), BY_RUN),
        (SampleFilter(min_similarity=0.2, max_similarity=0.4), BY_RUN),
        (SampleFilter(task_types=("chat",)), BY_TYPE),
        (SampleFilter(task_types=("chat",), min_similarity=0.2), BY_TYPE),
    ],
)
def test_sqlite_pages_walk_the_paging_index_without_sorting(
    tmp_path: Path, flt: SampleFilter, index: str
) -> None:
    """Each page query is an index range scan in page order: no sort, no OFFSET."""
    db = Database(f"sqlite:///{tmp_path / 'plan.db'}")
    try:
        db.upgrade()
        conditions = SampleStore._conditions("r", flt)
        phases: list[tuple[bool, tuple[float | None, str] | None]] = [
            (True, None),
            (True, (0.5, "ex-1")),
        ]
        if not flt.has_similarity_bound:  # the NULL phase runs only without bounds
            phases += [(False, None), (False, (None, "ex-1"))]
        for with_similarity, after in phases:
            stmt = queries_.sample_keys(conditions, with_similarity=with_similarity, after=after)
            plan = _plan(db, stmt.limit(51))
            assert index in plan, plan
            assert "TEMP B-TREE" not in plan, plan
            sql = str(stmt.limit(51).compile(db.engine, compile_kwargs={"literal_binds": True}))
            assert re.search(r"OFFSET (?!0\b)", sql) is None, sql
    finally:
        db.dispose()

"""Pair facts (migration 0008): the pairs table built from ``pair_score.facts`` is the one
built from the records, on SQLite and PostgreSQL, after rescoring, and where a row has none.
Concurrent upserts of the same pairs keep one row each."""

from __future__ import annotations

import threading
from datetime import timedelta

import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa

from shadoweval.pair_facts import (
    PAIR_FACTS_BYTES,
    PAIR_FACTS_LAYOUT,
    PairFacts,
    pack_pair_facts,
    unpack_pair_facts,
)
from shadoweval.records import (
    FormatFlags,
    HarmKind,
    PairScore,
    SidePair,
    SimilarityDetail,
    ToolCallFlags,
    ToolChange,
)
from shadoweval.stats.frame import pairs_frame, pairs_frame_from_facts
from shadoweval.stats.policy import GatePolicy, parse_policy_yaml
from shadoweval.storage import Repository

from .factories import BASELINE, CANDIDATE, T0, make_exchange, make_pair_score

DEFAULT = parse_policy_yaml("{}\n")
OVERRIDES = parse_policy_yaml(
    "harm: {length_ratio_max: 1.5, min_runaway_chars: 10}\n"
    "task_types:\n"
    "  extraction:\n"
    "    format_parse: {success_flag: strict}\n"
    "  code:\n"
    "    format_parse: {success_flag: extracted}\n"
    "    harm: {length_ratio_max: 2, min_runaway_chars: 1}\n"
)
TASK_TYPES = ("chat", "extraction", "code", "summarize")
N = 240


def _maybe(rng: np.random.Generator, value: object, p: float = 0.3) -> object:
    return None if rng.random() < p else value


def _flags(rng: np.random.Generator) -> FormatFlags | None:
    if rng.random() < 0.3:
        return None
    strict, fence, extracted = (bool(b) for b in rng.integers(0, 2, 3))
    valid = [None, True, False][int(rng.integers(0, 3))]
    return FormatFlags(strict=strict, fence_stripped=fence, extracted=extracted, schema_valid=valid)


def _tools(rng: np.random.Generator) -> ToolCallFlags | None:
    if rng.random() < 0.5:
        return None
    calls = int(rng.integers(0, 3))
    return ToolCallFlags(
        calls=calls, arguments_parse=bool(calls), schema_valid=bool(rng.random() < 0.7)
    )


def _subset(rng: np.random.Generator, members: list[object]) -> tuple[object, ...]:
    return tuple(m for m in members if rng.random() < 0.15)


def varied_scores(repo: Repository, run_id: str, n: int = N, seed: int = 7) -> list[PairScore]:
    """``n`` stored exchanges with pair scores that vary every field the table reads."""
    rng = np.random.default_rng(seed)
    exchanges = [
        make_exchange(i, captured_at=T0 + timedelta(seconds=i // 2), task_type=TASK_TYPES[i % 4])
        for i in range(n)
    ]
    repo.save_exchanges(run_id, exchanges)
    scores = []
    for exchange in exchanges:
        base = make_pair_score(run_id, exchange)
        errored = rng.random() < 0.15
        detail = base.similarity_detail
        assert detail is not None
        scripts = ("Cyrillic", "Han")[: int(rng.integers(0, 3))]
        scores.append(
            base.model_copy(
                update={
                    "similarity": _maybe(rng, float(rng.uniform(-1, 1)), 0.1),
                    "similarity_detail": _maybe(
                        rng, detail.model_copy(update={"uncovered_scripts": scripts}), 0.2
                    ),
                    "noise_similarity": _maybe(rng, float(rng.uniform(0, 1)), 0.4),
                    "streamed": bool(rng.random() < 0.5),
                    "format_expected": bool(rng.random() < 0.6),
                    "baseline_format": _flags(rng),
                    "candidate_format": _flags(rng),
                    "baseline_tools": _tools(rng),
                    "candidate_tools": _tools(rng),
                    "baseline_error": bool(rng.random() < 0.1),
                    "candidate_error": errored,
                    "baseline_infra_error": bool(rng.random() < 0.05),
                    "candidate_infra_error": errored and bool(rng.random() < 0.5),
                    "baseline_empty": bool(rng.random() < 0.1),
                    "candidate_empty": bool(rng.random() < 0.1),
                    "output_tokens": SidePair(
                        baseline=_maybe(rng, float(rng.integers(1, 900))),
                        candidate=_maybe(rng, float(rng.integers(1, 900))),
                    ),
                    "output_chars": SidePair(
                        baseline=_maybe(rng, float(rng.integers(0, 5000))),
                        candidate=_maybe(rng, float(rng.integers(0, 5000))),
                    ),
                    "ttft_ms": SidePair(baseline=_maybe(rng, 40.5), candidate=_maybe(rng, 51.25)),
                    "ttfc_ms": SidePair(baseline=_maybe(rng, 60.0), candidate=_maybe(rng, 70.0)),
                    "e2e_ms": SidePair(
                        baseline=_maybe(rng, float(rng.uniform(100, 900))),
                        candidate=_maybe(rng, float(rng.uniform(100, 900))),
                    ),
                    "baseline_cache_hit": bool(rng.random() < 0.1),
                    "candidate_cache_hit": bool(rng.random() < 0.1),
                    "candidate_warmup": bool(rng.random() < 0.05),
                    "latency_baseline_source": ["live", "recorded", "baseline_repeat", "missing"][
                        int(rng.integers(0, 4))
                    ],
                    "baseline_harms": _subset(rng, list(HarmKind)),
                    "candidate_harms": _subset(rng, list(HarmKind)),
                    "tool_changes": _subset(rng, list(ToolChange)),
                    "sampled": [None, True, False][int(rng.integers(0, 3))],
                    "noise_identical": [None, True, False][int(rng.integers(0, 3))],
                    "candidate_sent_at": _maybe(
                        rng, T0 + timedelta(seconds=float(rng.uniform(0, 3600))), 0.2
                    ),
                }
            )
        )
    # through validation, as a scorer builds them
    return [PairScore.model_validate(s.model_dump()) for s in scores]


@pytest.fixture
def run_id(repo: Repository) -> str:
    return repo.create_run(
        run_id="run-facts",
        name="facts",
        baseline=BASELINE,
        candidate=CANDIDATE,
        policy_hash="sha256:policy",
        policy_yaml="{}\n",
    ).run_id


def _frames(repo: Repository, run_id: str, policy: GatePolicy) -> tuple[pd.DataFrame, pd.DataFrame]:
    from_records = pairs_frame(repo.load_pair_scores(run_id), policy)
    facts, _ = repo.load_pair_facts_after(run_id, 0)
    return from_records, pairs_frame_from_facts(facts, policy)


@pytest.mark.parametrize("policy", [DEFAULT, OVERRIDES], ids=["default", "overrides"])
def test_table_from_facts_is_the_table_from_records(
    repo: Repository, run_id: str, policy: GatePolicy
) -> None:
    repo.save_pair_scores(varied_scores(repo, run_id))
    from_records, from_facts = _frames(repo, run_id, policy)
    assert len(from_records) == N
    pd.testing.assert_frame_equal(from_facts, from_records, check_exact=True)


def test_a_rescore_replaces_the_facts(repo: Repository, run_id: str) -> None:
    first = varied_scores(repo, run_id)
    repo.save_pair_scores(first)
    rescored = [
        s.model_copy(
            update={
                "similarity": 0.25,
                "candidate_harms": (HarmKind.REFUSAL,),
                "similarity_detail": None,
                "candidate_error": not s.candidate_error,
            }
        )
        for s in first[::3]
    ]
    repo.save_pair_scores(rescored)
    from_records, from_facts = _frames(repo, run_id, OVERRIDES)
    pd.testing.assert_frame_equal(from_facts, from_records, check_exact=True)
    assert (from_facts["similarity"] == 0.25).sum() >= len(rescored)


def test_rows_without_facts_are_read_from_their_records(repo: Repository, run_id: str) -> None:
    repo.save_pair_scores(varied_scores(repo, run_id))
    with repo.database.connect() as conn:
        conn.execute(
            sa.text(
                "UPDATE pair_score SET facts = NULL, uncovered_scripts = NULL "
                "WHERE exchange_id < 'ex-00050'"
            )
        )
        conn.execute(
            sa.text("UPDATE pair_score SET facts = :stale WHERE exchange_id = 'ex-00060'"),
            {"stale": b"\x00" * PAIR_FACTS_BYTES},
        )
    from_records, from_facts = _frames(repo, run_id, DEFAULT)
    pd.testing.assert_frame_equal(from_facts, from_records, check_exact=True)


def test_facts_are_read_incrementally_by_row_id(repo: Repository, run_id: str) -> None:
    scores = varied_scores(repo, run_id)
    repo.save_pair_scores(scores[:100])
    first, last = repo.load_pair_facts_after(run_id, 0)
    assert len(first) == 100
    repo.save_pair_scores(scores[100:])
    rest, newest = repo.load_pair_facts_after(run_id, last)
    assert len(rest) == N - 100
    assert newest > last
    assert set(rest.exchange_ids) == {s.exchange_id for s in scores[100:]}
    nothing, same = repo.load_pair_facts_after(run_id, newest)
    assert (len(nothing), same) == (0, newest)


def test_an_empty_run_gives_the_empty_table(repo: Repository, run_id: str) -> None:
    facts, last = repo.load_pair_facts_after(run_id, 0)
    assert (len(facts), last) == (0, 0)
    pd.testing.assert_frame_equal(pairs_frame_from_facts(facts, DEFAULT), pairs_frame([], DEFAULT))


def test_unpack_refuses_rows_of_another_length_or_layout() -> None:
    score = make_pair_score("r", make_exchange(1))
    packed = pack_pair_facts(score)
    assert len(packed) == PAIR_FACTS_BYTES
    with pytest.raises(ValueError, match=r"row 1 has 3 bytes, expected"):
        unpack_pair_facts([packed, b"abc"])
    with pytest.raises(ValueError, match=rf"row 0 has layout 9, expected {PAIR_FACTS_LAYOUT}"):
        unpack_pair_facts([b"\x09" + packed[1:]])
    with pytest.raises(ValueError, match="columns differ in length"):
        PairFacts(("a",), (), (), unpack_pair_facts([]))


def test_the_frame_reads_a_similarity_detail_free_score() -> None:
    score = make_pair_score("r", make_exchange(1)).model_copy(
        update={
            "similarity_detail": SimilarityDetail(
                baseline_tokens=1,
                candidate_tokens=1,
                baseline_chunks=1,
                candidate_chunks=1,
                uncovered_scripts=("Thai",),
            )
        }
    )
    frame = pairs_frame_from_facts(PairFacts.of_scores([score]), DEFAULT)
    pd.testing.assert_frame_equal(frame, pairs_frame([score], DEFAULT), check_exact=True)
    assert frame["uncovered_scripts"].tolist() == ["Thai"]


@pytest.mark.postgres
def test_concurrent_writers_of_the_same_pairs_keep_one_row_each(
    pg_schema_url: str,
) -> None:
    """Two writers upsert the same 1,200 pairs at once, in opposite orders, many times:
    no deadlock (rows are written in key order), and each pair has one row."""
    from shadoweval.storage import Database

    with Database(pg_schema_url) as db:
        db.upgrade()
        repo = Repository(db)
        run = repo.create_run(
            run_id="run-two-writers",
            name="w",
            baseline=BASELINE,
            candidate=CANDIDATE,
            policy_hash="sha256:p",
            policy_yaml="{}\n",
        )
        scores = varied_scores(repo, run.run_id, n=1200)
        errors: list[BaseException] = []
        start = threading.Barrier(2)

        def write(batch: list[PairScore]) -> None:
            try:
                start.wait()
                for _ in range(5):
                    repo.save_pair_scores(batch)
            except BaseException as exc:  # collected and asserted below
                errors.append(exc)

        writers = [
            threading.Thread(target=write, args=(scores,)),
            threading.Thread(target=write, args=(scores[::-1],)),
        ]
        for thread in writers:
            thread.start()
        for thread in writers:
            thread.join()
        assert errors == []
        with db.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT count(*), count(DISTINCT exchange_id) FROM pair_score")
            ).one()
        assert tuple(rows) == (1200, 1200)
        from_records, from_facts = _frames(repo, run.run_id, DEFAULT)
        pd.testing.assert_frame_equal(from_facts, from_records, check_exact=True)

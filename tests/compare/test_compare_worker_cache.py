"""The compare worker with the database's embedding cache, process ranges and shards.

Real storage (SQLite file and PostgreSQL), pairs from the storage factories, the hashing
encoder or a counting one through the :class:`Encoder` seam; MiniLM for the bit-for-bit
check of cached scores. Multi-process passes spawn real processes.
"""

from __future__ import annotations

from typing import Any

import pytest

from shadoweval.application.scoring import (
    ScoringOptions,
    score_stored_run_in_processes,
    split_ranges,
)
from shadoweval.compare.encoders import HashingEncoder, MiniLMEncoder
from shadoweval.compare.worker import run_compare, shard_of
from shadoweval.errors import ConfigError, ShadowEvalError
from shadoweval.records import PairScore
from shadoweval.storage import Repository
from tests.compare.test_compare_similarity import CountingEncoder
from tests.storage.factories import BASELINE, CANDIDATE, make_exchange, make_outcome

HASHING = ScoringOptions(encoder="hashing")


def seed(repo: Repository, n: int = 12, *, identical_every: int = 4) -> str:
    """A run of ``n`` pairs; every ``identical_every``-th candidate repeats the baseline."""
    run_id = repo.create_run(
        name="cache", baseline=BASELINE, candidate=CANDIDATE, policy_hash="0" * 64,
        policy_yaml="version: 1\n",
    ).run_id  # fmt: skip
    exchanges = [
        make_exchange(i, text=f"baseline answer number {i % 5} " * (1 + i)) for i in range(n)
    ]
    repo.save_exchanges(run_id, exchanges)
    outcomes = []
    for i, e in enumerate(exchanges):
        outcome = make_outcome(run_id, e.exchange_id, text=f"candidate reply {i % 3} " * (2 + i))
        if i % identical_every == 0:  # the candidate answers exactly what was captured
            outcome = outcome.model_copy(update={"response": e.response})
        outcomes.append(outcome)
    repo.save_outcomes(outcomes)
    return run_id


def comparable(scores: list[PairScore]) -> list[dict[str, Any]]:
    return [s.model_dump(exclude={"scored_at"}) for s in scores]


def test_a_rescore_reads_every_text_from_the_cache_with_the_same_scores(
    repo: Repository,
) -> None:
    run_id = seed(repo)
    encoder = CountingEncoder(HashingEncoder(window_tokens=16))
    cold = run_compare(repo, run_id, encoder, batch_size=5)
    first = repo.load_pair_scores(run_id)
    assert cold.scored == 12
    assert cold.embedding_cache_hits == 0
    assert cold.embedding_cache_misses > 0
    assert repo.count_embeddings(encoder.cache_key) > 0
    warm_encoder = CountingEncoder(HashingEncoder(window_tokens=16))
    warm = run_compare(repo, run_id, warm_encoder, rescore=True, batch_size=5)
    assert warm_encoder.calls == 0
    assert warm.embedding_cache_misses == 0
    assert warm.embedding_cache_hits == cold.embedding_cache_misses
    assert comparable(repo.load_pair_scores(run_id)) == comparable(first)
    assert warm.as_dict()["embedding_cache"] == {"hits": warm.embedding_cache_hits, "misses": 0}


def test_with_the_cache_off_nothing_is_read_or_stored(repo: Repository) -> None:
    run_id = seed(repo)
    report = run_compare(repo, run_id, HashingEncoder(), embedding_cache=False)
    assert report.scored == 12
    assert (report.embedding_cache_hits, report.embedding_cache_misses) == (0, 0)
    assert repo.count_embeddings() == 0


def test_identical_pairs_are_not_embedded_through_the_worker(repo: Repository) -> None:
    run_id = seed(repo, n=4, identical_every=1)  # every pair identical
    encoder = CountingEncoder(HashingEncoder())
    report = run_compare(repo, run_id, encoder)
    assert encoder.calls == 0
    assert [s.similarity for s in repo.load_pair_scores(run_id)] == [1.0] * 4
    assert report.embedding_cache_misses == 0


def test_minilm_scores_from_the_cache_equal_uncached_ones_bit_for_bit(
    repo: Repository, minilm: MiniLMEncoder
) -> None:
    run_id = seed(repo, n=6)
    uncached = run_compare(repo, run_id, minilm, embedding_cache=False)
    plain = repo.load_pair_scores(run_id)
    storing = run_compare(repo, run_id, minilm, rescore=True)
    assert storing.embedding_cache_misses > 0
    cached = run_compare(repo, run_id, minilm, rescore=True)
    assert cached.embedding_cache_misses == 0
    assert cached.embedding_cache_hits > 0
    assert uncached.scored == cached.scored == 6
    assert comparable(repo.load_pair_scores(run_id)) == comparable(plain)
    assert minilm.cache_key.startswith("sentence-transformers/all-MiniLM-L6-v2@")
    assert minilm.cache_key.endswith(":torch-fp32-cpu")
    assert len(minilm.weights_sha256) == 64


def test_shards_cover_every_pair_exactly_once(repo: Repository) -> None:
    run_id = seed(repo, n=30)
    scored: list[str] = []
    for index in range(3):
        before = {s.exchange_id for s in repo.load_pair_scores(run_id)}
        report = run_compare(repo, run_id, HashingEncoder(), shard=(index, 3), batch_size=4)
        new = {s.exchange_id for s in repo.load_pair_scores(run_id)} - before
        assert report.scored == len(new)
        assert all(shard_of(e, 3) == index for e in new)
        scored.extend(new)
    assert sorted(scored) == sorted(f"ex-{i:05d}" for i in range(30))
    assert len(set(scored)) == 30


def test_an_out_of_range_shard_is_a_config_error(repo: Repository) -> None:
    run_id = seed(repo, n=2)
    with pytest.raises(ConfigError, match="shard 3/3 is out of range") as caught:
        run_compare(repo, run_id, HashingEncoder(), shard=(3, 3))
    assert caught.value.field == "shard"
    assert repo.load_pair_scores(run_id) == []


def test_split_ranges_are_contiguous_and_balanced() -> None:
    ids = [f"ex-{i:02d}" for i in range(7)]
    assert split_ranges(ids, 3) == [("ex-00", "ex-02"), ("ex-03", "ex-04"), ("ex-05", "ex-06")]
    assert split_ranges(ids[:2], 4) == [("ex-00", "ex-00"), ("ex-01", "ex-01")]
    assert split_ranges([], 2) == []


def test_two_worker_processes_give_the_same_scores_as_one(db_url: str, repo: Repository) -> None:
    run_id = seed(repo, n=20)
    one = score_stored_run_in_processes(db_url, run_id, HASHING, workers=1)
    single = comparable(repo.load_pair_scores(run_id))
    assert (one.scored, one.workers) == (20, 1)
    two = score_stored_run_in_processes(
        db_url,
        run_id,
        ScoringOptions(encoder="hashing", rescore=True, embedding_cache=False),
        workers=2,
    )
    assert (two.scored, two.workers) == (20, 2)  # each pair scored once: 20, not 40
    assert comparable(repo.load_pair_scores(run_id)) == single
    again = score_stored_run_in_processes(db_url, run_id, HASHING, workers=2)
    assert again.scored == 0  # nothing left unscored


def test_worker_processes_with_a_shard_score_only_that_shard(db_url: str, repo: Repository) -> None:
    run_id = seed(repo, n=16)
    report = score_stored_run_in_processes(db_url, run_id, HASHING, workers=2, shard=(1, 2))
    ids = {s.exchange_id for s in repo.load_pair_scores(run_id)}
    assert report.scored == len(ids) > 0
    assert all(shard_of(e, 2) == 1 for e in ids)


def test_a_failing_worker_process_is_reported_with_its_range_and_exit_code(
    db_url: str, repo: Repository
) -> None:
    run_id = seed(repo, n=4)
    with pytest.raises(ShadowEvalError) as caught:
        score_stored_run_in_processes(
            db_url, run_id, ScoringOptions(encoder="no-such-encoder"), workers=2
        )
    message = str(caught.value)
    assert "2 of 2 compare processes failed" in message
    assert "compare worker 1 of 2 (exchange ids ex-00000 … ex-00001) exited with code 1" in message
    assert "compare worker 2 of 2 (exchange ids ex-00002 … ex-00003) exited with code 1" in message
    assert "encoder 'no-such-encoder' is not known" in message


def test_in_memory_sqlite_is_refused_for_worker_processes() -> None:
    with pytest.raises(ConfigError, match="in-memory SQLite") as caught:
        score_stored_run_in_processes("sqlite://", "r", HASHING, workers=2)
    assert caught.value.field == "database_url"

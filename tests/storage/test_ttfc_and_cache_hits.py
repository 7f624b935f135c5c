"""TTFC and cache hits in storage (SQLite and PostgreSQL): records round-trip with them,
the scalar columns copy them, a cached pair carries the ``cache_hit`` flag (so the samples
page and the export filter by it), and migration 0005 goes down and up again over stored
rows."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from shadoweval.pair_flags import PairFlag
from shadoweval.records import HeaderPair, ReplayOutcome, Timings, TimingSource
from shadoweval.storage import Database, Repository, SampleFilter, head_revision
from shadoweval.storage.database import alembic_config

from .factories import BASELINE, CANDIDATE, as_stored, make_exchange, make_outcome, make_pair_score

CACHED = (HeaderPair(name="x-cache", value="HIT"), HeaderPair(name="age", value="12"))


def _run(repo: Repository) -> str:
    return repo.create_run(
        run_id="run-cache",
        name="cache",
        baseline=BASELINE,
        candidate=CANDIDATE,
        policy_hash="sha256:p",
        policy_yaml="",
    ).run_id


def _cached_outcome(run_id: str, exchange_id: str) -> ReplayOutcome:
    outcome = make_outcome(run_id, exchange_id)
    assert outcome.response is not None
    return outcome.model_copy(
        update={
            "response": outcome.response.model_copy(
                update={"cache_hit": True, "cache_hit_headers": CACHED}
            ),
            "timings": Timings(
                ttft_ms=55.5, ttfc_ms=480.0, e2e_ms=900.25, source=TimingSource.MEASURED
            ),
        }
    )


def test_ttfc_and_cache_hits_round_trip_into_their_columns(
    database: Database, repo: Repository
) -> None:
    run_id = _run(repo)
    plain = make_exchange(1)
    assert plain.response is not None
    cached = make_exchange(2)
    assert cached.response is not None
    cached = cached.model_copy(
        update={
            "response": cached.response.model_copy(
                update={"cache_hit": True, "cache_hit_headers": CACHED[:1]}
            ),
            "timings": cached.timings.model_copy(update={"ttfc_ms": 377.5}),
        }
    )
    repo.save_exchanges(run_id, [plain, cached])
    outcome = _cached_outcome(run_id, cached.exchange_id)
    uncached = make_outcome(run_id, plain.exchange_id)
    repo.save_outcomes([outcome, uncached])

    assert repo.get_exchange(cached.exchange_id) == cached
    assert repo.get_exchange(plain.exchange_id) == plain
    loaded = {o.exchange_id: o for o in repo.load_outcomes(run_id)}
    assert loaded[cached.exchange_id] == as_stored(outcome)
    assert loaded[cached.exchange_id].timings.ttfc_ms == 480.0
    assert loaded[cached.exchange_id].response.cache_hit_headers == CACHED  # type: ignore[union-attr]

    with database.connect() as conn:
        exchanges: dict[str, bool] = dict(
            conn.execute(sa.text("SELECT exchange_id, cache_hit FROM exchange")).all()
        )
        outcomes = {
            row.exchange_id: (row.ttfc_ms, row.cache_hit)
            for row in conn.execute(
                sa.text("SELECT exchange_id, ttfc_ms, cache_hit FROM replay_outcome")
            )
        }
    assert exchanges == {plain.exchange_id: False, cached.exchange_id: True}
    assert outcomes == {cached.exchange_id: (480.0, True), plain.exchange_id: (None, False)}


def test_migration_0005_down_and_up_over_stored_rows(empty_url: str) -> None:
    """Rows written at 0004 read ``cache_hit`` false and ``ttfc_ms`` NULL after the upgrade;
    a downgrade drops the columns and keeps the rows (their records keep everything)."""
    db = Database(empty_url)
    try:
        db.upgrade("0004")
        assert db.current_revision() == "0004"
        repo = Repository(db)
        run_id = _run(repo)
        old = make_exchange(1)
        record = old.model_dump(mode="json")
        outcome = make_outcome(run_id, old.exchange_id).model_dump(mode="json")
        with db.connect() as conn:
            conn.execute(
                sa.table(
                    "exchange",
                    *(sa.column(c) for c in ("exchange_id", "captured_at", "task_type")),
                    *(sa.column(c) for c in ("route", "outcome", "source")),
                    sa.column("record", sa.JSON()),
                ).insert(),
                [
                    {
                        "exchange_id": old.exchange_id,
                        "captured_at": old.captured_at,
                        "task_type": old.task_type,
                        "route": old.route,
                        "outcome": old.outcome.value,
                        "source": old.source,
                        "record": record,
                    }
                ],
            )
            conn.execute(
                sa.table(
                    "replay_outcome",
                    *(sa.column(c) for c in ("run_id", "exchange_id", "target", "attempt")),
                    *(sa.column(c) for c in ("error_kind", "warmup", "replayed_at")),
                    *(sa.column(c) for c in ("e2e_ms", "ttft_ms")),
                    sa.column("record", sa.JSON()),
                ).insert(),
                [
                    {
                        "run_id": run_id,
                        "exchange_id": old.exchange_id,
                        "target": "candidate",
                        "attempt": 1,
                        "error_kind": None,
                        "warmup": False,
                        "replayed_at": old.captured_at,
                        "e2e_ms": 900.25,
                        "ttft_ms": 55.5,
                        "record": outcome,
                    }
                ],
            )
        db.upgrade()
        assert db.current_revision() == head_revision()
        assert db.schema_diff() == []
        with db.connect() as conn:
            assert not conn.execute(sa.text("SELECT cache_hit FROM exchange")).scalar_one()
            row = conn.execute(sa.text("SELECT ttfc_ms, cache_hit FROM replay_outcome")).one()
        assert (row.ttfc_ms, row.cache_hit) == (None, False)
        assert repo.get_exchange(old.exchange_id) == old
        new = make_exchange(2)
        repo.save_exchanges(run_id, [new])
        repo.save_outcomes([_cached_outcome(run_id, new.exchange_id)])

        with db.connect() as conn:
            command.downgrade(alembic_config(conn), "0004")
        assert db.current_revision() == "0004"
        columns = {
            table: {c["name"] for c in sa.inspect(db.engine).get_columns(table)}
            for table in ("exchange", "replay_outcome")
        }
        assert "cache_hit" not in columns["exchange"]
        assert not {"cache_hit", "ttfc_ms"} & columns["replay_outcome"]
        with db.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM replay_outcome")).scalar_one() == 2

        db.upgrade()
        assert db.schema_diff() == []
        loaded = {o.exchange_id: o for o in repo.load_outcomes(run_id)}
        assert loaded[new.exchange_id] == as_stored(_cached_outcome(run_id, new.exchange_id))
        with db.connect() as conn:
            # The re-added columns start from their defaults; the records still hold it all.
            flags = conn.execute(sa.text("SELECT cache_hit FROM replay_outcome")).scalars().all()
        assert flags == [False, False]
    finally:
        db.dispose()


def test_a_cached_pair_is_flagged_and_filtered_by_its_flag(repo: Repository) -> None:
    run_id = _run(repo)
    exchanges = [make_exchange(i) for i in (1, 2, 3)]
    repo.save_exchanges(run_id, exchanges)
    scores = [
        make_pair_score(run_id, exchanges[0]),
        make_pair_score(run_id, exchanges[1]).model_copy(update={"baseline_cache_hit": True}),
        make_pair_score(run_id, exchanges[2]).model_copy(update={"candidate_cache_hit": True}),
    ]
    repo.save_pair_scores(scores)
    page = repo.sample_page(run_id, SampleFilter(flags=(PairFlag.CACHE_HIT,)))
    assert sorted(s.exchange_id for s in page.samples) == [
        exchanges[1].exchange_id,
        exchanges[2].exchange_id,
    ]
    assert all(PairFlag.CACHE_HIT in s.flags for s in page.samples)

"""Every record type comes back from the database equal (``==``) to what was stored."""

from __future__ import annotations

from datetime import UTC, timedelta, timezone

from shadoweval.records import (
    Exchange,
    ExchangeOutcome,
    ReplayErrorKind,
    ReplayTarget,
    RequestRecord,
)
from shadoweval.storage import Repository

from .factories import (
    BASELINE,
    CANDIDATE,
    T0,
    as_stored,
    make_exchange,
    make_outcome,
    make_pair_score,
)
from .factories import make_verdict as verdict_of

TOKYO = timezone(timedelta(hours=9))


def _run(repo: Repository) -> str:
    return repo.create_run(
        run_id="run-ü",
        name="Ünïcödé run 🧪",
        baseline=BASELINE,
        candidate=CANDIDATE,
        policy_hash="sha256:policy",
        policy_yaml="alpha: 0.05\n",
    ).run_id


def test_every_record_round_trips(repo: Repository) -> None:
    run_id = _run(repo)
    exchange = make_exchange(1)
    minimal = Exchange(
        exchange_id="ex-minimal",
        captured_at=T0.astimezone(TOKYO),
        request=RequestRecord(body="\x7f\u00ff", body_encoding="utf-8"),
        outcome=ExchangeOutcome.CANCELLED,
        baseline_model=BASELINE,
    )
    binary = Exchange(
        exchange_id="ex-binary",
        captured_at=T0 + timedelta(microseconds=1),
        request=RequestRecord(body="AAEC/w==", body_encoding="base64"),
        baseline_model=BASELINE,
    )
    repo.save_exchanges(run_id, [exchange, minimal, binary])
    for original in (exchange, minimal, binary):
        loaded = repo.get_exchange(original.exchange_id)
        assert loaded == original
        assert loaded is not None
        assert loaded.captured_at.utcoffset() is not None
    loaded_binary = repo.get_exchange("ex-binary")
    assert loaded_binary is not None
    assert loaded_binary.request.body_bytes() == b"\x00\x01\x02\xff"

    candidate = make_outcome(run_id, exchange.exchange_id, replayed_at=T0.astimezone(TOKYO))
    repeat = make_outcome(
        run_id,
        exchange.exchange_id,
        target=ReplayTarget.BASELINE_REPEAT,
        error_kind=ReplayErrorKind.DECODE,
    )
    repo.save_outcomes([candidate, repeat])
    assert repo.load_outcomes(run_id, ReplayTarget.CANDIDATE) == [as_stored(candidate)]
    assert repo.load_outcomes(run_id, ReplayTarget.BASELINE_REPEAT) == [as_stored(repeat)]
    ((ex, cand, rep),) = next(repo.iter_pair_inputs(run_id))
    assert (ex, cand, rep) == (exchange, as_stored(candidate), as_stored(repeat))

    score = make_pair_score(run_id, exchange)
    repo.save_pair_scores([score])
    assert repo.load_pair_scores(run_id) == [score]

    verdict = verdict_of(run_id, decided_at=T0.astimezone(TOKYO))
    repo.save_verdict(verdict, command="shadow-eval gate 🚦")
    assert repo.latest_verdict(run_id) == verdict
    (entry,) = repo.verdict_history(run_id)
    assert entry.verdict == verdict
    assert entry.command == "shadow-eval gate 🚦"

    run = repo.get_run(run_id)
    assert run is not None
    assert run.name == "Ünïcödé run 🧪"
    assert (run.baseline, run.candidate) == (BASELINE, CANDIDATE)


def test_timestamp_columns_are_utc_and_ordered_across_offsets(repo: Repository) -> None:
    run_id = _run(repo)
    # 10:00 in Tokyo is 01:00 UTC: earlier than 02:00 UTC although "10" > "02".
    tokyo = make_exchange(1, captured_at=T0.replace(hour=10, tzinfo=TOKYO))
    utc = make_exchange(2, captured_at=T0.replace(hour=2, tzinfo=UTC))
    repo.save_exchanges(run_id, [utc, tokyo])
    repo.save_pair_scores([make_pair_score(run_id, utc), make_pair_score(run_id, tokyo)])
    assert [s.exchange_id for s in repo.load_pair_scores(run_id)] == ["ex-00001", "ex-00002"]
    with repo.database.session() as session:
        from shadoweval.storage.models import ExchangeRow

        row = session.get(ExchangeRow, "ex-00001")
        assert row is not None
        assert row.captured_at == tokyo.captured_at
        assert row.captured_at.tzinfo is UTC


def test_nul_characters_in_record_text(repo: Repository) -> None:
    """JSONB cannot hold U+0000: PostgreSQL stores U+FFFD, SQLite keeps it exactly."""
    run_id = _run(repo)
    exchange = make_exchange(1, text="before\x00after \\u0000 literal")
    repo.save_exchanges(run_id, [exchange])
    loaded = repo.get_exchange(exchange.exchange_id)
    assert loaded is not None
    assert loaded.response is not None
    if repo.database.dialect == "postgresql":
        assert loaded.response.text == "before\ufffdafter \\u0000 literal #1"
    else:
        assert loaded == exchange

"""shadoweval.export.canary_ratings: a ratings file → ratings, every bad row kept with its
reason."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import orjson
import pandas as pd
import pytest

from shadoweval.errors import ConfigError
from shadoweval.export.canary_ratings import read_canary_ratings

AT = datetime(2026, 12, 1, tzinfo=UTC)
OBSERVED = frozenset({"ex-1", "ex-2", "ex-3"})


def _read(path: Path, rater: str = "ana"):
    return read_canary_ratings(
        path, canary_id="c-1", observed=OBSERVED, rater=rater, clock=lambda: AT
    )


def test_ratings_are_read_and_each_bad_row_is_kept_with_its_reason(tmp_path: Path) -> None:
    path = tmp_path / "ratings.csv"
    path.write_text(
        "exchange_id,rating,rater,note\n"
        "ex-1,8,,fine\n"
        "ex-2,2.5,bo,wrong answer\n"
        "ex-3,,,\n"
        "ex-9,5,,\n"
        "ex-1,11,,\n"
        "ex-1,high,,\n"
        ",4,,\n"
        "ex-1,9,,\n",
        encoding="utf-8",
    )
    read = _read(path)
    assert [(r.exchange_id, r.rater, r.rating, r.note) for r in read.ratings] == [
        ("ex-1", "ana", 8.0, "fine"),
        ("ex-2", "bo", 2.5, "wrong answer"),
    ]
    assert all(r.rated_at == AT and r.canary_id == "c-1" for r in read.ratings)
    assert read.unrated == 1
    reasons = [(row.location, row.reason) for row in read.rejected]
    assert reasons == [
        ("ratings.csv:5", "unknown_exchange_id"),
        ("ratings.csv:6", "bad_rating"),
        ("ratings.csv:7", "bad_rating"),
        ("ratings.csv:8", "missing_exchange_id"),
        ("ratings.csv:9", "duplicate_exchange_id"),
    ]
    assert "rating '11' is not a number from 1 to 10" in read.rejected[1].detail
    assert "'ex-9'" in read.rejected[0].detail


def test_jsonl_and_parquet_read_the_same(tmp_path: Path) -> None:
    rows = [{"exchange_id": "ex-1", "rating": 3}, {"exchange_id": "ex-2", "rating": 10}]
    jsonl = tmp_path / "r.jsonl"
    jsonl.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    parquet = tmp_path / "r.parquet"
    pd.DataFrame(rows).to_parquet(parquet)
    for path in (jsonl, parquet):
        assert [(r.exchange_id, r.rating) for r in _read(path).ratings] == [
            ("ex-1", 3.0),
            ("ex-2", 10.0),
        ]


def test_a_file_without_a_rating_column_or_rater_names_it(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    path.write_text("exchange_id,score\nex-1,3\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="no 'rating' column"):
        _read(path)
    with pytest.raises(ConfigError, match="--rater must not be empty"):
        _read(path, rater=" ")
    with pytest.raises(ConfigError, match="txt"):
        _read(tmp_path / "r.txt")

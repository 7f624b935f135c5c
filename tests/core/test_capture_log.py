"""The capture-log format: JSONL segments, optional gzip, every line accounted for."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest

from shadoweval.capture_log import CaptureLogWriter, decode_exchange_line, read_capture_log
from shadoweval.errors import RecordDecodeError
from shadoweval.records import Exchange, ModelIdentity, RequestRecord, ResponseRecord


def exchange(i: int, text: str = "réponse 🙂") -> Exchange:
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": f"q{i}"}]})
    return Exchange(
        task_type="chat",
        request=RequestRecord(body=body.decode()),
        response=ResponseRecord(status_code=200, text=f"{text} {i}"),
        baseline_model=ModelIdentity(name="m"),
    )


@pytest.mark.parametrize("compress", [False, True])
def test_round_trip_in_order_with_rotation(tmp_path: Path, compress: bool) -> None:
    items = [exchange(i) for i in range(50)]
    with CaptureLogWriter(tmp_path / "log", compress=compress, max_segment_bytes=2_000) as w:
        for item in items:
            w.write(item)
    assert len(w.segments) > 3
    assert w.records_written == 50
    entries = list(read_capture_log(tmp_path / "log"))
    assert [e.exchange for e in entries] == items
    assert all(e.error is None for e in entries)
    # a single segment file is a capture log too
    first = list(read_capture_log(w.segments[0]))
    assert first[0].exchange == items[0]


def test_gzip_is_detected_by_content_not_name(tmp_path: Path) -> None:
    line = orjson.dumps(exchange(1).model_dump(mode="json")) + b"\n"
    path = tmp_path / "plain-name.jsonl"
    path.write_bytes(gzip.compress(line))
    assert [e.exchange for e in read_capture_log(path)] == [exchange_from(line)]


def exchange_from(line: bytes) -> Exchange:
    return decode_exchange_line(line.decode())


def test_bad_lines_are_reported_with_location_and_reason_never_skipped(tmp_path: Path) -> None:
    good = orjson.dumps(exchange(1).model_dump(mode="json")).decode()
    future = orjson.loads(good)
    future["schema_version"] = 99
    missing = orjson.loads(good)
    del missing["request"]
    lines = [
        good,
        "{not json",
        orjson.dumps(future).decode(),
        "",
        orjson.dumps(missing).decode(),
        "[1]",
    ]
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    entries = list(read_capture_log(path))
    assert len(entries) == 5  # the blank line is not a record
    assert entries[0].exchange is not None
    reasons = [(e.location, e.error.reason) for e in entries[1:] if e.error is not None]
    assert reasons == [
        ("log.jsonl:2", "invalid_json"),
        ("log.jsonl:3", "schema_version"),
        ("log.jsonl:5", "schema"),
        ("log.jsonl:6", "schema"),
    ]
    assert "request" in str(entries[3].error)
    assert entries[1].raw == "{not json"


def test_a_segment_cut_mid_record_yields_what_it_can_and_a_truncation_entry(
    tmp_path: Path,
) -> None:
    data = b"".join(orjson.dumps(exchange(i).model_dump(mode="json")) + b"\n" for i in range(20))
    packed = gzip.compress(data)
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(packed[: len(packed) * 2 // 3])
    entries = list(read_capture_log(path))
    assert entries[-1].error is not None
    assert entries[-1].error.reason in ("truncated_segment", "invalid_json")
    assert all(e.exchange is not None for e in entries[:-1])


def test_writers_never_overwrite_each_other(tmp_path: Path) -> None:
    with CaptureLogWriter(tmp_path) as a, CaptureLogWriter(tmp_path) as b:
        a.write(exchange(1))
        b.write(exchange(2))
    assert len(set(a.segments + b.segments)) == 2
    assert len(list(read_capture_log(tmp_path))) == 2


def test_missing_log_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="capture log not found"):
        list(read_capture_log(tmp_path / "nope"))


def test_decode_error_is_a_record_decode_error() -> None:
    with pytest.raises(RecordDecodeError) as info:
        decode_exchange_line("{}", "x:1")
    assert info.value.reason == "schema_version"
    assert info.value.location == "x:1"

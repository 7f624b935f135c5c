"""The capture-log format: JSONL segments, optional gzip, every line accounted for."""

from __future__ import annotations

import base64
import gzip
from pathlib import Path

import orjson
import pytest
from pydantic import ValidationError
from ulid import ULID

from shadoweval.capture_log import (
    CaptureLogWriter,
    content_exchange_id,
    decode_exchange_line,
    read_capture_log,
    read_segment_from,
)
from shadoweval.errors import RecordDecodeError
from shadoweval.records import (
    STORED,
    Exchange,
    ModelIdentity,
    RequestRecord,
    ResponseRecord,
)


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
    assert len(entries) == 6  # one entry per line: the blank line too
    assert entries[0].exchange is not None
    reasons = [(e.location, e.error.reason) for e in entries[1:] if e.error is not None]
    assert reasons == [
        ("log.jsonl:2", "invalid_json"),
        ("log.jsonl:3", "schema_version"),
        ("log.jsonl:4", "blank_line"),
        ("log.jsonl:5", "schema"),
        ("log.jsonl:6", "schema"),
    ]
    assert "request" in str(entries[4].error)
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


# ------------------------------------------------------- issue 13: the reader's defects


def line_of(exchange_: Exchange, **changes: object) -> dict[str, object]:
    """The JSON object of ``exchange_``'s line with top-level ``changes`` (``...``: drop)."""
    payload: dict[str, object] = exchange_.model_dump(mode="json")
    for key, value in changes.items():
        if value is ...:
            payload.pop(key, None)
        else:
            payload[key] = value
    return payload


def write_lines(path: Path, *payloads: object, prefix: bytes = b"") -> Path:
    data = b"".join((p if isinstance(p, bytes) else orjson.dumps(p)) + b"\n" for p in payloads)
    path.write_bytes(prefix + data)
    return path


@pytest.mark.parametrize("compress", [False, True])
def test_a_byte_order_mark_at_the_start_of_a_segment_is_not_part_of_line_1(
    tmp_path: Path, compress: bool
) -> None:
    data = b"\xef\xbb\xbf" + orjson.dumps(exchange(1).model_dump(mode="json")) + b"\n"
    path = tmp_path / "bom.jsonl"
    path.write_bytes(gzip.compress(data) if compress else data)
    (entry,) = read_capture_log(path)
    assert entry.error is None
    assert entry.exchange == exchange_from(data[3:])


@pytest.mark.parametrize(
    ("timings", "field", "shown"),
    [
        ({"e2e_ms": -41.5, "source": "recorded"}, "timings.e2e_ms", "-41.5"),
        ({"ttft_ms": -0.001}, "timings.ttft_ms", "-0.001"),
        ({"ttfb_ms": "-inf"}, "timings.ttfb_ms", "-inf"),
        ({"tpot_ms": "NaN"}, "timings.tpot_ms", "nan"),
        (
            {"itl": {"count": 3, "mean_ms": 1, "p50_ms": 1, "p95_ms": -2, "p99_ms": 1,
                     "max_ms": 1}},
            "timings.itl.p95_ms",
            "-2",
        ),
    ],
)  # fmt: skip
def test_a_negative_or_non_finite_duration_is_rejected_naming_the_field_and_value(
    tmp_path: Path, timings: dict[str, object], field: str, shown: str
) -> None:
    path = write_lines(tmp_path / "t.jsonl", line_of(exchange(1), timings=timings))
    (entry,) = read_capture_log(path)
    assert entry.exchange is None
    assert entry.error is not None
    assert entry.error.reason == "schema"
    message = str(entry.error)
    assert message.startswith("t.jsonl:1: ")
    assert f"field {field!r}" in message
    assert shown in message


def test_negative_token_counts_and_huge_integers_are_rejected(tmp_path: Path) -> None:
    usage = {"prompt_tokens": -3, "usage_source": "reported"}
    response = exchange(1).response.model_dump(mode="json") | {"usage": usage}  # type: ignore[union-attr]
    path = write_lines(
        tmp_path / "u.jsonl",
        line_of(exchange(1), response=response),
        line_of(exchange(2), monotonic_start_ns="9" * 40),
    )
    first, second = read_capture_log(path)
    assert "field 'response.usage.prompt_tokens'" in str(first.error)
    assert "-3" in str(first.error)
    assert "field 'monotonic_start_ns'" in str(second.error)
    assert "64 bits" in str(second.error)


@pytest.mark.parametrize("task_type", ["", " ", "\t", "\u200b", " \ufeff"])
def test_a_blank_task_type_is_rejected_not_stored(tmp_path: Path, task_type: str) -> None:
    path = write_lines(tmp_path / "b.jsonl", line_of(exchange(1), task_type=task_type))
    (entry,) = read_capture_log(path)
    assert entry.error is not None
    assert entry.error.reason == "schema"
    assert "field 'task_type': task_type must not be blank" in str(entry.error)
    assert repr(task_type) in str(entry.error)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("exchange_id", ""),
        ("exchange_id", "two words"),
        ("exchange_id", "nul\x00"),
        ("exchange_id", "x" * 201),
        ("task_type", "chat\x00"),
        ("route", "/v1/chat/completions\n"),
        ("source", "sidecar:\x00"),
    ],
)
def test_ids_and_labels_that_a_database_cannot_hold_are_rejected(
    tmp_path: Path, field: str, value: str
) -> None:
    path = write_lines(tmp_path / "i.jsonl", line_of(exchange(1), **{field: value}))
    (entry,) = read_capture_log(path)
    assert entry.error is not None
    assert f"field {field!r}" in str(entry.error)


def test_a_line_without_exchange_id_gets_the_same_content_id_on_every_read(
    tmp_path: Path,
) -> None:
    """Issue 13: such a line got a new random id on each read, so a resumed run replayed
    it again (921 → 925 exchanges)."""
    base = exchange(1)
    payload = line_of(base, exchange_id=...)
    reordered = dict(reversed(list(payload.items())))
    other = line_of(exchange(2), exchange_id=...)
    path = write_lines(
        tmp_path / "noid.jsonl",
        payload,
        orjson.dumps(reordered, option=orjson.OPT_INDENT_2).replace(b"\n", b" "),
        line_of(base, exchange_id=None),
        other,
    )
    first = [e.exchange for e in read_capture_log(path)]
    second = [e.exchange for e in read_capture_log(path)]
    assert all(e is not None for e in first)
    ids = [e.exchange_id for e in first if e is not None]
    assert ids == [e.exchange_id for e in second if e is not None]  # every read the same
    assert ids[0] == ids[1] == ids[2]  # key order, spacing and a null id do not matter
    assert ids[3] != ids[0]  # other content, other id
    assert ids[0] == content_exchange_id(payload, base.captured_at)
    ulid = ULID.from_str(ids[0])
    assert ulid.milliseconds == int(base.captured_at.timestamp() * 1000)  # sorts by time
    assert first[0] == base.model_copy(update={"exchange_id": ids[0]})


def test_a_line_without_captured_at_is_rejected(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "c.jsonl",
        line_of(exchange(1), captured_at=...),
        line_of(exchange(2), captured_at=None),
        line_of(exchange(3), exchange_id=..., captured_at="yesterday"),
    )
    entries = list(read_capture_log(path))
    assert [e.error.reason if e.error else None for e in entries] == ["schema"] * 3
    assert "field 'captured_at' is missing" in str(entries[0].error)
    assert "field 'captured_at'" in str(entries[2].error)
    assert "yesterday" in str(entries[2].error)


def test_white_space_only_lines_are_kept_as_blank_line_entries(tmp_path: Path) -> None:
    good = orjson.dumps(exchange(1).model_dump(mode="json"))
    path = write_lines(tmp_path / "w.jsonl", good, b"", b"   ", b"\t", good.replace(b"q1", b"q2"))
    entries = list(read_capture_log(path))
    assert [(e.location, e.error.reason if e.error else "ok") for e in entries] == [
        ("w.jsonl:1", "ok"),
        ("w.jsonl:2", "blank_line"),
        ("w.jsonl:3", "blank_line"),
        ("w.jsonl:4", "blank_line"),
        ("w.jsonl:5", "ok"),
    ]
    assert entries[2].raw == "   "
    assert "blank line" in str(entries[2].error)


@pytest.mark.parametrize("compress", [False, True])
def test_a_line_with_bytes_that_are_not_utf8_is_rejected_not_replaced(
    tmp_path: Path, compress: bool
) -> None:
    """Found by the trial: the reader decoded with ``errors="replace"``, so a prompt with a
    stray byte was stored and replayed as a prompt nobody sent (and a task type
    ``\ufffdstem`` became a gate unit of its own)."""
    good = orjson.dumps(exchange(1).model_dump(mode="json"))
    bad_prompt = good.replace(b"q1", b"\xff\xfeq1")
    bad_type = orjson.dumps(line_of(exchange(2), task_type="stem")).replace(
        b'"stem"', b'"\xffstem"'
    )
    path = write_lines(tmp_path / "u.jsonl", good, bad_prompt, bad_type)
    if compress:
        path.write_bytes(gzip.compress(path.read_bytes()))
    entries = list(read_capture_log(path))
    assert [(e.location, e.error.reason if e.error else "ok") for e in entries] == [
        ("u.jsonl:1", "ok"),
        ("u.jsonl:2", "invalid_utf8"),
        ("u.jsonl:3", "invalid_utf8"),
    ]
    assert "not valid UTF-8 (byte 0xFF at character" in str(entries[1].error)
    assert "\ufffd" in entries[1].raw  # the kept raw text is storable
    assert not any("\udcff" in e.raw for e in entries)


@pytest.mark.parametrize("version", [True, 1.0, "1"])
def test_schema_version_must_be_the_integer_1(tmp_path: Path, version: object) -> None:
    path = write_lines(tmp_path / "v.jsonl", line_of(exchange(1), schema_version=version))
    (entry,) = read_capture_log(path)
    assert entry.error is not None
    assert entry.error.reason == "schema_version"


def test_a_base64_body_that_does_not_decode_is_rejected_when_the_line_is_decoded(
    tmp_path: Path,
) -> None:
    """Issue 13: such a line passed validation and crashed ``replay run`` later."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    encoded = base64.b64encode(orjson.dumps(body)).decode()
    base = exchange(1).model_dump(mode="json")

    def with_body(text: str) -> dict[str, object]:
        request = dict(base["request"]) | {"body": text, "body_encoding": "base64"}
        return base | {"request": request}

    path = write_lines(
        tmp_path / "b64.jsonl",
        with_body(encoded),
        with_body("eyJtb2RlbCI6Im0i"[:-1]),  # cut: not a multiple of 4
        with_body("not base64 at all!"),
        with_body(encoded[:8] + "\n" + encoded[8:]),  # white space inside
    )
    good, *bad = read_capture_log(path)
    assert good.exchange is not None
    assert good.exchange.request.json_body() == body
    for entry in bad:
        assert entry.error is not None, entry
        assert entry.error.reason == "schema"
        assert "request.body is not valid base64" in str(entry.error)


def test_stored_records_are_read_back_without_the_value_rules() -> None:
    """A record stored before a rule existed stays readable (shape still checked)."""
    payload = exchange(1).model_dump(mode="json") | {"task_type": ""}
    payload["timings"] = {"e2e_ms": -5.0}
    with pytest.raises(ValidationError):
        Exchange.model_validate(payload)
    stored = Exchange.model_validate(payload, context=STORED)
    assert (stored.task_type, stored.timings.e2e_ms) == ("", -5.0)
    with pytest.raises(ValidationError):
        Exchange.model_validate(payload | {"request": "not an object"}, context=STORED)


def test_a_segment_reads_on_from_a_byte_offset(tmp_path: Path) -> None:
    """read_segment_from: each complete line with the offset past it; a BOM at 0 skipped;
    a last line without its newline held back; the entries equal read_capture_log's."""
    exchanges = [exchange(i) for i in range(3)]
    lines = [ex.model_dump_json().encode() + b"\n" for ex in exchanges]
    segment = tmp_path / "capture-000001.jsonl"
    segment.write_bytes(b"\xef\xbb\xbf" + lines[0] + b"\n" + lines[1] + lines[2][:30])
    read = list(read_segment_from(segment))
    assert [entry.location for entry, _ in read] == [
        "capture-000001.jsonl:1",
        "capture-000001.jsonl:2",
        "capture-000001.jsonl:3",
    ]
    assert read[0][0].exchange == exchanges[0]
    assert read[1][0].error is not None
    assert read[1][0].error.reason == "blank_line"
    end = read[-1][1]
    assert end == 3 + len(lines[0]) + 1 + len(lines[1])
    with segment.open("ab") as fh:
        fh.write(lines[2][30:])
    (resumed,) = list(read_segment_from(segment, start_byte=end, start_line=3))
    assert resumed[0].location == "capture-000001.jsonl:4"
    assert resumed[0].exchange == exchanges[2]
    assert resumed[1] == segment.stat().st_size
    whole = [e.exchange for e in read_capture_log(segment)]
    assert whole == [read[0][0].exchange, None, read[2][0].exchange, resumed[0].exchange]


def test_a_gzip_segment_cannot_be_read_from_an_offset(tmp_path: Path) -> None:
    segment = tmp_path / "capture-000001.jsonl.gz"
    segment.write_bytes(gzip.compress(exchange(0).model_dump_json().encode() + b"\n"))
    with pytest.raises(ValueError, match="gzip-compressed"):
        list(read_segment_from(segment))

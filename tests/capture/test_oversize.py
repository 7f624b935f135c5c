"""Oversize exchanges: raw body dropped, else offloaded to a one-line capture log with a
stub sent instead, else dropped with a reason — never an endless shrink loop.

``make_exchange``/``payload_of``/``built_of`` are the exchange factory of the capture-sink
tests (``test_kafka_sink``, ``test_file_sink`` import them).
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from shadoweval.capture.sinks.base import BuiltExchange
from shadoweval.capture.sinks.oversize import OversizeHandler, message_limit_bytes
from shadoweval.capture_log import read_capture_log
from shadoweval.records import (
    Exchange,
    FinishReason,
    HeaderPair,
    ModelIdentity,
    RequestRecord,
    ResponseRecord,
    Timings,
    TimingSource,
    ToolCall,
    Usage,
    UsageSource,
)
from shadoweval.testing.full_disk import FullDisk


def make_exchange(
    i: int = 0,
    *,
    prompt: str = "Say hi.",
    raw_body: str | None = None,
    text: str = "Hi!",
    session: str | None = None,
    error_message: str | None = None,
) -> Exchange:
    """A streamed chat exchange as the sidecar builds it; ``i`` goes into the prompt."""
    body = orjson.dumps(
        {"model": "baseline-v1", "messages": [{"role": "user", "content": f"{i}: {prompt}"}]}
    ).decode()
    return Exchange(
        task_type="chat",
        session_key_hash=session,
        request=RequestRecord(
            body=body, headers=(HeaderPair(name="content-type", value="application/json"),)
        ),
        response=ResponseRecord(
            status_code=200,
            body=raw_body,
            streamed=True,
            model="baseline-v1",
            text=text,
            tool_calls=(ToolCall(index=0, name="lookup", arguments='{"q": 1}'),),
            finish_reason_raw="stop",
            finish_reason=FinishReason.STOP,
            usage=Usage(
                prompt_tokens=9,
                completion_tokens=3,
                total_tokens=12,
                usage_source=UsageSource.REPORTED,
            ),
            error_message=error_message,
        ),
        timings=Timings(
            ttfb_ms=10.0, ttft_ms=12.5, e2e_ms=80.0, tpot_ms=33.75, source=TimingSource.MEASURED
        ),
        baseline_model=ModelIdentity(name="baseline-v1", tokenizer_hash="tok"),
        source="sidecar:test",
    )


def payload_of(exchange: Exchange) -> bytes:
    """The capture-log line of ``exchange`` (no newline)."""
    return orjson.dumps(exchange.model_dump(mode="json"))


def built_of(exchange: Exchange, key: bytes | None = None) -> BuiltExchange:
    """``exchange`` as the sinks receive it (key: the session hash, else the id)."""
    if key is None:
        key = (exchange.session_key_hash or exchange.exchange_id).encode()
    return BuiltExchange(exchange.exchange_id, key, payload_of(exchange))


LIMIT = 4_000


def assert_stub_of(stub: Exchange, original: Exchange) -> None:
    """Same identity, timings, usage, outcome and models; bodies and outputs removed."""
    keep = ("exchange_id", "captured_at", "route", "task_type", "session_key_hash", "timings")
    for field in (*keep, "outcome", "baseline_model", "source"):
        assert getattr(stub, field) == getattr(original, field), field
    assert stub.request.body == ""
    assert stub.request.path == original.request.path
    assert stub.response is not None
    assert original.response is not None
    assert stub.response.usage == original.response.usage
    assert stub.response.model == original.response.model
    assert stub.response.finish_reason == original.response.finish_reason
    assert stub.response.status_code == original.response.status_code
    assert (stub.response.text, stub.response.body, stub.response.tool_calls) == (None, None, ())


def test_message_limit_leaves_headroom_for_key_and_headers() -> None:
    assert message_limit_bytes(1_000_000, b"k" * 26, 15) == 1_000_000 - 512 - 26 - 15


def test_small_payload_is_sent_as_is(tmp_path: Path) -> None:
    payload = payload_of(make_exchange())
    result = OversizeHandler(LIMIT, tmp_path).fit(payload)
    assert (result.action, result.payload) == ("as_is", payload)
    assert not tmp_path.joinpath("offload").exists()


def test_raw_body_is_dropped_first(tmp_path: Path) -> None:
    original = make_exchange(raw_body="data: " + "x" * 10_000)
    payload = payload_of(original)
    result = OversizeHandler(LIMIT, tmp_path / "offload").fit(payload)
    assert result.action == "raw_body_dropped"
    assert result.payload is not None
    assert len(result.payload) <= LIMIT
    slim = Exchange.model_validate_json(result.payload)
    assert slim.response is not None
    assert slim.response.body is None
    assert slim.response.text == "Hi!"
    assert slim.response.tool_calls
    assert slim.oversize is not None
    assert (slim.oversize.action, slim.oversize.original_bytes) == (
        "raw_body_dropped",
        len(payload),
    )
    assert slim.oversize.limit_bytes == LIMIT
    assert slim.model_copy(update={"oversize": None, "response": original.response}) == original


def test_too_big_without_raw_body_is_offloaded_with_a_stub(tmp_path: Path) -> None:
    original = make_exchange(prompt="p" * 20_000, raw_body="data: " + "x" * 100)
    payload = payload_of(original)
    result = OversizeHandler(LIMIT, tmp_path / "offload").fit(payload)
    assert result.action == "offloaded"
    assert result.payload is not None
    assert len(result.payload) <= LIMIT
    stub = Exchange.model_validate_json(result.payload)
    assert_stub_of(stub, original)
    assert stub.oversize is not None
    assert stub.oversize.action == "offloaded"
    assert stub.oversize.original_bytes == len(payload)
    ref = Path(str(stub.oversize.offload_ref))
    assert ref.is_absolute()
    assert (
        ref
        == result.offload_path
        == tmp_path.absolute() / "offload" / f"{original.exchange_id}.jsonl"
    )
    entries = list(read_capture_log(ref))
    assert [e.exchange for e in entries] == [original]  # the full original, raw body included


def test_broker_rejections_escalate_and_end_in_a_counted_drop(tmp_path: Path) -> None:
    """A broker limit below ours: each refusal takes the next step; the third drops."""
    handler = OversizeHandler(LIMIT, tmp_path / "offload")
    original = make_exchange(raw_body="data: " + "x" * 1_000)
    first = handler.fit(payload_of(original), rejected=True)
    assert first.action == "raw_body_dropped"
    assert first.payload is not None
    second = handler.fit(first.payload, rejected=True)
    assert second.action == "offloaded"
    assert second.payload is not None
    offloaded = next(iter(read_capture_log(str(second.offload_path)))).exchange
    assert offloaded is not None
    assert offloaded.oversize is not None
    assert offloaded.oversize.action == "raw_body_dropped"
    third = handler.fit(second.payload, rejected=True)
    assert (third.action, third.reason, third.payload) == ("dropped", "oversize", None)


def test_stub_that_still_does_not_fit_is_dropped_without_offloading(tmp_path: Path) -> None:
    original = make_exchange(prompt="p" * 10_000, error_message="e" * 10_000)
    result = OversizeHandler(LIMIT, tmp_path / "offload").fit(payload_of(original))
    assert (result.action, result.reason) == ("dropped", "oversize")
    assert list((tmp_path / "offload").glob("*.jsonl")) == []


def test_undecodable_oversize_payload_is_dropped(tmp_path: Path) -> None:
    result = OversizeHandler(LIMIT, tmp_path).fit(b"{" + b"x" * LIMIT)
    assert (result.action, result.reason) == ("dropped", "oversize_undecodable")


@pytest.mark.parametrize("existing", [0, 30_000])
def test_offload_directory_is_bounded(tmp_path: Path, existing: int) -> None:
    offload = tmp_path / "offload"
    offload.mkdir()
    if existing:
        (offload / "old.jsonl").write_bytes(b"x" * existing)
    handler = OversizeHandler(LIMIT, offload, max_offload_bytes=45_000)
    payloads = [payload_of(make_exchange(i, prompt="p" * 10_000)) for i in range(6)]
    line_bytes = len(payloads[0]) + 1
    fits = (45_000 - existing) // line_bytes
    assert fits in (1, 3)
    assert [handler.fit(p).action for p in payloads] == ["offloaded"] * fits + ["dropped"] * (
        6 - fits
    )
    assert sum(f.stat().st_size for f in offload.iterdir()) <= 45_000
    dropped = handler.fit(payload_of(make_exchange(9, prompt="p" * 10_000)))
    assert dropped.reason == "offload_full"


def test_an_offload_on_a_full_disk_is_a_counted_drop_that_leaves_nothing(tmp_path: Path) -> None:
    """Through the opener seam: a disk with room for a third of the line fails the write
    (short, then ENOSPC); no temporary file stays, the budget is not used up, and the
    next offload after space returns succeeds."""
    offload = tmp_path / "offload"
    disk = FullDisk(offload)
    handler = OversizeHandler(LIMIT, offload, max_offload_bytes=45_000, opener=disk)
    payload = payload_of(make_exchange(1, prompt="p" * 10_000))
    disk.recover(free=len(payload) // 3)
    failed = handler.fit(payload)
    assert (failed.action, failed.reason, failed.payload) == ("dropped", "offload_io", None)
    assert disk.failures >= 1
    assert list(offload.iterdir()) == []  # neither the half-written temporary file nor a line
    disk.recover()
    for i in range(2, 5):  # the failed one used none of the 45 kB budget: 3 fit
        assert handler.fit(payload_of(make_exchange(i, prompt="p" * 10_000))).action == "offloaded"
    assert len(list(offload.glob("*.jsonl"))) == 3

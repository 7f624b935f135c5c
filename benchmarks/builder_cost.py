"""CPU cost of the capture builder: µs of process CPU per ``ExchangeBuilder.build``.

    python benchmarks/builder_cost.py [--n 2000] [--repeats 3] [--markdown]

The builder turns each captured request and response into a redacted, serialized Exchange
in the sidecar's builder worker; its CPU counts against the sidecar's budget per request
(issue 33). Each scenario builds ``--n`` distinct captures (after a warm-up of 50) and
reports ``time.process_time()`` per build, the median of ``--repeats`` passes, in one
process: compare rows, or runs of two checkouts, on the same machine only.

Scenarios: ``stream`` (a chat stream of 20 content events, a finish chunk, a usage chunk
and ``[DONE]``, one network read per event), ``stream, coalesced reads`` (the same bytes in
4 reads), ``stream, tool call`` (a tool call's arguments in 20 fragments), ``stream, PII``
(content with e-mail addresses and phone numbers the body rules replace),
``non-streamed`` (the same answer as one JSON body), ``non-streamed, raw body kept``
(``keep_raw_body``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime

import orjson

from shadoweval.capture.builder import ExchangeBuilder
from shadoweval.capture.raw import RawCapture
from shadoweval.config import CaptureSettings
from shadoweval.records import ModelIdentity

T0 = 1_000_000_000
MODEL = "bench-llm"


def _chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
    event = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(event) + b"\n\n"


def _usage() -> bytes:
    usage = {"prompt_tokens": 12, "completion_tokens": 20, "total_tokens": 32}
    event = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": MODEL,
        "choices": [],
        "usage": usage,
    }
    return b"data: " + orjson.dumps(event) + b"\n\n"


def _words(i: int, pii: bool) -> list[str]:
    if pii:
        return [f"mail user{i}.{k}@example.com or call +1 555 010 {k:04d} " for k in range(20)]
    return [f"tok{k} " for k in range(20)]


def _capture(i: int, pieces: list[bytes], content_type: bytes, *, stream: bool) -> RawCapture:
    body = orjson.dumps(
        {
            "model": MODEL,
            "stream": stream,
            "max_tokens": 32,
            "messages": [{"role": "user", "content": f"Say something about request {i}, briefly."}],
        }
    )
    chunks = [(T0 + 100_000_000 + k * 30_000_000, p) for k, p in enumerate(pieces)]
    return RawCapture(
        exchange_id=f"ex{i:08d}",
        captured_at=datetime.now(UTC),
        start_ns=T0,
        method="POST",
        path="/v1/chat/completions",
        request_headers=[
            (b"host", b"127.0.0.1:8000"),
            (b"content-type", b"application/json"),
            (b"authorization", b"Bearer sk-x"),
            (b"x-session-id", b"bench-1-2"),
            (b"content-length", str(len(body)).encode()),
        ],
        request_body=body,
        status_code=200,
        response_headers=[(b"content-type", content_type), (b"cache-control", b"no-cache")],
        response_start_ns=T0 + 1000,
        chunks=chunks,
        captured_bytes=sum(len(p) for p in pieces),
        end_ns=chunks[-1][0],
        session_key_hash="abc",
    )


def stream_capture(i: int, *, reads: int = 0, tool: bool = False, pii: bool = False) -> RawCapture:
    """A streamed chat answer; ``reads`` > 0 regroups its bytes into that many reads."""
    if tool:
        start: dict[str, object] = {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": ""},
                }
            ]
        }
        events = [_chunk(start)] + [
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": f'"k{k}": {k}, '}}]})
            for k in range(20)
        ]
    else:
        words = _words(i, pii)
        events = [_chunk({"role": "assistant", "content": words[0]})]
        events += [_chunk({"content": w}) for w in words[1:]]
    events += [_chunk({}, "tool_calls" if tool else "stop"), _usage() + b"data: [DONE]\n\n"]
    if reads:
        data = b"".join(events)
        size = -(-len(data) // reads)
        events = [data[k : k + size] for k in range(0, len(data), size)]
    return _capture(i, events, b"text/event-stream", stream=True)


def body_capture(i: int) -> RawCapture:
    """The same answer, not streamed: one JSON body."""
    message = {"role": "assistant", "content": "".join(_words(i, pii=False))}
    body = orjson.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": MODEL,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 20, "total_tokens": 32},
        }
    )
    return _capture(i, [body], b"application/json", stream=False)


Scenario = tuple[str, Callable[[int], RawCapture], CaptureSettings]
SCENARIOS: list[Scenario] = [
    ("stream", stream_capture, CaptureSettings()),
    ("stream, coalesced reads", lambda i: stream_capture(i, reads=4), CaptureSettings()),
    ("stream, tool call", lambda i: stream_capture(i, tool=True), CaptureSettings()),
    ("stream, PII", lambda i: stream_capture(i, pii=True), CaptureSettings()),
    ("non-streamed", body_capture, CaptureSettings()),
    ("non-streamed, raw body kept", body_capture, CaptureSettings(keep_raw_body=True)),
]


def measure(scenario: Scenario, n: int, repeats: int) -> tuple[float, int]:
    """(median µs of CPU per build over ``repeats`` passes of ``n`` builds, payload bytes
    of the first build)."""
    _, make, settings = scenario
    builder = ExchangeBuilder(settings, ModelIdentity(name=MODEL), "sidecar:bench")
    captures = [make(i) for i in range(n)]
    for capture in captures[:50]:
        builder.build(capture)
    passes = []
    for _ in range(repeats):
        start = time.process_time()
        for capture in captures:
            builder.build(capture)
        passes.append((time.process_time() - start) / n * 1e6)
    return statistics.median(passes), len(builder.build(captures[0]).built.payload)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="captures built per pass")
    parser.add_argument("--repeats", type=int, default=3, help="passes (the median is shown)")
    parser.add_argument("--markdown", action="store_true", help="a Markdown table")
    args = parser.parse_args()
    rows = [(s[0], *measure(s, args.n, args.repeats)) for s in SCENARIOS]
    if args.markdown:
        print("| scenario | µs CPU per build | payload bytes |")
        print("|---|---:|---:|")
        for name, us, size in rows:
            print(f"| {name} | {us:.0f} | {size} |")
    else:
        print(f"{'scenario':<30} {'µs CPU/build':>13} {'payload B':>10}")
        for name, us, size in rows:
            print(f"{name:<30} {us:>13.0f} {size:>10}")
    print(f"({args.n} builds per pass, median of {args.repeats} passes, time.process_time)")


if __name__ == "__main__":
    main()

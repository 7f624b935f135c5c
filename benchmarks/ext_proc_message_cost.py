"""Where the capture service's CPU per ext_proc message goes (issue 33): one process,
``time.process_time`` around each part, over synthetic streams shaped like the overhead
benchmark's (request headers + ``request.time``, one request body, response headers,
``--chunks`` SSE events of ~``--chunk-bytes`` bytes).

Usage::

    .venv/bin/python benchmarks/ext_proc_message_cost.py [--streams 2000] [--concurrency 200]

Parts, each in CPU microseconds per message and per stream:

* ``parse``: ``ProcessingRequest.FromString`` of the serialized messages (what gRPC does
  for every message before the servicer sees it);
* ``tap``: :class:`shadoweval.capture.ext_proc.StreamTap` ``feed`` (the capture work,
  pure Python, no I/O), incl. ``WhichOneof`` and ``perf_counter_ns``;
* ``build``: :meth:`shadoweval.capture.builder.ExchangeBuilder.build` of the stream's
  capture, in this process (what the builder process does per exchange, without the
  hand-off to it and the sink), per stream;
* ``servicer``: :meth:`CaptureProcessor.Process` driven by a plain async iterator on one
  event loop (no gRPC): the tap, the metrics counters and asyncio's per-message cost;
* ``grpc_capture``: the same servicer behind a real ``grpc.aio`` server in a child
  process, fed over loopback by a ``grpc.aio`` client here with ``--concurrency`` streams
  at once; the child's CPU (``/proc``) per message: gRPC's transport, HTTP/2, parse and
  the servicer (``on_capture`` drops the capture: no builder, no sink);
* ``grpc_aio-raw`` / ``grpc_sync-raw``: the transport alone — a handler that reads each
  message as bytes and drops it, on ``grpc.aio`` and on the thread-pool ``grpc.server``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")
_REQUEST_BODY = (
    b'{"model":"bench-llm","stream":true,"messages":[{"role":"user","content":"'
    + b"hello " * 16
    + b'"}]}'
)


def sse_events(chunks: int, chunk_bytes: int) -> list[bytes]:
    """``chunks`` SSE events as the overhead benchmark's upstream sends them: content
    deltas padded to about ``chunk_bytes``, a finish event, a usage event, ``[DONE]``."""
    head = (
        b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,'
        b'"model":"bench-llm","system_fingerprint":null,"choices":['
    )
    out: list[bytes] = []
    for k in range(chunks - 2):
        last = k == chunks - 3
        delta = "{}" if last else '{"content":" word' + str(k) + '"}'
        finish = '"stop"' if last else "null"
        choice = '{"index":0,"delta":' + delta + ',"logprobs":null,"finish_reason":' + finish + "}"
        event = head + choice.encode() + b'],"x_pad":"'
        out.append(event + b"p" * max(0, chunk_bytes - len(event) - 5) + b'"}\n\n')
    usage = b'"usage":{"prompt_tokens":96,"completion_tokens":20,"total_tokens":116}}\n\n'
    out.append(head[:-1] + b"[]," + usage)
    out.append(b"data: [DONE]\n\n")
    return out


def messages(chunks: int, chunk_bytes: int) -> list[Any]:
    """One captured streamed exchange as Envoy sends it."""
    from envoy.config.core.v3 import base_pb2
    from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
    from google.protobuf import struct_pb2

    from shadoweval.capture.envoy_config import EXT_PROC_FILTER

    def headers(pairs: list[tuple[str, str]], eos: bool = False) -> Any:
        hm = base_pb2.HeaderMap(
            headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs]
        )
        return pb.HttpHeaders(headers=hm, end_of_stream=eos)

    attrs = struct_pb2.Struct()
    attrs.fields["request.time"].string_value = datetime.now(UTC).isoformat()
    req = [
        (":authority", "127.0.0.1:8080"),
        (":path", "/v1/chat/completions"),
        (":method", "POST"),
        (":scheme", "http"),
        ("content-type", "application/json"),
        ("content-length", "120"),
        ("x-session-id", "bench-1-2"),
        ("x-forwarded-proto", "http"),
    ]
    out = [
        pb.ProcessingRequest(
            request_headers=headers(req),
            attributes={EXT_PROC_FILTER: attrs},
            observability_mode=True,
        ),
        pb.ProcessingRequest(
            request_body=pb.HttpBody(body=_REQUEST_BODY, end_of_stream=True),
            observability_mode=True,
        ),
    ]
    rattrs = struct_pb2.Struct()
    rattrs.fields["response.code_details"].string_value = "via_upstream"
    resp = [
        (":status", "200"),
        ("content-type", "text/event-stream"),
        ("cache-control", "no-cache"),
    ]
    out.append(
        pb.ProcessingRequest(
            response_headers=headers(resp),
            attributes={EXT_PROC_FILTER: rattrs},
            observability_mode=True,
        )
    )
    for i, piece in enumerate(sse_events(chunks, chunk_bytes)):
        out.append(
            pb.ProcessingRequest(
                response_body=pb.HttpBody(body=piece, end_of_stream=i == chunks - 1),
                observability_mode=True,
            )
        )
    return out


def _parts() -> tuple[Any, Any, Any, Any]:
    from prometheus_client import CollectorRegistry

    from shadoweval.capture.ext_proc import ExtProcMetrics
    from shadoweval.capture.metrics import CaptureMetrics
    from shadoweval.capture.sampling import StickySampler
    from shadoweval.config import CaptureSettings

    cap = CaptureSettings()
    metrics = CaptureMetrics(CollectorRegistry())
    ext = ExtProcMetrics(metrics.registry)
    return cap, StickySampler(100.0, cap.session_headers, "salt"), metrics, ext


def local_costs(msgs: list[Any], streams: int) -> dict[str, float]:
    """CPU µs per message of parse, tap and the servicer without gRPC."""
    from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

    from shadoweval.capture.ext_proc import CaptureProcessor, StreamTap

    wire = [m.SerializeToString() for m in msgs]
    n = streams * len(msgs)
    t0 = time.process_time()
    for _ in range(streams):
        for data in wire:
            pb.ProcessingRequest.FromString(data)
    parse = time.process_time() - t0

    cap, sampler, metrics, ext = _parts()
    perf = time.perf_counter_ns
    t0 = time.process_time()
    for _ in range(streams):
        tap = StreamTap(cap, sampler, metrics, ext)
        for m in msgs:
            m.WhichOneof("request")
            tap.feed(m, perf())
        tap.take()
    tap_s = time.process_time() - t0

    taken: list[Any] = []
    proc = CaptureProcessor(cap, sampler, taken.append, metrics, ext)

    async def feed() -> Any:
        for m in msgs:
            yield m

    async def drive() -> None:
        for _ in range(streams):
            async for _reply in proc.Process(feed(), None):
                pass

    t0 = time.process_time()
    asyncio.run(drive())
    servicer = time.process_time() - t0
    assert len(taken) == streams
    from shadoweval.capture.builder import ExchangeBuilder, default_source
    from shadoweval.capture.identity import identity_from_settings

    identity = identity_from_settings(cap.live_model, "bench-llm", "http://127.0.0.1:1")
    builder = ExchangeBuilder(cap, identity, default_source())
    raws = []
    for _ in range(streams):
        tap = StreamTap(cap, sampler, metrics, ext)
        for k, m in enumerate(msgs):
            tap.feed(m, 30_000_000 * k)
        raw = tap.take()
        assert raw is not None
        raws.append(raw)
    t0 = time.process_time()
    for one in raws:
        result = builder.build(one)
    assert result.outcome.value == "done", result.fallback_reason
    build = time.process_time() - t0
    return {
        "build_ms_per_stream": build / streams * 1e3,
        "parse_us_per_msg": parse / n * 1e6,
        "tap_us_per_msg": tap_s / n * 1e6,
        "servicer_us_per_msg": servicer / n * 1e6,
    }


SERVERS = ("capture", "aio-raw", "sync-raw")
"""The child's gRPC server: ``capture`` the real servicer on ``grpc.aio``; ``aio-raw`` a
``grpc.aio`` handler that reads each message as bytes and drops it (the transport's floor);
``sync-raw`` the same on the thread-pool ``grpc.server`` (400 threads)."""

_METHOD = "envoy.service.ext_proc.v3.ExternalProcessor"


def _serve_sync_raw() -> None:
    from concurrent import futures

    import grpc

    def process(it: Any, context: Any) -> Any:
        for _ in it:
            pass
        return iter(())

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=400))
    handler = grpc.stream_stream_rpc_method_handler(process)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(_METHOD, {"Process": handler}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)  # the parent reads the port from the first line
    server.wait_for_termination()


async def _serve(kind: str) -> None:
    import grpc
    from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

    from shadoweval.capture.ext_proc import CaptureProcessor

    server = grpc.aio.server()
    if kind == "capture":
        cap, sampler, metrics, ext = _parts()
        processor = CaptureProcessor(cap, sampler, lambda raw: None, metrics, ext)
        pb_grpc.add_ExternalProcessorServicer_to_server(processor, server)
    else:

        async def process(it: Any, context: Any) -> Any:
            async for _ in it:
                pass
            return
            yield  # an async generator: the stream's (empty) replies

        handler = grpc.stream_stream_rpc_method_handler(process)
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(_METHOD, {"Process": handler}),)
        )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)  # the parent reads the port from the first line
    await server.wait_for_termination()


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def grpc_cost(
    msgs: list[Any], streams: int, concurrency: int, kind: str = "capture"
) -> dict[str, float]:
    """A gRPC server (:data:`SERVERS`) in a child process: its CPU per message."""
    cmd = [sys.executable, __file__, "--serve", kind]
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        out = asyncio.run(_client(child.pid, port, msgs, streams, concurrency))
        return {f"grpc_{kind}_{key}": value for key, value in out.items()}
    finally:
        child.terminate()
        child.wait()


async def _client(
    pid: int, port: int, msgs: list[Any], streams: int, concurrency: int
) -> dict[str, float]:
    import grpc
    from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.ExternalProcessorStub(channel)

        async def one() -> None:
            async def gen() -> Any:
                for m in msgs:
                    yield m

            async for _ in stub.Process(gen()):
                pass

        async def worker(count: int) -> None:
            for _ in range(count):
                await one()

        await asyncio.gather(*(worker(5) for _ in range(concurrency)))  # warm-up
        before = _cpu_s(pid)
        t0 = time.perf_counter()
        per = [streams // concurrency + (i < streams % concurrency) for i in range(concurrency)]
        await asyncio.gather(*(worker(c) for c in per))
        wall = time.perf_counter() - t0
        used = _cpu_s(pid) - before
    n = streams * len(msgs)
    return {"us_per_msg": used / n * 1e6, "wall_s": wall}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--chunks", type=int, default=23)
    parser.add_argument("--chunk-bytes", type=int, default=240)
    parser.add_argument("--servers", nargs="+", default=list(SERVERS), choices=SERVERS)
    parser.add_argument("--serve", choices=SERVERS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        if args.serve == "sync-raw":
            _serve_sync_raw()
        else:
            asyncio.run(_serve(args.serve))
        return 0
    msgs = messages(args.chunks, args.chunk_bytes)
    out = local_costs(msgs, args.streams)
    for kind in args.servers:
        out |= grpc_cost(msgs, args.streams, args.concurrency, kind)
    per_stream = len(msgs)
    for key, value in out.items():
        if key.endswith("_us_per_msg"):
            print(f"{key:28s} {value:8.1f} µs/msg  {value * per_stream / 1000:7.3f} ms/stream")
        else:
            print(f"{key:28s} {value:8.2f}")
    print(f"messages per stream: {per_stream}; streams: {args.streams}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

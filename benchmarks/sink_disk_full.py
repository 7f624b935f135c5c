"""The capture sinks on a full disk: what the file sink counts, and how fast the spool drains.

Usage::

    .venv/bin/python benchmarks/sink_disk_full.py [--volume auto|tmpfs|simulated]
        [--file-exchanges 600] [--spool-exchanges 2000] [--window-s 20] [--json out.json]

The disk is a real small file system when the process may mount one (``--volume tmpfs``:
a tmpfs of ``--size-kib`` mounted on a temporary directory, root only), else
(``simulated``) a directory behind :class:`shadoweval.simulation.full_disk.FullDisk` handed to the
sinks through their ``opener`` seam. ``auto`` (default) tries tmpfs first. The tmpfs mode
uses only what every version of the sinks has, so the same script measures an older
checkout (``PYTHONPATH=<checkout> python benchmarks/sink_disk_full.py``).

Two scenarios, each on a fresh volume:

* **file**: a :class:`~shadoweval.capture.sinks.file.FileSink` writes ``--file-exchanges``
  exchanges, one every millisecond, onto a volume a filler file has left ``--free-kib``
  free; the disk fills; the filler is deleted and 100 more are written; the sink stops.
  Reported: ``produced{sink="file"}``, the exchanges a reader finds in the files, the
  difference (counted, not on disk), drops by reason, empty segment files left.
* **spool**: a :class:`~shadoweval.capture.sinks.kafka.KafkaSink` whose producer is an in-memory
  broker (acknowledges at once when up: the rate measured is the spool's, not a broker's)
  spools ``--spool-exchanges`` exchanges while the broker is down; then the volume is
  filled to the last byte and the broker comes back. Reported: exchanges drained per
  second while the disk is full (over at most ``--window-s`` seconds; counted from the
  first acknowledgement, which comes up to ``retry_interval_s`` = 1 s after the broker's
  return, reported apart), then after the filler is deleted, then a reference drain of as
  many on a healthy disk; and whether the spool's cursor was saved at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from shadoweval.bus import BusError, BusTimeoutError
from shadoweval.bus.producer import Delivery, OutgoingRecord
from shadoweval.capture.metrics import CaptureMetrics
from shadoweval.capture.sinks.base import BuiltExchange
from shadoweval.capture.sinks.file import FileSink
from shadoweval.capture.sinks.kafka import KafkaSink, ProducerLike, SinkMode
from shadoweval.capture_log import read_capture_log
from shadoweval.config import KafkaSettings, SpoolSettings
from shadoweval.records import Exchange, ModelIdentity, RequestRecord, ResponseRecord

_now = time.perf_counter


def exchange(i: int) -> BuiltExchange:
    """A chat exchange of about 1 KB, as the builder hands it to the sinks."""
    body = orjson.dumps(
        {"model": "m", "messages": [{"role": "user", "content": f"{i}: " + "q" * 300}]}
    ).decode()
    ex = Exchange(
        task_type="chat",
        request=RequestRecord(body=body),
        response=ResponseRecord(status_code=200, text="a" * 300, model="m"),
        baseline_model=ModelIdentity(name="m"),
        source="sidecar:bench",
    )
    payload = orjson.dumps(ex.model_dump(mode="json"))
    return BuiltExchange(ex.exchange_id, ex.exchange_id.encode(), payload)


def sample(metrics: CaptureMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def drops(metrics: CaptureMetrics) -> dict[str, float]:
    return {
        s.labels["reason"]: s.value
        for metric in metrics.dropped.collect()
        for s in metric.samples
        if s.name.endswith("_total") and s.value
    }


# ------------------------------------------------------------------ volumes


class Volume:
    """A small volume: a mounted tmpfs, or a directory behind FullDisk (``opener``)."""

    def __init__(self, kind: str, size_kib: int) -> None:
        self.kind = kind
        self.size = size_kib * 1024
        self.root = Path(tempfile.mkdtemp(prefix="shadoweval-disk-"))
        self.opener: Any = None
        if kind == "tmpfs":
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(self.root)],
                check=True,
                capture_output=True,
            )
        else:
            from shadoweval.testing.full_disk import FullDisk  # the seam: the current sinks only

            self.opener = FullDisk(self.root, free=self.size)
        self.filler = self.root / "filler"

    def leave_free(self, free: int) -> None:
        """Write a filler file so that about ``free`` bytes stay free."""
        if self.opener is not None:
            self.opener.recover(free=free)
            return
        stat = os.statvfs(self.root)
        fill = stat.f_bavail * stat.f_frsize - free
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            os.write(fd, b"\0" * max(fill, 0))
        finally:
            os.close(fd)

    def fill(self) -> None:
        """Take every byte left (and keep them taken)."""
        if self.opener is not None:
            self.opener.fill()
            return
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            for size in (1 << 16, 4096, 1):  # big pieces, then the last partial block
                with contextlib.suppress(OSError):
                    while True:
                        os.write(fd, b"\0" * size)
        finally:
            os.close(fd)

    def recover(self) -> None:
        """Delete the filler: the volume has room again."""
        if self.opener is not None:
            self.opener.recover()
            return
        self.filler.unlink(missing_ok=True)

    def close(self) -> None:
        if self.kind == "tmpfs":
            subprocess.run(["umount", str(self.root)], check=False, capture_output=True)
        with contextlib.suppress(OSError):
            for path in sorted(self.root.rglob("*"), reverse=True):
                path.rmdir() if path.is_dir() else path.unlink()
            self.root.rmdir()


@contextlib.contextmanager
def volume(kind: str, size_kib: int) -> Iterator[Volume]:
    v = Volume(kind, size_kib)
    try:
        yield v
    finally:
        v.close()


def resolve_kind(requested: str) -> str:
    if requested != "auto":
        return requested
    try:
        with volume("tmpfs", 64):
            return "tmpfs"
    except (subprocess.CalledProcessError, OSError):
        return "simulated"


# ------------------------------------------------------------------ file sink


async def file_scenario(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    with volume(kind, args.size_kib) as vol:
        log = vol.root / "log"
        metrics = CaptureMetrics()
        options: dict[str, Any] = {} if vol.opener is None else {"opener": vol.opener}
        vol.leave_free(args.free_kib * 1024)
        sink = FileSink(log, metrics, **options)
        async with sink:
            for i in range(args.file_exchanges):
                await sink.write(exchange(i))
                await asyncio.sleep(0.001)
            vol.recover()
            for i in range(args.file_exchanges, args.file_exchanges + 100):
                await sink.write(exchange(i))
                await asyncio.sleep(0.001)
        entries = list(read_capture_log(log)) if any(log.iterdir()) else []
        on_disk = sum(1 for e in entries if e.exchange is not None)
        produced = sample(metrics, "shadoweval_capture_produced_total", sink="file")
        segments = [p for p in log.iterdir() if p.name.startswith("exchanges-")]
        return {
            "written": args.file_exchanges + 100,
            "produced": produced,
            "on_disk": on_disk,
            "counted_not_on_disk": produced - on_disk,
            "unreadable_lines": sum(1 for e in entries if e.error is not None),
            "dropped": drops(metrics),
            "segments": len(segments),
            "empty_segments": sum(1 for p in segments if p.stat().st_size == 0),
        }


# ------------------------------------------------------------------ spool drain


class MemoryBroker:
    """An in-memory producer: acknowledges every record at once while ``up``."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.up = False
        self.delivered = 0
        self.idempotent = True
        self.first_at: float | None = None  # first and last acknowledgement of a drain
        self.last_at = 0.0

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def send_many(
        self, topic: str, records: Sequence[OutgoingRecord]
    ) -> list[Delivery | BusError]:
        await asyncio.sleep(0)
        if not self.up:
            return [BusTimeoutError("record not acknowledged in time") for _ in records]
        self.delivered += len(records)
        if self.first_at is None:
            self.first_at = _now()
        self.last_at = _now()
        return [Delivery(topic, 0, self.delivered) for _ in records]


async def _until(predicate: Any, timeout_s: float) -> None:
    """Poll ``predicate`` every 10 ms until it holds or ``timeout_s`` has passed."""
    deadline = _now() + timeout_s
    while not predicate():
        if _now() >= deadline:
            return
        await asyncio.sleep(0.01)


async def _drain_rate(
    sink: KafkaSink, broker: MemoryBroker, metrics: CaptureMetrics, window_s: float
) -> dict[str, float]:
    """Bring the broker back; wait until the spool is empty or ``window_s`` has passed.

    ``probe_wait_s``: from the broker's return to its first acknowledgement (the drainer
    was waiting ``retry_interval_s`` after the last failure); ``per_second``: exchanges
    acknowledged per second from that first acknowledgement on.
    """
    start_count = broker.delivered
    left = sample(metrics, "shadoweval_capture_spool_records")
    broker.first_at = None
    broker.up = True
    t0 = _now()
    await _until(lambda: sink.mode is SinkMode.DIRECT, window_s)
    end = _now()
    n = broker.delivered - start_count
    first = broker.first_at
    if not n or first is None:
        return {"spooled": left, "drained": 0, "probe_wait_s": 0.0, "seconds": 0.0,
                "per_second": 0.0}  # fmt: skip
    seconds = (broker.last_at if sink.mode is SinkMode.DIRECT else end) - first
    return {
        "spooled": left,
        "drained": n,
        "probe_wait_s": first - t0,
        "seconds": seconds,
        "per_second": n / seconds if seconds > 0 else float("inf"),
    }


async def spool_scenario(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    with volume(kind, args.size_kib * 8) as vol:
        metrics = CaptureMetrics()
        made: list[MemoryBroker] = []

        def factory(settings: KafkaSettings) -> ProducerLike:
            made.append(MemoryBroker(settings))
            return made[-1]

        options: dict[str, Any] = {} if vol.opener is None else {"spool_opener": vol.opener}
        sink = KafkaSink(
            KafkaSettings(bootstrap_servers="127.0.0.1:1", topic="bench"),
            SpoolSettings(directory=str(vol.root / "spool"), retry_interval_s=1.0),
            metrics,
            producer_factory=factory,
            **options,
        )
        await sink.start()
        (broker,) = made
        n = args.spool_exchanges
        try:
            for i in range(n):
                await sink.write(exchange(i))
            await _until(lambda: sample(metrics, "shadoweval_capture_spool_records") == n, 60)
            vol.fill()
            full = await _drain_rate(sink, broker, metrics, args.window_s)
            vol.recover()
            after = await _drain_rate(sink, broker, metrics, 600)
            await _until(
                lambda: sample(metrics, "shadoweval_capture_spool_cursor_unsaved") == 0, 10
            )
            cursor_unsaved = sample(metrics, "shadoweval_capture_spool_cursor_unsaved")
            broker.up = False
            for i in range(n, 2 * n):
                await sink.write(exchange(i))
            await _until(lambda: sample(metrics, "shadoweval_capture_spool_records") == n, 60)
            healthy = await _drain_rate(sink, broker, metrics, 600)
        finally:
            await sink.stop(deadline_s=5)
        return {
            "disk_full": full,
            "after_recovery": after,
            "healthy_reference": healthy,
            "cursor_unsaved_at_end": cursor_unsaved,
            "dropped": drops(metrics),
        }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    kind = resolve_kind(args.volume)
    return {
        "volume": kind,
        "args": vars(args),
        "file": await file_scenario(kind, args),
        "spool": await spool_scenario(kind, args),
    }


def print_result(result: dict[str, Any]) -> None:
    f = result["file"]
    print(f"volume: {result['volume']}")
    print("\n| file sink | written | produced | on disk | counted, not on disk | dropped | "
          "segments | empty segments |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    print(
        f"| | {f['written']} | {f['produced']:.0f} | {f['on_disk']} | "
        f"{f['counted_not_on_disk']:.0f} | {f['dropped']} | {f['segments']} | "
        f"{f['empty_segments']} |"
    )
    s = result["spool"]
    print("\n| spool drain | spooled | drained | first ack after (s) | seconds | exchanges/s |")
    print("|---|---|---|---|---|---|")
    for name in ("disk_full", "after_recovery", "healthy_reference"):
        r = s[name]
        rate = f"{r['per_second']:.0f}" if r["drained"] else "–"
        print(
            f"| {name} | {r['spooled']:.0f} | {r['drained']} | {r['probe_wait_s']:.2f} | "
            f"{r['seconds']:.2f} | {rate} |"
        )
    print(f"\ncursor unsaved at the end: {s['cursor_unsaved_at_end']:.0f}; dropped {s['dropped']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--volume", choices=("auto", "tmpfs", "simulated"), default="auto")
    parser.add_argument("--size-kib", type=int, default=1024, help="the file scenario's volume")
    parser.add_argument("--free-kib", type=int, default=64, help="left free before writing")
    parser.add_argument("--file-exchanges", type=int, default=600)
    parser.add_argument("--spool-exchanges", type=int, default=2000)
    parser.add_argument("--window-s", type=float, default=20.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.volume == "tmpfs" and os.geteuid() != 0:
        raise SystemExit("--volume tmpfs needs root (mount); use --volume simulated")
    result = asyncio.run(main_async(args))
    print_result(result)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()

"""FileSink: readable capture-log lines with rotation and gzip, drops counted when its
queue is full, disk errors counted and never raised, stop bounded by its deadline."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from capture.metrics import CaptureMetrics
from capture.sinks.base import ExchangeSink
from capture.sinks.file import FileSink, LineWriter
from shadoweval.capture_log import read_capture_log
from shadoweval.config import CaptureSettings
from tests.capture.test_oversize import built_of, make_exchange

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def sample(metrics: CaptureMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return value or 0.0


def dropped(metrics: CaptureMetrics, reason: str) -> float:
    return sample(metrics, "shadoweval_capture_dropped_total", reason=reason)


class BlockingWriter:
    """A writer whose first ``write_line`` waits until ``release`` is set."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.lines: list[bytes] = []

    def write_line(self, line: bytes) -> None:
        self.entered.set()
        self.release.wait(timeout=30)
        self.lines.append(line)

    def close(self) -> None:
        pass


class FailingWriter:
    """Fails every ``fail_every``-th write with ``OSError`` (a full disk)."""

    def __init__(self, log: list[bytes], fail_every: int) -> None:
        self.log = log
        self.fail_every = fail_every

    def write_line(self, line: bytes) -> None:
        if (len(self.log) + 1) % self.fail_every == 0:
            self.log.append(b"<failed>")
            raise OSError(28, "No space left on device")
        self.log.append(line)

    def close(self) -> None:
        pass


@pytest.mark.parametrize("compress", [False, True])
async def test_lines_are_readable_in_order_with_rotation(tmp_path: Path, compress: bool) -> None:
    metrics = CaptureMetrics()
    exchanges = [make_exchange(i) for i in range(200)]
    sink = FileSink(tmp_path / "log", metrics, compress=compress, max_segment_bytes=20_000)
    assert isinstance(sink, ExchangeSink)
    assert not sink.ready()
    async with sink:
        assert sink.ready()
        for ex in exchanges:
            await sink.write(built_of(ex))
    assert not sink.ready()
    segments = sorted((tmp_path / "log").iterdir())
    assert len(segments) > 5
    assert all(p.name.endswith(".jsonl.gz" if compress else ".jsonl") for p in segments)
    entries = list(read_capture_log(tmp_path / "log"))
    assert [e.exchange for e in entries] == exchanges
    assert sample(metrics, "shadoweval_capture_produced_total", sink="file") == 200


async def test_full_queue_drops_and_counts(tmp_path: Path) -> None:
    metrics = CaptureMetrics()
    writer = BlockingWriter()
    sink = FileSink(tmp_path, metrics, max_queue=2, writer_factory=lambda: writer)
    await sink.start()
    items = [built_of(make_exchange(i)) for i in range(6)]
    await sink.write(items[0])
    assert await asyncio.to_thread(writer.entered.wait, 60)  # the thread holds item 0
    for item in items[1:]:
        await sink.write(item)  # 1 and 2 are queued, 3..5 are dropped
    assert sink.queued == 2
    assert not sink.ready()
    assert dropped(metrics, "file_queue_full") == 3
    writer.release.set()
    await sink.stop(deadline_s=5)
    assert writer.lines == [i.payload for i in items[:3]]
    assert sample(metrics, "shadoweval_capture_produced_total", sink="file") == 3
    await sink.write(items[0])
    assert dropped(metrics, "shutdown") == 1


async def test_disk_errors_are_counted_never_raised(tmp_path: Path) -> None:
    metrics = CaptureMetrics()
    log: list[bytes] = []
    opened: list[FailingWriter] = []

    def factory() -> LineWriter:
        opened.append(FailingWriter(log, fail_every=4))
        return opened[-1]

    async with FileSink(tmp_path, metrics, writer_factory=factory) as sink:
        for i in range(12):
            await sink.write(built_of(make_exchange(i)))
    assert log.count(b"<failed>") == 3
    assert sample(metrics, "shadoweval_capture_produce_errors_total", reason="file_io") == 3
    assert dropped(metrics, "sink_failed") == 3
    assert sample(metrics, "shadoweval_capture_produced_total", sink="file") == 9
    assert len(opened) == 3  # a fresh writer (new segment) after the 1st and 2nd error


async def test_unwritable_directory_is_counted(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the directory should be")
    metrics = CaptureMetrics()
    async with FileSink(blocker / "log", metrics) as sink:
        await sink.write(built_of(make_exchange()))
    assert sample(metrics, "shadoweval_capture_produce_errors_total", reason="file_io") == 1
    assert dropped(metrics, "sink_failed") == 1


async def test_stop_is_bounded_by_its_deadline(tmp_path: Path) -> None:
    metrics = CaptureMetrics()
    writer = BlockingWriter()
    sink = FileSink(tmp_path, metrics, writer_factory=lambda: writer)
    await sink.start()
    for i in range(5):
        await sink.write(built_of(make_exchange(i)))
    assert await asyncio.to_thread(writer.entered.wait, 60)
    t0 = time.monotonic()
    await sink.stop(deadline_s=0.3)
    # A bound on a hang, not a speed check: the stuck write holds for 30 s, and a stop
    # that waited for it instead of its deadline would take that long.
    assert time.monotonic() - t0 < 10.0
    assert dropped(metrics, "shutdown") == 4  # one is stuck in the disk write, 4 queued
    writer.release.set()


async def test_from_settings(tmp_path: Path) -> None:
    settings = CaptureSettings(file_sink_directory=str(tmp_path / "cap"), file_sink_compress=True)
    sink = FileSink.from_settings(settings, CaptureMetrics())
    assert (sink.directory, sink.compress) == (tmp_path / "cap", True)

"""Test harness for the whole live loop: a :class:`~shadoweval.capture.sidecar.Sidecar` serving in a
background thread (its own event loop), plus helpers to read every sink back."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from pathlib import Path
from typing import Any

from shadoweval.capture.sidecar import Sidecar
from shadoweval.config import CaptureSettings, KafkaSettings


class SidecarThread:
    """Serve a Sidecar on free loopback ports in a daemon thread.

    ``url`` is the proxy, ``admin_url`` the admin port. :meth:`shutdown` does what SIGTERM
    does (graceful drain and flush) and waits for the thread.
    """

    def __init__(
        self, capture: CaptureSettings, kafka: KafkaSettings | None = None, **kwargs: Any
    ) -> None:
        capture = capture.model_copy(update={"port": 0, "admin_port": 0, "host": "127.0.0.1"})
        self.sidecar = Sidecar(capture, kafka, **kwargs)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.url = ""
        self.admin_url = ""

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self.sidecar.serve(install_signal_handlers=False))
        except BaseException as exc:  # reported by start()/shutdown()
            self._error = exc
        finally:
            loop.close()

    def start(self, timeout_s: float = 30.0) -> SidecarThread:
        """Start serving; return when both ports accept connections."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while self.sidecar.bound_port is None or self.sidecar.bound_admin_port is None:
            if self._error is not None:
                raise RuntimeError("sidecar failed to start") from self._error
            if not self._thread.is_alive():
                raise RuntimeError("sidecar thread exited before serving")
            if time.monotonic() > deadline:
                raise RuntimeError(f"sidecar did not start within {timeout_s} s")
            time.sleep(0.01)
        self.url = f"http://127.0.0.1:{self.sidecar.bound_port}"
        self.admin_url = f"http://127.0.0.1:{self.sidecar.bound_admin_port}"
        return self

    def shutdown(self, timeout_s: float = 60.0) -> None:
        """Graceful shutdown (as on SIGTERM); wait for the thread; re-raise its error."""
        if self._loop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self.sidecar.request_shutdown)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise RuntimeError(f"sidecar did not stop within {timeout_s} s")
        if self._error is not None:
            raise self._error

    def metric(self, name: str, **labels: str) -> float:
        """A sample of the sidecar's registry (0.0 when absent)."""
        value = self.sidecar.metrics.registry.get_sample_value(name, labels)
        return value or 0.0

    def __enter__(self) -> SidecarThread:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.shutdown()


def all_bytes_under(directory: Path) -> bytes:
    """Every file's bytes under ``directory`` (gzip segments decompressed)."""
    import gzip

    out = bytearray()
    for path in sorted(directory.rglob("*")):
        if not path.is_file():
            continue
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        out += data
    return bytes(out)


def run_replay_worker(
    source: str,
    candidate_url: str,
    database_url: str,
    run_id: str,
    *,
    until_idle_s: float = 3.0,
    timeout_s: float = 180.0,
    extra: tuple[str, ...] = (),
) -> str:
    """Run ``shadow-eval replay run --source kafka://...`` to idle; return its stdout.

    Raises:
        AssertionError: the worker exited non-zero (its output is in the message).
    """
    import os
    import subprocess
    import sys

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "shadoweval.cli",
            "replay",
            "run",
            "--source",
            source,
            "--candidate-url",
            candidate_url,
            "--database-url",
            database_url,
            "--run-id",
            run_id,
            "--until-idle",
            str(until_idle_s),
            "--no-progress",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ},
        check=False,
    )
    assert proc.returncode == 0, f"worker exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def database_text(database_url: str) -> tuple[dict[str, int], str]:
    """Row counts per table and every row of every table as one text (for canary searches)."""
    import sqlalchemy as sa

    engine = sa.create_engine(database_url)
    counts: dict[str, int] = {}
    text: list[str] = []
    try:
        meta = sa.MetaData()
        meta.reflect(engine)
        with engine.connect() as conn:
            for table in meta.sorted_tables:
                rows = conn.execute(sa.select(table)).all()
                counts[table.name] = len(rows)
                text.extend(repr(tuple(row)) for row in rows)
    finally:
        engine.dispose()
    return counts, "\n".join(text)


def run_replay_scraped(
    source: str,
    candidate_url: str,
    database_url: str,
    run_id: str,
    *,
    extra: tuple[str, ...] = (),
    metrics_port: int | None = None,
    timeout_s: float = 180.0,
) -> tuple[str, str]:
    """Run ``shadow-eval replay run`` to its end (a capture log, or a Kafka topic to idle);
    with ``metrics_port`` (Kafka only) its ``/metrics`` is scraped while it runs.

    Returns:
        (stdout + stderr of the worker — its log —, the last metrics page scraped or "").

    Raises:
        AssertionError: the worker exited non-zero (its output is in the message).
    """
    import os
    import subprocess
    import sys

    import httpx

    args = [sys.executable, "-m", "shadoweval.cli", "replay", "run", "--source", source]
    args += ["--candidate-url", candidate_url, "--database-url", database_url]
    args += ["--run-id", run_id, "--no-progress", *extra]
    if metrics_port is not None:
        args += ["--until-idle", "3", "--metrics-port", str(metrics_port)]
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ}
    )
    metrics = ""
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        if metrics_port is not None:
            with contextlib.suppress(httpx.HTTPError):
                metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2).text
        time.sleep(0.2)
    if proc.poll() is None:
        proc.kill()
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, f"worker exit {proc.returncode}\n{out}"
    return out, metrics

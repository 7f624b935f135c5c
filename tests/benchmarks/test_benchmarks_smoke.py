"""Every script in benchmarks/ runs in ``make test`` at a tiny size (issue 33 item 3).

A benchmark is re-run rarely, so one that no longer imports or finishes (a renamed
function, a column the frame gained, an option that moved) went unnoticed until someone
needed its numbers. Each script here runs as a subprocess, as documented in
docs/benchmarks.md, with its smallest options; it must exit 0 and print its table. Nothing
is asserted about its numbers (no timed assertions): the size makes them meaningless.

The gate's benchmarks (``tests/stats/test_gate_benchmarks_tiny.py``), ``import_time.py``
(``tests/packaging/test_import_time_benchmark.py``) and ``latency_aa.py``
(``tests/replay/test_latency_aa_benchmark.py``) have their own tests. Rows that need nginx
are left out (CI has none): ``sidecar_overhead.py`` runs its sidecar and Envoy rows,
``replay_throughput.py`` its ``events`` upstream (one write per SSE event, no nginx).
:data:`SCRIPTS` plus those covers every script; :func:`test_every_benchmark_is_smoke_tested`
fails when a new one is added without a smoke run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PG_BASE_URL

REPO = Path(__file__).resolve().parents[2]

SCRIPTS: dict[str, tuple[list[str], str]] = {
    "trace_import": (["--records", "200", "--repeats", "1"], "| preset |"),
    "sink_disk_full": (
        ["--volume", "simulated", "--file-exchanges", "60", "--spool-exchanges", "100",
         "--window-s", "1"],
        "| spool drain |",
    ),
    "replay_throughput": (
        ["--upstreams", "events", "--requests", "40", "--concurrency", "4", "--runner"],
        "| http1 (new) | events | stream 24 ev, 25 writes |",
    ),
    "similarity_throughput": (
        ["--texts", "2", "--repeats", "1", "--lengths", "16", "--source", "{alpaca}"],
        "fp32 GEMM over the run",
    ),
    "similarity_backends": (
        ["--limit", "2", "--chunks", "1", "--backends", "torch-fp32", "--source", "{alpaca}"],
        "| torch-fp32 |",
    ),
    "dashboard_render": (["--pairs", "1500", "--repeats", "1", "--before-repeats", "1"],
                         "overview cold"),
    "live_port_reliability": (
        ["--duration-s", "2", "--rate", "5", "--slow", "5", "--large", "1", "--large-mb", "1"],
        '"stale keep-alives"',
    ),
    "envoy_capture_failures": (
        ["--rounds", "1", "--concurrency", "2", "--requests", "2", "--events", "2",
         "--ttft-ms", "5", "--itl-ms", "1"],
        "| healthy |",
    ),
    "sidecar_overhead": (
        ["--rounds", "1", "--duration", "0.5", "--scenarios", "stream:4", "--rows", "sidecar",
         "envoy", "--markdown", "--ttft-ms", "5", "--itl-ms", "1", "2", "--events", "2"],
        "| stream × 4 | sidecar |",
    ),
    "ext_proc_message_cost": (["--streams", "4", "--concurrency", "2", "--chunks", "2"],
                              "capture"),
    "large_body_memory": (["--size-mb", "2", "--bodies", "1", "--after-s", "0.5",
                           "--settle-s", "5"], "| request | 1 |"),
    "builder_cost": (["--n", "20", "--repeats", "1", "--markdown"], "| stream, tool call |"),
    "peak_rss": (["--interval-s", "0.05", "--", sys.executable, "-c",
                  "import time; b = bytearray(64 << 20); time.sleep(1)"], "| **process tree** |"),
}  # fmt: skip
"""Script → (its tiny options, a piece of the table it must print); ``{alpaca}`` is the
shared data's AlpacaEval folder."""

TESTED_ELSEWHERE = ("gate_simulation", "gate_direction_simulation", "gate_scale",
                    "ppi_simulation", "import_time", "latency_aa")  # fmt: skip
"""Benchmarks with a tiny-size test of their own (module docstring)."""

CHAINED = ("evaluate_stages", "compare_scaling", "pg_ingest", "envoy_variants")
"""Run below by tests of their own: a database made by one, a PostgreSQL server, or a
front end that ``sidecar_overhead.py`` launches as a ``--proxy`` row."""


def bench(script: str, *args: str) -> str:
    """Run ``benchmarks/<script>.py`` with ``args``; its stdout (stderr shown on failure)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    run = subprocess.run(
        [sys.executable, f"benchmarks/{script}.py", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert run.returncode == 0, f"{script} exited {run.returncode}:\n{run.stderr[-4000:]}"
    return run.stdout


def test_every_benchmark_is_smoke_tested() -> None:
    scripts = {p.stem for p in (REPO / "benchmarks").glob("*.py")} - {"__init__"}
    covered = set(SCRIPTS) | set(TESTED_ELSEWHERE) | set(CHAINED)
    assert scripts == covered, f"not smoke-tested: {scripts - covered}; gone: {covered - scripts}"


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_benchmark_runs_tiny(script: str, shared_data: Path) -> None:
    args, table = SCRIPTS[script]
    out = bench(script, *(a.format(alpaca=shared_data / "alpaca_eval") for a in args))
    assert table in out, out[-4000:]


def test_evaluate_stages_then_compare_scaling_tiny(tmp_path: Path, shared_data: Path) -> None:
    """8 prompts with the hashing encoder; the run it keeps is rescored by compare_scaling."""
    db = tmp_path / "eval.db"
    out = bench("evaluate_stages", "--limit", "8", "--time-scale", "0", "--encoder",
                "hashing", "--data", str(shared_data), "--keep-database", str(db))  # fmt: skip
    assert re.search(r"^total\s+\d", out, re.MULTILINE), out
    run_id = re.search(r"^run (\S+) kept in", out, re.MULTILINE)
    assert run_id is not None, out
    out = bench("compare_scaling", "--database", str(db), "--run", run_id.group(1),
                "--workers", "1", "--encoder", "hashing")  # fmt: skip
    assert re.search(r"^\s+warm\s+default\s+1\s+8\s", out, re.MULTILINE), out


@pytest.mark.postgres
def test_pg_ingest_tiny(pg_url: str) -> None:
    """On the test server (``pg_url`` fails under CI=true when it is not reachable); the
    script makes and drops its own schema."""
    out = bench("pg_ingest", "--url", PG_BASE_URL, "--pairs", "200", "--per-row-pairs", "20",
                "--rounds", "1", "--batches", "100")  # fmt: skip
    assert "batch 100" in out, out


def test_envoy_variants_run_as_proxy_rows_tiny() -> None:
    # docs/benchmarks.md, "Envoy front end: designs measured": the variants are rows of the
    # overhead benchmark; one with the capture service, one with Envoy's own tap filter
    # (beside a CPU burner: the starved machine of "Issue 33: the starved machine")
    variants = f"{sys.executable} {REPO / 'benchmarks' / 'envoy_variants.py'}"
    out = bench(
        "sidecar_overhead", "--rounds", "1", "--duration", "0.5", "--scenarios", "stream:4",
        "--rows", "envoy-plain", "--markdown", "--ttft-ms", "5", "--itl-ms", "1", "2",
        "--events", "2", "--burners", "1",
        "--proxy", f"extproc-raw={variants} extproc-raw {{upstream_url}} {{listen_port}}",
        "--proxy", f"tap-streamed={variants} tap-streamed {{upstream_url}} {{listen_port}}",
    )  # fmt: skip
    for row in ("envoy-plain", "extproc-raw", "tap-streamed"):
        assert f"| {row} |" in out, out[-4000:]


def _children(pid: int) -> dict[int, bytes]:
    """``pid``'s live child processes and their command lines."""
    out = {}
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        try:
            out[int(child)] = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
    return out


def _gone(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    try:
        return "State:\tZ" in status.read_text()
    except OSError:
        return True


def test_overhead_benchmark_stopped_by_sigterm_leaves_no_process() -> None:
    # found by a fresh user: a SIGTERM'd run left its burner spinning, its upstream and
    # sidecar running; SIGTERM now unwinds through the cleanup, and a burner ends with us
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with subprocess.Popen(
        [sys.executable, "benchmarks/sidecar_overhead.py", "--rounds", "50", "--duration", "1",
         "--scenarios", "stream:2", "--rows", "sidecar", "--ttft-ms", "5", "--itl-ms", "1", "2",
         "--events", "2", "--burners", "1"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    ) as proc:  # fmt: skip
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:  # wait for the condition: the burner is running
            lines.append(line)
            if "burner(s) running" in line:
                break
        else:
            pytest.fail("the benchmark ended before starting its burner:\n" + "".join(lines[-40:]))
        children = _children(proc.pid)
        assert any(b"parent = os.getppid()" in cmd for cmd in children.values()), children
        proc.terminate()
        proc.stderr.read()
        assert proc.wait(timeout=120) != 0
    left = [pid for pid in children if not _gone(pid)]
    assert not left, {pid: children[pid] for pid in left}

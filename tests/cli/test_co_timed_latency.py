"""Latency under equal conditions (issue 29 item 2), end to end through ``evaluate``.

The capture log is the demo workload's baseline (4 task types × 10 chat requests, seeded,
with recorded TTFTs); the candidate is mock-llm (a test double) under real uvicorn
serving the same answers three times slower than recorded, on SQLite. Against the recorded
baseline the latency checks are report only: never ROLLBACK, and the reason says why.
With a baseline replica (mock-llm at the recorded pace) every exchange is sent to both
together: the pairs are co-timed and the latency check is gated (it rolls back).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from shadoweval.capture.table_import import import_table
from shadoweval.cli import app
from shadoweval.records import CheckOutcome, Decision, Verdict
from shadoweval.serving import BackgroundServer
from shadoweval.simulation.mock_llm import FaultConfig, TableLatency, create_app
from shadoweval.simulation.workload import DEMO_MAPPING, WorkloadSpec, write_workload
from shadoweval.storage import Database, Repository
from shadoweval.tables import RecordedRow, TableMapping, load_recorded_rows

PER_TASK_TYPE = 10
PAIRS = PER_TASK_TYPE * 4
POLICY = f"""\
min_pairs_per_task_type: 5
min_pairs_pooled: 30
error_rate: {{margin: 0.1}}
infra_error_rate: {{margin: 0.1}}
format_parse: {{margin: 0.1}}
harm: {{margin: 0.1}}
tool_calls: {{margin: 0.1}}
latency: {{metrics: [ttft_ms]}}
sequential: {{first_checkpoint: {PAIRS}, n_max: {PAIRS}}}
"""
ADD_REPLICA = (
    "latency compared with the live/recorded baseline, not timed under the same conditions "
    "as the candidate: report only; add a baseline replica (--baseline-repeat-url) for a "
    "gated latency check"
)


@dataclass(frozen=True)
class Workload:
    capture: Path
    rows: list[RecordedRow]
    policy: Path


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Workload:
    root = tmp_path_factory.mktemp("co-timed")
    mapping = TableMapping(**DEMO_MAPPING)
    baseline, _ = write_workload(root / "tables", WorkloadSpec(per_task_type=PER_TASK_TYPE, seed=3))
    capture = root / "capture"
    import_table(baseline, out=capture, mapping=mapping, stream=True)
    policy = root / "policy.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    return Workload(capture, load_recorded_rows(baseline, mapping).rows, policy)


@pytest.fixture
def servers(workload: Workload) -> Iterator[dict[str, str]]:
    """A candidate three times slower than recorded, and a replica at the recorded pace."""
    with ExitStack() as stack:
        urls = {}
        for name, model, scale in (
            ("slow", "candidate-v2", 3.0),
            ("replica", "demo-baseline-v1", 1.0),
        ):
            mock = create_app(
                workload.rows,
                latency=TableLatency(),
                faults=FaultConfig(),
                seed=1,
                model_name=model,
                time_scale=scale,
            )
            urls[name] = stack.enter_context(BackgroundServer(mock)).url
        yield urls


def evaluate(workload: Workload, url: str, db: str, report: Path, *extra: object) -> Result:
    args = [
        "evaluate", "--capture-log", workload.capture, "--candidate-url", url,
        "--database-url", db, "--policy", workload.policy, "--encoder", "hashing",
        "--no-progress", "--report", report, *extra,
    ]  # fmt: skip
    return CliRunner().invoke(app, [str(a) for a in args])


def pooled_p50(report: dict[str, Any]) -> Any:
    verdict = Verdict.model_validate(report["verdict"])
    [check] = [
        c
        for c in verdict.checks
        if c.task_type == "__pooled__" and c.metric == "latency_ttft_ms_p50"
    ]
    return verdict, check


def test_a_slower_candidate_against_the_recorded_baseline_is_report_only(
    workload: Workload, servers: dict[str, str], tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'r.db'}"
    evaluate(workload, servers["slow"], db, tmp_path / "r.json")
    report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    verdict, p50 = pooled_p50(report)
    assert p50.outcome == CheckOutcome.INCONCLUSIVE, p50.reason
    assert p50.estimate is not None
    assert p50.estimate > 1.5  # slower, and said so
    assert ADD_REPLICA in p50.reason
    assert verdict.decision != Decision.ROLLBACK, verdict.reasons
    assert any("report only" in r for r in verdict.reasons)


def test_with_a_replica_the_pairs_are_co_timed_and_latency_is_gated(
    workload: Workload, servers: dict[str, str], tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'r.db'}"
    evaluate(
        workload, servers["slow"], db, tmp_path / "r.json",
        "--baseline-repeat-url", servers["replica"], "--baseline-repeat-share", "1.0",
    )  # fmt: skip
    report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert report["replay"]["co_timed"] == PAIRS
    database = Database(db)
    try:
        scores = Repository(database).load_pair_scores(report["run"]["run_id"])
    finally:
        database.dispose()
    # Warm-up replays are never latency pairs (their latency comes from the recording).
    assert {s.latency_baseline_source for s in scores if not s.candidate_warmup} == {"co_timed"}
    verdict, p50 = pooled_p50(report)
    assert p50.outcome == CheckOutcome.FAIL, p50.reason
    assert "co-timed with the baseline replica" in p50.reason
    assert verdict.decision == Decision.ROLLBACK, verdict.reasons

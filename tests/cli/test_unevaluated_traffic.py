"""Unevaluated traffic end to end (issue 13): ``evaluate`` and ``gate`` through CliRunner.

The capture log is the demo workload's baseline (4 task types × 40 chat requests, seeded)
plus 8 legacy ``/v1/completions`` requests and 15 ``/v1/embeddings`` requests (a route no
replay reads) spread over the task types (each task type stays above ``min_coverage``, and
so does the run: 183 of 198, 92.4%). The candidate is mock-llm (a test double) serving the
baseline's own answers under real uvicorn, on both completion routes. Before issue 13 this
run promoted with "15 skipped" in its last reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner, Result

from shadoweval.capture.table_import import import_table
from shadoweval.capture_log import CaptureLogWriter, read_capture_log
from shadoweval.cli import app
from shadoweval.cli.exit_codes import EXIT_CODES
from shadoweval.records import Decision, RequestRecord, Verdict
from shadoweval.serving import BackgroundServer
from shadoweval.simulation.mock_llm import FaultConfig, TableLatency, create_app
from shadoweval.simulation.workload import DEMO_MAPPING, TASK_TYPES, WorkloadSpec, write_workload
from shadoweval.tables import RecordedRow, TableMapping, load_recorded_rows

PER_TASK_TYPE = 40
COMPLETIONS = 8
RESPONSES = 15
PAIRS = PER_TASK_TYPE * len(TASK_TYPES) + COMPLETIONS
POLICY = f"""\
min_pairs_per_task_type: 30
min_pairs_pooled: 30
error_rate: {{margin: 0.1}}
infra_error_rate: {{margin: 0.1}}
format_parse: {{margin: 0.1}}
harm: {{margin: 0.1}}
tool_calls: {{margin: 0.1}}
latency: {{metrics: []}}
sequential: {{first_checkpoint: {PAIRS}, n_max: {PAIRS}}}
"""


@dataclass(frozen=True)
class Workload:
    capture: Path
    rows: list[RecordedRow]
    root: Path


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Workload:
    root = tmp_path_factory.mktemp("unevaluated")
    mapping = TableMapping(**DEMO_MAPPING)
    baseline, _ = write_workload(root / "tables", WorkloadSpec(per_task_type=PER_TASK_TYPE, seed=3))
    capture = root / "capture"
    import_table(baseline, out=capture, mapping=mapping, stream=True)
    chat = [e.exchange for e in read_capture_log(capture) if e.exchange is not None]
    support = [e for e in chat if e.task_type == "support_chat"]
    extra = []
    for i, exchange in enumerate(support[:COMPLETIONS]):
        body = exchange.request.json_body() or {}
        prompt = body["messages"][-1]["content"]
        request = {"model": body["model"], "prompt": prompt, "stream": i % 2 == 0}
        extra.append(
            exchange.model_copy(
                update={
                    "exchange_id": f"cmpl-{i:02d}",
                    "route": "/v1/completions",
                    "request": RequestRecord(
                        path="/v1/completions", body=orjson.dumps(request).decode()
                    ),
                }
            )
        )
    for i in range(RESPONSES):
        exchange = chat[i]
        request = {"model": "demo-baseline-v1", "input": "hi"}
        extra.append(
            exchange.model_copy(
                update={
                    "exchange_id": f"resp-{i:02d}",
                    "task_type": TASK_TYPES[i % len(TASK_TYPES)],
                    "route": "/v1/embeddings",
                    "request": RequestRecord(
                        path="/v1/embeddings", body=orjson.dumps(request).decode()
                    ),
                }
            )
        )
    with CaptureLogWriter(capture) as writer:
        for exchange in extra:
            writer.write(exchange)
    return Workload(capture, load_recorded_rows(baseline, mapping).rows, root)


@pytest.fixture(scope="module")
def candidate_url(workload: Workload) -> Iterator[str]:
    with ExitStack() as stack:
        mock = create_app(
            workload.rows,
            latency=TableLatency(),
            faults=FaultConfig(),
            seed=1,
            model_name="candidate-v2",
            time_scale=0.05,
        )
        yield stack.enter_context(BackgroundServer(mock)).url


def policy_file(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY + extra, encoding="utf-8")
    return path


def cli(*args: object) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def evaluate(workload: Workload, url: str, tmp_path: Path, policy: Path) -> tuple[Result, dict]:  # type: ignore[type-arg]
    report = tmp_path / "report.json"
    result = cli(
        "evaluate", "--capture-log", workload.capture, "--candidate-url", url,
        "--database-url", f"sqlite:///{tmp_path / 'r.db'}", "--policy", policy,
        "--encoder", "hashing", "--no-progress", "--report", report, "--json",
    )  # fmt: skip
    return result, json.loads(report.read_text(encoding="utf-8"))


def test_a_captured_route_that_is_never_replayed_holds_naming_it(
    workload: Workload, candidate_url: str, tmp_path: Path
) -> None:
    result, report = evaluate(workload, candidate_url, tmp_path, policy_file(tmp_path))
    verdict = Verdict.model_validate(report["verdict"])
    assert verdict.decision is Decision.HOLD, verdict.reasons
    assert result.exit_code == EXIT_CODES[Decision.HOLD]
    assert verdict.reasons[0].startswith(
        "15 exchanges on /v1/embeddings were captured but not replayed (reason: route not "
        "replayable: /v1/embeddings)"
    )
    coverage = report["coverage"]
    assert coverage["captured"] == PAIRS + RESPONSES
    assert coverage["paired"] == PAIRS
    by_route = coverage["by_route"]
    assert by_route["/v1/chat/completions"]["paired"] == PER_TASK_TYPE * len(TASK_TYPES)
    assert by_route["/v1/completions"] | {"skip_reasons": {}} == {
        "captured": COMPLETIONS,
        "replayed": COMPLETIONS,
        "skipped": 0,
        "paired": COMPLETIONS,
        "skip_reasons": {},
        "evaluated": True,
    }
    assert by_route["/v1/embeddings"]["evaluated"] is False
    assert by_route["/v1/embeddings"]["skipped"] == RESPONSES
    assert coverage["by_task_type"]["support_chat"] == {
        "captured": PER_TASK_TYPE + COMPLETIONS + 4,
        "paired": PER_TASK_TYPE + COMPLETIONS,
        "share": pytest.approx((PER_TASK_TYPE + COMPLETIONS) / (PER_TASK_TYPE + COMPLETIONS + 4)),
    }
    # The text output names the route too.
    assert "/v1/embeddings 0/15 (15 skipped) not evaluated" in " ".join(result.stderr.split())
    # The completions were answered from choices[0].text and scored like the chat pairs.
    assert report["replay"]["sent"] == {"candidate": PAIRS}
    assert report["replay"]["skipped"] == {"candidate": RESPONSES}
    assert report["replay"]["errors"] == {}


def test_exempting_the_route_in_the_policy_promotes_and_still_names_it(
    workload: Workload, candidate_url: str, tmp_path: Path
) -> None:
    policy = policy_file(tmp_path, "routes:\n  /v1/embeddings: {required: false}\n")
    result, report = evaluate(workload, candidate_url, tmp_path, policy)
    verdict = Verdict.model_validate(report["verdict"])
    assert verdict.decision is Decision.PROMOTE, verdict.reasons
    assert result.exit_code == EXIT_CODES[Decision.PROMOTE]
    assert any(
        r.startswith("15 exchanges on /v1/embeddings were captured but not replayed")
        and "exempt by the policy" in r
        for r in verdict.reasons
    )


def test_a_policy_task_type_typo_holds_and_is_printed_as_a_warning(
    workload: Workload, candidate_url: str, tmp_path: Path
) -> None:
    policy = policy_file(
        tmp_path,
        "routes:\n  /v1/embeddings: {required: false}\n"
        "task_types:\n  extration: {format_parse: {margin: 0.01}}\n",
    )
    result, report = evaluate(workload, candidate_url, tmp_path, policy)
    verdict = Verdict.model_validate(report["verdict"])
    assert verdict.decision is Decision.HOLD
    assert verdict.reasons[0].startswith(
        "policy: task_types.extration matches no traffic (task types seen: classification, "
        "extraction, summarization, support_chat); did you mean 'extraction'?"
    )
    warning = (
        "warning: policy task_types.extration matches no traffic (task types seen: "
        "classification, extraction, summarization, support_chat); did you mean 'extraction'?"
    )
    assert warning in " ".join(result.stderr.split())
    assert report["policy_warnings"] == [warning.removeprefix("warning: ")]
    # shadow-eval gate prints it too.
    gated = cli(
        "gate", "--run", report["run"]["run_id"], "--database-url", f"sqlite:///{tmp_path / 'r.db'}"
    )
    assert gated.exit_code == EXIT_CODES[Decision.HOLD]
    assert warning in " ".join(gated.stderr.split())
    # and so does a replay into a run under that policy, before anything is scored.
    replayed = cli(
        "replay", "run", "--source", workload.capture, "--candidate-url", candidate_url,
        "--database-url", f"sqlite:///{tmp_path / 'steps.db'}", "--policy", policy,
        "--run-id", "steps", "--no-progress",
    )  # fmt: skip
    assert replayed.exit_code == 0, replayed.stderr
    assert warning in " ".join(replayed.stderr.split())
    assert json.loads(replayed.stdout)["measured_starts"] == PAIRS - 5  # 5 warm-up requests

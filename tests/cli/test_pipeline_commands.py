"""``evaluate``, ``replay run``, ``compare run`` and ``gate`` end to end through CliRunner.

The capture log is the demo workload's baseline (4 task types × 40 requests, seeded); the
candidates are mock-llm servers (test doubles) under real uvicorn: one serving the
baseline's own answers (→ PROMOTE), one serving the workload's candidate answers (a few
broken JSON answers → HOLD), and ones with injected faults (→ ROLLBACK). The policy is
frozen with each run; it is relaxed for 40 pairs per task type, latency is not gated
(mock latencies under test load are not a signal; the harm detectors and tool behaviour get
the same 10-point margins as the other paired checks), and its one checkpoint is the whole run
(``first_checkpoint = n_max = 160``: a single look at the full level, as a fixed-sample
test; fewer pairs wait for it: HOLD, look 0).
"""

from __future__ import annotations

import dataclasses
import json
import socket
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from shadoweval.capture.table_import import import_table
from shadoweval.cli import app
from shadoweval.cli.exit_codes import EXIT_CODES, EXIT_ERROR
from shadoweval.records import CheckOutcome, Decision, ReplayTarget, Verdict
from shadoweval.serving import BackgroundServer
from shadoweval.simulation.mock_llm import FaultConfig, TableLatency, create_app
from shadoweval.simulation.workload import DEMO_MAPPING, TASK_TYPES, WorkloadSpec, write_workload
from shadoweval.storage import Database, Repository
from shadoweval.tables import RecordedRow, TableMapping, load_recorded_rows

PER_TASK_TYPE = 40
EXCHANGES = PER_TASK_TYPE * len(TASK_TYPES)
POLICY = """\
min_pairs_per_task_type: 30
min_pairs_pooled: 30
error_rate:
  margin: 0.1
infra_error_rate:
  margin: 0.1
format_parse:
  margin: 0.1
harm:
  margin: 0.1
tool_calls:
  margin: 0.1
latency:
  metrics: []
sequential:
  first_checkpoint: 160
  n_max: 160
"""


@dataclass(frozen=True)
class Workload:
    capture: Path
    baseline_rows: list[RecordedRow]
    candidate_rows: list[RecordedRow]
    policy: Path


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Workload:
    root = tmp_path_factory.mktemp("pipeline")
    mapping = TableMapping(**DEMO_MAPPING)
    baseline, candidate = write_workload(
        root / "tables", WorkloadSpec(per_task_type=PER_TASK_TYPE, seed=3)
    )
    imported = import_table(baseline, out=root / "capture", mapping=mapping, stream=True)
    assert imported.written == EXCHANGES
    policy = root / "policy.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    return Workload(
        capture=root / "capture",
        baseline_rows=load_recorded_rows(baseline, mapping).rows,
        candidate_rows=load_recorded_rows(candidate, mapping).rows,
        policy=policy,
    )


ServeModel = Callable[..., str]


@pytest.fixture
def serve_model() -> Iterator[ServeModel]:
    """``serve_model(rows, faults=..., name=...)`` → base URL of a fresh mock-llm server."""
    with ExitStack() as stack:

        def start(
            rows: list[RecordedRow],
            *,
            faults: FaultConfig | None = None,
            name: str = "candidate-v2",
        ) -> str:
            mock = create_app(
                rows,
                latency=TableLatency(),
                faults=faults or FaultConfig(),
                seed=1,
                model_name=name,
                time_scale=0.05,
            )
            server = stack.enter_context(BackgroundServer(mock))
            return server.url

        yield start


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'results.db'}"


def cli(*args: object) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def stderr_text(result: Result) -> str:
    """stderr with rich's line wrapping undone."""
    return " ".join(result.stderr.split())


def evaluate(workload: Workload, url: str, db: str, *extra: object) -> Result:
    return cli(
        "evaluate",
        "--capture-log",
        workload.capture,
        "--candidate-url",
        url,
        "--database-url",
        db,
        "--policy",
        workload.policy,
        "--encoder",
        "hashing",
        "--no-progress",
        *extra,
    )


def with_repo(db: str, fn: Callable[[Repository], Any]) -> Any:
    database = Database(db)
    try:
        return fn(Repository(database))
    finally:
        database.dispose()


def outcomes(verdict: dict[str, Any] | Verdict) -> dict[tuple[str, str], str]:
    v = verdict if isinstance(verdict, Verdict) else Verdict.model_validate(verdict)
    return {(c.task_type, c.metric): c.outcome.value for c in v.checks}


SCENARIOS = {
    "promote": ("baseline", FaultConfig(), Decision.PROMOTE),
    "hold": ("candidate", FaultConfig(), Decision.HOLD),
    # a third of the answers come back empty: the model's failure, not the server's
    "rollback": ("baseline_empty", FaultConfig(), Decision.ROLLBACK),
    # 30% HTTP 500: the serving infrastructure failed, quality cannot be judged
    "infra": ("baseline", FaultConfig(error_rate=0.3), Decision.HOLD),
}


def emptied(rows: list[RecordedRow]) -> list[RecordedRow]:
    """Every third answer empty."""
    return [
        dataclasses.replace(r, output_text="", tool_calls=()) if i % 3 == 0 else r
        for i, r in enumerate(rows)
    ]


def start_scenario(name: str, workload: Workload, serve_model: ServeModel) -> str:
    table, faults, _ = SCENARIOS[name]
    rows = {
        "baseline": workload.baseline_rows,
        "baseline_empty": emptied(workload.baseline_rows),
        "candidate": workload.candidate_rows,
    }[table]
    return serve_model(rows, faults=faults)


# ---------------------------------------------------------------------- evaluate


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_evaluate_end_to_end_report_and_exit_code(
    scenario: str, workload: Workload, serve_model: ServeModel, db: str, tmp_path: Path
) -> None:
    url = start_scenario(scenario, workload, serve_model)
    report_path = tmp_path / "out" / "report.json"
    result = evaluate(workload, url, db, "--report", report_path, "--json")

    expected = SCENARIOS[scenario][2]
    report = json.loads(report_path.read_text(encoding="utf-8"))
    decision = Decision(report["verdict"]["decision"])
    assert decision is expected, report["verdict"]["reasons"]
    assert result.exit_code == EXIT_CODES[decision], result.stderr
    # --json prints exactly the verdict on stdout (the table goes to stderr).
    assert Verdict.model_validate_json(result.stdout).decision is decision

    assert {row["task_type"] for row in report["per_task_type"]} >= set(TASK_TYPES)
    for row in report["per_task_type"]:
        if row["task_type"] in TASK_TYPES:
            assert row["n"] == PER_TASK_TYPE
            assert row["outcome"] in {o.value for o in CheckOutcome}
    assert report["replay"]["lines_read"] == EXCHANGES
    assert report["replay"]["sent"] == {"candidate": EXCHANGES}
    assert report["rejected"] == {}
    assert report["compare"]["scored"] == EXCHANGES
    assert report["run"]["candidate"]["name"] == "candidate-v2"  # read from /v1/models
    assert report["run"]["baseline"]["name"] == "demo-baseline-v1"
    assert report["verdict"]["coverage"]["captured"] == EXCHANGES
    assert set(report["stages_s"]) == {"setup", "replay", "load_encoder", "compare", "gate"}
    failed = {k for k, v in outcomes(report["verdict"]).items() if v == "fail"}
    if decision is Decision.ROLLBACK:
        assert ("__pooled__", "error_rate") in failed
    if scenario == "infra":
        assert report["replay"]["errors"]["http_status"] > 0
        assert ("__pooled__", "infra_error_rate") in failed
        assert ("__pooled__", "error_rate") not in failed
        assert report["verdict"]["reasons"][0].startswith("infrastructure:")
    elif decision is Decision.HOLD:
        not_passed = {k for k, v in outcomes(report["verdict"]).items() if v != "pass"}
        assert ("extraction", "format_parse") in not_passed


def test_evaluate_with_a_baseline_repeat_replica(
    workload: Workload, serve_model: ServeModel, db: str, tmp_path: Path
) -> None:
    candidate = serve_model(workload.baseline_rows)
    replica = serve_model(workload.baseline_rows, name="demo-baseline-v1")
    result = evaluate(
        workload,
        candidate,
        db,
        "--baseline-repeat-url",
        replica,
        "--baseline-repeat-share",
        "0.5",
        "--report",
        tmp_path / "r.json",
    )
    report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert result.exit_code == EXIT_CODES[Decision(report["verdict"]["decision"])]
    sent = report["replay"]["sent"]
    assert sent["candidate"] == EXCHANGES
    assert 0.3 * EXCHANGES <= sent["baseline_repeat"] <= 0.7 * EXCHANGES
    repeats = with_repo(
        db,
        lambda r: r.load_outcomes(report["run"]["run_id"], ReplayTarget.BASELINE_REPEAT),
    )
    assert len(repeats) == sent["baseline_repeat"]
    assert {o.model.name for o in repeats} == {"demo-baseline-v1"}


# ------------------------------------------------------------ step by step = evaluate


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_replay_compare_gate_give_the_same_decision_as_evaluate(
    scenario: str, workload: Workload, serve_model: ServeModel, tmp_path: Path
) -> None:
    one_db = f"sqlite:///{tmp_path / 'one.db'}"
    steps_db = f"sqlite:///{tmp_path / 'steps.db'}"
    evaluated = evaluate(
        workload, start_scenario(scenario, workload, serve_model), one_db, "--json"
    )
    one = Verdict.model_validate_json(evaluated.stdout)

    url = start_scenario(scenario, workload, serve_model)
    replayed = cli(
        "replay", "run", "--source", workload.capture, "--candidate-url", url,
        "--database-url", steps_db, "--policy", workload.policy, "--run-id", "steps",
        "--no-progress",
    )  # fmt: skip
    assert replayed.exit_code == 0, replayed.stderr
    counts = json.loads(replayed.stdout)
    assert counts["run_id"] == "steps"
    assert sum(counts["sent"].values()) == EXCHANGES

    compared = cli(
        "compare", "run", "--run", "steps", "--database-url", steps_db, "--encoder", "hashing"
    )
    assert compared.exit_code == 0, compared.stderr
    assert json.loads(compared.stdout)["scored"] == EXCHANGES

    gated = cli("gate", "--run", "steps", "--database-url", steps_db, "--json")
    steps = Verdict.model_validate_json(gated.stdout)

    assert steps.decision is one.decision is SCENARIOS[scenario][2]
    assert gated.exit_code == evaluated.exit_code == EXIT_CODES[one.decision]
    assert outcomes(steps) == outcomes(one)
    assert steps.policy_hash == one.policy_hash


def test_gate_before_compare_is_hold_never_promote(
    workload: Workload, serve_model: ServeModel, db: str
) -> None:
    url = serve_model(workload.baseline_rows)
    replayed = cli(
        "replay", "run", "--source", workload.capture, "--candidate-url", url,
        "--database-url", db, "--policy", workload.policy, "--run-id", "early", "--no-progress",
    )  # fmt: skip
    assert replayed.exit_code == 0, replayed.stderr
    gated = cli("gate", "--run", "early", "--database-url", db, "--json")
    assert gated.exit_code == EXIT_CODES[Decision.HOLD]
    verdict = Verdict.model_validate_json(gated.stdout)
    assert verdict.decision is Decision.HOLD
    assert verdict.reasons  # says why


def test_replay_run_twice_resumes_and_sends_nothing_new(
    workload: Workload, serve_model: ServeModel, db: str
) -> None:
    url = serve_model(workload.baseline_rows)
    args = (
        "replay", "run", "--source", workload.capture, "--candidate-url", url,
        "--database-url", db, "--policy", workload.policy, "--run-id", "again", "--no-progress",
    )  # fmt: skip
    first = cli(*args)
    second = cli(*args)
    assert first.exit_code == second.exit_code == 0
    assert json.loads(first.stdout)["sent"] == {"candidate": EXCHANGES}
    again = json.loads(second.stdout)
    assert again["sent"] == {}
    assert again["already_done"] == EXCHANGES
    stored = with_repo(db, lambda r: r.load_outcomes("again"))
    assert len(stored) == EXCHANGES
    assert len({o.exchange_id for o in stored}) == EXCHANGES


# ------------------------------------------------------------------------ errors


def test_gate_on_an_unknown_run_exits_3(db: str) -> None:
    with_repo(db, lambda r: r.database.upgrade())
    result = cli("gate", "--run", "no-such-run", "--database-url", db)
    assert result.exit_code == EXIT_ERROR
    assert "run 'no-such-run' not found" in stderr_text(result)


def test_compare_on_an_unknown_run_exits_3(db: str) -> None:
    with_repo(db, lambda r: r.database.upgrade())
    result = cli("compare", "run", "--run", "no-such-run", "--database-url", db)
    assert result.exit_code == EXIT_ERROR
    assert "run 'no-such-run' not found" in stderr_text(result)


def test_gate_with_another_policy_exits_3_and_stores_nothing(
    workload: Workload, serve_model: ServeModel, db: str, tmp_path: Path
) -> None:
    url = start_scenario("hold", workload, serve_model)
    first = evaluate(workload, url, db, "--run-id", "r1")
    assert first.exit_code == EXIT_CODES[Decision.HOLD]
    other = tmp_path / "other.yaml"
    other.write_text(POLICY.replace("margin: 0.1", "margin: 0.05"), encoding="utf-8")

    result = cli("gate", "--run", "r1", "--database-url", db, "--policy", other)
    assert result.exit_code == EXIT_ERROR
    message = stderr_text(result)
    assert f"policy {other}" in message
    assert "a different policy means a new run" in message
    assert len(with_repo(db, lambda r: r.verdict_history("r1"))) == 1

    # The run's own policy is accepted as a check.
    same = cli("gate", "--run", "r1", "--database-url", db, "--policy", workload.policy)
    assert same.exit_code == EXIT_CODES[Decision.HOLD]

    # So does evaluate when resuming the run under another policy.
    resumed = evaluate(workload, url, db, "--run-id", "r1", "--policy", other)
    assert resumed.exit_code == EXIT_ERROR
    assert "a different policy means a new run" in stderr_text(resumed)


@pytest.mark.parametrize(
    ("policy", "field", "value"),
    [
        ("error_rate:\n  margin: -0.01\n", "error_rate.margin", "-0.01"),
        ("format_parse:\n  margin: 0\n", "format_parse.margin", "0"),
        ("alpha: 0.7\n", "alpha", "0.7"),
        ("latency:\n  p50_ratio_max: 0.9\n", "latency.p50_ratio_max", "0.9"),
    ],
)
def test_invalid_policy_exits_3_naming_field_and_value(
    workload: Workload, db: str, tmp_path: Path, policy: str, field: str, value: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(policy, encoding="utf-8")
    result = evaluate(workload, "http://127.0.0.1:9", db, "--policy", path)
    assert result.exit_code == EXIT_ERROR
    message = stderr_text(result)
    assert f"policy field {field} = {value}" in message
    assert with_repo(db, lambda r: r.list_runs()) == []  # nothing was started


def test_missing_policy_file_exits_3(workload: Workload, db: str, tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    for result in (
        evaluate(workload, "http://127.0.0.1:9", db, "--policy", missing),
        cli(
            "replay",
            "run",
            "--source",
            workload.capture,
            "--candidate-url",
            "http://127.0.0.1:9",
            "--candidate-model",
            "m",
            "--database-url",
            db,
            "--policy",
            missing,
        ),
    ):
        assert result.exit_code == EXIT_ERROR
        assert f"gate policy file not found: {missing}" in stderr_text(result)


def test_missing_capture_log_exits_3(workload: Workload, db: str, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-log"
    common = ("--candidate-url", "http://127.0.0.1:9", "--candidate-model", "m")
    for result in (
        cli("evaluate", "--capture-log", missing, *common, "--database-url", db),
        cli("replay", "run", "--source", missing, *common, "--database-url", db),
    ):
        assert result.exit_code == EXIT_ERROR
        assert f"capture log not found: {missing}" in stderr_text(result)


def test_capture_log_without_any_exchange_exits_3(db: str, tmp_path: Path) -> None:
    log = tmp_path / "cap"
    log.mkdir()
    (log / "exchanges-1.jsonl").write_text('{"not": "an exchange"}\n{broken\n')
    result = cli(
        "evaluate", "--capture-log", log, "--candidate-url", "http://127.0.0.1:9",
        "--candidate-model", "m", "--database-url", db,
    )  # fmt: skip
    assert result.exit_code == EXIT_ERROR
    assert "holds no decodable exchange" in stderr_text(result)


@pytest.mark.parametrize(
    ("option", "value", "field"),
    [("--timeout", "0", "replay.timeout_s"), ("--concurrency", "0", "replay.concurrency")],
)
def test_out_of_range_option_exits_3_naming_it(
    workload: Workload, db: str, option: str, value: str, field: str
) -> None:
    result = evaluate(workload, "http://127.0.0.1:9", db, "--candidate-model", "m", option, value)
    assert result.exit_code == EXIT_ERROR
    assert f"{field} = " in stderr_text(result)


def test_unknown_candidate_model_without_models_endpoint_exits_3(
    workload: Workload, db: str
) -> None:
    result = evaluate(workload, f"http://127.0.0.1:{closed_port()}", db)
    assert result.exit_code == EXIT_ERROR
    assert "/v1/models" in stderr_text(result)


@pytest.mark.parametrize(
    "url",
    ["not a url", "bogus://x/y", "postgresql+psycopg://nobody@127.0.0.1:1/x"],
)
def test_unusable_database_exits_3(url: str) -> None:
    for result in (
        cli("gate", "--run", "x", "--database-url", url),
        cli("compare", "run", "--run", "x", "--database-url", url),
    ):
        assert result.exit_code == EXIT_ERROR
        assert "error:" in stderr_text(result)


@pytest.mark.parametrize(
    "args",
    [["gate", "--run", "x", "--no-such-option"], ["gate"], ["evaluate", "--capture-log", "x"]],
)
def test_usage_errors_exit_3_not_a_decision_code(args: list[str]) -> None:
    result = cli(*args)
    assert result.exit_code == EXIT_ERROR


def test_gate_writes_junit_xml(
    workload: Workload, serve_model: ServeModel, db: str, tmp_path: Path
) -> None:
    url = start_scenario("hold", workload, serve_model)
    assert evaluate(workload, url, db, "--run-id", "j").exit_code == EXIT_CODES[Decision.HOLD]
    junit = tmp_path / "gate.xml"
    result = cli("gate", "--run", "j", "--database-url", db, "--junit", junit)
    assert result.exit_code == EXIT_CODES[Decision.HOLD]
    assert "<testsuite" in junit.read_text(encoding="utf-8")


# ------------------------------------------------------- broken candidates never crash


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_candidate_answering_html_to_everything_is_counted_never_promoted(
    workload: Workload, serve_model: ServeModel, db: str, tmp_path: Path
) -> None:
    url = serve_model(workload.baseline_rows, faults=FaultConfig(html_rate=1.0))
    result = evaluate(workload, url, db, "--report", tmp_path / "r.json")
    report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    decision = Decision(report["verdict"]["decision"])
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert decision is not Decision.PROMOTE
    assert result.exit_code == EXIT_CODES[decision]
    assert report["replay"]["errors"] == {"http_status": EXCHANGES}
    assert report["replay"]["ok"] == {}
    assert report["verdict"]["coverage"]["errored"] == EXCHANGES
    for row in report["per_task_type"]:
        if row["task_type"] in TASK_TYPES:
            assert row["candidate_infra_error_rate"] == 1.0


def test_unreachable_candidate_is_counted_never_promoted(
    workload: Workload, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHADOWEVAL_REPLAY__CONNECT_RETRIES", "0")
    url = f"http://127.0.0.1:{closed_port()}"
    # The preflight stops before the replay, naming the URL requested (issue 29).
    stopped = evaluate(workload, url, db, "--candidate-model", "m", "--run-id", "stopped")
    assert stopped.exit_code == EXIT_ERROR
    assert f"POST {url}/v1/chat/completions" in stderr_text(stopped)
    # Without it, every replay fails to connect: counted as infrastructure, never promoted.
    result = evaluate(
        workload, url, db, "--candidate-model", "m", "--report", tmp_path / "r.json",
        "--no-preflight",
    )  # fmt: skip
    report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    decision = Decision(report["verdict"]["decision"])
    assert decision is Decision.HOLD
    assert result.exit_code == EXIT_CODES[decision]
    assert report["replay"]["errors"] == {"connect": EXCHANGES}


# ------------------------------------------------------------------ terminal verdicts


@pytest.mark.parametrize("scenario", ["promote", "rollback"])
def test_promote_and_rollback_are_terminal(
    scenario: str, workload: Workload, serve_model: ServeModel, db: str
) -> None:
    url = start_scenario(scenario, workload, serve_model)
    first = evaluate(workload, url, db, "--run-id", "t", "--json")
    stored = Verdict.model_validate_json(first.stdout)
    assert stored.decision is SCENARIOS[scenario][2]

    again = cli("gate", "--run", "t", "--database-url", db, "--json")
    assert again.exit_code == first.exit_code == EXIT_CODES[stored.decision]
    assert "(terminal verdict: returned as stored)" in stderr_text(again)
    returned = Verdict.model_validate_json(again.stdout)
    assert returned == stored
    history = with_repo(db, lambda r: r.verdict_history("t"))
    assert len(history) == 1


def test_hold_is_not_terminal_and_a_gate_between_checkpoints_repeats_its_look(
    workload: Workload, serve_model: ServeModel, db: str
) -> None:
    # The look is the checkpoint index (changed with the sequential gate): the whole run
    # is the policy's only checkpoint (160). Each checkpoint is evaluated once: gating
    # again at the same look returns the stored verdict (the same one, not stored again).
    url = start_scenario("hold", workload, serve_model)
    first = Verdict.model_validate_json(
        evaluate(workload, url, db, "--run-id", "h", "--json").stdout
    )
    assert first.look == 1
    again = cli("gate", "--run", "h", "--database-url", db, "--json")
    assert again.exit_code == EXIT_CODES[Decision.HOLD]
    second = Verdict.model_validate_json(again.stdout)
    assert second == first
    assert "each checkpoint is evaluated once" in again.stdout + stderr_text(again)
    assert len(with_repo(db, lambda r: r.verdict_history("h"))) == 1


# --------------------------------------------------------------- bugs (reported)


def test_resuming_a_run_with_another_candidate_model_is_refused(
    workload: Workload, serve_model: ServeModel, db: str
) -> None:
    first_url = serve_model(workload.baseline_rows, name="candidate-v2")
    first = cli(
        "replay", "run", "--source", workload.capture, "--candidate-url", first_url,
        "--database-url", db, "--policy", workload.policy, "--run-id", "mix", "--no-progress",
    )  # fmt: skip
    assert first.exit_code == 0
    other_url = serve_model(workload.candidate_rows, name="candidate-v3")
    resumed = evaluate(workload, other_url, db, "--run-id", "mix")
    assert resumed.exit_code == EXIT_ERROR
    assert "candidate-v3" in stderr_text(resumed)


@pytest.mark.parametrize("odd", ["[bold]", "[/]"])
def test_error_messages_are_printed_verbatim(odd: str, db: str, tmp_path: Path) -> None:
    missing = tmp_path / odd / "log"
    result = cli(
        "evaluate", "--capture-log", missing, "--candidate-url", "http://127.0.0.1:9",
        "--candidate-model", "m", "--database-url", db,
    )  # fmt: skip
    assert result.exit_code == EXIT_ERROR
    assert f"capture log not found: {missing}" in stderr_text(result)


# ------------------------------------------------------------------ real encoder


@pytest.mark.model
def test_evaluate_with_the_real_minilm_encoder(
    workload: Workload, serve_model: ServeModel, db: str, tmp_path: Path
) -> None:
    url = start_scenario("promote", workload, serve_model)
    result = evaluate(workload, url, db, "--encoder", "minilm", "--report", tmp_path / "r.json")
    report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert report["verdict"]["decision"] == "promote", report["verdict"]["reasons"]
    assert result.exit_code == 0
    for row in report["per_task_type"]:
        assert row["similarity_mean"] == pytest.approx(1.0, abs=1e-4)


def test_gate_on_a_database_that_does_not_exist_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "nothing-here.db"
    result = cli("gate", "--run", "r", "--database-url", f"sqlite:///{missing}")
    assert result.exit_code == EXIT_ERROR
    assert "does not exist" in stderr_text(result)
    assert not missing.exists()


def test_unwritable_report_path_fails_before_the_run(
    workload: Workload, db: str, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x", encoding="utf-8")
    result = evaluate(workload, "http://127.0.0.1:9", db, "--report", blocker / "r.json")
    assert result.exit_code == EXIT_ERROR
    assert "--report" in stderr_text(result)

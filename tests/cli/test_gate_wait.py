"""``shadow-eval gate --wait``, the JUnit report and the policy audit through the commands.

Two runs are evaluated for real once per module (the demo workload replayed to mock-llm
servers under uvicorn, scored with the hashing encoder): one that PROMOTEs and one that
ROLLs BACK. Runs that grow while ``gate --wait`` polls are clones of those runs made
through the Repository: their exchanges and replay outcomes first, their pair scores later
(from another thread, as a compare worker would add them).
"""

from __future__ import annotations

import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from shadoweval.cli.exit_codes import EXIT_CODES, EXIT_ERROR
from shadoweval.cli.gate_cmd import parse_duration
from shadoweval.cli.junit import verdict_junit_xml
from shadoweval.errors import ConfigError
from shadoweval.records import (
    POOLED,
    Check,
    CheckOutcome,
    Coverage,
    Decision,
    Verdict,
)
from shadoweval.serving import BackgroundServer
from shadoweval.simulation.mock_llm import FaultConfig, TableLatency, create_app
from shadoweval.storage import Database, PolicyAuditAction, Repository
from shadoweval.tables import RecordedRow
from tests.cli.test_pipeline_commands import (
    POLICY,
    Workload,
    cli,
    emptied,
    evaluate,
    stderr_text,
    workload,
)
from tests.waiting import wait_until

__all__ = ["workload"]  # the module-scoped fixture, shared with test_pipeline_commands

PROMOTE, HOLD, ROLLBACK = (EXIT_CODES[d] for d in Decision)  # 0, 1, 2


def serve_and_evaluate(workload: Workload, rows: list[RecordedRow], db: str, run_id: str) -> int:
    app = create_app(
        rows,
        latency=TableLatency(),
        faults=FaultConfig(),
        seed=1,
        model_name="candidate-v2",
        time_scale=0.05,
    )
    with BackgroundServer(app) as server:
        return evaluate(workload, server.url, db, "--run-id", run_id).exit_code


@pytest.fixture(scope="module")
def evaluated(workload: Workload, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database file holding run ``promoted`` (the candidate answers as the baseline did:
    PROMOTE, as in test_pipeline_commands) and run ``rolled`` (a third of the answers
    empty: ROLLBACK)."""
    path = tmp_path_factory.mktemp("gate-wait") / "evaluated.db"
    db = f"sqlite:///{path}"
    assert serve_and_evaluate(workload, workload.baseline_rows, db, "promoted") != EXIT_ERROR
    assert serve_and_evaluate(workload, emptied(workload.baseline_rows), db, "rolled") == 2
    return path


@pytest.fixture
def db(evaluated: Path, tmp_path: Path) -> str:
    """A private copy of the evaluated database (tests add runs and verdicts to it)."""
    copy = tmp_path / "results.db"
    copy.write_bytes(evaluated.read_bytes())
    return f"sqlite:///{copy}"


@pytest.fixture
def repo(db: str) -> Iterator[Repository]:
    database = Database(db)
    try:
        yield Repository(database)
    finally:
        database.dispose()


def clone_without_scores(repo: Repository, source: str, run_id: str) -> None:
    """Make ``run_id``: ``source``'s population and replays under its policy, no scores yet."""
    run = repo.get_run(source)
    assert run is not None
    repo.create_run(
        run_id=run_id,
        name=f"clone of {source}",
        baseline=run.baseline,
        candidate=run.candidate,
        policy_hash=run.policy_hash,
        policy_yaml=run.policy_yaml,
        command="test clone",
    )
    for batch in repo.iter_pair_inputs(source):
        repo.save_exchanges(run_id, [exchange for exchange, _, _ in batch])
        repo.save_outcomes([c.model_copy(update={"run_id": run_id}) for _, c, _ in batch])


def copy_scores(repo: Repository, source: str, run_id: str, share: float = 1.0) -> int:
    """Give ``run_id`` the first ``share`` of ``source``'s pair scores; returns how many."""
    scores = repo.load_pair_scores(source)
    chosen = scores[: round(len(scores) * share)]
    return repo.save_pair_scores([s.model_copy(update={"run_id": run_id}) for s in chosen])


def gate(db: str, run_id: str, *extra: object) -> tuple[int, str, float]:
    start = time.monotonic()
    result = cli("gate", "--run", run_id, "--database-url", db, *extra)
    return result.exit_code, stderr_text(result), time.monotonic() - start


def poll_lines(stderr: str) -> list[str]:
    return [part for part in stderr.split("gate run ")[1:] if " poll " in part[:40]]


# ------------------------------------------------------------------------ --wait


def test_a_run_that_stays_on_hold_exits_1_when_the_wait_runs_out(repo: Repository, db: str) -> None:
    clone_without_scores(repo, "promoted", "half")
    copy_scores(repo, "promoted", "half", share=0.5)  # coverage 50% < min_coverage: HOLD
    code, stderr, elapsed = gate(db, "half", "--wait", "5s", "--poll-interval", "0.5s")
    assert code == HOLD == 1
    assert 5.0 <= elapsed < 60.0  # it waited the 5 s out; the upper end bounds a hang
    lines = poll_lines(stderr)
    # the first poll, then at least one more (how many fit in 5 s depends on the machine;
    # a first poll on a loaded machine takes well under the 5 s)
    assert len(lines) >= 2, stderr
    assert all("HOLD" in line for line in lines)
    assert "wait over" in lines[-1]
    assert "next poll in" in lines[0]
    # Polls on unchanged data keep the verdict: one verdict, not one per poll. (Its look is
    # 0: 80 of 160 pairs wait for the policy's first checkpoint, 160 — the look is the
    # checkpoint index since the sequential gate.)
    history = repo.verdict_history("half")
    assert [e.verdict.look for e in history] == [0]
    assert "no new data, verdict kept" in lines[1]


def test_a_run_that_becomes_terminal_mid_wait_returns_at_once_with_its_code(
    repo: Repository, db: str
) -> None:
    clone_without_scores(repo, "rolled", "growing")
    writer_db = Database(db)

    def compare_worker() -> None:
        # the scores arrive once the gate has looked at the run without them (a condition,
        # not a 1 s sleep that a slow first poll could outlast)
        writer = Repository(writer_db)
        wait_until(lambda: writer.verdict_history("growing"), "the gate's first verdict")
        copy_scores(writer, "rolled", "growing")

    worker = threading.Thread(target=compare_worker)
    worker.start()
    try:
        code, stderr, elapsed = gate(
            db, "growing", "--wait", "60s", "--poll-interval", "0.25s", "--json"
        )
    finally:
        worker.join()
        writer_db.dispose()
    assert code == ROLLBACK == 2, stderr
    assert elapsed < 45.0  # before the 60 s wait ran out
    lines = poll_lines(stderr)
    assert len(lines) >= 2
    assert "HOLD" in lines[0]  # no pairs yet
    assert "ROLLBACK" in lines[-1]
    assert "terminal" in lines[-1]
    decisions = [e.verdict.decision for e in repo.verdict_history("growing")]
    assert decisions == [Decision.HOLD, Decision.ROLLBACK]  # one look per change, not per poll
    source = repo.verdict_history("rolled")[-1].verdict
    final = repo.verdict_history("growing")[-1].verdict
    assert {(c.task_type, c.metric, c.outcome) for c in final.checks} == {
        (c.task_type, c.metric, c.outcome) for c in source.checks
    }


def clone_under_policy(repo: Repository, source: str, run_id: str, policy_yaml: str) -> None:
    """Make ``run_id``: ``source``'s population, replays and pair scores under another policy."""
    from shadoweval.stats.policy import parse_policy_yaml, policy_hash

    run = repo.get_run(source)
    assert run is not None
    repo.create_run(
        run_id=run_id,
        name=f"clone of {source}",
        baseline=run.baseline,
        candidate=run.candidate,
        policy_hash=policy_hash(parse_policy_yaml(policy_yaml)),
        policy_yaml=policy_yaml,
        command="test clone",
    )
    for batch in repo.iter_pair_inputs(source):
        repo.save_exchanges(run_id, [exchange for exchange, _, _ in batch])
        repo.save_outcomes([c.model_copy(update={"run_id": run_id}) for _, c, _ in batch])
    copy_scores(repo, source, run_id)


def test_a_final_hold_at_the_sample_cap_returns_at_once_with_exit_1(
    repo: Repository, db: str
) -> None:
    # The workload's policy caps the run at its 160 pairs (n_max 160, one look): with a
    # floor of 1,000 pairs per unit every check is inconclusive at the cap, a final HOLD
    # that no poll can change. --wait returns it at the first poll, not when 120 s ran out.
    capped = POLICY.replace("min_pairs_per_task_type: 30", "min_pairs_per_task_type: 1000")
    capped = capped.replace("min_pairs_pooled: 30", "min_pairs_pooled: 1000")
    clone_under_policy(repo, "promoted", "capped", capped)
    code, stderr, _ = gate(db, "capped", "--wait", "120s", "--poll-interval", "60s")
    assert code == HOLD == 1, stderr
    (line,) = poll_lines(stderr)  # one poll: it did not sleep for a second one
    assert "HOLD" in line
    assert "final HOLD at the sample cap n_max 160: more pairs cannot change it" in line
    assert "next poll" not in line
    history = repo.verdict_history("capped")
    assert [e.verdict.look for e in history] == [1]
    assert history[-1].verdict.decision is Decision.HOLD


@pytest.mark.parametrize(("run_id", "code"), [("promoted", 0), ("rolled", 2)])
def test_a_run_already_terminal_returns_at_once(
    run_id: str, code: int, repo: Repository, db: str
) -> None:
    exit_code, stderr, elapsed = gate(
        db, run_id, "--wait", "120s", "--poll-interval", "60s", "--json"
    )
    assert exit_code == code
    assert elapsed < 60.0  # it did not wait for a second poll
    (line,) = poll_lines(stderr)
    assert "terminal" in line
    assert "(terminal verdict: returned as stored)" in stderr
    assert len(repo.verdict_history(run_id)) == 1


def test_wait_zero_is_a_single_look(repo: Repository, db: str) -> None:
    clone_without_scores(repo, "promoted", "empty")
    code, stderr, _ = gate(db, "empty", "--wait", "0")
    assert code == HOLD
    (line,) = poll_lines(stderr)
    assert "wait over" in line


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--wait", "3x"),
        ("--wait", "-5"),
        ("--wait", ""),
        ("--wait", "1h30"),
        ("--wait", "nan"),
        ("--poll-interval", "soon"),
        ("--poll-interval", "0"),
    ],
)
def test_bad_durations_exit_3_naming_the_option_and_value(option: str, value: str, db: str) -> None:
    args = ["--wait", "1s", option, value] if option == "--poll-interval" else [option, value]
    code, stderr, _ = gate(db, "promoted", *args)
    assert code == EXIT_ERROR
    assert f"{option} {value!r}" in stderr


def test_junit_to_a_directory_exits_3_before_gating(db: str, tmp_path: Path) -> None:
    code, stderr, _ = gate(db, "promoted", "--junit", str(tmp_path))
    assert code == EXIT_ERROR
    assert f"--junit {str(tmp_path)!r} is a directory" in stderr
    assert "Traceback" not in stderr


def test_junit_that_cannot_be_written_exits_3_naming_the_path(db: str, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory", encoding="utf-8")
    target = blocker / "report.xml"  # its parent is a file: mkdir and write fail
    code, stderr, _ = gate(db, "promoted", "--junit", str(target))
    assert code == EXIT_ERROR
    assert f"cannot write --junit {str(target)!r}" in stderr
    assert "was stored" in stderr
    assert "Traceback" not in stderr


def test_unknown_run_with_wait_exits_3(db: str) -> None:
    code, stderr, _ = gate(db, "no-such-run", "--wait", "5s")
    assert code == EXIT_ERROR
    assert "run 'no-such-run' not found" in stderr


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90.0),
        ("15m", 900.0),
        ("2h", 7200.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("45", 45.0),
        ("0.5", 0.5),
        (" 2M ", 120.0),
        ("0", 0.0),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text, "--wait") == seconds


def test_parse_duration_error_names_option_and_value() -> None:
    with pytest.raises(ConfigError, match=r"--poll-interval '2 days' is not a duration") as info:
        parse_duration("2 days", "--poll-interval")
    assert info.value.field == "--poll-interval"


# ------------------------------------------------------------------------- JUnit


def _check(metric: str, task_type: str, outcome: CheckOutcome, **numbers: float) -> Check:
    return Check(
        metric=metric,
        task_type=task_type,
        statistic="tango score",
        outcome=outcome,
        reason=f"{metric} in {task_type}: {outcome.value} — «why» <&>",
        n=120,
        **numbers,
    )


def test_junit_has_one_case_per_task_type_and_check() -> None:
    verdict = Verdict(
        run_id="r-ü",
        decision=Decision.ROLLBACK,
        reasons=("error_rate harm in extraction",),
        checks=(
            _check("error_rate", POOLED, CheckOutcome.PASS, estimate=0.001, p_value=0.002),
            _check(
                "error_rate",
                "extraction",
                CheckOutcome.FAIL,
                estimate=0.08,
                ci_low=0.03,
                ci_high=0.12,
                margin=0.02,
                p_value=0.0004,
            ),
            _check("format_parse", "chat", CheckOutcome.INCONCLUSIVE),
        ),
        coverage=Coverage(
            captured=300, replayed=300, paired=290, errored=4, warmup=0, skipped=0, share=0.97
        ),
        policy_hash="sha256:abc",
        look=3,
    )
    root = ET.fromstring(verdict_junit_xml(verdict))
    (suite,) = root.findall("testsuite")
    assert suite.get("tests") == "3"
    assert suite.get("failures") == "1"
    assert suite.get("skipped") == "1"
    suite_props = {p.get("name"): p.get("value") for p in suite.findall("properties/property")}
    assert suite_props["decision"] == "rollback"
    assert suite_props["look"] == "3"
    assert suite_props["policy_hash"] == "sha256:abc"
    system_out = suite.find("system-out")
    assert system_out is not None
    assert (system_out.text or "").startswith("ROLLBACK")

    cases = {(c.get("classname"), c.get("name")): c for c in suite.findall("testcase")}
    assert set(cases) == {
        ("pooled", "error_rate"),
        ("extraction", "error_rate"),
        ("chat", "format_parse"),
    }
    passed = cases["pooled", "error_rate"]
    assert passed.find("failure") is None
    assert passed.find("skipped") is None

    failed = cases["extraction", "error_rate"]
    failure = failed.find("failure")
    assert failure is not None
    assert failure.get("message") == "error_rate in extraction: fail — «why» <&>"
    props = {p.get("name"): p.get("value") for p in failed.findall("properties/property")}
    assert props == {
        "outcome": "fail",
        "statistic": "tango score",
        "estimate": "0.08",
        "interval_low": "0.03",
        "interval_high": "0.12",
        "margin": "0.02",
        "n": "120",
        "p_value": "0.0004",
        "critical": "false",
    }

    skipped = cases["chat", "format_parse"].find("skipped")
    assert skipped is not None
    assert skipped.get("message") == "format_parse in chat: inconclusive — «why» <&>"
    inconclusive = {
        p.get("name") for p in cases["chat", "format_parse"].findall("properties/property")
    }
    assert "estimate" not in inconclusive  # not computed: left out, never "None"


def test_gate_wait_writes_junit_of_the_last_verdict(
    repo: Repository, db: str, tmp_path: Path
) -> None:
    junit = tmp_path / "reports" / "gate.xml"
    code, _, _ = gate(db, "rolled", "--wait", "5s", "--junit", junit)
    assert code == ROLLBACK
    verdict = repo.verdict_history("rolled")[-1].verdict
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    cases = suite.findall("testcase")
    assert len(cases) == len(verdict.checks)
    expected = {
        ("pooled" if c.task_type == POOLED else c.task_type, c.metric, c.outcome)
        for c in verdict.checks
    }
    found = set()
    for case in cases:
        if case.find("failure") is not None:
            outcome = CheckOutcome.FAIL
        elif case.find("skipped") is not None:
            outcome = CheckOutcome.INCONCLUSIVE
        else:
            outcome = CheckOutcome.PASS
        found.add((case.get("classname"), case.get("name"), outcome))
    assert found == expected
    assert any(outcome is CheckOutcome.FAIL for _, _, outcome in found)


# --------------------------------------------------------------- policy audit log


def test_commands_audit_the_policy_they_create_use_and_refuse(
    repo: Repository, db: str, tmp_path: Path, workload: Workload
) -> None:
    created = repo.policy_audit("rolled")
    assert [(e.action, e.command) for e in created] == [
        (PolicyAuditAction.CREATED, "shadow-eval evaluate")
    ]
    assert created[0].detail == {"policy_path": str(workload.policy.resolve())}
    run = repo.get_run("rolled")
    assert run is not None
    assert created[0].policy_hash == run.policy_hash
    assert created[0].actor

    other = tmp_path / "other.yaml"
    other.write_text(POLICY.replace("margin: 0.1", "margin: 0.05"), encoding="utf-8")
    refused, stderr, _ = gate(db, "rolled", "--policy", other)
    assert refused == EXIT_ERROR
    assert "a different policy means a new run" in stderr
    same, _, _ = gate(db, "rolled", "--policy", workload.policy)
    assert same == ROLLBACK
    plain, _, _ = gate(db, "rolled")
    assert plain == ROLLBACK

    log = repo.policy_audit("rolled")
    assert [(e.action, e.command) for e in log] == [
        (PolicyAuditAction.CREATED, "shadow-eval evaluate"),
        (PolicyAuditAction.REFUSED, "shadow-eval gate"),
        (PolicyAuditAction.USED, "shadow-eval gate"),
        (PolicyAuditAction.USED, "shadow-eval gate"),
    ]
    refusal = log[1]
    assert refusal.policy_hash != run.policy_hash
    assert refusal.detail["run_policy_hash"] == run.policy_hash
    assert refusal.detail["presented_policy_hash"] == refusal.policy_hash
    assert refusal.detail["policy_path"] == str(other.resolve())
    assert log[2].policy_hash == run.policy_hash
    assert log[3].detail == {"policy_path": None, "policy_source": "run"}


def test_resuming_a_run_under_another_policy_is_refused_and_audited(
    repo: Repository, db: str, tmp_path: Path, workload: Workload
) -> None:
    other = tmp_path / "other.yaml"
    other.write_text(POLICY.replace("margin: 0.1", "margin: 0.05"), encoding="utf-8")
    app = create_app(
        workload.baseline_rows,
        latency=TableLatency(),
        faults=FaultConfig(),
        seed=1,
        model_name="candidate-v2",
        time_scale=0.05,
    )
    with BackgroundServer(app) as server:
        refused = evaluate(workload, server.url, db, "--run-id", "rolled", "--policy", other)
        resumed = evaluate(workload, server.url, db, "--run-id", "rolled")
    assert refused.exit_code == EXIT_ERROR
    assert resumed.exit_code == ROLLBACK  # resumed: nothing new to replay, terminal verdict
    actions = [(e.action, e.command) for e in repo.policy_audit("rolled")]
    assert actions == [
        (PolicyAuditAction.CREATED, "shadow-eval evaluate"),
        (PolicyAuditAction.REFUSED, "shadow-eval evaluate"),
        (PolicyAuditAction.USED, "shadow-eval evaluate"),
    ]

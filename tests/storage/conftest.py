"""Storage fixtures: every test runs on SQLite (a tmp file) and on PostgreSQL.

PostgreSQL tests get a fresh schema per test (``empty_url`` in ``tests/conftest.py``, made
from the session ``pg_url`` fixture, which fails under ``CI=true`` when the server is
unreachable and skips locally).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shadoweval.storage import Database, Repository


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

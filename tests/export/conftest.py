"""Export fixtures: a seeded run on SQLite and on PostgreSQL (``empty_url``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shadoweval.storage import Database, Repository
from tests.export.seed import Seeded, seed_run


@pytest.fixture
def db_url(empty_url: str) -> str:
    """An upgraded, empty database (SQLite file or fresh PostgreSQL schema)."""
    with Database(empty_url) as db:
        db.upgrade()
    return empty_url


@pytest.fixture
def repo(db_url: str) -> Iterator[Repository]:
    with Database(db_url) as db:
        yield Repository(db)


@pytest.fixture
def seeded(repo: Repository) -> Seeded:
    """The run of :func:`tests.export.seed.seed_run` (no secrets in it)."""
    return seed_run(repo)

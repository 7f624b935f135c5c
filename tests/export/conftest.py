"""Export fixtures: a seeded run on SQLite and on PostgreSQL (``empty_url``)."""

from __future__ import annotations

import pytest

from shadoweval.storage import Repository
from tests.export.seed import Seeded, seed_run


@pytest.fixture
def seeded(repo: Repository) -> Seeded:
    """The run of :func:`tests.export.seed.seed_run` (no secrets in it)."""
    return seed_run(repo)

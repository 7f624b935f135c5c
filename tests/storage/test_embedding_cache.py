"""The embedding cache table: many-hash lookups, idempotent inserts, migration 0007.

SQLite and PostgreSQL (``repo``/``database`` fixtures of ``tests/storage/conftest.py``).
"""

from __future__ import annotations

import struct

import pytest
from alembic import command

from shadoweval.storage import CachedEmbedding, Database, Repository, head_revision
from shadoweval.storage.database import alembic_config

KEY = "sentence-transformers/all-MiniLM-L6-v2@0123456789abcdef:torch-fp32-cpu"


def item(n: int, *, value: float = 0.5, dimension: int = 4) -> CachedEmbedding:
    return CachedEmbedding(
        text_sha256=f"{n:064x}",
        dimension=dimension,
        vector_f32le=struct.pack(f"<{dimension}f", *([value] * dimension)),
        tokens=n,
        chunks=1 + n % 3,
        truncated=n % 2 == 1,
    )


def test_lookup_returns_exactly_what_was_stored(repo: Repository) -> None:
    items = [item(n) for n in range(3)]
    assert repo.save_embeddings(KEY, items) == 3
    found = repo.lookup_embeddings(KEY, [i.text_sha256 for i in items] + ["f" * 64])
    assert found == {i.text_sha256: i for i in items}
    assert repo.lookup_embeddings(KEY, []) == {}


def test_first_write_wins_and_a_repeat_is_not_an_error(repo: Repository) -> None:
    assert repo.save_embeddings(KEY, [item(1, value=0.25)]) == 1
    assert repo.save_embeddings(KEY, [item(1, value=0.75), item(2)]) == 1
    assert repo.lookup_embeddings(KEY, [item(1).text_sha256])[item(1).text_sha256] == item(
        1, value=0.25
    )
    assert repo.count_embeddings(KEY) == 2


def test_keys_are_separate(repo: Repository) -> None:
    repo.save_embeddings(KEY, [item(1)])
    repo.save_embeddings("hashing-256:v1", [item(1, value=0.1)])
    assert repo.lookup_embeddings("hashing-256:v1", [item(1).text_sha256]) == {
        item(1).text_sha256: item(1, value=0.1)
    }
    assert repo.count_embeddings() == 2
    assert repo.lookup_embeddings("other@x:y", [item(1).text_sha256]) == {}


def test_many_hashes_at_once_over_the_chunk_size(repo: Repository) -> None:
    items = [item(n, dimension=384) for n in range(1_203)]
    assert repo.save_embeddings(KEY, items) == 1_203
    found = repo.lookup_embeddings(KEY, [i.text_sha256 for i in items])
    assert len(found) == 1_203
    assert found[items[-1].text_sha256] == items[-1]


def test_a_vector_of_the_wrong_length_is_refused(repo: Repository) -> None:
    bad = CachedEmbedding(
        text_sha256="a" * 64, dimension=4, vector_f32le=b"\0" * 12, tokens=1, chunks=1,
        truncated=False,
    )  # fmt: skip
    with pytest.raises(ValueError, match="12 vector bytes for dimension 4"):
        repo.save_embeddings(KEY, [bad])
    assert repo.count_embeddings() == 0


def test_migration_0007_down_and_up(database: Database) -> None:
    repo = Repository(database)
    repo.save_embeddings(KEY, [item(1)])
    assert database.current_revision() == head_revision()
    with database.connect() as connection:
        command.downgrade(alembic_config(connection), "0006")
    assert database.current_revision() == "0006"
    database.upgrade()
    assert database.schema_diff() == []
    assert repo.count_embeddings() == 0  # dropped with the table; rebuilt by compare

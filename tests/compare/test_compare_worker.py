"""The compare worker keeps a pair it cannot score and moves on (issue 13); SQLite and
PostgreSQL. The failure comes through the encoder seam (an :class:`Encoder` that raises on
one text), the pairs from real storage."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import numpy.typing as npt
import pytest

from shadoweval.compare.encoders import HashingEncoder
from shadoweval.compare.worker import run_compare
from shadoweval.storage import Database, Repository
from tests.storage.factories import BASELINE, CANDIDATE, make_exchange, make_outcome

POISON = "poisoned answer"


class PoisonedEncoder(HashingEncoder):
    """Raises on any text holding :data:`POISON` (``everything``: on every text)."""

    def __init__(self, *, everything: bool = False) -> None:
        super().__init__()
        self.everything = everything

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if self.everything or any(POISON in text for text in texts):
            raise RuntimeError("the encoder cannot embed this")
        return super().embed(texts)


@pytest.fixture
def repo(empty_url: str) -> Iterator[Repository]:
    with Database(empty_url) as db:
        db.upgrade()
        yield Repository(db)


def seed(repo: Repository, n: int = 6) -> str:
    run_id = repo.create_run(
        name="compare", baseline=BASELINE, candidate=CANDIDATE, policy_hash="0" * 64,
        policy_yaml="version: 1\n",
    ).run_id  # fmt: skip
    exchanges = [make_exchange(i) for i in range(n)]
    repo.save_exchanges(run_id, exchanges)
    outcomes = [
        make_outcome(run_id, e.exchange_id, text=POISON if i == 2 else f"answer {i}")
        for i, e in enumerate(exchanges)
    ]
    repo.save_outcomes(outcomes)
    return run_id


def test_a_pair_that_cannot_be_scored_is_rejected_once_and_the_rest_scored(
    repo: Repository,
) -> None:
    run_id = seed(repo)
    report = run_compare(repo, run_id, PoisonedEncoder(), batch_size=4)
    assert report.scored == 5
    assert dict(report.rejected) == {"score_failed": 1}
    (rejected,) = repo.list_rejected(run_id, stage="compare")
    assert rejected.reason == "score_failed"
    assert "RuntimeError: the encoder cannot embed this" in (rejected.detail or "")
    # the pair is still unscored: a re-run tries it again, and stores no second rejection
    again = run_compare(repo, run_id, PoisonedEncoder(), batch_size=4)
    assert (again.scored, dict(again.rejected)) == (0, {"score_failed": 1})
    assert len(repo.list_rejected(run_id, stage="compare")) == 1
    # a rejected pair does not count as a captured-but-rejected line of the log
    assert repo.coverage_counts(run_id).rejected == 0


def test_an_encoder_that_fails_on_everything_is_an_error_not_a_run_of_rejections(
    repo: Repository,
) -> None:
    run_id = seed(repo)
    with pytest.raises(RuntimeError, match="cannot embed"):
        run_compare(repo, run_id, PoisonedEncoder(everything=True), batch_size=4)
    assert repo.list_rejected(run_id) == []

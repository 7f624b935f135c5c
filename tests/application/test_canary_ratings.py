"""shadoweval.application.canary.import_canary_ratings: ratings of observed answers stored with
their
arm; rejected rows kept once as rejected records of the canary's run."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from shadoweval.application.canary import RATING_STAGE, import_canary_ratings, rating_frame
from shadoweval.errors import ConfigError
from shadoweval.storage import CanaryObservation, Repository
from tests.storage.factories import T0


@pytest.fixture
def observed(repo: Repository, canary: str) -> str:
    """Canary ``c-1`` with one request observed on each arm (``ex-1`` baseline, ``ex-2``
    candidate)."""
    repo.save_canary_observations(
        "c-1",
        [
            CanaryObservation(
                exchange_id=f"ex-{i}",
                step_index=0,
                arm=arm,
                observed_at=T0 + timedelta(seconds=i),
                session=f"s-{i}",
                error=False,
                format_expected=False,
                format_ok=None,
                harmed=False,
                cache_hit=False,
                e2e_ms=100.0,
                ttft_ms=None,
            )
            for i, arm in ((1, "baseline"), (2, "candidate"))
        ],
    )
    return canary


def test_ratings_are_stored_with_the_arm_of_their_observation(
    repo: Repository, observed: str, tmp_path: Path
) -> None:
    path = tmp_path / "ratings.csv"
    path.write_text("exchange_id,rating\nex-1,7\nex-2,2\nex-3,5\n", encoding="utf-8")
    canary = observed
    result = import_canary_ratings(repo, canary, path, rater="ana")
    assert (result.stored, len(result.imported.rejected), result.skipped) == (2, 1, 0)
    frame = rating_frame(repo.canary_ratings(canary), repo.canary_observations(canary))
    assert sorted(zip(frame["arm"], frame["rating"], strict=True)) == [
        ("baseline", 7.0),
        ("candidate", 2.0),
    ]
    (kept,) = repo.list_rejected(run_id="run-1")
    assert (kept.stage, kept.reason) == (RATING_STAGE, "unknown_exchange_id")
    again = import_canary_ratings(repo, canary, path, rater="ana")
    assert (again.stored, again.skipped) == (2, 1)
    assert len(repo.canary_ratings(canary)) == 2
    assert len(repo.list_rejected(run_id="run-1")) == 1


def test_an_unknown_canary_is_named(repo: Repository, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="canary_id = 'nope'"):
        import_canary_ratings(repo, "nope", tmp_path / "r.csv", rater="ana")

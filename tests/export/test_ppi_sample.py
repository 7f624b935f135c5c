"""The random label sample (``ppi_sample``): a seeded draw from every changed pair of each
task type, judged or not, for prediction-powered inference of net harm.

The seeded run (:mod:`tests.export.seed`) has three pairs rewritten to be unchanged and
judgements of every source (:func:`tests.export.changed.judge_pairs`): the sample must be
drawn from the 19 changed pairs — the judged ones included — and never from the three
unchanged ones; each task type is drawn apart (stratified), reproducibly from the seed,
``ceil(F × changed)`` of each for a fraction F. SQLite and PostgreSQL.
"""

from __future__ import annotations

import math

import pytest

from shadoweval.application.exporting import export_zip, make_request, resolve_selection
from shadoweval.application.redaction import body_redaction
from shadoweval.application.run_views import changed_ids
from shadoweval.errors import ConfigError
from shadoweval.export import build_export
from shadoweval.export.request import MAX_SEED, ExportRequest, cli_option
from shadoweval.export.selection import choose_ids
from shadoweval.storage import Repository
from shadoweval.storage.samples import SampleFilter
from tests.export.changed import JUDGED_OK, LABELLED, REFERENCED, UNCHANGED, judge_pairs
from tests.export.readback import records, unzip
from tests.export.seed import Seeded


@pytest.fixture
def judged(repo: Repository, seeded: Seeded) -> Seeded:
    judge_pairs(repo, seeded)
    return seeded


def _changed_by_type(repo: Repository, seeded: Seeded) -> dict[str, list[str]]:
    """Each task type's changed pairs (the definition: ``changed_ids``), in page order."""
    changed = changed_ids(repo, seeded.run)
    out = {}
    for task_type in repo.task_types(seeded.run.run_id):
        ids = repo.sample_ids(seeded.run.run_id, SampleFilter(), task_type)
        out[task_type] = [i for i, _ in ids if i in changed]
    return out


def _export(repo: Repository, **kwargs: object) -> tuple[dict[str, object], list[str]]:
    request = make_request("run-export", ppi_sample=True, **kwargs)  # type: ignore[arg-type]
    archive = export_zip(repo, request, redact=body_redaction())
    ((name, body),) = ((n, b) for n, b in unzip(archive.data).items() if n.startswith("samples."))
    return archive.manifest, [str(r["exchange_id"]) for r in records(name, body)]


def test_the_sample_is_drawn_from_every_changed_pair_and_only_from_them(
    repo: Repository, judged: Seeded
) -> None:
    every = {s.exchange_id for s in judged.scores}
    changed = changed_ids(repo, judged.run)
    assert changed == every - set(UNCHANGED)
    manifest, exported = _export(repo, fraction=1.0, seed=3)
    assert set(exported) == changed  # judged pairs too: the judge's whole population
    assert {JUDGED_OK, REFERENCED, LABELLED} <= set(exported)
    assert not set(UNCHANGED) & set(exported)
    sample = manifest["ppi_sample"]
    assert isinstance(sample, dict)
    assert sample == {
        "id": "ppi-seed-3-fraction-1.0",
        "population": "changed pairs per task type",
        "seed": 3,
        "fraction": 1.0,
        "per_task_type": None,
        "exchange_ids": sorted(changed),
    }
    assert manifest["order"] == "random"
    assert manifest["per_task_type"] is None
    assert manifest["fraction"] == 1.0
    assert manifest["filters"]["exchange_ids"] == len(changed)  # type: ignore[index]
    assert manifest["schema_version"] == 1


def test_each_task_type_is_drawn_apart_reproducibly_from_the_seed(
    repo: Repository, judged: Seeded
) -> None:
    by_type = _changed_by_type(repo, judged)
    assert {t: len(ids) for t, ids in by_type.items()} == {"chat": 11, "extract": 5, "summarize": 3}
    manifest, exported = _export(repo, fraction=0.25, seed=1234)
    again, exported_again = _export(repo, fraction=0.25, seed=1234)
    assert exported_again == exported
    assert again["ppi_sample"] == manifest["ppi_sample"]
    # ceil(0.25 × changed) of each task type (at least 2: the PPI estimate needs a spread
    # per task type), each the seeded draw over that stratum alone
    counts = manifest["counts"]
    assert isinstance(counts, dict)
    drawn: list[str] = []
    for task_type, ids in by_type.items():
        n = max(math.ceil(0.25 * len(ids)), min(2, len(ids)))  # at least 2: a spread per type
        assert counts[task_type] == {"matching": len(ids), "exported": n}
        page = [(i, None) for i in ids]
        drawn += choose_ids(page, n=n, order="random", seed=1234)
    assert sorted(exported) == sorted(drawn)
    assert [counts[t]["exported"] for t in sorted(by_type)] == [3, 2, 2]
    # a task type's draw does not depend on which other task types were exported
    _, chat_only = _export(repo, fraction=0.25, seed=1234, task_types=["chat"])
    assert set(chat_only) == set(exported) & set(by_type["chat"])
    _, other = _export(repo, fraction=0.25, seed=99)
    assert sorted(other) != sorted(exported)


def test_n_per_task_type_and_a_drawn_seed(repo: Repository, judged: Seeded) -> None:
    manifest, exported = _export(repo, per_task_type=4)
    seed = manifest["seed"]
    assert isinstance(seed, int)
    assert 0 <= seed <= MAX_SEED
    sample = manifest["ppi_sample"]
    assert isinstance(sample, dict)
    assert sample["id"] == f"ppi-seed-{seed}-n-4"
    assert sample["seed"] == seed
    assert sample["per_task_type"] == 4
    assert sample["fraction"] is None
    assert len(exported) == 4 + 4 + 3  # summarize has only 3 changed pairs
    assert sorted(sample["exchange_ids"]) == sorted(exported)
    _, again = _export(repo, per_task_type=4, seed=seed)  # the recorded seed draws it again
    assert again == exported


def test_the_fraction_is_rounded_up_exactly() -> None:
    def drawn(fraction: float, matching: int) -> int:
        return ExportRequest("r", order="random", seed=1, fraction=fraction).pairs_to_draw(matching)

    assert drawn(0.1, 30) == 3  # 0.1 × 30 is 3.0000000000000004 in floating point
    assert drawn(0.1, 31) == 4
    assert drawn(0.1, 3) == 1
    assert drawn(0.1, 0) == 0
    assert drawn(1.0, 7) == 7
    assert drawn(0.07, 100) == 7
    assert ExportRequest("r", per_task_type=5).pairs_to_draw(3) == 5  # N: choose_ids caps


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"order": "lowest"}, "--ppi-sample cannot be combined with --order lowest"),
        ({"max_similarity": 0.5}, "--ppi-sample cannot be combined with --max-similarity 0.5"),
        ({"min_similarity": -0.1}, "--ppi-sample cannot be combined with --min-similarity -0.1"),
        ({"flags": ["format_regression"]}, "with --flag format_regression"),
        ({"changed_unjudged": True}, "cannot be combined with --changed-unjudged:"),
    ],
)
def test_filters_that_make_the_sample_not_random_are_refused(
    kwargs: dict[str, object], named: str
) -> None:
    with pytest.raises(ConfigError) as info:
        make_request("r", ppi_sample=True, seed=1, names=cli_option, **kwargs)  # type: ignore[arg-type]
    assert named in str(info.value)
    assert "not random over them" in str(info.value)
    with pytest.raises(ConfigError, match="ppi_sample cannot be combined with order lowest"):
        ExportRequest("r", ppi_sample=True, order="lowest")


@pytest.mark.parametrize("fraction", [0.0, -0.1, 1.5, math.nan, math.inf])
def test_a_bad_fraction_is_named(fraction: float) -> None:
    with pytest.raises(ConfigError, match=r"--fraction .* must be a number in \(0, 1\]"):
        make_request("r", fraction=fraction, names=cli_option)
    with pytest.raises(ConfigError, match=r"--fraction 0\.1 and --per-task-type 5 both"):
        make_request("r", fraction=0.1, per_task_type=5, names=cli_option)


def test_a_fraction_without_the_ppi_sample_is_a_share_of_the_matching_pairs(
    repo: Repository, seeded: Seeded
) -> None:
    request = make_request("run-export", fraction=0.5)
    result = build_export(repo, request, redact=body_redaction())
    assert {t: c["exported"] for t, c in result.manifest["counts"].items()} == {
        "chat": 6,
        "extract": 4,
        "summarize": 2,
    }
    assert result.manifest["ppi_sample"] is None
    assert result.manifest["order"] == "lowest"


def test_the_changed_pairs_must_be_resolved_before_the_build(
    repo: Repository, judged: Seeded
) -> None:
    request = make_request("run-export", ppi_sample=True, seed=1)
    with pytest.raises(ConfigError, match="ppi_sample: the changed pairs were not resolved"):
        build_export(repo, request, redact=body_redaction())
    resolved = resolve_selection(repo, request)
    assert resolved.exchange_ids == changed_ids(repo, judged.run)

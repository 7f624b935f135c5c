"""The export's "changed, not yet judged" selection: exactly changed ∧ unjudged pairs.

The seeded run (:mod:`tests.export.seed`) has every pair changed (format, tool and finish
reason differences, divergence beyond 0.1 without a usable noise floor); three pairs are
rewritten to be unchanged and pairs are judged by every source
(:func:`tests.export.changed.judge_pairs`) — a successful judge judgement, judge
judgements that failed, a reference check, human labels — and the export must hold the
changed pairs that have no *successful* judgement: the pair judged only by a failed one
stays in. The changed set is :func:`shadoweval.stats.change.classify_changes`' (the definition);
which pairs are judged is written out by hand.
"""

from __future__ import annotations

import pytest

from shadoweval.application.exporting import (
    export_to_directory,
    export_zip,
    filter_request,
    make_request,
    resolve_selection,
)
from shadoweval.application.redaction import body_redaction
from shadoweval.application.run_views import changed_unjudged_ids
from shadoweval.errors import ConfigError
from shadoweval.export import build_export
from shadoweval.export.request import cli_option
from shadoweval.stats.change import classify_changes
from shadoweval.stats.frame import pairs_frame
from shadoweval.stats.policy import parse_policy_yaml
from shadoweval.storage import Repository
from shadoweval.storage.samples import SampleFilter
from tests.export.changed import JUDGED_FAILED, LEFT_OUT, UNCHANGED, judge_pairs
from tests.export.readback import records, unzip
from tests.export.seed import Seeded


@pytest.fixture
def judged(repo: Repository, seeded: Seeded) -> Seeded:
    """The seeded run with three unchanged pairs and judgements of every source."""
    judge_pairs(repo, seeded)
    return seeded


def _rows(data: bytes) -> list[dict[str, object]]:
    """The samples file's rows of an export zip."""
    ((name, body),) = ((n, b) for n, b in unzip(data).items() if n.startswith("samples."))
    return records(name, body)


def _changed(repo: Repository, run_id: str) -> set[str]:
    run = repo.get_run(run_id)
    assert run is not None
    policy = parse_policy_yaml(run.policy_yaml)
    pairs = pairs_frame(repo.load_pair_scores(run_id), policy)
    changes = classify_changes(pairs, policy)
    return {str(e) for e, c in zip(pairs["exchange_id"], changes.changed, strict=True) if c}


def test_the_selection_is_changed_and_not_successfully_judged(
    repo: Repository, judged: Seeded
) -> None:
    run_id = judged.run.run_id
    every = {s.exchange_id for s in judged.scores}
    changed = _changed(repo, run_id)
    assert changed == every - set(UNCHANGED)  # the three rewritten pairs are unchanged
    expected = every - LEFT_OUT
    assert len(expected) == 22 - 7
    assert JUDGED_FAILED in expected  # judged only by a failed judgement: still unjudged
    run = repo.get_run(run_id)
    assert run is not None
    assert changed_unjudged_ids(repo, run) == expected

    archive = export_zip(
        repo,
        make_request(run_id, per_task_type=100, changed_unjudged=True),
        redact=body_redaction(),
    )
    exported = {row["exchange_id"] for row in _rows(archive.data)}
    assert exported == expected
    filters = archive.manifest["filters"]
    assert filters["changed_unjudged"] is True
    assert filters["exchange_ids"] == len(expected)
    per_type = {"chat": 0, "extract": 0, "summarize": 0}
    for exchange_id in expected:
        per_type[next(s.task_type for s in judged.scores if s.exchange_id == exchange_id)] += 1
    assert archive.manifest["counts"] == {
        t: {"matching": n, "exported": n} for t, n in sorted(per_type.items())
    }


def test_the_selection_combines_with_the_filter_order_and_stratum_size(
    repo: Repository, judged: Seeded
) -> None:
    run_id = judged.run.run_id
    expected = {s.exchange_id for s in judged.scores} - LEFT_OUT
    request = filter_request(
        run_id,
        SampleFilter(task_types=("chat",), max_similarity=0.6),
        per_task_type=2,
        order="lowest",
        seed=None,
        fmt="jsonl",
        changed_unjudged=True,
    )
    archive = export_zip(repo, request, redact=body_redaction())
    rows = _rows(archive.data)
    band = sorted(
        (s.similarity, s.exchange_id)
        for s in judged.scores
        if s.task_type == "chat"
        and s.similarity is not None
        and s.similarity <= 0.6
        and s.exchange_id in expected
    )
    assert [r["exchange_id"] for r in rows] == [e for _, e in band[:2]]
    assert archive.manifest["counts"] == {"chat": {"matching": len(band), "exported": 2}}

    drawn = export_zip(
        repo,
        make_request(run_id, per_task_type=3, order="random", seed=5, changed_unjudged=True),
        redact=body_redaction(),
    )
    assert {r["exchange_id"] for r in _rows(drawn.data)} <= expected


def test_without_the_flag_nothing_is_restricted(repo: Repository, judged: Seeded) -> None:
    archive = export_zip(
        repo, make_request(judged.run.run_id, per_task_type=100), redact=body_redaction()
    )
    assert len(_rows(archive.data)) == 22
    assert archive.manifest["filters"]["changed_unjudged"] is False
    assert archive.manifest["filters"]["exchange_ids"] is None


def test_the_directory_export_resolves_the_selection_too(
    repo: Repository, judged: Seeded, tmp_path
) -> None:
    written = export_to_directory(
        repo,
        make_request(judged.run.run_id, per_task_type=100, changed_unjudged=True),
        tmp_path / "out",
        redact=body_redaction(),
    )
    assert written.result.manifest["total"]["exported"] == 22 - len(LEFT_OUT)


def test_the_export_stage_refuses_an_unresolved_selection(repo: Repository, judged: Seeded) -> None:
    request = make_request(judged.run.run_id, changed_unjudged=True)
    with pytest.raises(ConfigError, match="--changed-unjudged: the changed, not yet judged"):
        build_export(repo, request, redact=body_redaction(), names=cli_option)
    resolved = resolve_selection(repo, request)
    assert resolved.exchange_ids is not None
    assert resolve_selection(repo, resolved) is resolved  # already resolved: kept
    plain = make_request(judged.run.run_id)
    assert resolve_selection(repo, plain) is plain


def test_an_unknown_run_is_named(repo: Repository) -> None:
    with pytest.raises(ConfigError, match="--run-id 'nope': run not found"):
        resolve_selection(repo, make_request("nope", changed_unjudged=True))

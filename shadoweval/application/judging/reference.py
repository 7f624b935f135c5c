"""``shadow-eval labels import-reference``: reference correctness as ``reference`` judgements."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from shadoweval.errors import ConfigError, ShadowEvalError
from shadoweval.export.reference_import import (
    REFERENCE_PRESETS,
    CategoryTally,
    ReferencePair,
    read_bfcl_scores,
    reference_judgements,
)
from shadoweval.storage import Repository

REFERENCE_COMMAND = "shadow-eval labels import-reference"


@dataclass(frozen=True)
class ReferenceImportResult:
    """What a reference import stored.

    Attributes:
        preset: the reference format (``bfcl``).
        stored: judgements written.
        pairs: scored pairs of the run; pairs_without_item: pairs not from a BFCL result
            file; pairs_without_scores: per category, pairs without a score file on one
            side; pairs_out_of_range: pairs beyond the category's item count.
        categories: per category, items / matched / not in run / better / tie / worse and
            the official accuracies.
    """

    preset: str
    stored: int
    pairs: int
    pairs_without_item: int
    pairs_without_scores: dict[str, int]
    pairs_out_of_range: int
    categories: dict[str, CategoryTally]


def import_reference(
    repo: Repository,
    run_id: str,
    *,
    preset: str,
    baseline_scores: Path,
    candidate_scores: Path,
) -> ReferenceImportResult:
    """Store per-item reference correctness of both sides as ``reference`` judgements.

    ``bfcl``: the two models' official score folders
    (:func:`shadoweval.export.reference_import.read_bfcl_scores`); each scored pair of the run is
    matched to its BFCL item by its exchange's import origin
    (:func:`shadoweval.export.reference_import.bfcl_item`). A repeat import replaces the stored
    reference judgements. Unmatched pairs and items are counted, never dropped silently.

    Raises:
        ConfigError: an unknown preset, a missing folder, or score files of different
            questions; RecordDecodeError: a score file fails its checks;
            ShadowEvalError: unknown run.
        StorageError: on database failure.
    """
    if preset not in REFERENCE_PRESETS:
        raise ConfigError(
            f"--preset {preset!r}: known reference presets are {', '.join(REFERENCE_PRESETS)}",
            field="--preset",
            value=preset,
        )
    if repo.get_run(run_id) is None:
        raise ShadowEvalError(f"run {run_id!r} not found")
    baseline = read_bfcl_scores(baseline_scores)
    candidate = read_bfcl_scores(candidate_scores)
    pairs = [
        ReferencePair(o.exchange_id, o.task_type, o.source)
        for o in repo.scored_pair_origins(run_id)
    ]
    found = reference_judgements(pairs, run_id=run_id, baseline=baseline, candidate=candidate)
    stored = repo.save_judgements(found.judgements) if found.judgements else 0
    return ReferenceImportResult(
        preset=preset,
        stored=stored,
        pairs=found.pairs,
        pairs_without_item=found.pairs_without_item,
        pairs_without_scores=found.pairs_without_scores,
        pairs_out_of_range=found.pairs_out_of_range,
        categories=found.categories,
    )

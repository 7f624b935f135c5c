"""Scoring a run's replayed pairs: similarity, formats, harms, latency (:mod:`compare.worker`).

The encoder is named by the face (``minilm``: the bundled all-MiniLM-L6-v2 weights;
``hashing``: a non-semantic hashing encoder for smoke tests) and built here
(:func:`make_encoder`); :func:`compare_run` scores what is not scored yet and
:func:`score_stored_run` does the same for a stored run, adding the structured task types
the run was created with.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from compare.encoders import Encoder, HashingEncoder, MiniLMEncoder
from compare.harms import compile_refusal_patterns
from compare.worker import CompareReport, run_compare
from shadoweval.errors import ConfigError, ShadowEvalError
from shadoweval.storage import Repository

__all__ = ["CompareReport", "Encoder", "compare_run", "make_encoder", "score_stored_run"]


def make_encoder(
    name: str, *, device: str = "cpu", batch_size: int = 64, model_path: Path | None = None
) -> Encoder:
    """Build the similarity encoder: ``minilm`` (bundled all-MiniLM-L6-v2) or ``hashing``.

    ``device`` is a torch device (``cpu``, ``cuda``); ``batch_size`` pieces per forward
    pass; ``model_path`` a local sentence-transformers model directory used instead of the
    bundled weights (``compare.model_path``; MiniLM only).

    Raises:
        ConfigError: an unknown encoder name, the model cannot be loaded, or
            ``model_path`` is given with the hashing encoder.
    """
    if name == "minilm":
        return MiniLMEncoder(model_path, device=device, batch_size=batch_size)
    if name == "hashing" and model_path is not None:
        raise ConfigError(
            "the hashing encoder has no model: compare.model_path applies to minilm only",
            field="compare.model_path",
            value=str(model_path),
        )
    if name == "hashing":
        return HashingEncoder()
    raise ConfigError(
        f"encoder {name!r} is not known: use minilm or hashing", field="encoder", value=name
    )


def compare_run(
    repo: Repository,
    run_id: str,
    encoder: Encoder,
    *,
    structured_task_types: frozenset[str] = frozenset(),
    rescore: bool = False,
    refusal_patterns: Sequence[str] | None = None,
    covered_scripts: frozenset[str] | None = None,
) -> CompareReport:
    """Score the run's replayed pairs not scored yet (all of them with ``rescore``).

    See :func:`compare.worker.run_compare`; ``structured_task_types`` are task types whose
    outputs must be JSON even when the requests do not say so; ``refusal_patterns`` the
    refusal detector's patterns (``CompareSettings.refusal_patterns``; ``None``: the
    defaults of :mod:`compare.harms`); ``covered_scripts`` the scripts the embedding model
    covers (``CompareSettings.covered_scripts()``; ``None``: any, no script warnings).

    Raises:
        ConfigError: a refusal pattern is invalid (nothing is scored).
        StorageError: the database failed.
    """
    return run_compare(
        repo,
        run_id,
        encoder,
        structured_task_types=structured_task_types,
        rescore=rescore,
        refusal_patterns=refusal_patterns,
        covered_scripts=covered_scripts,
    )


def score_stored_run(
    repo: Repository,
    run_id: str,
    *,
    encoder: str,
    device: str = "cpu",
    structured_task_types: frozenset[str] = frozenset(),
    rescore: bool = False,
    refusal_patterns: Sequence[str] | None = None,
    model_path: Path | None = None,
    covered_scripts: frozenset[str] | None = None,
) -> CompareReport:
    """Score a stored run with the named encoder (:func:`make_encoder`).

    The structured task types are ``structured_task_types`` plus those recorded in the
    run's settings when it was created; ``refusal_patterns`` and ``covered_scripts`` as
    in :func:`compare_run`; ``model_path`` as in :func:`make_encoder`.

    Raises:
        ShadowEvalError: the run does not exist (checked before the encoder is loaded).
        ConfigError: an unknown encoder name, the model cannot be loaded, or a refusal
            pattern is invalid.
        StorageError: the database failed.
    """
    run = repo.get_run(run_id)
    if run is None:
        raise ShadowEvalError(f"run {run_id!r} not found")
    compile_refusal_patterns(refusal_patterns)  # a bad pattern fails before the encoder loads
    stored = run.settings.get("structured_task_types")
    structured = set(structured_task_types)
    if isinstance(stored, list):
        structured.update(str(s) for s in stored)
    return compare_run(
        repo,
        run_id,
        make_encoder(encoder, device=device, model_path=model_path),
        structured_task_types=frozenset(structured),
        rescore=rescore,
        refusal_patterns=refusal_patterns,
        covered_scripts=covered_scripts,
    )

"""The compare worker: read a run's replayed pairs from storage, score them, write them back.

This is the glue between the pure scorers (:func:`compare.pair.score_pairs`) and storage.
Pairs are read in capture-time order in batches (:meth:`Repository.iter_pair_inputs`);
by default only pairs not scored yet are read, so the worker can be re-run after new
replays arrive. A batch that fails to score (any exception) is retried pair by pair so one
bad record never blocks the others; a pair that still fails is stored as a rejected record
(stage ``compare``, reason ``score_failed``, the exception in ``detail``) and counted —
never dropped silently — and the worker moves on. The rejection is fingerprinted by the
exchange id, so a re-run (which reads the pair again: it is still unscored) stores it once.
When *every* pair of a batch fails on its own, the fault is not the records' (an encoder
that cannot run): the error propagates instead of rejecting the whole run.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from compare.encoders import Encoder
from compare.harms import compile_refusal_patterns
from compare.pair import PairInput, score_pairs
from shadoweval.records import PairScore
from shadoweval.storage import RejectedRecord, Repository, rejection_fingerprint

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class CompareReport:
    """What one compare pass did: pairs scored, pairs rejected by reason, wall seconds."""

    run_id: str
    scored: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    wall_s: float = 0.0

    def as_dict(self) -> dict[str, object]:
        """A JSON-ready view."""
        return {
            "run_id": self.run_id,
            "scored": self.scored,
            "rejected": dict(self.rejected),
            "wall_s": round(self.wall_s, 3),
        }


def run_compare(
    repo: Repository,
    run_id: str,
    encoder: Encoder,
    *,
    structured_task_types: frozenset[str] = frozenset(),
    rescore: bool = False,
    batch_size: int = 256,
    encode_batch_size: int = 64,
    refusal_patterns: Sequence[str] | None = None,
    covered_scripts: frozenset[str] | None = None,
) -> CompareReport:
    """Score every replayed pair of ``run_id`` (only unscored ones unless ``rescore``).

    Args:
        repo: storage holding the run's exchanges and replay outcomes.
        encoder: the embedding encoder for similarity.
        structured_task_types: task types whose outputs must be JSON even when the request
            did not say so.
        rescore: score all pairs again (the stored scores are replaced).
        batch_size: pairs read and written per batch.
        encode_batch_size: pieces per encoder forward pass.
        refusal_patterns: the refusal detector's patterns (``None``: the defaults of
            :mod:`compare.harms`); compiled once, before any pair is read.
        covered_scripts: the scripts the embedding model covers (``None``: any); see
            :func:`compare.pair.score_pairs`.

    Raises:
        ConfigError: a refusal pattern is invalid (nothing is scored).
        Exception: whatever the scorers raised when every pair of a batch of several
            failed on its own (an encoder that cannot run; nothing is rejected then).
        StorageError: the database refused a write.
    """
    patterns = compile_refusal_patterns(refusal_patterns).patterns
    report = CompareReport(run_id=run_id)
    started = time.perf_counter()

    def score(group: list[PairInput]) -> list[PairScore]:
        return score_pairs(
            group,
            encoder,
            run_id=run_id,
            structured_task_types=structured_task_types,
            batch_size=encode_batch_size,
            refusal_patterns=patterns,
            covered_scripts=covered_scripts,
        )

    for batch in repo.iter_pair_inputs(run_id, only_unscored=not rescore, batch_size=batch_size):
        items = [PairInput(exchange=e, candidate=c, baseline_repeat=b) for e, c, b in batch]
        try:
            scores = score(items)
        except Exception:
            logger.warning("scoring a batch of %d failed; scoring pair by pair", len(items))
            scores = _score_one_by_one(repo, run_id, items, score, report)
        repo.save_pair_scores(scores)
        report.scored += len(scores)
    report.wall_s = time.perf_counter() - started
    return report


def _score_one_by_one(
    repo: Repository,
    run_id: str,
    items: list[PairInput],
    score: Callable[[list[PairInput]], list[PairScore]],
    report: CompareReport,
) -> list[PairScore]:
    """Score ``items`` one at a time; keep each that fails as a rejected record.

    Raises:
        Exception: the last pair's error when every pair of a batch of several failed
            (not a record's fault: nothing is rejected then).
    """
    scores: list[PairScore] = []
    failed: list[RejectedRecord] = []
    last: Exception | None = None
    for item in items:
        try:
            scores.extend(score([item]))
        except Exception as exc:  # one pair's fault: kept, and the worker moves on
            last = exc
            failed.append(_rejected(run_id, item, exc))
    if last is not None and not scores and len(items) > 1:
        raise last
    report.rejected["score_failed"] += len(failed)
    if failed:
        repo.save_rejected_many(failed)
    return scores


def _rejected(run_id: str, item: PairInput, exc: Exception) -> RejectedRecord:
    """The rejected record of a pair that could not be scored (fingerprinted by its id)."""
    exchange_id = item.exchange.exchange_id
    return RejectedRecord(
        stage="compare",
        reason="score_failed",
        location=exchange_id,
        detail=f"{exchange_id}: cannot be scored: {type(exc).__name__}: {exc}"[:2000],
        run_id=run_id,
        fingerprint=rejection_fingerprint(exchange_id, None),
    )

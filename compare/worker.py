"""The compare worker: read a run's replayed pairs from storage, score them, write them back.

This is the glue between the pure scorers (:func:`compare.pair.score_pairs`) and storage.
Pairs are read in capture-time order in batches (:meth:`Repository.iter_pair_inputs`);
by default only pairs not scored yet are read, so the worker can be re-run after new
replays arrive. A batch that fails to score is retried pair by pair so one bad record never
blocks the others; a pair that still fails is stored as a rejected record
(stage ``compare``) with its reason and counted — never dropped silently.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from compare.encoders import Encoder
from compare.harms import compile_refusal_patterns
from compare.pair import PairInput, score_pairs
from shadoweval.storage import Repository

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

    Raises:
        ConfigError: a refusal pattern is invalid (nothing is scored).
    """
    patterns = compile_refusal_patterns(refusal_patterns).patterns
    report = CompareReport(run_id=run_id)
    started = time.perf_counter()
    for batch in repo.iter_pair_inputs(run_id, only_unscored=not rescore, batch_size=batch_size):
        items = [PairInput(exchange=e, candidate=c, baseline_repeat=b) for e, c, b in batch]
        try:
            scores = score_pairs(
                items,
                encoder,
                run_id=run_id,
                structured_task_types=structured_task_types,
                batch_size=encode_batch_size,
                refusal_patterns=patterns,
            )
        except ValueError:
            logger.warning("scoring a batch of %d failed; scoring pair by pair", len(items))
            scores = []
            for item in items:
                try:
                    scores.extend(
                        score_pairs(
                            [item],
                            encoder,
                            run_id=run_id,
                            structured_task_types=structured_task_types,
                            batch_size=encode_batch_size,
                            refusal_patterns=patterns,
                        )
                    )
                except ValueError as exc:
                    report.rejected["score_failed"] += 1
                    repo.save_rejected(
                        run_id=run_id,
                        stage="compare",
                        location=item.exchange.exchange_id,
                        reason="score_failed",
                        detail=str(exc),
                    )
        repo.save_pair_scores(scores)
        report.scored += len(scores)
    report.wall_s = time.perf_counter() - started
    return report

"""The compare worker: read a run's replayed pairs from storage, score them, write them back.

This is the glue between the pure scorers (:func:`shadoweval.compare.pair.score_pairs`) and storage.
Pairs are read in capture-time order in batches (:meth:`Repository.iter_pair_inputs`);
by default only pairs not scored yet are read, so the worker can be re-run after new
replays arrive. A batch that fails to score (any exception) is retried pair by pair so one
bad record never blocks the others; a pair that still fails is stored as a rejected record
(stage ``compare``, reason ``score_failed``, the exception in ``detail``) and counted —
never dropped silently — and the worker moves on. The rejection is fingerprinted by the
exchange id, so a re-run (which reads the pair again: it is still unscored) stores it once.
When *every* pair of a batch fails on its own, the fault is not the records' (an encoder
that cannot run): the error propagates instead of rejecting the whole run.

Doing less work: pooled text embeddings are cached in the results database
(:class:`StorageEmbeddingCache`, keyed by :attr:`Encoder.cache_key` and the text's
SHA-256), so a text seen in an earlier batch, run or rescore is not embedded again; the
report counts hits and misses. Splitting the work: ``exchange_ids`` limits a pass to one
contiguous range of exchange ids (one of several processes on a machine:
:func:`shadoweval.application.scoring.score_stored_run`), ``shard`` ``(index, count)`` to the
exchanges whose :func:`shard_of` is ``index`` (one of several machines).

Following a run (:func:`follow_compare`, ``compare run --follow``): a long-running worker
polls for unscored pairs, scores them, waits ``poll_interval_s`` and polls again, until
told to stop (it finishes the batch in hand and writes it) or until nothing new came for
``until_idle_s``. Several follow workers split a run by :data:`WORK_BUCKETS` buckets of
the exchange id (``shard_of(id, 64)``): a worker scores a bucket only while it holds the
bucket's lock (:class:`~shadoweval.storage.WorkLocks`: PostgreSQL advisory locks, which
die with a dead worker's connection), and reads the bucket's unscored pairs after taking
it, so no pair is scored by two workers.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from shadoweval.compare.embedding_store import StorageEmbeddingCache
from shadoweval.compare.encoders import Encoder
from shadoweval.compare.harms import compile_refusal_patterns
from shadoweval.compare.metrics import FollowMetrics
from shadoweval.compare.pair import PairInput, score_pairs
from shadoweval.errors import ConfigError
from shadoweval.records import Exchange, PairScore, ReplayOutcome
from shadoweval.storage import (
    WORK_BUCKETS,
    RejectedRecord,
    Repository,
    WorkLocks,
    rejection_fingerprint,
    rejection_key,
)

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class CompareReport:
    """What one compare pass did.

    ``scored``: pairs scored; ``rejected``: pairs rejected, by reason; ``wall_s``: wall
    seconds; ``polls``: database polls of a follow worker (``None`` for one pass);
    ``embedding_cache_hits`` / ``embedding_cache_misses``: distinct non-blank
    texts (per scoring batch) found / not found in the embedding cache (both 0 with the
    cache off); ``workers``: compare processes that did the pass; ``backend``: the
    encoder's backend id (``torch-bf16-cpu`` …; ``None`` for an encoder without one) and
    ``backend_choice`` what ``auto`` measured
    (:meth:`shadoweval.compare.backends.BackendChoice.as_dict`).
    """

    run_id: str
    scored: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    wall_s: float = 0.0
    embedding_cache_hits: int = 0
    embedding_cache_misses: int = 0
    workers: int = 1
    backend: str | None = None
    backend_choice: dict[str, object] | None = None
    polls: int | None = None

    def as_dict(self) -> dict[str, object]:
        """A JSON-ready view (``backend``/``backend_choice`` only when known)."""
        out: dict[str, object] = {
            "run_id": self.run_id,
            "scored": self.scored,
            "rejected": dict(self.rejected),
            "wall_s": round(self.wall_s, 3),
            "embedding_cache": {
                "hits": self.embedding_cache_hits,
                "misses": self.embedding_cache_misses,
            },
            "workers": self.workers,
        }
        if self.backend is not None:
            out["backend"] = self.backend
        if self.backend_choice is not None:
            out["backend_choice"] = self.backend_choice
        if self.polls is not None:
            out["polls"] = self.polls
        return out

    def merge(self, other: CompareReport) -> None:
        """Add another process's counts to this report (``wall_s`` is left to the caller)."""
        self.scored += other.scored
        self.rejected.update(other.rejected)
        self.embedding_cache_hits += other.embedding_cache_hits
        self.embedding_cache_misses += other.embedding_cache_misses
        self.backend = self.backend or other.backend
        self.backend_choice = self.backend_choice or other.backend_choice


def pair_input(
    exchange: Exchange,
    candidate: ReplayOutcome,
    baseline_repeat: ReplayOutcome | None,
    repeated: frozenset[tuple[int, str]],
) -> PairInput:
    """A :class:`PairInput`, its ``repeated_rejection`` set when the candidate's failure
    is one of the run's ``repeated`` rejections
    (:meth:`shadoweval.storage.Repository.repeated_rejections`)."""
    return PairInput(
        exchange=exchange,
        candidate=candidate,
        baseline_repeat=baseline_repeat,
        repeated_rejection=rejection_key(candidate) in repeated,
    )


def limit_torch_threads(threads: int) -> None:
    """Use at most ``threads`` CPU threads for the encoder in this process.

    Sets ``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` (read when torch loads) and calls
    ``torch.set_num_threads``; call it before the model loads (several compare processes
    on one machine share its cores: ``max(1, cores // processes)`` each).

    Raises:
        ValueError: ``threads`` < 1.
    """
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(threads)
    try:
        import torch
    except ImportError:  # the hashing encoder needs no torch
        return
    torch.set_num_threads(threads)


def shard_of(exchange_id: str, count: int) -> int:
    """The shard (0 … ``count``-1) an exchange belongs to: a stable split by id.

    First 8 bytes of SHA-256 of the id (UTF-8), big-endian, modulo ``count``: the same
    on every machine and Python version, so ``count`` machines each scoring one shard
    cover a run exactly once.
    """
    digest = hashlib.sha256(exchange_id.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % count


def check_shard(shard: tuple[int, int]) -> None:
    """Refuse a shard that is not ``(index, count)`` with ``0 <= index < count``.

    Raises:
        ConfigError: naming the field ``shard`` and the value ``index/count``.
    """
    index, count = shard
    if count < 1 or not 0 <= index < count:
        raise ConfigError(
            f"shard {index}/{count} is out of range: use I/N with N >= 1 and 0 <= I < N",
            field="shard",
            value=f"{index}/{count}",
        )


Score = Callable[[list[PairInput]], list[PairScore]]
"""Scores of a batch of pairs, in order (:func:`shadoweval.compare.pair.score_pairs`, bound)."""


def _scorer(
    encoder: Encoder,
    run_id: str,
    structured_task_types: frozenset[str],
    encode_batch_size: int,
    patterns: tuple[str, ...],
    covered_scripts: frozenset[str] | None,
    cache: StorageEmbeddingCache | None,
) -> Score:
    """:func:`shadoweval.compare.pair.score_pairs` with a pass's settings bound."""
    return partial(
        score_pairs,
        encoder=encoder,
        run_id=run_id,
        structured_task_types=structured_task_types,
        batch_size=encode_batch_size,
        refusal_patterns=patterns,
        covered_scripts=covered_scripts,
        embedding_cache=cache,
    )


def _finished(
    report: CompareReport, cache: StorageEmbeddingCache | None, started: float
) -> CompareReport:
    """``report`` with the embedding cache's counts and the pass's wall seconds."""
    if cache is not None:
        report.embedding_cache_hits = cache.hits
        report.embedding_cache_misses = cache.misses
    report.wall_s = time.perf_counter() - started
    return report


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
    embedding_cache: bool = True,
    exchange_ids: tuple[str, str] | None = None,
    shard: tuple[int, int] | None = None,
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
            :mod:`shadoweval.compare.harms`); compiled once, before any pair is read.
        covered_scripts: the scripts the embedding model covers (``None``: any); see
            :func:`shadoweval.compare.pair.score_pairs`.
        embedding_cache: look up and store pooled text embeddings in the database
            (:class:`StorageEmbeddingCache`); ``False`` embeds every text.
        exchange_ids: only pairs whose exchange id is in this inclusive ``(first, last)``
            range (:meth:`Repository.pair_exchange_ids` slices).
        shard: ``(index, count)``: only pairs with ``shard_of(exchange_id, count) ==
            index``.

    Raises:
        ConfigError: a refusal pattern or the shard is invalid (nothing is scored).
        Exception: whatever the scorers raised when every pair of a batch of several
            failed on its own (an encoder that cannot run; nothing is rejected then).
        StorageError: the database refused a write.
    """
    patterns = compile_refusal_patterns(refusal_patterns).patterns
    if shard is not None:
        check_shard(shard)
    report = CompareReport(run_id=run_id)
    cache = StorageEmbeddingCache(repo) if embedding_cache else None
    started = time.perf_counter()

    score = _scorer(
        encoder, run_id, structured_task_types, encode_batch_size, patterns, covered_scripts, cache
    )

    batches = repo.iter_pair_inputs(
        run_id, only_unscored=not rescore, batch_size=batch_size, exchange_ids=exchange_ids
    )
    repeated = repo.repeated_rejections(run_id)
    for batch in batches:
        items = [
            pair_input(e, c, b, repeated)
            for e, c, b in batch
            if shard is None or shard_of(e.exchange_id, shard[1]) == shard[0]
        ]
        _score_and_save(repo, run_id, items, score, report)
    return _finished(report, cache, started)


def check_follow_timing(poll_interval_s: float, until_idle_s: float | None) -> None:
    """Refuse a follow worker's timing before it waits for anything.

    Raises:
        ConfigError: ``poll_interval_s`` <= 0 (field ``compare.poll_interval_s``) or
            ``until_idle_s`` < 0 (field ``until_idle_s``); NaN is refused too.
    """
    if not poll_interval_s > 0:
        raise ConfigError(
            f"poll_interval_s must be > 0, got {poll_interval_s}",
            field="compare.poll_interval_s",
            value=poll_interval_s,
        )
    if until_idle_s is not None and not until_idle_s >= 0:
        raise ConfigError(
            f"until_idle_s must be >= 0, got {until_idle_s}",
            field="until_idle_s",
            value=until_idle_s,
        )


def follow_compare(
    repo: Repository,
    run_id: str,
    encoder: Encoder,
    locks: WorkLocks,
    stop: threading.Event,
    *,
    poll_interval_s: float,
    until_idle_s: float | None = None,
    structured_task_types: frozenset[str] = frozenset(),
    batch_size: int = 256,
    encode_batch_size: int = 64,
    refusal_patterns: Sequence[str] | None = None,
    covered_scripts: frozenset[str] | None = None,
    embedding_cache: bool = True,
    first_bucket: int | None = None,
    clock: Callable[[], float] = time.monotonic,
    metrics: FollowMetrics | None = None,
    expects_repeat: Callable[[str], bool] | None = None,
) -> CompareReport:
    """Keep scoring ``run_id``'s new pairs until ``stop`` is set or the run stays idle.

    Each poll lists the run's unscored pairs, groups them into :data:`WORK_BUCKETS`
    buckets (``shard_of(exchange_id, 64)``) and walks the buckets from ``first_bucket``
    (default: a random one, so workers start apart): for each bucket with work it tries the
    bucket's lock (``locks.try_acquire``; a bucket another worker holds is left to it),
    re-reads the bucket's unscored pairs under the lock, scores and writes them in batches
    of ``batch_size`` and releases the lock. A poll that scored something is followed by
    another at once; otherwise the worker waits ``poll_interval_s`` seconds (``stop``
    wakes it). A pair that cannot be scored is kept as a rejected record (as in
    :func:`run_compare`) and not retried by this worker. A pair for which
    ``expects_repeat(exchange_id)`` is true (the run replays it to a baseline replica too)
    waits, unscored, until its baseline-repeat outcome is stored (the replay worker stores
    one even when that replay fails): the replay worker writes each target's outcome as it
    finishes, and a pair scored before its repeat would lose its noise estimate for good.

    Stops, returning the report (``polls`` counted): when ``stop`` is set (after the batch
    in hand is written; between batches, buckets and polls), or when ``until_idle_s`` is
    given and no pair was scored or rejected for that many seconds (``clock``: monotonic
    seconds). ``metrics`` (optional) is updated after each poll and marked ready from the
    first successful listing of the run's unscored pairs until the loop ends. The other
    arguments are as in :func:`run_compare`.

    Raises:
        ConfigError: a refusal pattern is invalid, ``poll_interval_s`` <= 0 or
            ``until_idle_s`` < 0 (nothing is scored).
        StorageError: the database or the lock connection failed (the batch in hand is
            not written; its bucket's lock is gone with the connection or released).
        Exception: as :func:`run_compare`, when every pair of a batch fails on its own.
    """
    check_follow_timing(poll_interval_s, until_idle_s)
    patterns = compile_refusal_patterns(refusal_patterns).patterns
    report = CompareReport(run_id=run_id, polls=0)
    cache = StorageEmbeddingCache(repo) if embedding_cache else None
    started = time.perf_counter()
    offset = random.randrange(WORK_BUCKETS) if first_bucket is None else first_bucket

    score = _scorer(
        encoder, run_id, structured_task_types, encode_batch_size, patterns, covered_scripts, cache
    )

    job = _FollowJob(repo, run_id, locks, stop, score, batch_size, expects_repeat, report)
    last_progress = clock()
    last_busy = 0
    scored_before, rejected_before = 0, Counter[str]()
    while not stop.is_set():
        report.polls = (report.polls or 0) + 1
        done_before = report.scored + sum(report.rejected.values())
        by_bucket = job.unscored_buckets()
        if metrics is not None:
            metrics.ready = True  # the database answered and the encoder is loaded
        busy, waiting = job.walk(by_bucket, offset)
        if busy != last_busy:
            logger.info("run %s: %d buckets with work are held by other workers", run_id, busy)
            last_busy = busy
        progressed = report.scored + sum(report.rejected.values()) > done_before
        if metrics is not None:
            _update_metrics(metrics, report, scored_before, rejected_before, by_bucket, busy)
            metrics.waiting_for_repeat.set(waiting)
            scored_before, rejected_before = report.scored, Counter(report.rejected)
        if progressed:
            last_progress = clock()
            logger.info(
                "run %s: %d pairs scored so far (poll %d)", run_id, report.scored, report.polls
            )
            continue
        if until_idle_s is not None and clock() - last_progress >= until_idle_s:
            break
        stop.wait(poll_interval_s)
    if metrics is not None:
        metrics.ready = False
    return _finished(report, cache, started)


@dataclass
class _FollowJob:
    """What a follow worker's polls share: the run, its locks, the scorer and the report.

    ``rejected_ids``: exchange ids this worker kept as rejected records (never retried).
    """

    repo: Repository
    run_id: str
    locks: WorkLocks
    stop: threading.Event
    score: Score
    batch_size: int
    expects_repeat: Callable[[str], bool] | None
    report: CompareReport
    rejected_ids: set[str] = field(default_factory=set)

    def unscored_buckets(self) -> defaultdict[int, list[str]]:
        """The run's unscored exchange ids (less the rejected ones) by work bucket."""
        by_bucket: defaultdict[int, list[str]] = defaultdict(list)
        for exchange_id in self.repo.pair_exchange_ids(self.run_id, only_unscored=True):
            if exchange_id not in self.rejected_ids:
                by_bucket[shard_of(exchange_id, WORK_BUCKETS)].append(exchange_id)
        return by_bucket

    def walk(self, by_bucket: Mapping[int, list[str]], offset: int) -> tuple[int, int]:
        """Score every bucket with work whose lock this worker gets, from ``offset`` on.

        Returns:
            ``(busy, waiting)``: buckets with work held by other workers, and pairs left
            waiting for their baseline repeat.
        """
        busy = waiting = 0
        for step in range(WORK_BUCKETS):
            bucket = (offset + step) % WORK_BUCKETS
            if self.stop.is_set():
                break
            if bucket not in by_bucket:
                continue
            if not self.locks.try_acquire(bucket):
                busy += 1
                continue
            try:
                waiting += self._score_bucket(by_bucket[bucket])
            finally:
                self.locks.release(bucket)
        return busy, waiting

    def _score_bucket(self, exchange_ids: list[str]) -> int:
        """Score a locked bucket's ready pairs in batches; returns the pairs left waiting."""
        repeated = self.repo.repeated_rejections(self.run_id)
        pairs = [
            pair_input(e, c, b, repeated)
            for e, c, b in self.repo.pair_inputs_for(self.run_id, exchange_ids)
            if e.exchange_id not in self.rejected_ids
        ]
        waiting = 0
        if self.expects_repeat is not None:
            ready = [
                p
                for p in pairs
                if p.baseline_repeat is not None or not self.expects_repeat(p.exchange.exchange_id)
            ]
            waiting = len(pairs) - len(ready)
            pairs = ready
        for start in range(0, len(pairs), self.batch_size):
            batch = pairs[start : start + self.batch_size]
            _score_and_save(
                self.repo, self.run_id, batch, self.score, self.report, self.rejected_ids
            )
            if self.stop.is_set():
                break
        return waiting


def _update_metrics(
    metrics: FollowMetrics,
    report: CompareReport,
    scored_before: int,
    rejected_before: Counter[str],
    by_bucket: Mapping[int, list[str]],
    busy: int,
) -> None:
    """Add one poll's counts to ``metrics``."""
    metrics.polls.inc()
    metrics.scored.inc(report.scored - scored_before)
    for reason, count in report.rejected.items():
        if count > rejected_before[reason]:
            metrics.rejected.labels(reason=reason).inc(count - rejected_before[reason])
    metrics.unscored.set(sum(len(ids) for ids in by_bucket.values()))
    metrics.buckets_held_elsewhere.set(busy)


def _score_and_save(
    repo: Repository,
    run_id: str,
    items: list[PairInput],
    score: Score,
    report: CompareReport,
    rejected_ids: set[str] | None = None,
) -> None:
    """Score one batch (pair by pair when the batch fails), write the scores, count them.

    A pair that fails on its own is kept as a rejected record; ``rejected_ids`` collects
    the exchange ids of those pairs.

    Raises:
        Exception: the last pair's error when every pair of a batch of several failed
            (not a record's fault: nothing is rejected then).
    """
    if not items:
        return
    try:
        scores = score(items)
    except Exception:
        logger.warning("scoring a batch of %d failed; scoring pair by pair", len(items))
        scores, failed = _score_one_by_one(run_id, items, score)
        report.rejected["score_failed"] += len(failed)
        if rejected_ids is not None:
            rejected_ids.update(r.location for r in failed if r.location is not None)
        if failed:
            repo.save_rejected_many(failed)
    repo.save_pair_scores(scores)
    report.scored += len(scores)


def _score_one_by_one(
    run_id: str, items: list[PairInput], score: Score
) -> tuple[list[PairScore], list[RejectedRecord]]:
    """Score ``items`` one at a time: the scores, and a rejected record for each that failed.

    Raises:
        Exception: the last pair's error when every pair of a batch of several failed.
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
    return scores, failed


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

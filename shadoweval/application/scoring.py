"""Scoring a run's replayed pairs: similarity, formats, harms, latency
(:mod:`shadoweval.compare.worker`).

The encoder is named by the face (``minilm``: the bundled all-MiniLM-L6-v2 weights;
``hashing``: a non-semantic hashing encoder for smoke tests) and built here
(:func:`make_encoder`); :func:`compare_run` scores what is not scored yet and
:func:`score_stored_run` does the same for a stored run, adding the structured task types
the run was created with. :func:`score_stored_run_in_processes` splits a stored run's
pairs over several processes on one machine (``compare run --workers N``), each scoring
one contiguous range of the run's exchange ids. :func:`follow_stored_run` keeps scoring
a run as its pairs arrive (``compare run --follow``), splitting the work with other
follow workers by bucket locks (:func:`shadoweval.compare.worker.follow_compare`).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

from shadoweval.application.database import open_repository
from shadoweval.application.scoring_options import (
    ScoringOptions,
    encoder_backend_id,
    make_encoder,
    options_encoder,
)
from shadoweval.compare.encoders import Encoder
from shadoweval.compare.harms import compile_refusal_patterns
from shadoweval.compare.metrics import FollowMetrics
from shadoweval.compare.worker import (
    CompareReport,
    check_follow_timing,
    check_shard,
    follow_compare,
    limit_torch_threads,
    run_compare,
    shard_of,
)
from shadoweval.errors import ConfigError, ShadowEvalError
from shadoweval.probes import probe_app
from shadoweval.process_death import die_with_parent
from shadoweval.replay.exchange_replay import in_sample
from shadoweval.serving import BackgroundServer
from shadoweval.storage import Repository, WorkLocks, is_memory_sqlite_url

_log = logging.getLogger(__name__)

__all__ = [
    "CompareReport",
    "Encoder",
    "ScoringOptions",
    "compare_run",
    "follow_stored_run",
    "make_encoder",
    "score_stored_run",
    "score_stored_run_in_processes",
]


def _check_patterns_and_shard(options: ScoringOptions, shard: tuple[int, int] | None) -> None:
    """Refuse an invalid refusal pattern or shard before any encoder is loaded.

    Raises:
        ConfigError: a refusal pattern of ``options`` or ``shard`` is invalid.
    """
    compile_refusal_patterns(options.refusal_patterns)
    if shard is not None:
        check_shard(shard)


def compare_run(
    repo: Repository,
    run_id: str,
    encoder: Encoder,
    *,
    structured_task_types: frozenset[str] = frozenset(),
    rescore: bool = False,
    refusal_patterns: Sequence[str] | None = None,
    covered_scripts: frozenset[str] | None = None,
    embedding_cache: bool = True,
    shard: tuple[int, int] | None = None,
    exchange_ids: tuple[str, str] | None = None,
) -> CompareReport:
    """Score the run's replayed pairs not scored yet (all of them with ``rescore``).

    See :func:`shadoweval.compare.worker.run_compare`; ``structured_task_types`` are task types
    whose
    outputs must be JSON even when the requests do not say so; ``refusal_patterns`` the
    refusal detector's patterns (``CompareSettings.refusal_patterns``; ``None``: the
    defaults of :mod:`shadoweval.compare.harms`); ``covered_scripts`` the scripts the embedding
    model
    covers (``CompareSettings.covered_scripts()``; ``None``: any, no script warnings);
    ``embedding_cache`` reads and writes the database's embedding cache; ``shard``
    ``(I, N)`` scores only the exchanges of shard I of N
    (:func:`shadoweval.compare.worker.shard_of`);
    ``exchange_ids`` an inclusive id range.

    Raises:
        ConfigError: a refusal pattern is invalid (nothing is scored).
        StorageError: the database failed.
    """
    report = run_compare(
        repo,
        run_id,
        encoder,
        structured_task_types=structured_task_types,
        rescore=rescore,
        refusal_patterns=refusal_patterns,
        covered_scripts=covered_scripts,
        embedding_cache=embedding_cache,
        shard=shard,
        exchange_ids=exchange_ids,
    )
    report.backend = encoder_backend_id(encoder)
    choice = getattr(encoder, "backend_choice", None)
    report.backend_choice = choice.as_dict() if choice is not None else None
    return report


def score_stored_run(
    repo: Repository,
    run_id: str,
    options: ScoringOptions,
    *,
    shard: tuple[int, int] | None = None,
    exchange_ids: tuple[str, str] | None = None,
) -> CompareReport:
    """Score a stored run with the encoder ``options`` name (:func:`make_encoder`).

    The structured task types are ``options.structured_task_types`` plus those recorded in
    the run's settings when it was created; the other options, ``shard`` and
    ``exchange_ids`` as in :func:`compare_run` and :func:`make_encoder`.

    A worker started before its run exists (the replay worker that creates it has not had
    a record yet) waits for it, serving its probes; stopped while waiting, it returns an
    empty report.

    Raises:
        ShadowEvalError: the run still does not exist after ``until_idle_s`` (checked
            before the encoder is loaded).
        ConfigError: an unknown encoder name or backend, the model cannot be loaded, or a
            refusal pattern is invalid.
        StorageError: the database failed.
    """
    structured = _run_structured_types(repo, run_id, options.structured_task_types)
    _check_patterns_and_shard(options, shard)  # a bad pattern fails before loading
    encoder = options_encoder(options)
    return compare_run(
        repo,
        run_id,
        encoder,
        structured_task_types=structured,
        covered_scripts=options.covered_scripts,
        rescore=options.rescore,
        refusal_patterns=options.refusal_patterns,
        embedding_cache=options.embedding_cache,
        shard=shard,
        exchange_ids=exchange_ids,
    )


def follow_stored_run(
    repo: Repository,
    run_id: str,
    options: ScoringOptions,
    stop: threading.Event,
    *,
    poll_interval_s: float,
    until_idle_s: float | None = None,
    metrics_port: int | None = None,
) -> CompareReport:
    """Score a stored run's pairs as they arrive, until ``stop`` is set or it stays idle.

    The encoder and structured task types as in :func:`score_stored_run` (``rescore`` is
    refused: a follow worker scores new pairs only); the loop, the bucket locks and when
    it returns as in :func:`shadoweval.compare.worker.follow_compare` (``poll_interval_s`` seconds
    between empty polls; ``until_idle_s``: return after that many seconds with nothing
    new, ``None``: only when ``stop`` is set). On PostgreSQL several workers split the run
    by bucket locks; on SQLite run one (a second is safe, pair scores being upserts, but
    may repeat work). A pair the run also replays to a baseline replica (its
    ``baseline_repeat_url`` and ``baseline_repeat_share``) is scored once its
    baseline-repeat outcome is stored. ``report.backend`` as in :func:`compare_run`. With
    ``metrics_port`` (``0``: any free port) ``/metrics`` (:mod:`shadoweval.compare.metrics`),
    ``/healthz`` and
    ``/readyz`` (200 from the first listing of the run's pairs; text bodies as the replay
    worker's)
    are served on every interface while the worker runs.

    Raises:
        ShadowEvalError: the run does not exist (checked before the encoder is loaded).
        ConfigError: ``options.rescore``, an invalid ``poll_interval_s``/``until_idle_s``,
            an unknown encoder or backend, or an invalid refusal pattern.
        StorageError: the database or the lock connection failed.
        RuntimeError: the metrics port could not be bound.
    """
    if options.rescore:
        raise ConfigError(
            "--rescore cannot be combined with --follow: a follow worker scores new pairs only",
            field="rescore",
            value=True,
        )
    check_follow_timing(poll_interval_s, until_idle_s)
    metrics = FollowMetrics()
    server: BackgroundServer | None = None
    if metrics_port is not None:
        # Up before the wait for the run and the encoder's load (tens of seconds): liveness
        # answers at once, readiness stays 503 until the first listing of the run's pairs.
        app = probe_app(metrics.registry, lambda: (metrics.ready, ""), style="text")
        server = BackgroundServer(
            app, host="0.0.0.0", port=metrics_port, thread_name="shadoweval-compare-metrics"
        ).start()
    try:
        _wait_for_run(repo, run_id, stop, poll_interval_s, until_idle_s)
        if stop.is_set() and repo.get_run(run_id) is None:
            return CompareReport(run_id=run_id, polls=0)  # stopped before there was work
        structured = _run_structured_types(repo, run_id, options.structured_task_types)
        expects_repeat = _repeat_sample(repo, run_id)
        compile_refusal_patterns(options.refusal_patterns)
        encoder = options_encoder(options)
        with WorkLocks(repo.database, run_id) as locks:
            report = _follow(
                repo,
                run_id,
                encoder,
                locks,
                stop,
                structured,
                options,
                metrics,
                poll_interval_s,
                until_idle_s,
                expects_repeat,
            )
    finally:
        if server is not None:
            server.stop()
    report.backend = encoder_backend_id(encoder)
    return report


def _wait_for_run(
    repo: Repository,
    run_id: str,
    stop: threading.Event,
    poll_interval_s: float,
    until_idle_s: float | None,
) -> None:
    """Wait until the run exists: a deployment starts compare workers beside the replay
    workers, and the first replay worker creates the run when its first record arrives.

    Returns when the run exists, when ``stop`` is set, or after ``until_idle_s`` seconds
    (the caller then reports the missing run); logs once while it waits.
    """
    started = time.monotonic()
    logged = False
    while repo.get_run(run_id) is None and not stop.is_set():
        if until_idle_s is not None and time.monotonic() - started >= until_idle_s:
            return
        if not logged:
            _log.info("run %r does not exist yet: waiting for a replay worker to create it", run_id)
            logged = True
        stop.wait(poll_interval_s)


def _follow(
    repo: Repository,
    run_id: str,
    encoder: Encoder,
    locks: WorkLocks,
    stop: threading.Event,
    structured: frozenset[str],
    options: ScoringOptions,
    metrics: FollowMetrics,
    poll_interval_s: float,
    until_idle_s: float | None,
    expects_repeat: Callable[[str], bool] | None,
) -> CompareReport:
    """:func:`shadoweval.compare.worker.follow_compare` with ``options``' scoring settings."""
    return follow_compare(
        repo,
        run_id,
        encoder,
        locks,
        stop,
        poll_interval_s=poll_interval_s,
        until_idle_s=until_idle_s,
        structured_task_types=structured,
        refusal_patterns=options.refusal_patterns,
        covered_scripts=options.covered_scripts,
        embedding_cache=options.embedding_cache,
        metrics=metrics,
        expects_repeat=expects_repeat,
    )


def _repeat_sample(repo: Repository, run_id: str) -> Callable[[str], bool] | None:
    """Which exchanges the run also replays to a baseline replica (its frozen settings
    ``baseline_repeat_url`` and ``baseline_repeat_share``, the replay worker's
    :func:`shadoweval.replay.exchange_replay.in_sample`); ``None`` when it has no replica."""
    run = repo.get_run(run_id)
    settings = run.settings if run is not None else {}
    share = settings.get("baseline_repeat_share")
    if not settings.get("baseline_repeat_url") or not isinstance(share, int | float):
        return None
    if share <= 0:
        return None
    return partial(in_sample, share=float(share))


def _run_structured_types(
    repo: Repository, run_id: str, structured_task_types: frozenset[str]
) -> frozenset[str]:
    """``structured_task_types`` plus the run's own; raises ShadowEvalError for no run."""
    run = repo.get_run(run_id)
    if run is None:
        raise ShadowEvalError(f"run {run_id!r} not found")
    stored = run.settings.get("structured_task_types")
    structured = set(structured_task_types)
    if isinstance(stored, list):
        structured.update(str(s) for s in stored)
    return frozenset(structured)


@dataclass(frozen=True, slots=True)
class _WorkerJob:
    """What one compare process scores (picklable: it crosses a ``spawn``)."""

    database_url: str
    run_id: str
    options: ScoringOptions
    shard: tuple[int, int] | None
    exchange_ids: tuple[str, str]
    torch_threads: int


def _worker_main(job: _WorkerJob, connection: Connection) -> None:
    """Body of one compare process: score its range, send back its report or its error.

    Exits 0 after sending ``("ok", report)``; on any error sends ``("error", message)``
    and exits 1 (the parent reports the exit code and the range). Killed with its parent
    (:func:`~shadoweval.process_death.die_with_parent`).
    """
    die_with_parent()
    try:
        limit_torch_threads(job.torch_threads)  # before the model loads
        with open_repository(job.database_url, upgrade=False) as repo:
            report = score_stored_run(
                repo, job.run_id, job.options, shard=job.shard, exchange_ids=job.exchange_ids
            )
        connection.send(("ok", report))
    except BaseException as exc:  # reported to the parent, then this process fails
        connection.send(("error", f"{type(exc).__name__}: {exc}"[:2000]))
        connection.close()
        raise SystemExit(1) from None
    connection.close()


def split_ranges(exchange_ids: Sequence[str], parts: int) -> list[tuple[str, str]]:
    """Cut ordered ``exchange_ids`` into at most ``parts`` contiguous ``(first, last)`` ranges.

    Sizes differ by at most one; no range is empty (fewer ids than ``parts`` give fewer
    ranges). The ids must be in the database's order (:meth:`Repository.pair_exchange_ids`).

    Raises:
        ConfigError: ``parts`` < 1.
    """
    if parts < 1:
        raise ConfigError("workers must be >= 1", field="workers", value=parts)
    count = min(parts, len(exchange_ids))
    ranges: list[tuple[str, str]] = []
    start = 0
    for index in range(count):
        size = len(exchange_ids) // count + (1 if index < len(exchange_ids) % count else 0)
        ranges.append((exchange_ids[start], exchange_ids[start + size - 1]))
        start += size
    return ranges


def score_stored_run_in_processes(
    database_url: str,
    run_id: str,
    options: ScoringOptions,
    *,
    workers: int,
    shard: tuple[int, int] | None = None,
    cpu_count: int | None = None,
) -> CompareReport:
    """Score a stored run in ``workers`` processes, each on its own range of exchange ids.

    The run's pairs to score (unscored ones, all with ``rescore``; only shard ``I/N``
    with ``shard``) are listed in exchange-id order and cut into ``workers`` contiguous
    ranges (:func:`split_ranges`); each process (``spawn``, so no model or connection is
    shared) opens the database, loads its own encoder with
    ``max(1, cpu_count // workers)`` torch threads (``cpu_count``: ``os.cpu_count()``),
    scores its range and writes its scores. The processes' reports are summed
    (``workers`` = processes started); ``wall_s`` is the whole pass. ``options`` and
    ``shard`` are as in :func:`score_stored_run`. With ``backend="auto"`` each process
    resolves the choice itself; the first measures and caches it
    (``<cache_dir>/backend-choice-*.json``), the thread count is part of the choice's key.

    SQLite is safe with several writer processes (WAL and a busy timeout:
    :data:`shadoweval.storage.database.SQLITE_BUSY_TIMEOUT_MS`); an in-memory SQLite
    database is private to one process and is refused.

    Raises:
        ConfigError: ``workers`` < 1, an in-memory SQLite URL, an invalid shard or
            refusal pattern.
        ShadowEvalError: the run does not exist, or a worker process failed: the message
            names each failed process, its exchange-id range and exit code, and its
            error (the other processes' scores are kept; a re-run scores the rest).
        StorageError: the database failed.
    """
    if workers < 1:
        raise ConfigError("workers must be >= 1", field="workers", value=workers)
    if is_memory_sqlite_url(database_url):
        raise ConfigError(
            "an in-memory SQLite database cannot be shared by compare processes; "
            "use a SQLite file or PostgreSQL",
            field="database_url",
            value=database_url,
        )
    _check_patterns_and_shard(options, shard)
    started = time.perf_counter()
    with open_repository(database_url, upgrade=False) as repo:
        structured = _run_structured_types(repo, run_id, options.structured_task_types)
        ids = repo.pair_exchange_ids(run_id, only_unscored=not options.rescore)
    job_options = replace(options, structured_task_types=structured)
    if shard is not None:
        ids = [i for i in ids if shard_of(i, shard[1]) == shard[0]]
    ranges = split_ranges(ids, workers)
    threads = max(1, (cpu_count or os.cpu_count() or 1) // max(1, len(ranges)))
    jobs = [
        _WorkerJob(
            database_url=database_url,
            run_id=run_id,
            options=job_options,
            shard=shard,
            exchange_ids=first_last,
            torch_threads=threads,
        )
        for first_last in ranges
    ]
    started_jobs = [_start(job) for job in jobs]
    report = CompareReport(run_id=run_id, workers=len(ranges))
    failures = [
        failure
        for index, started_job in enumerate(started_jobs, start=1)
        if (failure := _collect(started_job, index, len(ranges), report)) is not None
    ]
    report.wall_s = time.perf_counter() - started
    if failures:
        raise ShadowEvalError(
            f"{len(failures)} of {len(ranges)} compare processes failed "
            f"({report.scored} pairs were scored and kept): " + "; ".join(failures)
        )
    return report


def _start(job: _WorkerJob) -> tuple[_WorkerJob, BaseProcess, Connection]:
    """Start one compare process (``spawn``) on ``job``; the pipe's reading end comes back."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_worker_main, args=(job, send), daemon=True)
    process.start()  # on the CLI's main thread: the child's parent-death signal follows it
    send.close()  # the child holds the only writing end: EOF when it dies
    return job, process, receive


def _collect(
    started_job: tuple[_WorkerJob, BaseProcess, Connection],
    index: int,
    count: int,
    report: CompareReport,
) -> str | None:
    """Wait for compare process ``index`` of ``count``: merge its report into ``report``, or
    return why it failed (its exchange-id range, exit code and error)."""
    job, process, receive = started_job
    message: tuple[str, object] | None = None
    try:
        message = receive.recv()
    except EOFError:  # died without a word (killed, out of memory)
        message = None
    process.join()
    receive.close()
    first, last = job.exchange_ids
    where = f"compare worker {index} of {count} (exchange ids {first} … {last})"
    if message is not None and message[0] == "ok" and process.exitcode == 0:
        assert isinstance(message[1], CompareReport)
        report.merge(message[1])
        return None
    detail = str(message[1]) if message is not None else "no report"
    return f"{where} exited with code {process.exitcode}: {detail}"

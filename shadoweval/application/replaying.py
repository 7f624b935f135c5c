"""Replaying captured exchanges to the shadow targets of a run.

The source is typed: a capture log (a :class:`~pathlib.Path`, segment file or directory)
is replayed once, to its end (:func:`replay_capture_log`); a Kafka topic
(:class:`~shadoweval.bus.KafkaSource`) is consumed by a worker until stopped or idle
(:func:`replay_kafka`). :func:`replay` opens the run (:mod:`shadoweval.application.runs`) and
replays
either; outcomes are stored idempotently, so replaying again into the same run resumes.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rich.console import Console

from shadoweval.application.candidate_runs import CandidateTarget, candidate_run_requests
from shadoweval.application.database import open_repository
from shadoweval.application.run_policy import run_policy_warnings
from shadoweval.application.runs import RunRequest, TargetConfig, prepare_kafka_run, prepare_run
from shadoweval.application.target_preflight import (
    naming_evaluated,
    preflight_candidates,
    preflight_log,
    target_specs,
)
from shadoweval.bus import BusConsumer, BusProducer, KafkaSource, ensure_topics
from shadoweval.bus.url import is_kafka_url, parse_kafka_url
from shadoweval.capture_log import read_capture_log
from shadoweval.config import KafkaSettings, ReplaySettings, Settings
from shadoweval.errors import ConfigError
from shadoweval.records import ReplayPace
from shadoweval.replay.client import CandidateClient
from shadoweval.replay.kafka_worker import KafkaReplayWorker, WorkerReport
from shadoweval.replay.metrics import MetricsServer, WorkerMetrics, metrics_app
from shadoweval.replay.runner import ReplayReport, ReplayRunner
from shadoweval.storage import Repository, RunInfo

__all__ = [
    "KafkaReplayOptions",
    "ReplayReport",
    "ReplayRequest",
    "ReplayResult",
    "ReplaySource",
    "WorkerReport",
    "parse_replay_source",
    "replay",
    "replay_candidates",
    "replay_capture_log",
    "replay_kafka",
    "replay_kafka_runs",
    "replay_pacing",
]

ReplaySource = Path | KafkaSource
"""What is replayed: a capture log (segment file or directory) or a Kafka topic."""


def parse_replay_source(text: str) -> ReplaySource:
    """``kafka://HOST:PORT[,HOST:PORT]/TOPIC`` → a :class:`KafkaSource`; anything else is
    a capture-log path.

    Raises:
        ConfigError: a ``kafka://`` URL without brokers or topic.
    """
    return parse_kafka_url(text) if is_kafka_url(text) else Path(text)


@dataclass(frozen=True, slots=True)
class KafkaReplayOptions:
    """How a Kafka replay worker runs (ignored for a capture log).

    Attributes:
        baseline_model: the live (baseline) model's name for a new run; ``None``: the
            resumed run's, else the first exchange on the topic.
        until_idle_s: stop once nothing arrived and nothing was in flight this long,
            seconds; ``None``: run until SIGTERM/SIGINT.
        session_timeout_ms: consumer-group session timeout, milliseconds.
        group_id: the consumer group; ``None``: ``settings.worker.group_id``, else
            ``shadoweval-replay.<run id>``.
        metrics_port: serve ``/metrics``, ``/healthz`` and ``/readyz`` on this port;
            ``None``: ``settings.worker.metrics_port``.
    """

    baseline_model: str | None = None
    until_idle_s: float | None = None
    session_timeout_ms: int = 10_000
    group_id: str | None = None
    metrics_port: int | None = None

    def apply(self, settings: Settings) -> Settings:
        """``settings`` with ``group_id`` and ``metrics_port`` applied where given."""
        update: dict[str, object] = {}
        if self.group_id:
            update["group_id"] = self.group_id
        if self.metrics_port is not None:
            update["metrics_port"] = self.metrics_port
        if not update:
            return settings
        return settings.model_copy(update={"worker": settings.worker.model_copy(update=update)})


@dataclass(frozen=True, slots=True)
class ReplayRequest:
    """A replay into a run: the source, the run to open, and how to run.

    ``progress`` shows a progress bar (capture log only); ``kafka`` applies to a topic.
    """

    source: ReplaySource
    run: RunRequest
    progress: bool = True
    kafka: KafkaReplayOptions = field(default_factory=KafkaReplayOptions)


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """The run replayed into and the replay's counts (``report.as_dict()`` is JSON-ready;
    a Kafka worker's report is a :class:`WorkerReport`); ``warnings``: the run's policy
    keys that match none of its traffic
    (:func:`shadoweval.application.gating.run_policy_warnings`)."""

    run: RunInfo
    report: ReplayReport
    warnings: tuple[str, ...] = ()


def replay_pacing(settings: ReplaySettings) -> tuple[ReplayPace, float]:
    """The pace of a replay (``rate``: by ``rate_per_s``, unpaced without it; ``capture``:
    the captured inter-arrival times divided by ``pace_speed``) and its speed.

    Raises:
        ConfigError: ``pace`` is ``capture`` and ``rate_per_s`` is set too (the two are
            different schedules; the message names both).
    """
    if settings.pace == "capture":
        if settings.rate_per_s is not None:
            raise ConfigError(
                f"replay.pace = 'capture' (--pace capture) and replay.rate_per_s = "
                f"{settings.rate_per_s:g} (--rate) are two different schedules: give one",
                field="replay.pace",
                value=settings.pace,
            )
        return ReplayPace.CAPTURE, settings.pace_speed
    if settings.rate_per_s is not None:
        return ReplayPace.RATE, settings.pace_speed
    return ReplayPace.UNPACED, settings.pace_speed


def _record_pass(
    repo: Repository, run_id: str, report: ReplayReport, source: Literal["capture_log", "kafka"]
) -> None:
    """Store the pass's pacing and achieved load with the run (when it sent anything), so
    the gate can say when latency was measured under another load than asked."""
    if report.measured_starts or report.warmup_starts:
        repo.record_replay_pass(run_id, report.replay_pass(source))


async def replay_capture_log(
    repo: Repository,
    run_id: str,
    capture_log: Path,
    targets: Sequence[TargetConfig],
    settings: ReplaySettings,
    *,
    progress: bool = True,
    console: Console | None = None,
    preflight: bool = True,
) -> ReplayReport:
    """Replay every line of ``capture_log`` into run ``run_id`` (resuming what is done).

    Paced by ``settings`` (concurrency, rate or the captured pace, warm-up requests per
    target, sent and completed first); a progress bar on ``console`` (stderr by default)
    when ``progress``. Candidate failures are not errors: they are stored as outcomes and
    counted in the report. The pass's pacing and achieved start rate are stored with the
    run (:meth:`~shadoweval.storage.Repository.record_replay_pass`) for the gate.

    With ``settings.preflight`` (the default) the log's first replayable request is sent
    once to every target first (:mod:`shadoweval.replay.preflight`): nothing is replayed
    when no connection or a configuration status (401/403/404/405/407) fails it; a
    transient failure is printed as a warning on ``console`` and the replay goes on.
    ``preflight=False``: the caller preflighted the targets already
    (:func:`shadoweval.application.target_preflight.preflight_candidates`).

    Raises:
        FileNotFoundError: the capture log does not exist.
        StorageError: the database failed.
        ConfigError: ``--pace capture`` together with ``--rate``.
        PreflightError: a target failed the preflight request (URL, status and body named).
    """
    pace, speed = replay_pacing(settings)
    clients, specs = target_specs(targets, settings)
    for client in clients:
        await client.start()
    try:
        if settings.preflight and preflight:
            await preflight_log(specs, capture_log, console)
        runner = ReplayRunner(
            repo,
            run_id,
            specs,
            concurrency=settings.concurrency,
            rate_per_s=settings.rate_per_s,
            warmup_requests=settings.warmup_requests,
            progress=progress,
            console=console,
            pace=pace,
            pace_speed=speed,
        )
        report = await runner.run(read_capture_log(capture_log))
    finally:
        for client in clients:
            await client.stop()
    await asyncio.to_thread(_record_pass, repo, run_id, report, "capture_log")
    return report


async def replay_kafka(
    repo: Repository,
    run_id: str,
    source: KafkaSource,
    targets: Sequence[TargetConfig],
    settings: Settings,
    *,
    until_idle_s: float | None = None,
    session_timeout_ms: int = 10_000,
    console: Console | None = None,
) -> WorkerReport:
    """Consume ``source`` and replay it into run ``run_id`` until stopped or idle.

    SIGTERM and SIGINT stop the worker gracefully (in-flight replays get
    ``settings.worker.grace_period_s``). The dead-letter topic is created if missing. With
    ``settings.worker.metrics_port`` set, ``/metrics``, ``/healthz`` and ``/readyz`` are
    served on it while the worker runs. Offsets are committed only after the outcomes
    are stored. The worker's pacing and achieved start rate are stored with the run when
    it stops.

    Raises:
        BusError: the broker is unreachable or failed.
        StorageError: the database failed (finished work is persisted and committed first).
    """
    [report] = await replay_kafka_runs(
        repo,
        [(run_id, targets)],
        source,
        settings,
        until_idle_s=until_idle_s,
        session_timeout_ms=session_timeout_ms,
        console=console,
    )
    return report


def _kafka_group(settings: Settings, run_id: str, *, several: bool) -> str:
    """A run's consumer group: ``worker.group_id`` (suffixed ``.<run id>`` when several
    runs consume the topic, so that each consumes all of it), else
    ``shadoweval-replay.<run id>``."""
    group = settings.worker.group_id
    if not group:
        return f"shadoweval-replay.{run_id}"
    return f"{group}.{run_id}" if several else group


def _kafka_workers(
    repo: Repository,
    runs: Sequence[tuple[str, Sequence[TargetConfig]]],
    source: KafkaSource,
    settings: Settings,
    kafka: KafkaSettings,
    *,
    session_timeout_ms: int,
    metrics: WorkerMetrics,
) -> tuple[list[CandidateClient], list[KafkaReplayWorker], list[str]]:
    """One worker per run (not started), their clients and consumer groups; ``metrics``
    is the one worker's when there is one run."""
    pace, speed = replay_pacing(settings.replay)
    several = len(runs) > 1
    clients: list[CandidateClient] = []
    workers: list[KafkaReplayWorker] = []
    groups: list[str] = []
    for run_id, targets in runs:
        run_clients, specs = target_specs(targets, settings.replay)
        clients += run_clients
        group = _kafka_group(settings, run_id, several=several)
        groups.append(group)
        consumer = BusConsumer(
            kafka.bootstrap_servers,
            source.topic,
            group,
            client_id=f"{kafka.client_id}-replay",
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=max(100, session_timeout_ms // 3),
        )
        workers.append(
            KafkaReplayWorker(
                repo,
                run_id,
                specs,
                consumer,
                BusProducer(kafka),
                settings.worker,
                kafka,
                concurrency=settings.replay.concurrency,
                rate_per_s=settings.replay.rate_per_s,
                warmup_requests=settings.replay.warmup_requests,
                metrics=metrics if not several else WorkerMetrics(),
                pace=pace,
                pace_speed=speed,
            )
        )
    return clients, workers, groups


async def replay_kafka_runs(
    repo: Repository,
    runs: Sequence[tuple[str, Sequence[TargetConfig]]],
    source: KafkaSource,
    settings: Settings,
    *,
    until_idle_s: float | None = None,
    session_timeout_ms: int = 10_000,
    console: Console | None = None,
) -> list[WorkerReport]:
    """:func:`replay_kafka` for several runs at once — the candidates of one sample — in
    one process: one worker per run, each in its own consumer group (so every record
    reaches every run's candidate), with its own offsets, dead letters and outcomes (a
    candidate that fails or lags holds back no other); SIGTERM/SIGINT stop them all.
    Reports in the order of ``runs``.

    Raises:
        ConfigError: ``worker.metrics_port`` with several runs (one port, several
            workers: run one worker per candidate to serve metrics).
        BusError, StorageError: as :func:`replay_kafka` (the other workers are stopped
            gracefully first).
    """
    replay_pacing(settings.replay)  # a bad pace is refused before anything starts
    several = len(runs) > 1
    if several and settings.worker.metrics_port is not None:
        raise ConfigError(
            f"--metrics-port {settings.worker.metrics_port} with {len(runs)} candidates: one "
            "port cannot serve several workers; run one worker per candidate to serve metrics",
            field="worker.metrics_port",
            value=str(settings.worker.metrics_port),
        )
    kafka = settings.kafka.model_copy(update={"bootstrap_servers": source.bootstrap_servers})
    await ensure_topics(
        kafka.bootstrap_servers,
        [kafka.dead_letter_topic],
        partitions=kafka.partitions,
        replication_factor=kafka.replication_factor,
    )
    metrics = WorkerMetrics()
    clients, workers, groups = _kafka_workers(
        repo, runs, source, settings, kafka, session_timeout_ms=session_timeout_ms, metrics=metrics
    )
    server: MetricsServer | None = None
    if settings.worker.metrics_port is not None:
        worker = workers[0]
        server = MetricsServer(
            metrics_app(metrics, lambda: worker.ready), port=settings.worker.metrics_port
        ).start()

    def stop_all() -> None:
        for each in workers:
            each.request_stop()

    loop = asyncio.get_running_loop()
    stop_signals = (signal.SIGTERM, signal.SIGINT)
    for sig in stop_signals:
        loop.add_signal_handler(sig, stop_all)
    if console is not None:
        where = f"; metrics on :{server.port}" if server is not None else ""
        for (run_id, _), group in zip(runs, groups, strict=True):
            console.print(f"replaying {source} into run {run_id} (group {group}){where}")
    try:
        for client in clients:
            await client.start()
        tasks = [asyncio.create_task(w.run(until_idle_s=until_idle_s)) for w in workers]
        try:
            reports = list(await asyncio.gather(*tasks))
        except BaseException:
            stop_all()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        for (run_id, _), report in zip(runs, reports, strict=True):
            await asyncio.to_thread(_record_pass, repo, run_id, report, "kafka")
        return reports
    finally:
        for sig in stop_signals:
            loop.remove_signal_handler(sig)
        for client in clients:
            await client.stop()
        if server is not None:
            server.stop()


def _replay_log(
    repo: Repository,
    run_request: RunRequest,
    capture_log: Path,
    settings: Settings,
    *,
    progress: bool,
    console: Console | None,
    preflight: bool = True,
) -> ReplayResult:
    """Open the run of ``run_request`` and replay the capture log into it (``preflight``:
    :func:`replay_capture_log`'s)."""
    run, targets = prepare_run(repo, run_request, settings, capture_log=capture_log)
    report = asyncio.run(
        replay_capture_log(
            repo,
            run.run_id,
            capture_log,
            targets,
            settings.replay,
            progress=progress,
            console=console,
            preflight=preflight,
        )
    )
    return ReplayResult(run, report, run_policy_warnings(repo, run))


def replay(
    request: ReplayRequest, settings: Settings, *, console: Console | None = None
) -> ReplayResult:
    """Open the run (create or resume) and replay the request's source into it.

    A capture log is replayed to its end; a Kafka topic until SIGTERM/SIGINT or
    ``request.kafka.until_idle_s``. Progress and the worker's start line go to
    ``console``.

    Raises:
        ShadowEvalError: bad input (no exchange in the source, a model name that cannot be
            read, another model or policy for an existing run, the database or broker
            unreachable).
        FileNotFoundError: the capture log does not exist.
    """
    [(_, result)] = replay_candidates(request, [], settings, console=console)
    return result


def replay_candidates(
    request: ReplayRequest,
    candidates: Sequence[CandidateTarget],
    settings: Settings,
    *,
    console: Console | None = None,
) -> list[tuple[str, ReplayResult]]:
    """:func:`replay` for several candidates on one sample: one run per candidate
    (:func:`shadoweval.application.candidate_runs.candidate_run_requests`). A capture log
    is replayed into each run in turn; a Kafka topic is consumed by one worker per run at
    once (:func:`replay_kafka_runs`), the baseline identity read once. With no
    ``candidates``, the request's own run alone (named ``""``). Before a capture log is
    replayed into any candidate's run, every candidate's model is resolved and every
    target preflighted (:func:`shadoweval.application.target_preflight.
    preflight_candidates`: the error names the candidate); a later error names the
    candidates already replayed, with their run ids.

    Raises:
        ShadowEvalError, FileNotFoundError: as :func:`replay`.
    """
    replay_pacing(settings.replay)  # a bad pace is refused before a run is created
    requests = (
        candidate_run_requests(request.run, candidates) if candidates else [("", request.run)]
    )
    if isinstance(request.source, Path) and candidates:  # all or nothing, up front
        resolved = preflight_candidates(
            request.source,
            [(t, r) for t, (_, r) in zip(candidates, requests, strict=True)],
            settings,
            console=console,
        )
        requests = [(t.name, r) for t, r in zip(candidates, resolved, strict=True)]
    with open_repository(
        settings.database.url, body_redaction=settings.capture.body_redaction
    ) as repo:
        if isinstance(request.source, Path):
            done: list[tuple[str, ReplayResult]] = []
            for (name, run_request), candidate in zip(
                requests,
                candidates or [CandidateTarget("", request.run.candidate_url)],
                strict=True,
            ):
                ran = [(n, r.run.run_id) for n, r in done]
                with naming_evaluated(
                    candidate, str(run_request.run_id), ran, what="replayed, their runs stored"
                ):
                    result = _replay_log(
                        repo,
                        run_request,
                        request.source,
                        settings,
                        progress=request.progress,
                        console=console,
                        preflight=not candidates,
                    )
                done.append((name, result))
            return done
        options = request.kafka
        settings = options.apply(settings)
        prepared: list[tuple[str, RunInfo, list[TargetConfig]]] = []
        baseline_model = options.baseline_model
        for name, run_request in requests:
            run, targets = prepare_kafka_run(
                repo,
                run_request,
                settings,
                source=request.source,
                baseline_model=baseline_model,
                session_timeout_ms=options.session_timeout_ms,
            )
            baseline_model = baseline_model or run.baseline.name
            prepared.append((name, run, targets))
        reports = asyncio.run(
            replay_kafka_runs(
                repo,
                [(run.run_id, targets) for _, run, targets in prepared],
                request.source,
                settings,
                until_idle_s=options.until_idle_s,
                session_timeout_ms=options.session_timeout_ms,
                console=console,
            )
        )
        return [
            (name, ReplayResult(run, report, run_policy_warnings(repo, run)))
            for (name, run, _), report in zip(prepared, reports, strict=True)
        ]

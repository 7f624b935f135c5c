"""The stages of one evaluation, wired together (used by the ``replay``, ``compare``,
``gate``, ``evaluate`` and ``demo`` commands).

This module is part of the composition root: it is the only place that joins storage, the
replay client, the scorers and the gate. Each function does one stage and returns what it
did; the commands decide how to print it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from application.gating import load_gate_policy
from shadoweval.errors import ConfigError, ShadowEvalError
from shadoweval.records import ModelIdentity, ReplayTarget

if TYPE_CHECKING:
    from rich.console import Console

    from compare.encoders import Encoder
    from compare.worker import CompareReport
    from faces.cli.evaluation import EvaluationRequest
    from replay.client import CandidateClient
    from replay.kafka_worker import WorkerReport
    from replay.runner import ReplayReport, TargetSpec
    from shadoweval.bus.url import KafkaSource
    from shadoweval.config import ReplaySettings, Settings
    from shadoweval.storage import Repository, RunInfo


def make_encoder(name: str, *, device: str = "cpu", batch_size: int = 64) -> Encoder:
    """Build the similarity encoder: ``minilm`` (bundled all-MiniLM-L6-v2) or ``hashing``.

    Raises:
        ConfigError: an unknown encoder name, or the model cannot be loaded.
    """
    from compare.encoders import HashingEncoder, MiniLMEncoder

    if name == "minilm":
        return MiniLMEncoder(device=device, batch_size=batch_size)
    if name == "hashing":
        return HashingEncoder()
    raise ConfigError(
        f"encoder {name!r} is not known: use minilm or hashing", field="encoder", value=name
    )


def baseline_identity(capture_log: Path) -> ModelIdentity:
    """The baseline model identity recorded in the first decodable exchange of a log.

    Raises:
        ShadowEvalError: the log holds no decodable exchange.
    """
    from shadoweval.capture_log import read_capture_log

    for entry in read_capture_log(capture_log):
        if entry.exchange is not None:
            return entry.exchange.baseline_model
    raise ShadowEvalError(f"capture log {capture_log} holds no decodable exchange")


async def model_identity_from_server(
    base_url: str, name: str | None, api_key: str | None, timeout_s: float = 10.0
) -> ModelIdentity:
    """The identity of the model behind ``base_url``: ``name`` if given, else the first id
    listed by ``GET /v1/models``.

    Raises:
        ShadowEvalError: no name given and the server does not list a model.
    """
    import httpx

    from shadoweval.redaction import strip_url_credentials

    if name:
        return ModelIdentity(name=name, base_url=strip_url_credentials(base_url))
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with httpx.AsyncClient(base_url=base_url, timeout=timeout_s) as client:
            response = await client.get("/v1/models", headers=headers)
            response.raise_for_status()
            data = response.json().get("data") or []
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        raise ShadowEvalError(
            f"cannot read the model name from {strip_url_credentials(base_url)}/v1/models "
            f"({exc}); pass it explicitly"
        ) from exc
    if not data or not isinstance(data[0], dict) or not data[0].get("id"):
        raise ShadowEvalError(
            f"{strip_url_credentials(base_url)}/v1/models lists no model; pass the model name"
        )
    return ModelIdentity(name=str(data[0]["id"]), base_url=strip_url_credentials(base_url))


@dataclass(frozen=True, slots=True)
class TargetConfig:
    """A shadow target to replay to: where, which model, what share of exchanges."""

    target: ReplayTarget
    base_url: str
    model: ModelIdentity
    share: float = 1.0
    api_key: str | None = None
    send_model_name: bool = True


def _target_specs(
    targets: Sequence[TargetConfig], settings: ReplaySettings
) -> tuple[list[CandidateClient], list[TargetSpec]]:
    """One candidate client per target (not started) and the replay target specs."""
    from replay.client import CandidateClient
    from replay.runner import TargetSpec

    clients = [
        CandidateClient(
            t.base_url,
            timeout_s=settings.timeout_s,
            connect_timeout_s=settings.connect_timeout_s,
            connect_retries=settings.connect_retries,
            backoff_s=settings.backoff_s,
            max_connections=settings.concurrency,
            keep_raw_body=settings.keep_raw_body,
        )
        for t in targets
    ]
    specs = [
        TargetSpec(
            target=t.target,
            client=c,
            model=t.model,
            share=t.share,
            model_name=t.model.name if t.send_model_name else None,
            api_key=t.api_key,
        )
        for t, c in zip(targets, clients, strict=True)
    ]
    return clients, specs


async def replay_capture_log(
    repo: Repository,
    run_id: str,
    capture_log: Path,
    targets: Sequence[TargetConfig],
    settings: ReplaySettings,
    *,
    progress: bool = True,
    console: Console | None = None,
) -> ReplayReport:
    """Replay every line of ``capture_log`` into run ``run_id`` (resuming what is done)."""
    from replay.runner import ReplayRunner
    from shadoweval.capture_log import read_capture_log

    clients, specs = _target_specs(targets, settings)
    for client in clients:
        await client.start()
    try:
        runner = ReplayRunner(
            repo,
            run_id,
            specs,
            concurrency=settings.concurrency,
            rate_per_s=settings.rate_per_s,
            warmup_requests=settings.warmup_requests,
            progress=progress,
            console=console,
        )
        return await runner.run(read_capture_log(capture_log))
    finally:
        for client in clients:
            await client.stop()


# ------------------------------------------------------------------ Kafka source


async def peek_baseline_identity(
    source: KafkaSource, *, timeout_s: float = 30.0, session_timeout_ms: int = 10_000
) -> ModelIdentity:
    """The baseline identity of the first decodable exchange on the topic.

    Reads from the beginning in a throwaway consumer group (nothing is committed).

    Raises:
        ShadowEvalError: no decodable exchange arrived within ``timeout_s`` (the topic is
            empty or missing); pass the baseline model name instead.
        BusError: the broker is unreachable.
    """
    import uuid

    from shadoweval.bus import BusConsumer
    from shadoweval.capture_log import decode_exchange_line
    from shadoweval.errors import RecordDecodeError

    consumer = BusConsumer(
        source.bootstrap_servers,
        source.topic,
        f"shadoweval-peek.{uuid.uuid4().hex}",
        session_timeout_ms=session_timeout_ms,
        heartbeat_interval_ms=max(100, session_timeout_ms // 3),
    )
    deadline = time.monotonic() + timeout_s
    async with consumer:
        while time.monotonic() < deadline:
            for record in await consumer.getmany(timeout_ms=200, max_records=16):
                try:
                    text = (record.value or b"").decode("utf-8", errors="replace").strip()
                    return decode_exchange_line(text).baseline_model
                except RecordDecodeError:
                    continue
    raise ShadowEvalError(
        f"no decodable exchange on {source} within {timeout_s:g} s; pass --baseline-model "
        "for a new run (or --run-id of an existing one)"
    )


def prepare_kafka_run(
    repo: Repository,
    request: EvaluationRequest,
    settings: Settings,
    *,
    source: KafkaSource,
    baseline_model: str | None = None,
    session_timeout_ms: int = 10_000,
) -> tuple[RunInfo, list[TargetConfig]]:
    """Create the run (or resume ``request.run_id``) for a Kafka source; resolve targets.

    Like :func:`faces.cli.evaluation.prepare_run` (``request.capture_log`` is not
    read): the baseline identity is ``baseline_model``, else the resumed run's, else the
    first exchange on the topic; the run's ``source`` is the ``kafka://`` URL.

    Raises:
        BusError: the broker is unreachable (checked first, so no run is created).
        ConfigError: the run exists with another candidate or baseline model, or policy.
        ShadowEvalError: no baseline identity can be found, or a model name cannot be read.
    """
    from shadoweval.bus import ensure_topics
    from shadoweval.records import ModelIdentity as _Identity

    # Reach the broker (and create the dead-letter topic) before a run is created.
    run_async(
        ensure_topics(
            source.bootstrap_servers,
            [settings.kafka.dead_letter_topic],
            partitions=settings.kafka.partitions,
            replication_factor=settings.kafka.replication_factor,
        )
    )
    existing = repo.get_run(request.run_id) if request.run_id else None
    if baseline_model:
        baseline = _Identity(name=baseline_model)
    elif existing is not None:
        baseline = existing.baseline
    else:
        baseline = run_async(peek_baseline_identity(source, session_timeout_ms=session_timeout_ms))
    return resolve_run(repo, request, settings, baseline=baseline, source=str(source))


def resolve_run(
    repo: Repository,
    request: EvaluationRequest,
    settings: Settings,
    *,
    baseline: ModelIdentity,
    source: str,
) -> tuple[RunInfo, list[TargetConfig]]:
    """Resolve the replay targets; resume ``request.run_id`` or create the run.

    The candidate's identity comes from the request or the server's ``/v1/models``; the
    policy is frozen into a new run (YAML and hash).

    Raises:
        ConfigError: the run exists with another candidate or baseline model, or under a
            different policy (a new model or policy means a new run).
        ShadowEvalError: a model name cannot be read.
    """
    from pydantic import JsonValue

    from shadoweval.redaction import strip_url_credentials

    api_key = settings.replay.api_key.get_secret_value() if settings.replay.api_key else None
    _, policy_yaml, policy_hash = load_gate_policy(request.policy_path)
    candidate = run_async(
        model_identity_from_server(request.candidate_url, request.candidate_model, api_key)
    )
    targets = [TargetConfig(ReplayTarget.CANDIDATE, request.candidate_url, candidate, 1.0, api_key)]
    if request.baseline_repeat_url:
        repeat_model = run_async(
            model_identity_from_server(
                request.baseline_repeat_url, request.baseline_repeat_model or baseline.name, api_key
            )
        )
        targets.append(
            TargetConfig(
                ReplayTarget.BASELINE_REPEAT,
                request.baseline_repeat_url,
                repeat_model,
                request.baseline_repeat_share,
                api_key,
            )
        )
    run = repo.get_run(request.run_id) if request.run_id else None
    if run is not None:
        for role, stored, given in (
            ("candidate", run.candidate.name, candidate.name),
            ("baseline", run.baseline.name, baseline.name),
        ):
            if stored != given:
                raise ConfigError(
                    f"run {run.run_id} compares baseline {run.baseline.name!r} with candidate "
                    f"{run.candidate.name!r}; this {role} is {given!r}: a different model "
                    "means a new run",
                    field=role,
                    value=given,
                )
        from faces.cli.evaluation import audit_policy

        if not audit_policy(
            repo, run, policy_hash, command=request.command, policy_path=request.policy_path
        ):
            raise ConfigError(
                f"run {run.run_id} was started under policy {run.policy_hash[:12]}; this "
                f"policy is {policy_hash[:12]}: a different policy means a new run",
                field="policy",
                value=str(request.policy_path),
            )
        return run, targets
    structured: list[JsonValue] = [*sorted(request.structured_task_types)]
    run = repo.create_run(
        command=request.command,
        run_id=request.run_id,
        name=request.run_name or f"{baseline.name} → {candidate.name}",
        baseline=baseline,
        candidate=candidate,
        policy_hash=policy_hash,
        policy_yaml=policy_yaml,
        candidate_base_url=strip_url_credentials(request.candidate_url),
        source=source,
        settings={
            "replay": settings.replay.model_dump(mode="json", exclude={"api_key"}),
            "baseline_repeat_url": (
                strip_url_credentials(request.baseline_repeat_url)
                if request.baseline_repeat_url
                else None
            ),
            "baseline_repeat_share": request.baseline_repeat_share,
            "encoder": request.encoder,
            "structured_task_types": structured,
        },
        audit_detail={"policy_path": _policy_path(request.policy_path)},
    )
    return run, targets


def _policy_path(path: Path | None) -> str | None:
    """The policy file as recorded in the audit log (``None``: the default policy)."""
    return None if path is None else str(path.resolve())


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
    served on it while the worker runs.

    Raises:
        BusError: the broker is unreachable or failed.
        StorageError: the database failed (finished work is persisted and committed first).
    """
    import signal

    from replay.kafka_worker import KafkaReplayWorker
    from replay.metrics import MetricsServer, WorkerMetrics, metrics_app
    from shadoweval.bus import BusConsumer, BusProducer, ensure_topics

    kafka = settings.kafka.model_copy(update={"bootstrap_servers": source.bootstrap_servers})
    group = settings.worker.group_id or f"shadoweval-replay.{run_id}"
    await ensure_topics(
        kafka.bootstrap_servers,
        [kafka.dead_letter_topic],
        partitions=kafka.partitions,
        replication_factor=kafka.replication_factor,
    )
    clients, specs = _target_specs(targets, settings.replay)
    consumer = BusConsumer(
        kafka.bootstrap_servers,
        source.topic,
        group,
        client_id=f"{kafka.client_id}-replay",
        session_timeout_ms=session_timeout_ms,
        heartbeat_interval_ms=max(100, session_timeout_ms // 3),
    )
    metrics = WorkerMetrics()
    worker = KafkaReplayWorker(
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
        metrics=metrics,
    )
    server: MetricsServer | None = None
    if settings.worker.metrics_port is not None:
        server = MetricsServer(
            metrics_app(metrics, lambda: worker.ready), port=settings.worker.metrics_port
        ).start()
    loop = asyncio.get_running_loop()
    stop_signals = (signal.SIGTERM, signal.SIGINT)
    for sig in stop_signals:
        loop.add_signal_handler(sig, worker.request_stop)
    if console is not None:
        where = f"; metrics on :{server.port}" if server is not None else ""
        console.print(f"replaying {source} into run {run_id} (group {group}){where}")
    try:
        for client in clients:
            await client.start()
        return await worker.run(until_idle_s=until_idle_s)
    finally:
        for sig in stop_signals:
            loop.remove_signal_handler(sig)
        for client in clients:
            await client.stop()
        if server is not None:
            server.stop()


def compare_run(
    repo: Repository,
    run_id: str,
    encoder: Encoder,
    *,
    structured_task_types: frozenset[str] = frozenset(),
    rescore: bool = False,
) -> CompareReport:
    """Score the run's replayed pairs (see :func:`compare.worker.run_compare`)."""
    from compare.worker import run_compare

    return run_compare(
        repo, run_id, encoder, structured_task_types=structured_task_types, rescore=rescore
    )


def run_async(coro: Any) -> Any:
    """Run a coroutine to completion from synchronous CLI code."""
    return asyncio.run(coro)


class StageTimer:
    """Wall-clock seconds per named stage, in the order they ran."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the block as stage ``name``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = round(time.perf_counter() - start, 3)

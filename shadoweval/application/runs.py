"""Runs: which run an evaluation writes into, the models it compares, and its frozen policy.

A run compares one baseline model with one candidate model under one gate policy; a new
model or a new policy means a new run. Opening a run (:func:`prepare_run` for a capture
log, :func:`prepare_kafka_run` for a Kafka topic, both through :func:`resolve_run`):

1. the baseline identity comes from the source (the first decodable exchange of the log
   or topic) or the resumed run; the candidate's (and a baseline replica's) from the
   request or the server's ``GET /v1/models`` (:mod:`shadoweval.model_listing`);
2. a run that exists is resumed only with the same models and policy; each policy
   presented for it is recorded in its policy audit log (:func:`audit_policy`);
3. a new run stores the policy (YAML and hash) it is judged by, whatever the policy file
   says later.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from pydantic import JsonValue

from shadoweval.application.run_policy import load_gate_policy
from shadoweval.bus import BusConsumer, KafkaSource, ensure_topics
from shadoweval.bus.url import is_kafka_url
from shadoweval.capture_log import decode_exchange_line, read_capture_log
from shadoweval.config import Settings
from shadoweval.errors import ConfigError, RecordDecodeError, ShadowEvalError
from shadoweval.model_listing import ModelListingError, list_model_ids, models_url_for_display
from shadoweval.records import Exchange, ModelIdentity, ReplayTarget
from shadoweval.redaction import strip_url_credentials
from shadoweval.storage import PolicyAuditAction, Repository, RunInfo

__all__ = [
    "SOURCE_FIRST_EXCHANGE_KEY",
    "RunRequest",
    "TargetConfig",
    "audit_policy",
    "baseline_identity",
    "capture_log_targets",
    "check_presented_policy",
    "check_run_source",
    "exchange_fingerprint",
    "peek_baseline_identity",
    "prepare_kafka_run",
    "prepare_run",
    "resolve_run",
    "server_model_identity",
]


@dataclass(frozen=True, slots=True)
class RunRequest:
    """The run an evaluation or a replay opens: the candidate, a replica, the policy.

    Attributes:
        candidate_url: base URL of the candidate (shadow) server.
        candidate_model: its model name; ``None``: the first id of its ``/v1/models``.
        baseline_repeat_url: base URL of a shadow replica of the baseline model (a share
            of exchanges is replayed there too: noise floor, latency under equal load).
        baseline_repeat_model: its model name; ``None``: the baseline's name.
        baseline_repeat_share: share of exchanges replayed to the replica, in [0, 1].
        policy_path: gate policy YAML; ``None``: the shipped default policy.
        run_name: a new run's name; ``None``: ``"<baseline> → <candidate>"``.
        run_id: the run to resume (created with this id when it does not exist);
            ``None``: a new run with a fresh id.
        encoder: the similarity encoder recorded in the run's settings.
        structured_task_types: task types whose outputs must be JSON (recorded too).
        command: what the run and the policy audit log record as the asking command.
        candidate_name: with several candidates on one sample, this candidate's name;
            recorded in a new run's settings (``candidate_name``) only when set.
        candidate_group: the runs of those candidates share it (``candidate_group``);
            recorded only when set (:mod:`shadoweval.application.candidates`).
    """

    candidate_url: str
    candidate_model: str | None = None
    baseline_repeat_url: str | None = None
    baseline_repeat_model: str | None = None
    baseline_repeat_share: float = 0.1
    policy_path: Path | None = None
    run_name: str | None = None
    run_id: str | None = None
    encoder: str = "minilm"
    structured_task_types: frozenset[str] = frozenset()
    command: str = "shadow-eval evaluate"
    candidate_name: str | None = None
    candidate_group: str | None = None


@dataclass(frozen=True, slots=True)
class TargetConfig:
    """A shadow target to replay to: where, which model, what share of exchanges.

    ``share`` is in [0, 1]; ``send_model_name`` false leaves the request's ``model`` field
    as recorded instead of naming ``model``.
    """

    target: ReplayTarget
    base_url: str
    model: ModelIdentity
    share: float = 1.0
    api_key: str | None = None
    send_model_name: bool = True


SOURCE_FIRST_EXCHANGE_KEY = "source_first_exchange"
"""Key of the run's ``settings`` holding the fingerprint of its capture log's first decodable
exchange (:func:`exchange_fingerprint`; what :func:`check_run_source` compares on resume)."""


def exchange_fingerprint(exchange: Exchange) -> str:
    """``<exchange id>:<SHA-256 of the record's JSON, first 16 hex digits>``: the id alone
    does not tell two captures apart (a table import derives ids from capture times), so
    the content is part of it."""
    digest = hashlib.sha256(exchange.model_dump_json().encode()).hexdigest()[:16]
    return f"{exchange.exchange_id}:{digest}"


def _first_exchange(capture_log: Path) -> Exchange:
    for entry in read_capture_log(capture_log):
        if entry.exchange is not None:
            return entry.exchange
    raise ShadowEvalError(f"capture log {capture_log} holds no decodable exchange")


def baseline_identity(capture_log: Path) -> ModelIdentity:
    """The baseline model identity recorded in the first decodable exchange of a log.

    Raises:
        ShadowEvalError: the log holds no decodable exchange.
        FileNotFoundError: the log does not exist.
    """
    return _first_exchange(capture_log).baseline_model


def _same_source(stored: str, given: str) -> bool:
    """A ``kafka://`` URL is the same source when equal; a capture-log path when it names
    the same file or directory (relative or absolute)."""
    if stored == given:
        return True
    if is_kafka_url(stored) or is_kafka_url(given):
        return False
    return Path(stored).resolve() == Path(given).resolve()


def _log_holds(capture_log: Path, fingerprint: str) -> bool:
    exchange_id = fingerprint.split(":", 1)[0]
    return any(
        entry.exchange is not None
        and entry.exchange.exchange_id == exchange_id
        and exchange_fingerprint(entry.exchange) == fingerprint
        for entry in read_capture_log(capture_log)
    )


def check_run_source(run: RunInfo, source: str, *, capture_log: Path | None = None) -> None:
    """Refuse to resume ``run`` from another capture source than the one it was started on.

    A run is one population: resuming it from another capture log (or topic) would blend
    two captures into one verdict. Two sources are compared by name (:func:`_same_source`)
    and, for a capture log, by content: the run records its log's first decodable exchange
    (``settings[SOURCE_FIRST_EXCHANGE_KEY]``: its id and a hash of its content); a log at
    the same path that no longer holds that exchange is another capture (a CI job that
    regenerates ``capture.jsonl`` and keeps its ``--run-id``). A log that grew, or that a
    new segment joined, holds it still. Runs stored without a source or a recorded first
    exchange are compared by what they have.

    Raises:
        ConfigError: (field ``run_id``) the source differs; the message names both.
    """
    if run.source is None:
        return
    advice = "another capture means a new run: omit --run-id (or give a new one)"
    if not _same_source(run.source, source):
        raise ConfigError(
            f"run {run.run_id} was started on capture source {run.source}; this source is "
            f"{source}: {advice}",
            field="run_id",
            value=run.run_id,
        )
    first = run.settings.get(SOURCE_FIRST_EXCHANGE_KEY)
    if capture_log is None or not isinstance(first, str):
        return
    if exchange_fingerprint(_first_exchange(capture_log)) != first and not _log_holds(
        capture_log, first
    ):
        raise ConfigError(
            f"run {run.run_id} was started on capture log {run.source} whose first exchange "
            f"is {first.split(':', 1)[0]}; the log now at {source} does not hold that "
            f"exchange as it was captured, so it is another capture: {advice}",
            field="run_id",
            value=run.run_id,
        )


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


async def server_model_identity(
    base_url: str,
    name: str | None,
    api_key: str | None,
    timeout_s: float = 10.0,
    *,
    option: str = "--candidate-model",
) -> ModelIdentity:
    """The identity of the model behind ``base_url``: ``name`` if given, else the first id
    listed by its ``GET /v1/models`` (:func:`shadoweval.model_listing.list_model_ids`).

    The identity's ``base_url`` is recorded without credentials; ``option`` is the
    command-line option that names the model instead (named in the error).

    Raises:
        ShadowEvalError: no name given and the server cannot be read (the message says the
            likely cause: a refused key, nothing listening, a 404) or lists no model.
    """
    clean = strip_url_credentials(base_url)
    if name:
        return ModelIdentity(name=name, base_url=clean)
    try:
        ids = await list_model_ids(base_url, api_key=api_key, timeout_s=timeout_s)
    except ModelListingError as exc:
        raise ShadowEvalError(
            f"cannot read the model name from {exc.url}: {exc.likely()}; check the URL, "
            "that the server is up and its API key (SHADOWEVAL_REPLAY__API_KEY), or pass "
            f"{option} NAME (the preflight then names what the server answers)"
        ) from exc
    if not ids:
        raise ShadowEvalError(
            f"{models_url_for_display(base_url)} lists no model; pass {option} NAME"
        )
    return ModelIdentity(name=ids[0], base_url=clean)


def policy_path_for_audit(path: Path | None) -> str | None:
    """The policy file as recorded in the audit log (``None``: the default policy)."""
    return None if path is None else str(path.resolve())


def audit_policy(
    repo: Repository,
    run: RunInfo,
    presented_hash: str,
    *,
    command: str,
    policy_path: Path | None,
    detail: dict[str, JsonValue] | None = None,
) -> bool:
    """Record in the run's policy audit log that ``command`` presented a policy for it.

    The same hash as the run's frozen policy is a ``used`` row; another hash is a
    ``refused`` row holding both hashes (the caller then refuses: a different policy
    means a new run). ``policy_path`` is ``None`` for the shipped default policy, or when
    the command applies the run's own frozen policy without reading a file.

    Returns:
        True when the presented policy is the run's.

    Raises:
        StorageError: the row cannot be written.
    """
    matches = presented_hash == run.policy_hash
    extra: dict[str, JsonValue] = {"policy_path": policy_path_for_audit(policy_path)}
    extra |= detail or {}
    if not matches:
        extra |= {"run_policy_hash": run.policy_hash, "presented_policy_hash": presented_hash}
    repo.record_policy_audit(
        run_id=run.run_id,
        policy_hash=presented_hash,
        action=PolicyAuditAction.USED if matches else PolicyAuditAction.REFUSED,
        command=command,
        detail=extra,
    )
    return matches


def check_presented_policy(
    repo: Repository, run: RunInfo, policy: Path | None, *, command: str
) -> None:
    """Audit the policy a gate of ``run`` applies; refuse (and audit) another policy.

    ``policy`` ``None`` applies the run's own frozen policy (audited with
    ``policy_source: run``); a file is loaded and its hash compared with the run's.

    Raises:
        ShadowEvalError: ``policy`` is not the policy the run was started under, or it
            cannot be loaded (ConfigError).
        StorageError: the audit row cannot be written.
    """
    if policy is None:
        audit_policy(
            repo,
            run,
            run.policy_hash,
            command=command,
            policy_path=None,
            detail={"policy_source": "run"},
        )
        return
    _, _, digest = load_gate_policy(policy)
    if not audit_policy(repo, run, digest, command=command, policy_path=policy):
        raise ShadowEvalError(
            f"policy {policy} (hash {digest[:12]}) is not the policy run {run.run_id} "
            f"was started under ({run.policy_hash[:12]}); a different policy "
            "means a new run"
        )


def prepare_run(
    repo: Repository, request: RunRequest, settings: Settings, *, capture_log: Path
) -> tuple[RunInfo, list[TargetConfig]]:
    """Create the run (or resume ``request.run_id``) for a capture log; resolve targets.

    The baseline identity comes from the capture log (its first decodable exchange); the
    run's ``source`` is the log's path. See :func:`resolve_run`.

    Raises:
        ConfigError: the run exists with another candidate or baseline model, or policy.
        ShadowEvalError: the capture log holds no exchange, or a model name cannot be read.
        FileNotFoundError: the capture log does not exist.
    """
    first = _first_exchange(capture_log)
    existing = repo.get_run(request.run_id) if request.run_id else None
    if existing is not None:
        check_run_source(existing, str(capture_log), capture_log=capture_log)
    return resolve_run(
        repo,
        request,
        settings,
        baseline=first.baseline_model,
        source=str(capture_log),
        first_exchange=exchange_fingerprint(first),
    )


def prepare_kafka_run(
    repo: Repository,
    request: RunRequest,
    settings: Settings,
    *,
    source: KafkaSource,
    baseline_model: str | None = None,
    session_timeout_ms: int = 10_000,
) -> tuple[RunInfo, list[TargetConfig]]:
    """Create the run (or resume ``request.run_id``) for a Kafka topic; resolve targets.

    Like :func:`prepare_run`: the baseline identity is ``baseline_model``, else the
    resumed run's, else the first exchange on the topic (:func:`peek_baseline_identity`);
    the run's ``source`` is the ``kafka://`` URL.

    Raises:
        BusError: the broker is unreachable (checked first, so no run is created).
        ConfigError: the run exists with another candidate or baseline model, or policy.
        ShadowEvalError: no baseline identity can be found, or a model name cannot be read.
    """
    # Reach the broker (and create the dead-letter topic) before a run is created.
    asyncio.run(
        ensure_topics(
            source.bootstrap_servers,
            [settings.kafka.dead_letter_topic],
            partitions=settings.kafka.partitions,
            replication_factor=settings.kafka.replication_factor,
        )
    )
    existing = repo.get_run(request.run_id) if request.run_id else None
    if existing is not None:
        check_run_source(existing, str(source))
    if baseline_model:
        baseline = ModelIdentity(name=baseline_model)
    elif existing is not None:
        baseline = existing.baseline
    else:
        baseline = asyncio.run(
            peek_baseline_identity(source, session_timeout_ms=session_timeout_ms)
        )
    return resolve_run(repo, request, settings, baseline=baseline, source=str(source))


def _api_key(settings: Settings) -> str | None:
    """The replay's API key (``replay.api_key``), or ``None``."""
    return settings.replay.api_key.get_secret_value() if settings.replay.api_key else None


def capture_log_targets(
    request: RunRequest, settings: Settings, *, capture_log: Path
) -> list[TargetConfig]:
    """The targets :func:`prepare_run` resolves for ``request`` (the candidate first, its
    model read from its ``/v1/models`` when not given), without opening a run: what a
    preflight of several candidates sends to before any run is created.

    Raises:
        ShadowEvalError: the capture log holds no exchange, or a model name cannot be read.
        FileNotFoundError: the capture log does not exist.
    """
    return _targets(request, baseline_identity(capture_log), _api_key(settings))


def _targets(
    request: RunRequest, baseline: ModelIdentity, api_key: str | None
) -> list[TargetConfig]:
    """The candidate target, and the baseline replica's when the request has one."""
    candidate = asyncio.run(
        server_model_identity(request.candidate_url, request.candidate_model, api_key)
    )
    targets = [TargetConfig(ReplayTarget.CANDIDATE, request.candidate_url, candidate, 1.0, api_key)]
    if request.baseline_repeat_url:
        repeat_model = asyncio.run(
            server_model_identity(
                request.baseline_repeat_url,
                request.baseline_repeat_model or baseline.name,
                api_key,
                option="--baseline-repeat-model",
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
    return targets


def resolve_run(
    repo: Repository,
    request: RunRequest,
    settings: Settings,
    *,
    baseline: ModelIdentity,
    source: str,
    first_exchange: str | None = None,
) -> tuple[RunInfo, list[TargetConfig]]:
    """Resolve the replay targets; resume ``request.run_id`` or create the run.

    The candidate's identity comes from the request or the server's ``/v1/models``; the
    policy is frozen into a new run (YAML and hash); ``source`` (a capture-log path or a
    ``kafka://`` URL) is recorded with it, and so is ``first_exchange`` (the fingerprint
    of a capture log's first decodable exchange, which :func:`check_run_source` compares on
    resume).

    Returns:
        The run and its targets (the candidate first).

    Raises:
        ConfigError: the run exists with another candidate or baseline model, or under a
            different policy (a new model or policy means a new run).
        ShadowEvalError: a model name cannot be read.
    """
    _, policy_yaml, policy_hash = load_gate_policy(request.policy_path)
    targets = _targets(request, baseline, _api_key(settings))
    candidate = targets[0].model
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
            SOURCE_FIRST_EXCHANGE_KEY: first_exchange,
            **(
                {"candidate_name": request.candidate_name, "candidate_group": group}
                if (group := request.candidate_group) is not None
                else {}
            ),
        },
        audit_detail={"policy_path": policy_path_for_audit(request.policy_path)},
    )
    return run, targets

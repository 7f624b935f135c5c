"""The steps every replay source shares: store, sample, replay one exchange, persist outcomes.

Used by :class:`shadoweval.replay.runner.ReplayRunner` (capture-log files) and
:class:`shadoweval.replay.kafka_worker.KafkaReplayWorker` (a Kafka topic), so both behave the same:

* :func:`split_conflicts` / :func:`rejected_record` — a reused exchange id with other
  content, or a line that does not decode, becomes a rejected record (secrets scrubbed,
  fingerprinted so that a re-read stores it once);
* :func:`unreplayable` — an exchange whose replay request cannot even be built (an
  exception, not a :class:`~shadoweval.replay.rewrite.SkipReplay`) is rejected before it is stored;
* :func:`in_sample` — a target with ``share < 1`` gets a deterministic subset of exchanges
  (SHA-256 of the exchange id, the same across restarts and workers);
* :class:`ExchangeReplayer` — one exchange to one target → one :class:`ReplayOutcome`,
  the first N sends per target flagged warm-up and completed before the target's first
  measured send; an exception while building or sending becomes a :class:`ReplayFailure`
  (kept as a rejected record by the caller), never a crash;
* :class:`OutcomeWriter` — outcomes written in batches, idempotently on
  ``(run_id, exchange_id, target)`` (first write wins);
* :class:`ReplayReport` — the counts of a pass; nothing read is missing from them.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from shadoweval.errors import ReplayError
from shadoweval.records import (
    Exchange,
    ModelIdentity,
    ReplayErrorKind,
    ReplayOutcome,
    ReplayPace,
    ReplayPass,
    ReplayTarget,
    Timings,
    same_named,
    translation_loss_fields,
    utc_now,
)
from shadoweval.redaction import scrub_secrets
from shadoweval.replay.client import CandidateClient, ReplayResult
from shadoweval.replay.conversations import ResponsesConversations
from shadoweval.replay.rewrite import ReplayRequest, SkipReplay, build_replay_request
from shadoweval.replay.scheduler import Dispatch, PacedStats, WarmupBarrier
from shadoweval.storage import RejectedRecord, RejectStage, Repository, rejection_fingerprint

DETAIL_MAX_CHARS = 2000
"""A rejection's ``detail`` built from an exception is cut to this many characters."""

_RESULT_FIELDS = ("response", "timings", "error_kind", "error_detail")
"""What a :class:`ReplayOutcome` takes from the client's :class:`ReplayResult` under the
same name."""

_PASS_FIELDS = (
    "pace",
    "pace_speed",
    "asked_rate_per_s",
    "achieved_rate_per_s",
    "measured_starts",
    "warmup_starts",
    "concurrency",
)
"""What a :class:`ReplayPass` takes from a :class:`ReplayReport` under the same name."""


@dataclass(frozen=True, slots=True)
class TargetSpec:
    """One shadow target of a run.

    ``share`` is the fraction of exchanges sent to it, chosen deterministically from the
    exchange id (the same exchange is always in or out, across restarts). ``model_name``
    overrides the request's ``model`` field (``None`` keeps the captured one).
    ``translate``: captured route → the route this target speaks instead
    (``replay.candidate_translate``; :func:`~shadoweval.replay.rewrite.build_replay_request`).
    """

    target: ReplayTarget
    client: CandidateClient
    model: ModelIdentity
    share: float = 1.0
    model_name: str | None = None
    api_key: str | None = None
    translate: Mapping[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class ReplayReport:
    """Counts of one replay pass. Nothing read is missing from these counts.

    ``lines_read``: capture-log lines (or Kafka records) read; ``rejected``: those kept
    as rejected records, by reason (a file replay counts every rejected line of the pass:
    ``lines_read == exchanges + sum(rejected)``); ``rejected_already_stored``: of those,
    the ones an earlier pass had stored already (not stored again); ``replay_failed``:
    (exchange, target) pairs whose replay raised instead of returning an outcome (kept as
    rejected records of stage ``replay``, by reason); ``exchanges``: decoded exchanges stored;
    ``already_done``: (exchange, target) pairs not sent because an outcome was stored
    before; ``retried``: per target, stored failures of the environment sent again (their
    new outcome replaces the failure; issue 29); ``sent``/``skipped``/``ok``: per target;
    ``errors``: per error kind;
    ``duplicates``: outcomes not written because the same key was stored already;
    ``cache_hits``: per target, answers a cache served (``response.cache_hit``: kept, and
    left out of the latency checks by the gate).

    Load: ``pace`` (unpaced, ``rate`` or ``capture`` with ``pace_speed``);
    ``target_rate_per_s`` the ``--rate`` asked; ``asked_rate_per_s`` the rate asked of the
    measured requests (``--rate``, or the captured arrival rate × speed);
    ``achieved_rate_per_s`` their achieved start rate, (n − 1) / (last − first start), on
    ``measured_starts`` starts (warm-up requests, ``warmup_starts``, and skips do not
    count); ``rate_shortfall`` when it is below 95% of the asked rate
    (:attr:`~shadoweval.records.ReplayPass.shortfall`).

    Interruptions: ``concurrency`` the requests in flight at most (``--concurrency``); per
    target, ``streamed``
    counts the streamed replays that came back and ``interrupted`` those that were an
    interrupted stream (``error_kind interrupted``); :meth:`interruption_advice` says to
    lower ``--concurrency`` when a burst of them shows a server that interrupts running
    streams (:meth:`~shadoweval.records.ReplayPass.interruption_advice`).

    ``translated``: candidate replays sent translated to another API, by the route sent to;
    ``translation_losses``: what those translations dropped, by field
    (:func:`~shadoweval.records.translation_loss_fields`).

    ``co_timed``: exchanges whose candidate and baseline-replica replays were sent together
    (:mod:`shadoweval.replay.co_timed`).
    """

    run_id: str
    lines_read: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    rejected_already_stored: int = 0
    replay_failed: Counter[str] = field(default_factory=Counter)
    exchanges: int = 0
    already_done: int = 0
    retried: Counter[str] = field(default_factory=Counter)
    sent: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    ok: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    warmup: int = 0
    duplicates: int = 0
    cache_hits: Counter[str] = field(default_factory=Counter)
    wall_s: float = 0.0
    achieved_rate_per_s: float | None = None
    target_rate_per_s: float | None = None
    pace: ReplayPace = ReplayPace.UNPACED
    pace_speed: float | None = None
    asked_rate_per_s: float | None = None
    measured_starts: int = 0
    warmup_starts: int = 0
    concurrency: int | None = None
    streamed: Counter[str] = field(default_factory=Counter)
    interrupted: Counter[str] = field(default_factory=Counter)
    co_timed: int = 0
    translated: Counter[str] = field(default_factory=Counter)
    translation_losses: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        if self.pace is ReplayPace.UNPACED and self.target_rate_per_s is not None:
            self.pace = ReplayPace.RATE
        if self.pace is ReplayPace.RATE and self.asked_rate_per_s is None:
            self.asked_rate_per_s = self.target_rate_per_s

    def record_load(self, stats: PacedStats) -> None:
        """Take the wall time, starts and achieved start rate of a paced run."""
        self.wall_s = stats.wall_s
        self.measured_starts = stats.measured_starts
        self.warmup_starts = stats.warmup_starts
        self.achieved_rate_per_s = stats.achieved_rate_per_s
        if self.pace is ReplayPace.CAPTURE:
            self.asked_rate_per_s = stats.captured_rate_per_s(self.pace_speed or 1.0)

    def replay_pass(self, source: Literal["capture_log", "kafka"]) -> ReplayPass:
        """This pass's pacing and achieved load, as stored with the run for the gate."""
        return ReplayPass(
            source=source,
            **same_named(self, _PASS_FIELDS),
            streamed=dict(self.streamed),
            interrupted=dict(self.interrupted),
            translated=dict(self.translated),
            translation_losses=dict(self.translation_losses),
        )

    def interruption_advice(self) -> str | None:
        """Lower ``--concurrency`` or fix the server: a burst of interrupted streams under
        concurrency (:meth:`~shadoweval.records.ReplayPass.interruption_advice`)."""
        return self.replay_pass("capture_log").interruption_advice()

    @property
    def rate_shortfall(self) -> bool:
        """The measured requests started below 95% of the asked rate."""
        return self.replay_pass("capture_log").shortfall

    def count_outcome(self, outcome: ReplayOutcome) -> None:
        """Count one finished replay (sent or skipped, ok or by error kind, warm-up)."""
        key = outcome.target.value
        if outcome.error_kind is ReplayErrorKind.SKIPPED:
            self.skipped[key] += 1
        else:
            self.sent[key] += 1
        if outcome.warmup:
            self.warmup += 1
        if outcome.error_kind is None:
            self.ok[key] += 1
        elif outcome.error_kind is not ReplayErrorKind.SKIPPED:
            self.errors[outcome.error_kind.value] += 1
        if outcome.response is not None and outcome.response.cache_hit:
            self.cache_hits[key] += 1
        if outcome.response is not None and outcome.response.streamed:
            self.streamed[key] += 1
        if outcome.error_kind is ReplayErrorKind.INTERRUPTED:
            self.interrupted[key] += 1
        if outcome.translated_to is not None:
            self.translated[outcome.translated_to] += 1
            self.translation_losses.update(translation_loss_fields(outcome.missing_params))

    def as_dict(self) -> dict[str, object]:
        """A JSON-ready view."""
        return {
            "run_id": self.run_id,
            "lines_read": self.lines_read,
            "rejected": dict(self.rejected),
            "rejected_already_stored": self.rejected_already_stored,
            "replay_failed": dict(self.replay_failed),
            "exchanges": self.exchanges,
            "already_done": self.already_done,
            "retried": dict(self.retried),
            "sent": dict(self.sent),
            "skipped": dict(self.skipped),
            "ok": dict(self.ok),
            "errors": dict(self.errors),
            "warmup": self.warmup,
            "duplicates": self.duplicates,
            "cache_hits": dict(self.cache_hits),
            "wall_s": round(self.wall_s, 3),
            "achieved_rate_per_s": _rounded(self.achieved_rate_per_s),
            "target_rate_per_s": self.target_rate_per_s,
            "pace": self.pace.value,
            "pace_speed": self.pace_speed,
            "asked_rate_per_s": _rounded(self.asked_rate_per_s),
            "measured_starts": self.measured_starts,
            "warmup_starts": self.warmup_starts,
            "rate_shortfall": self.rate_shortfall,
            "concurrency": self.concurrency,
            "streamed": dict(self.streamed),
            "interrupted": dict(self.interrupted),
            "interruption_advice": self.interruption_advice(),
            "translated": dict(self.translated),
            "translation_losses": dict(self.translation_losses),
            "co_timed": self.co_timed,
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


async def resume_point(
    repo: Repository, run_id: str, target: ReplayTarget
) -> tuple[set[str], set[str]]:
    """Where a pass of ``run_id`` to ``target`` resumes: ``(done, retry)`` — the exchange
    ids with a stored outcome that are not sent again, and those whose stored outcome
    failed for reasons of the environment
    (:meth:`~shadoweval.storage.Repository.environment_failed_ids`), which are sent again
    and replaced (:class:`OutcomeWriter` with ``replace_failures``; issue 29)."""
    stored = await asyncio.to_thread(repo.completed_exchange_ids, run_id, target)
    retry = await asyncio.to_thread(repo.environment_failed_ids, run_id, target)
    return stored - retry, stored & retry


def in_sample(exchange_id: str, share: float) -> bool:
    """Deterministic Bernoulli(share) membership from the exchange id (SHA-256)."""
    if share >= 1.0:
        return True
    if share <= 0.0:
        return False
    digest = hashlib.sha256(exchange_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


def sampled_targets(exchange_id: str, targets: Sequence[TargetSpec]) -> list[TargetSpec]:
    """The targets whose deterministic sample contains ``exchange_id``, in order."""
    return [spec for spec in targets if in_sample(exchange_id, spec.share)]


def rejected_record(
    run_id: str,
    location: str,
    reason: str,
    detail: str,
    raw: str,
    *,
    stage: RejectStage = RejectStage.CAPTURE_LOG,
) -> RejectedRecord:
    """A rejected capture-log line or record, with secret-looking substrings scrubbed.

    Stage ``capture_log`` (the default): it counts in the run's coverage as
    captured-but-rejected, whether it came from a file or from a Kafka topic. Stage
    ``replay``: an exchange already stored as a member of the run (it counts as captured
    once) that could not be replayed. The fingerprint
    (:func:`~shadoweval.storage.rejection_fingerprint` of ``location`` and the scrubbed
    ``raw``) makes storing it again — a re-read of the same source — a no-op.
    """
    raw_text, _ = scrub_secrets(raw)
    detail_text, _ = scrub_secrets(detail)
    return RejectedRecord(
        stage=stage.value,
        reason=reason,
        location=location,
        detail=detail_text,
        raw=raw_text,
        run_id=run_id,
        fingerprint=rejection_fingerprint(location, raw_text),
    )


def describe_exception(exc: BaseException) -> str:
    """``"<type>: <message>"`` of an exception, cut to :data:`DETAIL_MAX_CHARS`."""
    return f"{type(exc).__name__}: {exc}"[:DETAIL_MAX_CHARS]


@dataclass(frozen=True, slots=True)
class ReplayFailure:
    """An exchange the replay could not handle for one target: building or sending its
    request raised (an input no rule foresaw, or a bug) instead of returning an outcome.

    ``reason`` is ``build_failed`` or ``send_failed``; ``detail`` the exception
    (``"<type>: <message>"``). The caller keeps it as a rejected record of stage
    ``replay`` (and, on Kafka, a dead letter) and goes on with the next exchange.
    """

    exchange_id: str
    target: ReplayTarget
    reason: str
    detail: str


def unreplayable(exchange: Exchange, targets: Sequence[TargetSpec]) -> str | None:
    """Why the replay request of ``exchange`` cannot be built, or ``None`` when it can.

    Builds the request for each target it is sampled for (pure and cheap, nothing is
    sent); an exception there — rather than a :class:`~shadoweval.replay.rewrite.SkipReplay`, which
    is a stored outcome with its reason — means the exchange could never be replayed, so
    it is rejected before it is stored. Returns ``"<type>: <message>"``.
    """
    for spec in sampled_targets(exchange.exchange_id, targets):
        try:
            build_replay_request(
                exchange, model=spec.model_name, api_key=spec.api_key, translate=spec.translate
            )
        except Exception as exc:
            return describe_exception(exc)
    return None


async def split_conflicts(
    repo: Repository, exchanges: list[Exchange]
) -> tuple[list[Exchange], list[tuple[Exchange, str]]]:
    """Split ``exchanges`` into those that may be stored and those whose id is already
    stored with different content (``(exchange, reason)``; the stored one is kept)."""
    conflicts = await asyncio.to_thread(repo.conflicting_exchanges, exchanges)
    if not conflicts:
        return exchanges, []
    kept = [e for e in exchanges if e.exchange_id not in conflicts]
    refused = [(e, conflicts[e.exchange_id]) for e in exchanges if e.exchange_id in conflicts]
    return kept, refused


def skipped_outcome(
    run_id: str, exchange: Exchange, spec: TargetSpec, reason: str
) -> ReplayOutcome:
    """The outcome of an exchange deliberately not sent to ``spec`` (``error_kind=skipped``)."""
    return ReplayOutcome(
        run_id=run_id,
        exchange_id=exchange.exchange_id,
        target=spec.target,
        attempt=0,
        model=spec.model,
        error_kind=ReplayErrorKind.SKIPPED,
        error_detail=reason,
        timings=Timings(),
        warmup=False,
    )


@dataclass(frozen=True, slots=True)
class PreparedReplay:
    """One exchange planned for one target: the request to send (or why it is skipped)
    and whether it is a warm-up request. :attr:`dispatch` is how the scheduler starts it."""

    exchange: Exchange
    spec: TargetSpec
    request: ReplayRequest | SkipReplay | ReplayFailure
    warmup: bool
    barrier: WarmupBarrier
    location: str = ""

    @property
    def skipped(self) -> bool:
        """Not sent (a route that is not replayed, an oversize or unreadable body, or a
        request that could not be built: :attr:`failure`)."""
        return not isinstance(self.request, ReplayRequest)

    @property
    def failure(self) -> ReplayFailure | None:
        """Why building the request raised, when it did."""
        return self.request if isinstance(self.request, ReplayFailure) else None

    @property
    def reason(self) -> str:
        """Why it is skipped (empty for a request that is sent)."""
        return self.request.reason if not isinstance(self.request, ReplayRequest) else ""

    @property
    def dispatch(self) -> Dispatch:
        """A skip starts at once, unpaced and unmeasured; a warm-up request is paced and
        not measured; a measured request first waits for its target's warm-up to end."""
        if self.skipped:
            return Dispatch(paced=False, measured=False)
        at = self.exchange.captured_at
        if self.warmup:
            return Dispatch(measured=False, at=at)
        if self.barrier.is_done(self.spec.target):
            return Dispatch(at=at)
        target = self.spec.target
        return Dispatch(ready=lambda: self.barrier.ready(target), at=at)


class ExchangeReplayer:
    """Replays one exchange to one target; warm-up requests go first, per target.

    :meth:`prepare` (called in dispatch order) builds the request and numbers the sends
    per target: the first ``warmup_requests`` requests *sent* to each target are flagged
    ``warmup``; a skipped exchange neither is nor uses up a warm-up request. A measured
    request of a target waits until every warm-up request of that target has completed
    (:attr:`PreparedReplay.dispatch`, :class:`~shadoweval.replay.scheduler.WarmupBarrier`), so a
    cold
    replica's first answers are sent, flagged and out of the way before anything is
    measured. :meth:`send` returns the outcome. Candidate failures are returned as
    outcomes with ``error_kind``, never raised; an exception while building or sending the
    request is returned as a :class:`ReplayFailure` (only cancellation and
    :class:`~shadoweval.errors.ReplayError` — a target that cannot be used at all, such as
    a client not started — propagate).
    """

    def __init__(self, run_id: str, *, warmup_requests: int = 0) -> None:
        self.run_id = run_id
        self.warmup_requests = warmup_requests
        self.barrier = WarmupBarrier(warmup_requests)
        self.conversations = ResponsesConversations()
        """The Responses turns read so far (the source calls ``observe`` on every exchange
        it reads, in order), for ``previous_response_id``."""

    def prepare(self, exchange: Exchange, spec: TargetSpec, location: str = "") -> PreparedReplay:
        """Plan ``exchange`` for ``spec``: its request (or skip, or the failure to build it)
        and warm-up flag. Call it in dispatch order: it numbers the sends per target."""
        request: ReplayRequest | SkipReplay | ReplayFailure
        try:
            request = build_replay_request(
                exchange,
                model=spec.model_name,
                api_key=spec.api_key,
                translate=spec.translate,
                conversations=self.conversations,
            )
        except Exception as exc:
            request = ReplayFailure(
                exchange.exchange_id, spec.target, "build_failed", describe_exception(exc)
            )
        warmup = isinstance(request, ReplayRequest) and self.barrier.assign(spec.target)
        return PreparedReplay(exchange, spec, request, warmup, self.barrier, location)

    async def send(
        self, prepared: PreparedReplay, *, co_timed: bool = False
    ) -> ReplayOutcome | ReplayFailure:
        """Send a prepared replay (or record its skip) and return the outcome, or the
        :class:`ReplayFailure` when building or sending raised. ``co_timed``: sent together
        with the other target's replay of the exchange (:mod:`shadoweval.replay.co_timed`),
        recorded on the outcome.

        Raises:
            ReplayError: the target cannot be used at all (its client is not started).
        """
        exchange, spec, request = prepared.exchange, prepared.spec, prepared.request
        if isinstance(request, ReplayFailure):
            return request
        if isinstance(request, SkipReplay):
            return skipped_outcome(self.run_id, exchange, spec, request.reason)
        try:
            sent_at = utc_now()
            result: ReplayResult = await spec.client.send(request)
            return ReplayOutcome(
                run_id=self.run_id,
                exchange_id=exchange.exchange_id,
                target=spec.target,
                attempt=result.attempts,
                model=spec.model,
                pinned_params=dict(request.pinned_params),
                missing_params=request.missing_params,
                **same_named(result, _RESULT_FIELDS),
                warmup=prepared.warmup,
                co_timed=co_timed,
                sent_at=sent_at,
                translated_to=request.translated_to,
            )
        except ReplayError:
            raise
        except Exception as exc:
            return ReplayFailure(
                exchange.exchange_id, spec.target, "send_failed", describe_exception(exc)
            )
        finally:
            if prepared.warmup:
                self.barrier.completed(spec.target)

    async def replay(self, exchange: Exchange, spec: TargetSpec) -> ReplayOutcome | ReplayFailure:
        """Prepare and send at once (a measured request waits for its target's warm-up)."""
        prepared = self.prepare(exchange, spec)
        ready = prepared.dispatch.ready
        if ready is not None:
            await ready()
        return await self.send(prepared)


@dataclass(frozen=True, slots=True)
class FlushResult:
    """What one :meth:`OutcomeWriter.flush` wrote: the outcomes (new or duplicate — all
    are now persisted) and how many were duplicates of stored ones."""

    written: list[ReplayOutcome]
    duplicates: int


class OutcomeWriter:
    """Collects finished outcomes and writes them in batches (idempotent, first write wins).

    With ``replace_failures`` (a capture-log pass, which re-sends the environment's
    failures) a stored *failed* outcome of the same key is replaced
    (:meth:`~shadoweval.storage.Repository.replace_failed_outcomes`); a stored answer
    never is.

    :meth:`due` says a flush is wanted: ``batch`` outcomes are waiting, or ``interval_s``
    seconds passed since the last flush. Flushes are serialized by a lock.

    Raises (from :meth:`flush`):
        StorageError: the database refused the batch (the outcomes stay un-persisted and
            are dropped from the buffer; the caller must not treat them as stored).
    """

    def __init__(
        self,
        repo: Repository,
        *,
        batch: int = 64,
        interval_s: float = 1.0,
        replace_failures: bool = False,
    ) -> None:
        self.repo = repo
        self.replace_failures = replace_failures
        self.batch = batch
        self.interval_s = interval_s
        self._pending: list[ReplayOutcome] = []
        self._lock = asyncio.Lock()
        self._last = time.monotonic()

    def add(self, outcome: ReplayOutcome) -> None:
        """Queue one outcome for the next flush."""
        self._pending.append(outcome)

    @property
    def pending(self) -> int:
        """Outcomes waiting to be written."""
        return len(self._pending)

    def due(self) -> bool:
        """True when a batch is full or the interval has passed since the last flush."""
        return len(self._pending) >= self.batch or (
            bool(self._pending) and time.monotonic() - self._last >= self.interval_s
        )

    async def flush(self) -> FlushResult:
        """Write every queued outcome; return them and the number of duplicates."""
        async with self._lock:
            self._last = time.monotonic()
            pending, self._pending = self._pending, []
            if not pending:
                return FlushResult([], 0)
            save = (
                self.repo.replace_failed_outcomes
                if self.replace_failures
                else self.repo.save_outcomes
            )
            inserted = await asyncio.to_thread(save, pending)
            return FlushResult(pending, len(pending) - inserted)

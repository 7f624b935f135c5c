"""Replay a capture log into a run: source → scheduler → client → storage.

Every line of the source ends somewhere: a decoded exchange is stored (with run
membership, its sensitive headers removed) and replayed to each target it is sampled for; a
line that does not decode, or that reuses a stored exchange id with different content, is
stored as a rejected record with its reason (secret-looking text scrubbed). Outcomes are
written idempotently — unique ``(run_id, exchange_id, target)`` — so re-running a replay
resumes: exchanges that already have an outcome for a target are not sent again.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from replay.client import CandidateClient, ReplayResult
from replay.rewrite import SkipReplay, build_replay_request
from replay.scheduler import run_paced
from shadoweval.capture_log import LogEntry
from shadoweval.records import (
    Exchange,
    ModelIdentity,
    ReplayErrorKind,
    ReplayOutcome,
    ReplayTarget,
    Timings,
)
from shadoweval.redaction import redact_exchange_headers, scrub_secrets
from shadoweval.storage import RejectedRecord, RejectStage, Repository

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TargetSpec:
    """One shadow target of a run.

    ``share`` is the fraction of exchanges sent to it, chosen deterministically from the
    exchange id (the same exchange is always in or out, across restarts). ``model_name``
    overrides the request's ``model`` field (``None`` keeps the captured one).
    """

    target: ReplayTarget
    client: CandidateClient
    model: ModelIdentity
    share: float = 1.0
    model_name: str | None = None
    api_key: str | None = None


@dataclass(slots=True)
class ReplayReport:
    """Counts of one replay pass. Nothing read is missing from these counts."""

    run_id: str
    lines_read: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    exchanges: int = 0
    already_done: int = 0
    sent: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    ok: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    warmup: int = 0
    duplicates: int = 0
    wall_s: float = 0.0
    achieved_rate_per_s: float = 0.0
    target_rate_per_s: float | None = None

    def as_dict(self) -> dict[str, object]:
        """A JSON-ready view."""
        return {
            "run_id": self.run_id,
            "lines_read": self.lines_read,
            "rejected": dict(self.rejected),
            "exchanges": self.exchanges,
            "already_done": self.already_done,
            "sent": dict(self.sent),
            "skipped": dict(self.skipped),
            "ok": dict(self.ok),
            "errors": dict(self.errors),
            "warmup": self.warmup,
            "duplicates": self.duplicates,
            "wall_s": round(self.wall_s, 3),
            "achieved_rate_per_s": round(self.achieved_rate_per_s, 3),
            "target_rate_per_s": self.target_rate_per_s,
        }


def in_sample(exchange_id: str, share: float) -> bool:
    """Deterministic Bernoulli(share) membership from the exchange id (SHA-256)."""
    if share >= 1.0:
        return True
    if share <= 0.0:
        return False
    digest = hashlib.sha256(exchange_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


class ReplayRunner:
    """Replays capture-log entries into run ``run_id`` against one or more targets.

    Args:
        repo: storage.
        run_id: an existing run.
        targets: the candidate and, optionally, a baseline-repeat target.
        concurrency: maximum requests in flight (all targets together).
        rate_per_s: target start rate; ``None`` = as fast as concurrency allows.
        warmup_requests: the first N sends per target are flagged warm-up.
        batch_size: exchanges stored per database write.
        progress: show a rich progress bar on ``console``.

    Finished outcomes are written in batches of ``flush_batch`` (64) or at least every
    ``flush_interval_s`` (1 s), and once more when the run ends or is interrupted.
    """

    def __init__(
        self,
        repo: Repository,
        run_id: str,
        targets: Sequence[TargetSpec],
        *,
        concurrency: int = 16,
        rate_per_s: float | None = None,
        warmup_requests: int = 0,
        batch_size: int = 256,
        progress: bool = True,
        console: Console | None = None,
    ) -> None:
        if not targets:
            raise ValueError("at least one replay target is required")
        self.repo = repo
        self.run_id = run_id
        self.targets = list(targets)
        self.concurrency = concurrency
        self.rate_per_s = rate_per_s
        self.warmup_requests = warmup_requests
        self.batch_size = batch_size
        self.progress = progress
        self.console = console or Console(stderr=True)
        self._dispatched: Counter[ReplayTarget] = Counter()
        self._pending: list[ReplayOutcome] = []
        self._flush_lock = asyncio.Lock()
        self._last_flush = time.monotonic()
        self.flush_batch = 64
        self.flush_interval_s = 1.0

    async def run(self, entries: Iterable[LogEntry]) -> ReplayReport:
        """Replay every entry; return the report. Candidate failures never raise.

        ``sent`` counts requests actually sent per target; ``skipped`` counts exchanges not
        sent (non-replayable route, oversize body), also stored as outcomes with a reason.
        The progress bar's total grows as the log is read (exchanges × sampled targets).
        """
        report = ReplayReport(run_id=self.run_id, target_rate_per_s=self.rate_per_s)
        done = {
            spec.target: await asyncio.to_thread(
                self.repo.completed_exchange_ids, self.run_id, spec.target
            )
            for spec in self.targets
        }
        bar = Progress(
            TextColumn("replay"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            console=self.console,
            disable=not self.progress,
            transient=False,
        )
        task = bar.add_task("replay", total=0, status="")

        async def work(item: tuple[Exchange, TargetSpec], index: int) -> ReplayOutcome:
            exchange, spec = item
            return await self._replay_one(exchange, spec)

        async def on_result(item: tuple[Exchange, TargetSpec], outcome: ReplayOutcome) -> None:
            key = outcome.target.value
            if outcome.error_kind is ReplayErrorKind.SKIPPED:
                report.skipped[key] += 1
            else:
                report.sent[key] += 1
            if outcome.warmup:
                report.warmup += 1
            if outcome.error_kind is None:
                report.ok[key] += 1
            elif outcome.error_kind is not ReplayErrorKind.SKIPPED:
                report.errors[outcome.error_kind.value] += 1
            self._pending.append(outcome)
            due = time.monotonic() - self._last_flush >= self.flush_interval_s
            if len(self._pending) >= self.flush_batch or due:
                report.duplicates += await self._flush()
            errs = sum(report.errors.values())
            bar.update(task, advance=1, status=f"errors {errs}")

        with bar:
            try:
                stats = await run_paced(
                    self._work_items(entries, report, done, bar, task),
                    work,
                    on_result,
                    concurrency=self.concurrency,
                    rate_per_s=self.rate_per_s,
                )
            finally:
                # Finished replays are stored even when the run is interrupted (Ctrl-C,
                # SIGTERM, a failure): a resume then sends only what has no outcome.
                report.duplicates += await asyncio.shield(self._flush())
        report.wall_s = stats.wall_s
        report.achieved_rate_per_s = stats.achieved_rate_per_s
        return report

    async def _work_items(
        self,
        entries: Iterable[LogEntry],
        report: ReplayReport,
        done: dict[ReplayTarget, set[str]],
        bar: Progress,
        task: TaskID,
    ) -> AsyncIterator[tuple[Exchange, TargetSpec]]:
        batch: list[LogEntry] = []
        for entry in entries:
            batch.append(entry)
            if len(batch) >= self.batch_size:
                for item in await self._store_batch(batch, report, done, bar, task):
                    yield item
                batch = []
        if batch:
            for item in await self._store_batch(batch, report, done, bar, task):
                yield item

    async def _store_batch(
        self,
        batch: list[LogEntry],
        report: ReplayReport,
        done: dict[ReplayTarget, set[str]],
        bar: Progress,
        task: TaskID,
    ) -> list[tuple[Exchange, TargetSpec]]:
        exchanges: list[Exchange] = []
        rejected: list[RejectedRecord] = []
        for entry in batch:
            report.lines_read += 1
            if entry.exchange is not None:
                exchanges.append(redact_exchange_headers(entry.exchange))
                continue
            assert entry.error is not None
            rejected.append(
                self._rejected(
                    entry.location, entry.error.reason or "invalid", str(entry.error), entry.raw
                )
            )
        conflicts = await asyncio.to_thread(self.repo.conflicting_exchanges, exchanges)
        if conflicts:
            kept = []
            for exchange in exchanges:
                if exchange.exchange_id in conflicts:
                    rejected.append(
                        self._rejected(
                            exchange.source or exchange.exchange_id,
                            "conflicting_duplicate",
                            conflicts[exchange.exchange_id],
                            exchange.model_dump_json(),
                        )
                    )
                else:
                    kept.append(exchange)
            exchanges = kept
        for item in rejected:
            report.rejected[item.reason] += 1
        if rejected:
            await asyncio.to_thread(self.repo.save_rejected_many, rejected)
        await asyncio.to_thread(self.repo.save_exchanges, self.run_id, exchanges)
        report.exchanges += len(exchanges)
        items: list[tuple[Exchange, TargetSpec]] = []
        resumed = 0
        for exchange in exchanges:
            for spec in self.targets:
                if not in_sample(exchange.exchange_id, spec.share):
                    continue
                if exchange.exchange_id in done[spec.target]:
                    resumed += 1
                    continue
                items.append((exchange, spec))
        report.already_done += resumed
        known = bar.tasks[task].total or 0
        bar.update(task, total=known + resumed + len(items), advance=resumed)
        return items

    def _rejected(self, location: str, reason: str, detail: str, raw: str) -> RejectedRecord:
        """A rejected capture-log line, with secret-looking substrings scrubbed."""
        raw_text, _ = scrub_secrets(raw)
        detail_text, _ = scrub_secrets(detail)
        return RejectedRecord(
            stage=RejectStage.CAPTURE_LOG.value,
            reason=reason,
            location=location,
            detail=detail_text,
            raw=raw_text,
            run_id=self.run_id,
        )

    async def _replay_one(self, exchange: Exchange, spec: TargetSpec) -> ReplayOutcome:
        request = build_replay_request(exchange, model=spec.model_name, api_key=spec.api_key)
        if isinstance(request, SkipReplay):
            # Nothing is sent, so a skip neither is nor uses up a warm-up request.
            return ReplayOutcome(
                run_id=self.run_id,
                exchange_id=exchange.exchange_id,
                target=spec.target,
                attempt=0,
                model=spec.model,
                error_kind=ReplayErrorKind.SKIPPED,
                error_detail=request.reason,
                timings=Timings(),
                warmup=False,
            )
        # Counted before the first await, so the order is the dispatch order.
        index = self._dispatched[spec.target]
        self._dispatched[spec.target] += 1
        warmup = index < self.warmup_requests
        result: ReplayResult = await spec.client.send(request)
        return ReplayOutcome(
            run_id=self.run_id,
            exchange_id=exchange.exchange_id,
            target=spec.target,
            attempt=result.attempts,
            model=spec.model,
            pinned_params=dict(request.pinned_params),
            missing_params=request.missing_params,
            response=result.response,
            timings=result.timings,
            error_kind=result.error_kind,
            error_detail=result.error_detail,
            warmup=warmup,
        )

    async def _flush(self) -> int:
        """Write pending outcomes; return how many were duplicates of stored ones."""
        async with self._flush_lock:
            self._last_flush = time.monotonic()
            pending, self._pending = self._pending, []
            if not pending:
                return 0
            inserted = await asyncio.to_thread(self.repo.save_outcomes, pending)
            return len(pending) - inserted

"""Replay a capture log into a run: source → scheduler → client → storage.

Every line of the source ends somewhere: a decoded exchange is stored (with run
membership, its sensitive headers removed) and replayed to each target it is sampled for; a
line that does not decode (or is blank), whose replay request cannot be built
(``unreplayable``), that reuses an exchange id with different content
(``conflicting_duplicate``: stored before, or earlier in the same source) or that repeats
an earlier line of the same source (``duplicate_exchange_id``: not sent twice) is stored as
a rejected record with its reason (secret-looking text scrubbed) and the runner goes on. An
exchange whose replay raises instead of returning an outcome is a rejected record of stage
``replay`` (reason ``send_failed`` / ``build_failed``), never a crash. Rejected records are
fingerprinted by location and content, so reading the same log again stores none twice.

Outcomes are written idempotently — unique ``(run_id, exchange_id, target)`` — so
re-running a replay resumes: exchanges that already have an outcome for a target are not
sent again, except those whose outcome failed for reasons of the environment (issue 29:
:mod:`shadoweval.storage.environment`), which are sent again and replace the failure; an
answer is never replaced.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from typing import Unpack

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from shadoweval.capture_log import LogEntry
from shadoweval.records import Exchange, ReplayOutcome, ReplayTarget
from shadoweval.redaction import redact_exchange_headers
from shadoweval.replay.co_timed import ReplayItem, SentReplay, co_time, send_item
from shadoweval.replay.driver import ReplayDriver, ReplayLoad
from shadoweval.replay.exchange_replay import (
    OutcomeWriter,
    PreparedReplay,
    ReplayFailure,
    ReplayReport,
    TargetSpec,
    describe_exception,
    in_sample,
    rejected_record,
    resume_point,
    sampled_targets,
    split_conflicts,
    unreplayable,
)
from shadoweval.replay.scheduler import run_paced
from shadoweval.storage import RejectedRecord, RejectStage, Repository

__all__ = ["ReplayReport", "ReplayRunner", "TargetSpec", "in_sample"]

logger = logging.getLogger(__name__)

"""An exchange, a target it is sent to, and where the exchange was read (``file:line``)."""


@dataclass(frozen=True, slots=True)
class _PassState:
    """What one :meth:`ReplayRunner.run` keeps while it reads its source: the report, the
    exchange ids already done per target, the exchange ids read so far (content digest,
    location: :meth:`ReplayRunner._admit`), and the progress bar with its task."""

    report: ReplayReport
    done: dict[ReplayTarget, set[str]]
    seen: dict[str, tuple[str, str]]
    bar: Progress
    task: TaskID


class ReplayRunner(ReplayDriver):
    """Replays capture-log entries into run ``run_id`` against one or more targets.

    Args:
        repo, run_id, targets, load: the run, its targets and the load
            (:class:`~shadoweval.replay.driver.ReplayDriver`).
        batch_size: exchanges stored per database write.
        progress: show a rich progress bar on ``console``.

    Finished outcomes are written in batches of ``flush_batch`` (64) or at least every
    ``flush_interval_s`` (1 s), and once more when the run ends or is interrupted.

    An exchange sampled for the baseline replica is sent to the replica and the candidate
    together, in an order drawn per exchange from the run id
    (:mod:`shadoweval.replay.co_timed`): started at the same moment, or back to back at
    ``concurrency`` 1; both outcomes are marked ``co_timed``.
    """

    def __init__(
        self,
        repo: Repository,
        run_id: str,
        targets: Sequence[TargetSpec],
        *,
        batch_size: int = 256,
        progress: bool = True,
        console: Console | None = None,
        **load: Unpack[ReplayLoad],
    ) -> None:
        super().__init__(repo, run_id, targets, **load)
        self.batch_size = batch_size
        self.progress = progress
        self.console = console or Console(stderr=True)
        self._writer = OutcomeWriter(repo, batch=64, interval_s=1.0, replace_failures=True)

    async def run(self, entries: Iterable[LogEntry]) -> ReplayReport:
        """Replay every entry; return the report. Candidate failures never raise.

        ``sent`` counts requests actually sent per target; ``skipped`` counts exchanges not
        sent (non-replayable route, oversize body), also stored as outcomes with a reason;
        ``rejected`` counts the lines of this pass kept as rejected records, by reason
        (``lines_read == exchanges + sum(rejected)``); ``replay_failed`` the sends that
        raised (rejected records of stage ``replay``). The progress bar's total grows as
        the log is read (exchanges × sampled targets).

        Raises:
            StorageError: the database refused a write (not a record's fault).
            ReplayError: a target cannot be used at all (its client is not started).
        """
        report = self.new_report(ReplayReport)
        done = {spec.target: await self._done(spec.target, report) for spec in self.targets}
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
        seen: dict[str, tuple[str, str]] = {}

        async def work(item: ReplayItem, index: int) -> list[SentReplay]:
            return await send_item(self._replayer, item)

        async def on_result(item: ReplayItem, sent: list[SentReplay]) -> None:
            if any(isinstance(o, ReplayOutcome) and o.co_timed for _, o in sent):
                report.co_timed += 1
            for prepared, outcome in sent:
                await self._keep(prepared, outcome, report)
            errs = sum(report.errors.values())
            bar.update(task, advance=len(sent), status=f"errors {errs}")

        with bar:
            try:
                stats = await run_paced(
                    self._work_items(entries, _PassState(report, done, seen, bar, task)),
                    work,
                    on_result,
                    concurrency=self.concurrency,
                    pacer=self.pacer,
                    plan=lambda item: item.dispatch,
                )
            finally:
                # Finished replays are stored even when the run is interrupted (Ctrl-C,
                # SIGTERM, a failure): a resume then sends only what has no outcome.
                report.duplicates += (await asyncio.shield(self._writer.flush())).duplicates
        report.record_load(stats)
        return report

    async def _keep(
        self, item: PreparedReplay, outcome: ReplayOutcome | ReplayFailure, report: ReplayReport
    ) -> None:
        """Count and queue one finished send (a failure to send: a rejected record)."""
        if isinstance(outcome, ReplayFailure):
            await self._keep_failure(item, outcome, report)
            return
        report.count_outcome(outcome)
        self._writer.add(outcome)
        if self._writer.due():
            report.duplicates += (await self._writer.flush()).duplicates

    async def _done(self, target: ReplayTarget, report: ReplayReport) -> set[str]:
        """Exchanges with a stored outcome for ``target`` that this pass does not send again:
        every outcome except the failures of the environment
        (:meth:`~shadoweval.storage.Repository.environment_failed_ids`), which are sent
        again and replaced (counted in ``report.retried``)."""
        done, retry = await resume_point(self.repo, self.run_id, target)
        report.retried[target.value] += len(retry)
        return done

    async def _keep_failure(
        self, item: PreparedReplay, failure: ReplayFailure, report: ReplayReport
    ) -> None:
        """Keep a replay that raised as a rejected record of stage ``replay``."""
        exchange, spec, location = item.exchange, item.spec, item.location
        where = f"{location} [{spec.target.value}]"
        record = rejected_record(
            self.run_id,
            where,
            failure.reason,
            f"{where}: the replay of exchange {exchange.exchange_id} to {spec.target.value} "
            f"failed: {failure.detail}",
            exchange.model_dump_json(),
            stage=RejectStage.REPLAY,
        )
        report.replay_failed[failure.reason] += 1
        logger.warning("%s", record.detail)
        if not await asyncio.to_thread(self.repo.save_rejected_many, [record]):
            report.rejected_already_stored += 1

    async def _work_items(
        self, entries: Iterable[LogEntry], state: _PassState
    ) -> AsyncIterator[ReplayItem]:
        batch: list[LogEntry] = []
        for entry in entries:
            batch.append(entry)
            if len(batch) >= self.batch_size:
                for item in await self._store_batch(batch, state):
                    yield item
                batch = []
        if batch:
            for item in await self._store_batch(batch, state):
                yield item

    def _admit(
        self, entry: LogEntry, seen: dict[str, tuple[str, str]]
    ) -> Exchange | RejectedRecord:
        """The exchange of ``entry`` to store, or the rejected record that keeps it.

        ``seen`` maps the exchange ids read so far in this pass to (content digest,
        location): a repeated id is a duplicate line (same content) or a conflicting one.
        """
        if entry.exchange is None:
            error = entry.error
            reason = (error.reason if error is not None else "") or "invalid"
            detail = str(error) if error is not None else f"{entry.location}: no exchange"
            return rejected_record(self.run_id, entry.location, reason, detail, entry.raw)
        exchange = redact_exchange_headers(entry.exchange)
        raw = entry.raw or exchange.model_dump_json()
        problem = unreplayable(exchange, self.targets)
        if problem is not None:
            detail = f"{entry.location}: the replay request cannot be built: {problem}"
            return rejected_record(self.run_id, entry.location, "unreplayable", detail, raw)
        digest = hashlib.sha256(exchange.model_dump_json().encode()).hexdigest()
        first = seen.get(exchange.exchange_id)
        if first is None:
            seen[exchange.exchange_id] = (digest, entry.location)
            return exchange
        if first[0] == digest:
            # The same exchange twice in one source (a sink retried a write): counted and
            # kept, never sent twice. Stage replay: the exchange counts once as captured.
            return rejected_record(
                self.run_id,
                entry.location,
                "duplicate_exchange_id",
                f"{entry.location}: exchange_id {exchange.exchange_id} repeats {first[1]} "
                "with the same content; replayed once",
                raw,
                stage=RejectStage.REPLAY,
            )
        return rejected_record(
            self.run_id,
            entry.location,
            "conflicting_duplicate",
            f"{entry.location}: exchange_id {exchange.exchange_id} was read at {first[1]} "
            "with different content; the first is kept",
            raw,
        )

    async def _store_batch(self, batch: list[LogEntry], state: _PassState) -> list[ReplayItem]:
        report, done = state.report, state.done
        exchanges: list[Exchange] = []
        locations: dict[str, str] = {}
        rejected: list[RejectedRecord] = []
        for entry in batch:
            report.lines_read += 1
            try:
                admitted = self._admit(entry, state.seen)
            except Exception as exc:  # whatever a record does, it is kept, not a crash
                detail = f"{entry.location}: cannot be processed: {describe_exception(exc)}"
                admitted = rejected_record(
                    self.run_id, entry.location, "unprocessable", detail, entry.raw
                )
            if isinstance(admitted, RejectedRecord):
                rejected.append(admitted)
                continue
            exchanges.append(admitted)
            locations[admitted.exchange_id] = entry.location
        exchanges, conflicting = await split_conflicts(self.repo, exchanges)
        for exchange, reason in conflicting:
            rejected.append(
                rejected_record(
                    self.run_id,
                    locations[exchange.exchange_id],
                    "conflicting_duplicate",
                    reason,
                    exchange.model_dump_json(),
                )
            )
        for item in rejected:
            report.rejected[item.reason] += 1
        if rejected:
            stored = await asyncio.to_thread(self.repo.save_rejected_many, rejected)
            report.rejected_already_stored += len(rejected) - stored
        await asyncio.to_thread(self.repo.save_exchanges, self.run_id, exchanges)
        report.exchanges += len(exchanges)
        items: list[ReplayItem] = []
        resumed = sends = 0
        for exchange in exchanges:
            self._replayer.conversations.observe(exchange)  # previous_response_id context
            prepared: list[PreparedReplay] = []
            for spec in sampled_targets(exchange.exchange_id, self.targets):
                if exchange.exchange_id in done[spec.target]:
                    resumed += 1
                    continue
                # prepared in dispatch order: the first sends per target are the warm-up
                prepared.append(
                    self._replayer.prepare(exchange, spec, locations[exchange.exchange_id])
                )
            sends += len(prepared)
            # The candidate's and the replica's send of one exchange go together (issue 29).
            items += co_time(prepared, seed=self.run_id, together=self.concurrency > 1)
        report.already_done += resumed
        known = state.bar.tasks[state.task].total or 0
        state.bar.update(state.task, total=known + resumed + sends, advance=resumed)
        return items

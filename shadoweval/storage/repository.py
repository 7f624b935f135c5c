"""Typed access to the shadow-eval database: records in, records out.

:class:`Repository` is the only API other packages use to read and write results. Every
method takes or returns :mod:`shadoweval.records` models (or the storage value types of
:mod:`shadoweval.storage.types`), never ORM rows, and runs in one transaction. Batch
writes are chunked multi-row ``INSERT`` statements.

Idempotence (DESIGN §6: consumers commit after persisting, so every write may be
repeated):

* exchanges: insert-or-ignore on ``exchange_id``;
* replay outcomes: insert-or-ignore on ``(run_id, exchange_id, target)``; the first write
  wins and a repeat is counted as a duplicate;
* pair scores: upsert on ``(run_id, exchange_id)``; rescoring replaces;
* human labels: upsert on ``(run_id, exchange_id, labeller)``; relabelling replaces;
* cached embeddings: insert-or-ignore on ``(cache_key, text_sha256)``; the first wins;
* pair judgements: one per ``(run_id, exchange_id, source)``; a judge's first successful
  judgement wins (a failed one is replaced), reference and human ones replace.

Errors: every database failure raises :class:`~shadoweval.errors.StorageError`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime

from pydantic import JsonValue
from sqlalchemy import select

from shadoweval.config import BodyRedactionSettings
from shadoweval.errors import StorageError
from shadoweval.outcome_redaction import OutcomeRedactor
from shadoweval.records import (
    STORED,
    Coverage,
    Exchange,
    ModelIdentity,
    ReplayOutcome,
    ReplayPass,
    ReplayTarget,
    new_exchange_id,
    utc_now,
)
from shadoweval.storage import queries
from shadoweval.storage import rows as rows_
from shadoweval.storage.audit import PolicyAuditLog, add_audit_row, audit_row
from shadoweval.storage.canary import CanaryStore
from shadoweval.storage.database import Database
from shadoweval.storage.embeddings import EmbeddingStore
from shadoweval.storage.environment import EnvironmentStore
from shadoweval.storage.history import HistoryStore
from shadoweval.storage.judgements import JudgementStore
from shadoweval.storage.labels import LabelStore
from shadoweval.storage.models import (
    ExchangeRow,
    ReplayOutcomeRow,
    RunExchangeRow,
    RunRow,
)
from shadoweval.storage.pair_scores import PAIR_ID_CHUNK as PAIR_ID_CHUNK
from shadoweval.storage.pair_scores import PairInput as PairInput
from shadoweval.storage.pair_scores import PairScoreStore
from shadoweval.storage.samples import SampleStore
from shadoweval.storage.statements import insert_ignore
from shadoweval.storage.types import PolicyAuditAction, RunInfo, RunStatus

logger = logging.getLogger(__name__)

MAX_REPLAY_PASSES = 200
"""Replay passes kept per run (the latest; a long-lived Kafka deployment restarts workers)."""


class Repository(
    HistoryStore,
    PolicyAuditLog,
    SampleStore,
    LabelStore,
    JudgementStore,
    EmbeddingStore,
    CanaryStore,
    PairScoreStore,
    EnvironmentStore,
):
    """Records in, records out, over one :class:`~shadoweval.storage.database.Database`.

    The database must already be at the head revision (``db.upgrade()`` or
    ``shadow-eval db upgrade``); the repository never creates tables. Verdict and
    rejected-record methods come from :class:`~shadoweval.storage.history.HistoryStore`,
    the policy audit log from :class:`~shadoweval.storage.audit.PolicyAuditLog`, sample
    paging (``sample_page``, ``count_samples``, ``sample_ids``, ``samples_by_ids``,
    ``task_types``) from :class:`~shadoweval.storage.samples.SampleStore` and human labels
    (``save_labels``, ``load_labels``) from :class:`~shadoweval.storage.labels.LabelStore`;
    pair judgements and the run's frozen judge (``save_judgements``, ``list_judgements``,
    ``freeze_judge``, ``run_judge``, ``scored_pair_origins``) from
    :class:`~shadoweval.storage.judgements.JudgementStore`; the embedding cache
    (``lookup_embeddings``, ``save_embeddings``, ``count_embeddings``) from
    :class:`~shadoweval.storage.embeddings.EmbeddingStore`; pair scores (``save_pair_scores``,
    ``iter_pair_inputs``, ``pair_exchange_ids``, ``pair_inputs_for``, ``load_pair_scores``,
    ``load_pair_scores_after``, ``load_pair_facts_after``) from
    :class:`~shadoweval.storage.pair_scores.PairScoreStore`; replay failures of the
    environment (``environment_failed_ids``, ``replace_failed_outcomes``,
    ``repeated_rejections``, ``load_outcomes_of``) from
    :class:`~shadoweval.storage.environment.EnvironmentStore`.

    Replay outcomes are redacted before they are written
    (:class:`~shadoweval.outcome_redaction.OutcomeRedactor` with ``body_redaction``, the
    capture sidecar's rules: pass ``settings.capture.body_redaction``; the default rules
    when ``None``).

    Raises:
        ConfigError: ``body_redaction`` names an unknown rule or a bad pattern.
    """

    def __init__(
        self, db: Database, *, body_redaction: BodyRedactionSettings | None = None
    ) -> None:
        super().__init__(db)
        self._outcome_redactor = OutcomeRedactor(body_redaction)

    # ------------------------------------------------------------------- runs

    def create_run(
        self,
        *,
        name: str,
        baseline: ModelIdentity,
        candidate: ModelIdentity,
        policy_hash: str,
        policy_yaml: str,
        candidate_base_url: str | None = None,
        source: str | None = None,
        settings: Mapping[str, JsonValue] | None = None,
        run_id: str | None = None,
        created_at: datetime | None = None,
        command: str = "create_run",
        actor: str | None = None,
        audit_detail: Mapping[str, JsonValue] | None = None,
    ) -> RunInfo:
        """Create a run in status ``open``; ``run_id`` defaults to a new ULID.

        The policy is frozen into the run, and a ``created`` row is added to its policy
        audit log in the same transaction (``command``: what created it, e.g.
        ``"shadow-eval evaluate"``; ``actor``: the OS user by default; ``audit_detail``:
        free JSON such as the policy file path). So every run has its creation audited.

        Raises:
            StorageError: a run with this ``run_id`` already exists.
        """
        row = RunRow(
            run_id=run_id or new_exchange_id(),
            name=name,
            created_at=created_at or utc_now(),
            baseline_model=baseline.model_dump(mode="json"),
            candidate_model=candidate.model_dump(mode="json"),
            candidate_base_url=candidate_base_url,
            policy_hash=policy_hash,
            policy_yaml=policy_yaml,
            source=source,
            status=RunStatus.OPEN.value,
            settings=dict(settings or {}),
        )
        with self._db.session() as session:
            if session.get(RunRow, row.run_id) is not None:
                raise StorageError(f"run {row.run_id!r} already exists")
            session.add(row)
            session.flush()
            audit = audit_row(
                run_id=row.run_id,
                policy_hash=policy_hash,
                action=PolicyAuditAction.CREATED,
                command=command,
                actor=actor,
                detail=audit_detail,
                recorded_at=row.created_at,
            )
            add_audit_row(session, audit)
        logger.info("created run %s (%s)", row.run_id, name)
        return rows_.run_info(row)

    def get_run(self, run_id: str) -> RunInfo | None:
        """Return the run, or ``None`` when there is no such run."""
        with self._db.session() as session:
            row = session.get(RunRow, run_id)
            return None if row is None else rows_.run_info(row)

    def list_runs(
        self, *, status: RunStatus | None = None, limit: int | None = None
    ) -> list[RunInfo]:
        """Return runs, newest first, optionally only those in ``status``."""
        stmt = select(RunRow).order_by(RunRow.created_at.desc(), RunRow.run_id.desc())
        if status is not None:
            stmt = stmt.where(RunRow.status == status.value)
        if limit is not None:
            stmt = stmt.limit(limit)
        with self._db.session() as session:
            return [rows_.run_info(row) for row in session.scalars(stmt)]

    def set_run_status(self, run_id: str, status: RunStatus, *, reopen: bool = False) -> RunInfo:
        """Set a run's status and return the updated run.

        Setting the status a run already has is a no-op. ``reopen`` lets a promoted or
        rolled-back run take another status: the gate reopened its terminal verdict on
        new evidence (:func:`shadoweval.application.gating.gate_run`); an aborted run
        never changes.

        Raises:
            StorageError: unknown run, or the run is in a terminal status
                (promoted, rolled_back, aborted) and ``status`` differs (unless
                ``reopen`` and the run is promoted or rolled back).
        """
        with self._db.session() as session:
            row = session.get(RunRow, run_id, with_for_update=True)
            if row is None:
                raise StorageError(f"unknown run {run_id!r}")
            current = RunStatus(row.status)
            if current is not status:
                reopened = reopen and current in (RunStatus.PROMOTED, RunStatus.ROLLED_BACK)
                if current.terminal and not reopened:
                    raise StorageError(
                        f"run {run_id!r} is {current.value}, a terminal status; "
                        f"it cannot become {status.value}"
                    )
                row.status = status.value
                logger.info("run %s: %s -> %s", run_id, current.value, status.value)
            return rows_.run_info(row)

    # -------------------------------------------------------------- exchanges

    def save_exchanges(self, run_id: str | None, exchanges: Iterable[Exchange]) -> int:
        """Store exchanges (insert-or-ignore on ``exchange_id``).

        When ``run_id`` is given, every exchange (new or already stored) also becomes a
        member of that run's population. Returns the number of exchanges newly stored.

        Raises:
            StorageError: e.g. ``run_id`` names no run.
        """
        rows = [rows_.exchange_row(ex) for ex in exchanges]
        if not rows:
            return 0
        with self._db.session() as session:
            inserted = insert_ignore(session, ExchangeRow, rows, ["exchange_id"])
            if run_id is not None:
                members = [{"run_id": run_id, "exchange_id": r["exchange_id"]} for r in rows]
                insert_ignore(session, RunExchangeRow, members, ["run_id", "exchange_id"])
        if inserted < len(rows):
            logger.debug("save_exchanges: %d of %d already stored", len(rows) - inserted, len(rows))
        return inserted

    def conflicting_exchanges(self, exchanges: Iterable[Exchange]) -> dict[str, str]:
        """Exchanges whose id is already stored with *different* content.

        Exchanges are insert-or-ignore on ``exchange_id`` (first write wins), so a log line
        that reuses an id with other content would otherwise be silently replaced by the
        stored one. Returns ``{exchange_id: reason}`` for each such exchange; identical
        re-deliveries (at-least-once) are not conflicts. The comparison is on the stored
        form (on PostgreSQL U+0000 is stored as U+FFFD).
        """
        wanted = {ex.exchange_id: ex for ex in exchanges}
        if not wanted:
            return {}
        with self._db.session() as session:
            stored = session.execute(
                select(ExchangeRow.exchange_id, ExchangeRow.record).where(
                    ExchangeRow.exchange_id.in_(list(wanted))
                )
            ).all()
        conflicts: dict[str, str] = {}
        for exchange_id, record in stored:
            given = rows_.nul_safe(wanted[exchange_id].model_dump(mode="json"))
            if rows_.nul_safe(record) != given:
                conflicts[exchange_id] = (
                    f"exchange_id {exchange_id} is already stored with different content; "
                    "the stored exchange is kept (first write wins)"
                )
        return conflicts

    def get_exchange(self, exchange_id: str) -> Exchange | None:
        """Return one stored exchange, or ``None``."""
        with self._db.session() as session:
            row = session.get(ExchangeRow, exchange_id)
            return None if row is None else Exchange.model_validate(row.record, context=STORED)

    # --------------------------------------------------------------- outcomes

    def save_outcomes(self, outcomes: Iterable[ReplayOutcome]) -> int:
        """Store replay outcomes, idempotent on ``(run_id, exchange_id, target)``.

        The first write of a key wins; later writes of the same key are ignored and
        counted as duplicates (logged). Returns the number of outcomes newly stored.

        Raises:
            StorageError: e.g. an outcome names an unknown run or exchange.
        """
        rows = [rows_.outcome_row(o, self._outcome_redactor) for o in outcomes]
        if not rows:
            return 0
        with self._db.session() as session:
            inserted = insert_ignore(
                session, ReplayOutcomeRow, rows, ["run_id", "exchange_id", "target"]
            )
        duplicates = len(rows) - inserted
        if duplicates:
            logger.info(
                "save_outcomes: %d duplicate outcome(s) ignored (first write wins)", duplicates
            )
        return inserted

    def completed_exchange_ids(self, run_id: str, target: ReplayTarget) -> set[str]:
        """Return ids of exchanges that already have an outcome (any, errors included)."""
        stmt = select(ReplayOutcomeRow.exchange_id).where(
            ReplayOutcomeRow.run_id == run_id, ReplayOutcomeRow.target == target.value
        )
        with self._db.session() as session:
            return set(session.scalars(stmt))

    def load_outcomes(self, run_id: str, target: ReplayTarget | None = None) -> list[ReplayOutcome]:
        """Return a run's outcomes (optionally for one target), in insertion order."""
        stmt = select(ReplayOutcomeRow.record).where(ReplayOutcomeRow.run_id == run_id)
        if target is not None:
            stmt = stmt.where(ReplayOutcomeRow.target == target.value)
        with self._db.session() as session:
            records = list(session.scalars(stmt.order_by(ReplayOutcomeRow.id)))
        return [ReplayOutcome.model_validate(r, context=STORED) for r in records]

    # ---------------------------------------------------------------- coverage

    def coverage_counts(self, run_id: str, *, baseline_model: str | None = None) -> Coverage:
        """Count how much of the run's population was replayed and compared.

        * ``captured``: exchanges that are members of the run, plus ``rejected``: lines of
          the run's capture log that could not be decoded (stage ``capture_log``);
        * ``replayed``: candidate outcomes (errors, skips and warm-ups included);
        * ``errored``: candidate outcomes with an error other than ``skipped``;
        * ``skipped``, ``warmup``: candidate outcomes skipped / flagged warm-up;
        * ``paired``: pair scores; ``share`` = paired / captured (0.0 when nothing was
          captured); ``per_task_type``: members per task type;
        * ``baseline_repeat_replayed`` / ``baseline_repeat_errored``: baseline-repeat
          outcomes sent (not skipped) / failed — the run's design: when it sent any, the
          gate judges similarity against the noise floor, never the absolute limit;
        * ``per_route``: members, candidate replays sent and skipped (with the skip
          reasons) and pairs per route; ``paired_per_task_type``: pairs per task type;
        * ``replay_passes``: the passes recorded by :meth:`record_replay_pass`;
        * ``per_baseline_model``: members by the baseline model their exchange recorded.

        ``baseline_model``: every other count only over the members of that baseline model
        (the gate policy's ``baseline_model``).
        """
        with self._db.session() as session:
            return queries.coverage(session, run_id, baseline_model=baseline_model)

    def record_replay_pass(self, run_id: str, replay_pass: ReplayPass) -> None:
        """Append one replay pass (its pacing and achieved load) to the run.

        Kept in the run's ``settings`` (key ``replay_passes``, the latest
        :data:`MAX_REPLAY_PASSES`), read back by :meth:`coverage_counts`; the row is locked
        while it is updated, so concurrent Kafka workers do not lose each other's passes.

        Raises:
            StorageError: unknown run.
        """
        with self._db.session() as session:
            row = session.get(RunRow, run_id, with_for_update=True)
            if row is None:
                raise StorageError(f"unknown run {run_id!r}")
            settings = dict(row.settings or {})
            stored = settings.get(queries.REPLAY_PASSES_KEY)
            passes = list(stored) if isinstance(stored, list) else []
            passes.append(replay_pass.model_dump(mode="json"))
            settings[queries.REPLAY_PASSES_KEY] = passes[-MAX_REPLAY_PASSES:]
            row.settings = settings

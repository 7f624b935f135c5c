"""ORM models of the shadow-eval database (SQLAlchemy 2 typed declarative).

Tables are singular snake_case; constraint and index names come from
:data:`NAMING_CONVENTION` so that Alembic autogenerate sees stable names. Every table
that stores a stage record keeps the whole record as JSON in ``record`` (JSONB on
PostgreSQL, JSON elsewhere) and copies the few fields that queries filter or sort on
into plain columns. The ``record`` column is the source of truth: rows are turned back
into :mod:`shadoweval.records` models with ``model_validate(row.record, context=STORED)``
(the shape is checked again, the value rules of records written before a rule existed
are not: :data:`shadoweval.records.STORED`).

ORM rows never leave :mod:`shadoweval.storage`; :class:`~shadoweval.storage.repository.Repository`
converts them to records.

The migrations (``migrations/versions/0001_initial.py``, ``0002_policy_audit.py``,
``0003_samples_and_labels.py``, ``0004_pair_judgements.py``, ``0005_ttfc_and_cache_hits.py``,
``0006_rejected_fingerprint.py``, ``0007_embedding_cache.py``, ``0008_pair_facts.py``,
``0009_canary.py``, ``0010_redact_replay_outcomes.py``, ``0011_label_sample.py``) must
match these models: ``Database.schema_diff()`` (an ``alembic check`` equivalent) finds no
difference after ``upgrade``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Dialect,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TIMESTAMP, TypeDecorator

NAMING_CONVENTION: dict[str, str] = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
"""Constraint names (SQLAlchemy "Configuring Constraint Naming Conventions")."""

JsonDict = dict[str, Any]
"""Python type of a JSON object column."""

JSON_VARIANT = JSON().with_variant(JSONB(), "postgresql")
"""JSONB on PostgreSQL, JSON (TEXT affinity on SQLite) elsewhere."""

BIGINT_ID = BigInteger().with_variant(Integer(), "sqlite")
"""64-bit surrogate key; INTEGER on SQLite so that it aliases the ROWID (autoincrement)."""


REPLACEMENT_CHAR = "\ufffd"
"""Stands in for U+0000 on PostgreSQL, whose text and JSONB types cannot hold it."""


class UTCDateTime(TypeDecorator[datetime]):
    """``TIMESTAMP WITH TIME ZONE`` that only accepts aware datetimes and returns UTC.

    Values are converted to UTC before they are bound, so SQLite (which stores text
    without an offset) still sorts and compares them correctly; values read back are
    aware UTC datetimes on every dialect.

    Raises:
        ValueError: when a naive datetime is bound (wrapped in ``StorageError`` by
            :class:`~shadoweval.storage.database.Database`).
    """

    impl = TIMESTAMP(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(
                f"naive datetime {value.isoformat()} given; timestamps must be timezone-aware"
            )
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class NulSafeText(TypeDecorator[str]):
    """``TEXT`` that survives NUL characters on PostgreSQL.

    PostgreSQL text cannot hold U+0000; there it is replaced by U+FFFD before binding
    (other dialects store the string unchanged). Used for raw record text, which may be
    arbitrary garbage and must still be kept.
    """

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        if value is not None and dialect.name == "postgresql" and "\x00" in value:
            return value.replace("\x00", REPLACEMENT_CHAR)
        return value


run_fk = Annotated[str, mapped_column(ForeignKey("run.run_id", ondelete="CASCADE"))]
exchange_fk = Annotated[str, mapped_column(ForeignKey("exchange.exchange_id", ondelete="CASCADE"))]
int_pk = Annotated[int, mapped_column(BIGINT_ID, primary_key=True, autoincrement=True)]
long_text = Annotated[str, mapped_column(NulSafeText)]
canary_fk = Annotated[str, mapped_column(ForeignKey("canary.canary_id", ondelete="CASCADE"))]


def _pair_score_fk() -> ForeignKeyConstraint:
    """The composite foreign key to ``pair_score (run_id, exchange_id)``: a row that has it
    exists only for a scored pair, and goes with it."""
    return ForeignKeyConstraint(
        ["run_id", "exchange_id"],
        ["pair_score.run_id", "pair_score.exchange_id"],
        ondelete="CASCADE",
    )


class Base(DeclarativeBase):
    """Declarative base: naming convention, ``datetime`` → UTC timestamp, ``dict`` → JSON."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {  # noqa: RUF012 (SQLAlchemy reads this class attribute)
        datetime: UTCDateTime(),
        JsonDict: JSON_VARIANT,
    }

    _repr_fields: ClassVar[tuple[str, ...]] = ()
    """The columns ``repr`` shows, in order."""
    _repr_short: ClassVar[frozenset[str]] = frozenset()
    """Of those, the ones shown by their first 12 characters (hashes)."""

    def __repr__(self) -> str:
        shown = []
        for name in self._repr_fields:
            value = getattr(self, name)
            shown.append(f"{name}={(value[:12] if name in self._repr_short else value)!r}")
        return f"{type(self).__name__}({', '.join(shown)})"


class RunRow(Base):
    """One evaluation run: a baseline identity, a candidate identity, one frozen policy."""

    __tablename__ = "run"
    _repr_fields = ("run_id", "name", "status")

    run_id: Mapped[str] = mapped_column(primary_key=True)
    name: Mapped[str]
    created_at: Mapped[datetime]
    baseline_model: Mapped[JsonDict]
    candidate_model: Mapped[JsonDict]
    candidate_base_url: Mapped[str | None]
    policy_hash: Mapped[str]
    policy_yaml: Mapped[long_text]
    source: Mapped[str | None]
    status: Mapped[str] = mapped_column(index=True)
    settings: Mapped[JsonDict]


class ExchangeRow(Base):
    """One captured exchange; ``record`` is the whole :class:`~shadoweval.records.Exchange`."""

    __tablename__ = "exchange"
    _repr_fields = ("exchange_id", "task_type")

    exchange_id: Mapped[str] = mapped_column(primary_key=True)
    captured_at: Mapped[datetime] = mapped_column(index=True)
    task_type: Mapped[str] = mapped_column(index=True)
    route: Mapped[str]
    outcome: Mapped[str]
    source: Mapped[str | None]
    record: Mapped[JsonDict]
    cache_hit: Mapped[bool] = mapped_column(server_default=false())
    """The live answer was served from a cache (``record.response.cache_hit``); false for
    rows written before migration 0005."""


class RunExchangeRow(Base):
    """Membership of a captured exchange in a run's population (the coverage denominator)."""

    __tablename__ = "run_exchange"
    _repr_fields = ("run_id", "exchange_id")

    run_id: Mapped[run_fk] = mapped_column(primary_key=True)
    exchange_id: Mapped[exchange_fk] = mapped_column(primary_key=True, index=True)


class ReplayOutcomeRow(Base):
    """One replay of one exchange to one target; unique per (run, exchange, target)."""

    __tablename__ = "replay_outcome"
    __table_args__ = (UniqueConstraint("run_id", "exchange_id", "target"),)
    _repr_fields = ("run_id", "exchange_id", "target", "error_kind")

    id: Mapped[int_pk]
    run_id: Mapped[run_fk]
    exchange_id: Mapped[exchange_fk] = mapped_column(index=True)
    target: Mapped[str]
    attempt: Mapped[int]
    error_kind: Mapped[str | None]
    warmup: Mapped[bool]
    replayed_at: Mapped[datetime]
    e2e_ms: Mapped[float | None]
    ttft_ms: Mapped[float | None]
    record: Mapped[JsonDict]
    ttfc_ms: Mapped[float | None]
    """Time to first visible content (``record.timings.ttfc_ms``); ``NULL`` for rows written
    before migration 0005."""
    cache_hit: Mapped[bool] = mapped_column(server_default=false())
    """The replayed answer was served from a cache (``record.response.cache_hit``)."""


RESCORE_SCORED_AT = datetime(1970, 1, 1, tzinfo=UTC)
"""``pair_score.scored_at`` of a pair whose replay outcome a re-run replaced (an
environment failure replayed again, :mod:`shadoweval.storage.environment`): the row stays,
with the labels and judgements that hang on it, and the compare stage scores the pair
again (it counts as unscored, :func:`shadoweval.storage.queries.pair_inputs`); the new
score's upsert replaces the row in place."""


class PairScoreRow(Base):
    """Scores of one exchange in one run; rescoring replaces the row (upsert).

    ``flags`` is the bitmask of :func:`shadoweval.pair_flags.pair_flags` (bits in
    :data:`~shadoweval.pair_flags.PAIR_FLAG_BITS`), written with the score. The two
    ``(run_id, [task_type,] similarity, exchange_id, flags)`` indexes serve keyset paging
    of a run's pairs in similarity order (the dashboard's sample pages): the key is the
    ``(similarity, exchange_id)`` prefix, and the trailing ``flags`` lets a flag filter be
    checked on the index alone (a flag that matches nothing among 200,000 pairs scans the
    index in tens of milliseconds instead of reading every row). The first also serves
    every ``run_id`` lookup, the second every ``(run_id, task_type)`` one.

    ``facts`` (migration 0008) is :func:`shadoweval.pair_facts.pack_pair_facts` of the
    record and ``uncovered_scripts`` its uncovered answer scripts (comma-separated,
    ``NULL`` for none), written with the score by the same upsert (so a rescore replaces
    them): the pairs table is built from them without reading ``record``. ``facts`` is
    ``NULL`` only where the 0008 backfill could not validate the record (a reader falls
    back to the record there).

    ``scored_at`` = :data:`RESCORE_SCORED_AT` marks a score to redo: its candidate or
    replica outcome was replaced by a re-run; the row is kept (never deleted), so the
    labels and judgements of the pair survive the rescore.
    """

    __tablename__ = "pair_score"
    __table_args__ = (
        UniqueConstraint("run_id", "exchange_id"),
        Index(None, "run_id", "similarity", "exchange_id", "flags"),
        Index(None, "run_id", "task_type", "similarity", "exchange_id", "flags"),
    )
    _repr_fields = ("run_id", "exchange_id", "similarity")

    id: Mapped[int_pk]
    run_id: Mapped[run_fk]
    exchange_id: Mapped[exchange_fk] = mapped_column(index=True)
    task_type: Mapped[str]
    captured_at: Mapped[datetime]
    similarity: Mapped[float | None]
    candidate_error: Mapped[bool]
    baseline_error: Mapped[bool]
    flags: Mapped[int]
    scored_at: Mapped[datetime]
    record: Mapped[JsonDict]
    facts: Mapped[bytes | None] = mapped_column(LargeBinary)
    uncovered_scripts: Mapped[str | None]


class VerdictRow(Base):
    """One gate decision; a run's rows in (decided_at, id) order are its verdict history."""

    __tablename__ = "verdict"
    _repr_fields = ("id", "run_id", "decision")

    id: Mapped[int_pk]
    run_id: Mapped[run_fk] = mapped_column(index=True)
    decided_at: Mapped[datetime]
    decision: Mapped[str]
    look: Mapped[int]
    policy_hash: Mapped[str]
    command: Mapped[str]
    record: Mapped[JsonDict]


class RejectedRecordRow(Base):
    """A record that could not be processed, kept with its reason (never dropped).

    ``run_id`` is deliberately not a foreign key: a rejected record must be storable even
    when it names a run this database does not know.

    ``fingerprint`` (migration 0006) identifies *what* was rejected — a SHA-256 of its
    location and raw text (:func:`~shadoweval.storage.types.rejection_fingerprint`) — so
    that reading the same source again stores no second row: it is unique per
    ``(run_id, stage)``. ``NULL`` for rows written before 0006 and for records stored
    without one (never de-duplicated; nor are rows without a run, as SQL unique
    indexes treat ``NULL`` as distinct).
    """

    __tablename__ = "rejected_record"
    __table_args__ = (
        Index(None, "run_id", "stage"),
        Index(None, "run_id", "stage", "fingerprint", unique=True),
    )
    _repr_fields = ("id", "stage", "location", "reason")

    id: Mapped[int_pk]
    run_id: Mapped[str | None]
    stage: Mapped[str]
    location: Mapped[str | None]
    reason: Mapped[str]
    detail: Mapped[str | None] = mapped_column(NulSafeText)
    raw: Mapped[str | None] = mapped_column(NulSafeText)
    created_at: Mapped[datetime]
    fingerprint: Mapped[str | None]


class PolicyAuditRow(Base):
    """One use of a run's gate policy: created with the run, used, or refused (append-only).

    ``policy_hash`` is the hash the command presented (for ``refused``, the one that was
    turned away; ``detail`` then holds both hashes). ``actor`` is the OS user of the
    process that wrote the row; ``command`` what it ran (``"shadow-eval gate"``).
    """

    __tablename__ = "policy_audit"
    _repr_fields = ("id", "run_id", "action", "command")

    id: Mapped[int_pk]
    run_id: Mapped[run_fk] = mapped_column(index=True)
    policy_hash: Mapped[str]
    recorded_at: Mapped[datetime]
    action: Mapped[str]
    command: Mapped[str]
    actor: Mapped[str]
    detail: Mapped[JsonDict]


class HumanLabelRow(Base):
    """An analyst's label of one pair; unique per ``(run_id, exchange_id, labeller)`` (upsert).

    The composite foreign key to ``pair_score (run_id, exchange_id)`` makes a label exist
    only for a scored pair, and go with it.
    """

    __tablename__ = "human_label"
    __table_args__ = (
        UniqueConstraint("run_id", "exchange_id", "labeller"),
        _pair_score_fk(),
    )
    _repr_fields = ("run_id", "exchange_id", "labeller", "label")

    id: Mapped[int_pk]
    run_id: Mapped[str]
    exchange_id: Mapped[str]
    task_type: Mapped[str]
    label: Mapped[str]
    note: Mapped[long_text]
    labeller: Mapped[str]
    labelled_at: Mapped[datetime]
    source: Mapped[str]
    sample: Mapped[str | None]
    """The random sample of changed pairs the pair was drawn in (``NULL``: chosen by hand;
    :attr:`shadoweval.records.HumanLabel.sample`)."""


class PairJudgementRow(Base):
    """A quality judgement of a pair from one source; unique per (run_id, exchange_id, source).

    ``record`` is the whole :class:`~shadoweval.records.PairJudgement` (votes, judge
    identity, reference passes, stratum); ``outcome`` is ``NULL`` for a failed judgement
    (kept as data). Like ``human_label``, the composite foreign key to ``pair_score
    (run_id, exchange_id)`` makes a judgement exist only for a scored pair, and go with it.
    """

    __tablename__ = "pair_judgement"
    __table_args__ = (
        UniqueConstraint("run_id", "exchange_id", "source"),
        _pair_score_fk(),
    )
    _repr_fields = ("run_id", "exchange_id", "source", "outcome")

    id: Mapped[int_pk]
    run_id: Mapped[str]
    exchange_id: Mapped[str]
    source: Mapped[str]
    task_type: Mapped[str]
    outcome: Mapped[str | None]
    judged_at: Mapped[datetime]
    record: Mapped[JsonDict]


class RunJudgeRow(Base):
    """The LLM judge frozen with a run: the first ``judge run`` stores its identity here.

    ``judge`` is the :class:`~shadoweval.records.JudgeIdentity` as JSON and
    ``judge_sha256`` the SHA-256 of its canonical JSON (what later commands compare);
    a different judge for the same run is refused (``policy_audit`` rows ``judge_*``).
    """

    __tablename__ = "run_judge"
    _repr_fields = ("run_id", "judge_sha256")
    _repr_short = frozenset(("judge_sha256",))

    run_id: Mapped[run_fk] = mapped_column(primary_key=True)
    judge: Mapped[JsonDict]
    judge_sha256: Mapped[str]
    frozen_at: Mapped[datetime]
    command: Mapped[str]


class EmbeddingCacheRow(Base):
    """One pooled text embedding, kept so the same text is never embedded twice.

    Keyed by ``cache_key`` (the encoder's identity: model name, weights hash, backend,
    e.g. ``sentence-transformers/all-MiniLM-L6-v2@<sha16>:torch-fp32-cpu``) and
    ``text_sha256`` (hex SHA-256 of the text's UTF-8 bytes), so another model or other
    weights never read these vectors. ``vector`` is the unit vector as ``dimension``
    float32 values, little-endian (``4 * dimension`` bytes); ``tokens`` and ``chunks``
    are the text's encoder tokens and passes, ``truncated`` as in the similarity detail.
    Rows are written insert-or-ignore (the first write wins) and never updated.
    """

    __tablename__ = "embedding_cache"
    _repr_fields = ("cache_key", "text_sha256", "dimension")
    _repr_short = frozenset(("text_sha256",))

    cache_key: Mapped[str] = mapped_column(primary_key=True)
    text_sha256: Mapped[str] = mapped_column(primary_key=True)
    dimension: Mapped[int]
    vector: Mapped[bytes] = mapped_column(LargeBinary)
    tokens: Mapped[int]
    chunks: Mapped[int]
    truncated: Mapped[bool]
    created_at: Mapped[datetime]


class CanaryRow(Base):
    """One canary rollout of a run's candidate on live traffic (issue 16, docs/canary.md).

    The canary belongs to a run (``run_id``: the shadow run whose candidate it rolls out,
    or one created for it); its policy (``shadoweval.stats.canary.policy.CanaryPolicy``) is frozen
    here as YAML with its hash, and every change is audited in that run's
    ``policy_audit``. ``state`` is ``running``, ``completed`` (share 1.0 reached) or
    ``rolled_back``; ``step_index``/``candidate_share`` the current step and the share of
    sessions the split gives the candidate (0.0 after a rollback); ``split_revision`` the
    last split revision written to ``split_dir`` (the directory the Envoy front watches);
    ``step_started_at`` when the current step's observation window began;
    ``error_breach_since`` when the error-rate excess was first seen without a break
    (``None`` when it does not hold); ``ingest_state`` how far each capture-log file was
    read (file name → lines consumed).
    """

    __tablename__ = "canary"
    _repr_fields = ("canary_id", "state", "step_index", "candidate_share")

    canary_id: Mapped[str] = mapped_column(primary_key=True)
    run_id: Mapped[run_fk] = mapped_column(index=True)
    name: Mapped[str]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    policy_hash: Mapped[str]
    policy_yaml: Mapped[long_text]
    split_dir: Mapped[str]
    state: Mapped[str] = mapped_column(index=True)
    step_index: Mapped[int]
    candidate_share: Mapped[float]
    split_revision: Mapped[int]
    step_started_at: Mapped[datetime]
    error_breach_since: Mapped[datetime | None]
    ingest_state: Mapped[JsonDict]


class CanaryStepRow(Base):
    """One step of a canary: its share, window and the latest verdict judged on it.

    Unique per ``(canary_id, step_index)``. ``outcome`` is ``None`` while the step runs,
    then ``promoted`` (the next step began), ``completed`` (the last step, share 1.0, was
    reached) or ``rolled_back``. ``last_verdict`` is the JSON of the latest
    ``shadoweval.stats.canary.verdict.StepVerdict`` (``last_decision`` its decision), from the
    ``evaluations``-th evaluation at ``last_evaluated_at``.
    """

    __tablename__ = "canary_step"
    __table_args__ = (UniqueConstraint("canary_id", "step_index"),)
    _repr_fields = ("canary_id", "step_index", "share", "outcome")

    id: Mapped[int_pk]
    canary_id: Mapped[canary_fk]
    step_index: Mapped[int]
    share: Mapped[float]
    started_at: Mapped[datetime]
    ended_at: Mapped[datetime | None]
    outcome: Mapped[str | None]
    evaluations: Mapped[int]
    last_decision: Mapped[str | None]
    last_verdict: Mapped[JsonDict | None]
    last_evaluated_at: Mapped[datetime | None]


class CanaryObservationRow(Base):
    """One live request seen during a canary step, with the facts its verdict reads.

    Unique per ``(canary_id, exchange_id)`` (a capture log read twice stores it once).
    ``arm`` is ``baseline`` or ``candidate`` (the version that served it, from the
    exchange's ``served_by``); ``session`` the salted session-key hash (``None``: no key);
    ``error`` the request failed; ``format_ok`` is ``None`` when no format was expected or
    the request failed; ``harmed`` at least one harm detector fired; ``e2e_ms``/``ttft_ms``
    ``None`` when unknown (TTFT: not streamed); ``cache_hit`` a cache answered (left out of
    latency); ``detail``: status code, harm kinds, model.
    """

    __tablename__ = "canary_observation"
    __table_args__ = (
        UniqueConstraint("canary_id", "exchange_id"),
        Index("ix_canary_observation_canary_id_step_index", "canary_id", "step_index"),
    )
    _repr_fields = ("canary_id", "exchange_id", "arm")

    id: Mapped[int_pk]
    canary_id: Mapped[canary_fk]
    exchange_id: Mapped[str]
    step_index: Mapped[int]
    arm: Mapped[str]
    observed_at: Mapped[datetime]
    session: Mapped[str | None]
    error: Mapped[bool]
    format_expected: Mapped[bool]
    format_ok: Mapped[bool | None]
    harmed: Mapped[bool]
    cache_hit: Mapped[bool]
    e2e_ms: Mapped[float | None]
    ttft_ms: Mapped[float | None]
    detail: Mapped[JsonDict]


class CanaryRatingRow(Base):
    """A spot check of one canary-served output: a 1–10 rating by one rater (upsert).

    Unique per ``(canary_id, exchange_id, rater)``; rating again replaces. The rating is
    on MT-Bench's single-answer grading scale (1–10); the canary policy's
    ``rating_bad_at_or_below`` says which ratings count as bad.
    """

    __tablename__ = "canary_rating"
    __table_args__ = (UniqueConstraint("canary_id", "exchange_id", "rater"),)
    _repr_fields = ("canary_id", "exchange_id", "rater", "rating")

    id: Mapped[int_pk]
    canary_id: Mapped[canary_fk]
    exchange_id: Mapped[str]
    rater: Mapped[str]
    rating: Mapped[float]
    note: Mapped[long_text]
    rated_at: Mapped[datetime]

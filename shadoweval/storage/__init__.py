"""Storage: the only package that imports SQLAlchemy (SQLite by default, PostgreSQL in production).

Public API::

    from shadoweval.storage import Database, Repository

    db = Database("sqlite:///shadow-eval.db")   # or postgresql+psycopg://...
    db.upgrade()                                 # Alembic, in-process, to head
    repo = Repository(db)
    run = repo.create_run(name=..., baseline=..., candidate=..., policy_hash=..., policy_yaml=...)

Modules: ``models`` (ORM tables), ``database`` (engine, sessions, migrations),
``repository`` (records in, records out), ``queries`` (read-side statements),
``history`` (verdicts, rejected records), ``audit`` (the policy audit log), ``canary``
(canary rollouts: steps, observations, spot-check ratings), ``samples``
(filtered, keyset-paged pairs for people to read), ``labels`` (human labels),
``judgements`` (pair judgements, the run's frozen judge), ``embeddings`` (the embedding
cache), ``rows`` (record <-> row conversion), ``statements`` (dialect upserts),
``work_locks`` (the bucket locks of follow compare workers), ``types`` (RunInfo,
RejectedRecord, VerdictEntry, LatestDecision, PolicyAuditEntry, JudgeFreeze,
CachedEmbedding).
"""

from __future__ import annotations

from shadoweval.storage.canary import AuditNote
from shadoweval.storage.database import (
    Database,
    head_revision,
    is_memory_sqlite_url,
    require_existing_sqlite,
    upgrade,
)
from shadoweval.storage.environment import rejection_key
from shadoweval.storage.judgements import ScoredPairOrigin, judge_identity_sha256
from shadoweval.storage.repository import PairInput, Repository
from shadoweval.storage.samples import Sample, SampleCursor, SampleFilter, SamplePage
from shadoweval.storage.types import (
    CachedEmbedding,
    CanaryInfo,
    CanaryObservation,
    CanaryRating,
    CanaryState,
    CanaryStepInfo,
    JudgeFreeze,
    LatestDecision,
    PolicyAuditAction,
    PolicyAuditEntry,
    RejectedRecord,
    RejectStage,
    RunInfo,
    RunStatus,
    VerdictEntry,
    rejection_fingerprint,
)
from shadoweval.storage.work_locks import WORK_BUCKETS, WorkLocks

__all__ = [
    "WORK_BUCKETS",
    "AuditNote",
    "CachedEmbedding",
    "CanaryInfo",
    "CanaryObservation",
    "CanaryRating",
    "CanaryState",
    "CanaryStepInfo",
    "Database",
    "JudgeFreeze",
    "LatestDecision",
    "PairInput",
    "PolicyAuditAction",
    "PolicyAuditEntry",
    "RejectStage",
    "RejectedRecord",
    "Repository",
    "RunInfo",
    "RunStatus",
    "Sample",
    "SampleCursor",
    "SampleFilter",
    "SamplePage",
    "ScoredPairOrigin",
    "VerdictEntry",
    "WorkLocks",
    "head_revision",
    "is_memory_sqlite_url",
    "judge_identity_sha256",
    "rejection_fingerprint",
    "rejection_key",
    "require_existing_sqlite",
    "upgrade",
]

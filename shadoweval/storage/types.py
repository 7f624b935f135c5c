"""Value types returned by :class:`~shadoweval.storage.repository.Repository`.

Stage records (Exchange, ReplayOutcome, PairScore, Verdict, Coverage) come from
:mod:`shadoweval.records`; this module adds the storage-only shapes: a run's row
(:class:`RunInfo`), a rejected record (:class:`RejectedRecord`), a verdict with its
bookkeeping (:class:`VerdictEntry`), a run's latest decision (:class:`LatestDecision`),
one use of a run's policy (:class:`PolicyAuditEntry`) and the outcome of presenting a judge
to a run (:class:`JudgeFreeze`) and one cached text embedding (:class:`CachedEmbedding`).
All are frozen dataclasses.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, field
from datetime import datetime

from pydantic import JsonValue

from shadoweval.errors import RecordDecodeError
from shadoweval.records import (
    Decision,
    JudgeIdentity,
    ModelIdentity,
    StepVerdict,
    Verdict,
    utc_now,
)


class RunStatus(enum.StrEnum):
    """Lifecycle of a run. ``promoted``, ``rolled_back`` and ``aborted`` are terminal."""

    OPEN = "open"
    """Created; replay, scoring and gating may still happen."""
    HELD = "held"
    """The latest gate said HOLD (not enough evidence yet, or a check failed)."""
    PROMOTED = "promoted"
    ROLLED_BACK = "rolled_back"
    ABORTED = "aborted"
    """Stopped by an operator without a decision."""

    @property
    def terminal(self) -> bool:
        """True when the status may no longer change."""
        return self in (RunStatus.PROMOTED, RunStatus.ROLLED_BACK, RunStatus.ABORTED)


class RejectStage(enum.StrEnum):
    """Known values of :attr:`RejectedRecord.stage` (any string is accepted)."""

    CAPTURE = "capture"
    CAPTURE_LOG = "capture_log"
    IMPORT = "import"
    BUS = "bus"
    REPLAY = "replay"
    COMPARE = "compare"
    GATE = "gate"


CONFLICTING_DUPLICATE = "conflicting_duplicate"
"""The reason of a rejected capture line that reuses an exchange id with other content
(the first line with that id is kept): counted apart in the verdict's coverage
(:attr:`~shadoweval.records.Coverage.conflicting_duplicates`)."""


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One run: a baseline identity, a candidate identity and one frozen, hashed policy.

    ``source`` is the capture-log path or URI the population came from; ``settings`` is
    the JSON form of the settings the run was started with (secrets excluded by the
    caller).
    """

    run_id: str
    name: str
    created_at: datetime
    baseline: ModelIdentity
    candidate: ModelIdentity
    candidate_base_url: str | None
    policy_hash: str
    policy_yaml: str
    source: str | None
    status: RunStatus
    settings: dict[str, JsonValue]


def rejection_fingerprint(location: str | None, raw: str | None) -> str:
    """What a rejection is about, as 64 hex digits: SHA-256 of the UTF-8 of
    ``location``, a NUL, and ``raw`` (``None`` as empty; lone surrogates replaced).

    The same line of the same file (``"seg.jsonl:17"`` and its text), the same Kafka record
    (``topic/partition@offset`` and its value) or the same labelled row gives the same
    fingerprint on every read, so a re-read stores no second rejected row; the same text
    at another location is another rejection.
    """
    text = f"{location or ''}\x00{raw or ''}"
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class RejectedRecord:
    """A record that could not be processed, kept with its reason and counted.

    ``stage`` says which step refused it (see :class:`RejectStage`); ``location`` where it
    came from (``"capture-000001.jsonl:17"``, a Kafka ``topic/partition@offset``);
    ``reason`` a short machine-friendly reason (``"invalid_json"``); ``detail`` the human
    message; ``raw`` the record's text as received (may be large). ``id`` is ``None``
    until stored. ``fingerprint`` (:func:`rejection_fingerprint`) makes storing it
    idempotent: a second record of the same run and stage with the same fingerprint is
    not stored (``None``: always stored).
    """

    stage: str
    reason: str
    location: str | None = None
    detail: str | None = None
    raw: str | None = None
    run_id: str | None = None
    created_at: datetime = field(default_factory=utc_now)
    id: int | None = None
    fingerprint: str | None = None

    @classmethod
    def from_decode_error(
        cls,
        error: RecordDecodeError,
        *,
        stage: str,
        raw: str | None = None,
        run_id: str | None = None,
    ) -> RejectedRecord:
        """Build the rejected record of a :class:`~shadoweval.errors.RecordDecodeError`."""
        return cls(
            stage=stage,
            reason=error.reason or "decode_error",
            location=error.location or None,
            detail=str(error),
            raw=raw,
            run_id=run_id,
        )


@dataclass(frozen=True, slots=True)
class VerdictEntry:
    """A stored verdict with its row id and the command that asked for it."""

    id: int
    command: str
    verdict: Verdict


@dataclass(frozen=True, slots=True)
class LatestDecision:
    """The most recent verdict of a run, without its checks (for run listings)."""

    run_id: str
    decision: Decision
    decided_at: datetime
    look: int


class PolicyAuditAction(enum.StrEnum):
    """What happened to a run's gate policy (``policy_audit.action``)."""

    CREATED = "created"
    """The run was created with this policy frozen into it."""
    USED = "used"
    """A command applied the run's frozen policy (or presented the same one)."""
    REFUSED = "refused"
    """A command presented a different policy; it was refused (a new policy is a new run)."""
    JUDGE_FROZEN = "judge_frozen"
    """The first ``judge run`` of the run froze its LLM judge (``detail["judge"]``)."""
    JUDGE_USED = "judge_used"
    """A command judged pairs of the run with its frozen judge."""
    JUDGE_REFUSED = "judge_refused"
    """A command presented another judge; it was refused (``detail`` holds both)."""
    JUDGE_RELEASED = "judge_released"
    """The judge frozen by a ``judge run`` whose every call failed was unfrozen: it judged
    nothing, so the run may be judged by a corrected one (``detail["reason"]``)."""
    CANARY_STARTED = "canary_started"
    """A canary of the run began (``detail``: canary id, step, share, split revision, why);
    ``policy_hash`` is the canary policy's."""
    CANARY_ADVANCED = "canary_advanced"
    """A canary moved to its next step (``detail``: from and to step and share, revision,
    the verdict's reasons)."""
    CANARY_HELD = "canary_held"
    """A canary step's verdict became HOLD (written when the decision changes, not at every
    evaluation; ``detail``: reasons)."""
    CANARY_ROLLED_BACK = "canary_rolled_back"
    """A canary's split was set to share 0: by its verdict (ROLLBACK) or on request
    (``detail``: reasons or the operator's why, revision)."""
    CANARY_COMPLETED = "canary_completed"
    """A canary reached its last step: every session goes to the candidate."""


@dataclass(frozen=True, slots=True)
class PolicyAuditEntry:
    """One row of the policy audit log of a run.

    ``policy_hash`` is the hash the command presented (for ``refused``, the refused one;
    ``detail["run_policy_hash"]`` and ``detail["presented_policy_hash"]`` hold both);
    ``recorded_at`` is UTC; ``actor`` the OS user of the writing process; ``command`` what
    it ran (``"shadow-eval gate"``, ``"shadow-eval api"``); ``detail`` free JSON (the
    policy file path, the client address).
    """

    id: int
    run_id: str
    policy_hash: str
    recorded_at: datetime
    action: PolicyAuditAction
    command: str
    actor: str
    detail: dict[str, JsonValue]


@dataclass(frozen=True, slots=True)
class JudgeFreeze:
    """What :meth:`Repository.freeze_judge` found: the run's judge and the one presented.

    ``action`` is ``judge_frozen`` (the presented judge is now the run's), ``judge_used``
    (it is the run's) or ``judge_refused`` (the run has another judge: ``frozen`` holds it;
    the caller must not judge). ``audit_id`` is the ``policy_audit`` row written.
    """

    run_id: str
    frozen: JudgeIdentity
    presented: JudgeIdentity
    action: PolicyAuditAction
    audit_id: int

    @property
    def accepted(self) -> bool:
        """True unless the presented judge was refused."""
        return self.action is not PolicyAuditAction.JUDGE_REFUSED


@dataclass(frozen=True, slots=True)
class CachedEmbedding:
    """One text's pooled embedding as the embedding cache keeps it.

    ``text_sha256``: hex SHA-256 of the text's UTF-8 bytes; ``vector_f32le``: the unit
    vector as ``dimension`` float32 values, little-endian (``4 * dimension`` bytes);
    ``tokens`` and ``chunks``: the text's encoder tokens and passes; ``truncated``: some
    piece exceeded the encoder window.
    """

    text_sha256: str
    dimension: int
    vector_f32le: bytes
    tokens: int
    chunks: int
    truncated: bool


class CanaryState(enum.StrEnum):
    """Lifecycle of a canary (``canary.state``); ``completed`` and ``rolled_back`` are final."""

    RUNNING = "running"
    COMPLETED = "completed"
    """The last step (share 1.0) was reached: the candidate serves every session."""
    ROLLED_BACK = "rolled_back"
    """The split gives the candidate nothing; the canary is over."""

    @property
    def terminal(self) -> bool:
        """True when the canary may no longer change."""
        return self is not CanaryState.RUNNING


@dataclass(frozen=True, slots=True)
class CanaryInfo:
    """One canary (a row of ``canary``; see :class:`~shadoweval.storage.models.CanaryRow`).

    ``candidate_share`` is the share of sessions the split gives the candidate (0..1);
    ``ingest_state`` maps a capture-log file name to the lines already read.
    """

    canary_id: str
    run_id: str
    name: str
    created_at: datetime
    updated_at: datetime
    policy_hash: str
    policy_yaml: str
    split_dir: str
    state: CanaryState
    step_index: int
    candidate_share: float
    split_revision: int
    step_started_at: datetime
    error_breach_since: datetime | None
    ingest_state: dict[str, JsonValue]


@dataclass(frozen=True, slots=True)
class CanaryStepInfo:
    """One step of a canary (a row of ``canary_step``).

    ``outcome``: ``None`` while it runs, else ``promoted``, ``completed`` or
    ``rolled_back``; ``last_verdict`` the latest step verdict (read back typed from the JSON
    the controller stored, :meth:`shadoweval.records.StepVerdict.from_json`).
    """

    canary_id: str
    step_index: int
    share: float
    started_at: datetime
    ended_at: datetime | None
    outcome: str | None
    evaluations: int
    last_decision: str | None
    last_verdict: StepVerdict | None
    last_evaluated_at: datetime | None


@dataclass(frozen=True, slots=True)
class CanaryObservation:
    """One live request seen during a canary step, as the step verdict reads it.

    ``arm``: ``baseline`` or ``candidate``; ``session``: the salted session-key hash;
    ``format_ok``: ``None`` when no format was expected or the request failed;
    ``e2e_ms``/``ttft_ms``: milliseconds, ``None`` when unknown.
    """

    exchange_id: str
    step_index: int
    arm: str
    observed_at: datetime
    session: str | None
    error: bool
    format_expected: bool
    format_ok: bool | None
    harmed: bool
    cache_hit: bool
    e2e_ms: float | None
    ttft_ms: float | None
    detail: dict[str, JsonValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CanaryRating:
    """A spot-check rating (1–10, MT-Bench single-answer scale) of one canary-served output."""

    canary_id: str
    exchange_id: str
    rater: str
    rating: float
    rated_at: datetime
    note: str = ""

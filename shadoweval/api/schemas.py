"""Response bodies of the HTTP API (pydantic models; their JSON Schema is the contract).

The API's models are its own, so the stored records can change without breaking clients;
field names follow the records (and ``shadow-eval gate --json``): ``ci_low``/``ci_high``
is the check's confidence interval on the metric's scale, ``p_value`` is one-sided unless
``statistic`` says otherwise, times are ISO 8601 in UTC. A float the gate could not
compute (NaN) is ``null``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from shadoweval.records import CheckOutcome, Coverage, Decision, ModelIdentity, Verdict
from shadoweval.storage import (
    CanaryInfo,
    CanaryState,
    LatestDecision,
    PolicyAuditAction,
    PolicyAuditEntry,
    RunInfo,
)

API_VERSION = "1"


class _Body(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="null")


class ErrorBody(_Body):
    """Every error answer: a short machine-readable ``error`` and a human ``detail``."""

    error: str = Field(examples=["not_found"])
    detail: str


class Health(_Body):
    """``GET /healthz``: the process serves (liveness; no database round trip)."""

    status: Literal["ok"] = "ok"


class LatestDecisionOut(_Body):
    """The latest stored verdict of a run, without its checks."""

    decision: Decision
    decided_at: datetime
    look: int

    @classmethod
    def of(cls, latest: LatestDecision) -> LatestDecisionOut:
        """From the storage value."""
        return cls(decision=latest.decision, decided_at=latest.decided_at, look=latest.look)


class RunOut(_Body):
    """One run: baseline vs candidate identity under one frozen policy."""

    run_id: str
    name: str
    status: str = Field(description="open, held, promoted, rolled_back or aborted")
    baseline: ModelIdentity
    candidate: ModelIdentity
    policy_hash: str
    created_at: datetime
    latest: LatestDecisionOut | None = Field(
        description="The latest stored verdict; null before the first gate."
    )

    @classmethod
    def of(cls, run: RunInfo, latest: LatestDecision | None) -> RunOut:
        """From the stored run and its latest decision."""
        return cls(
            run_id=run.run_id,
            name=run.name,
            status=run.status.value,
            baseline=run.baseline,
            candidate=run.candidate,
            policy_hash=run.policy_hash,
            created_at=run.created_at,
            latest=None if latest is None else LatestDecisionOut.of(latest),
        )


class RunList(_Body):
    """``GET /v1/runs``: runs, newest first."""

    runs: list[RunOut]


class CheckOut(_Body):
    """One gate check: one metric in one task type (``__pooled__`` for all pairs)."""

    metric: str
    task_type: str
    statistic: str
    estimate: float | None
    ci_low: float | None
    ci_high: float | None
    margin: float | None
    n: int
    p_value: float | None
    outcome: CheckOutcome
    reason: str
    critical: bool


class VerdictOut(_Body):
    """``GET /v1/runs/{run_id}/verdict``: a decision with its checks and coverage.

    ``source`` says whether it is the latest stored verdict or was computed by this
    request (the run had none: computed and stored as ``shadow-eval gate`` does).
    """

    run_id: str
    decision: Decision
    decided_at: datetime
    look: int
    policy_hash: str
    reasons: list[str]
    checks: list[CheckOut]
    coverage: Coverage
    source: Literal["stored", "computed"]

    @classmethod
    def of(cls, verdict: Verdict, source: Literal["stored", "computed"]) -> VerdictOut:
        """From a verdict record (its fields of the same names; each check's fields that
        :class:`CheckOut` declares)."""
        fields = {name: getattr(verdict, name) for name in cls.model_fields if name != "source"}
        return cls.model_validate({**fields, "source": source}, from_attributes=True)


class AuditEntryOut(_Body):
    """One row of a run's policy audit log."""

    id: int
    policy_hash: str
    recorded_at: datetime
    action: PolicyAuditAction
    command: str
    actor: str
    detail: dict[str, JsonValue]

    @classmethod
    def of(cls, entry: PolicyAuditEntry) -> AuditEntryOut:
        """From the storage value (its fields of the same names; ``run_id`` is the log's)."""
        return cls.model_validate(entry, from_attributes=True)


class AuditLog(_Body):
    """``GET /v1/runs/{run_id}/audit``: the run's policy audit log, oldest first."""

    run_id: str
    entries: list[AuditEntryOut]


class CanaryOut(_Body):
    """One canary, without its steps: where the rollout stands now."""

    canary_id: str
    run_id: str
    name: str
    state: CanaryState = Field(description="running, completed or rolled_back")
    step_index: int = Field(description="The current (or last) step, from 0.")
    candidate_share: float = Field(
        ge=0.0, le=1.0, description="Share of sessions the split gives the candidate now (0..1)."
    )
    split_revision: int
    created_at: datetime
    updated_at: datetime
    step_started_at: datetime

    @classmethod
    def of(cls, canary: CanaryInfo) -> CanaryOut:
        """From the storage value (its fields of the same names)."""
        return cls.model_validate(canary, from_attributes=True)


class CanaryList(_Body):
    """``GET /v1/canaries``: canaries, newest first."""

    canaries: list[CanaryOut]


class CanaryStepOut(_Body):
    """One step of a canary: its share, window, outcome and latest step verdict."""

    step_index: int
    share: float = Field(ge=0.0, le=1.0, description="The candidate's share of sessions (0..1).")
    started_at: datetime
    ended_at: datetime | None = Field(description="null while the step runs.")
    outcome: str | None = Field(description="null while it runs; promoted, completed, rolled_back")
    evaluations: int = Field(description="Step verdicts computed in this step.")
    last_decision: str | None
    last_verdict: dict[str, JsonValue] | None = Field(
        description="The latest step verdict as stored: decision, reasons and checks (each "
        "with name, role, status, estimate, low, high, threshold, detail); null before "
        "the first evaluation."
    )
    last_evaluated_at: datetime | None


class CanaryAuditOut(_Body):
    """One ``canary_*`` row of the run's policy audit log: who, what and why."""

    recorded_at: datetime
    action: PolicyAuditAction
    actor: str
    command: str
    detail: dict[str, JsonValue] = Field(description="step, shares, split revision; why")


class CanaryDetail(_Body):
    """``GET /v1/canaries/{canary_id}``: ``shadow-eval canary status --json`` with each
    step's latest verdict (:func:`shadoweval.application.canary.view_json`)."""

    canary_id: str
    run_id: str
    name: str
    state: CanaryState
    step_index: int
    candidate_share: float = Field(ge=0.0, le=1.0)
    split_revision: int
    split_dir: str
    policy_hash: str
    created_at: datetime
    step_started_at: datetime
    observed_per_arm: dict[str, int] = Field(description="Requests observed per arm.")
    rejected_lines: dict[str, int] = Field(
        default_factory=dict,
        description="Capture-log lines of the canary's run kept as rejected records "
        "(stage canary), per reason.",
    )
    steps: list[CanaryStepOut]
    audit: list[CanaryAuditOut]


class RollbackIn(_Body):
    """``POST /v1/canaries/{canary_id}/rollback``: who asks and why (both audited)."""

    why: str = Field(min_length=1, description="Why roll back (stored in the audit row).")
    actor: str = Field(min_length=1, description="Who asks (stored in the audit row).")


class VerdictHookIn(BaseModel):
    """``POST /v1/runs/{run_id}/verdict/expect/{decision}``: the optional body, Flagger's webhook
    payload (``name``, ``namespace``, ``phase``, ``metadata``; Flagger's docs, "Webhooks").

    Only the canary's name, namespace and phase are read (to name the caller in the
    answer); ``metadata`` is accepted and ignored (never echoed or stored: Flagger users
    put tokens there). Fields Flagger may add later (``checksum``) are ignored.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str = Field(default="", description="The canary's name.")
    namespace: str = Field(default="", description="The canary's namespace.")
    phase: str = Field(default="", description="The canary's phase (Progressing, Waiting, …).")
    metadata: dict[str, str] = Field(
        default_factory=dict, description="The webhook's metadata; ignored, never echoed."
    )


class VerdictHookOut(_Body):
    """The answer of ``POST /v1/runs/{run_id}/verdict/expect/{decision}``: 200 when the run's latest
    verdict is the expected decision, 409 with the same body when it is not."""

    run_id: str
    expected: Decision
    decision: Decision
    matches: bool = Field(description="decision == expected (the answer is 200 iff true).")
    look: int
    decided_at: datetime
    source: Literal["stored", "computed"]
    reasons: list[str]
    canary: str | None = Field(
        description="namespace/name from the body (a Flagger payload); null without one."
    )
    phase: str | None = Field(description="The canary's phase from the body; null without one.")

    @classmethod
    def of(
        cls,
        verdict: Verdict,
        source: Literal["stored", "computed"],
        expected: Decision,
        caller: VerdictHookIn,
    ) -> VerdictHookOut:
        """From the verdict the request looked up, the expectation and the caller's body."""
        named = caller.name or caller.namespace
        return cls(
            run_id=verdict.run_id,
            expected=expected,
            decision=verdict.decision,
            matches=verdict.decision is expected,
            look=verdict.look,
            decided_at=verdict.decided_at,
            source=source,
            reasons=list(verdict.reasons),
            canary=f"{caller.namespace}/{caller.name}" if named else None,
            phase=caller.phase or None,
        )

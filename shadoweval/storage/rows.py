"""Conversion between records and table rows (the only place that knows both shapes).

Writers turn a record into a ``dict`` of column values for a batch ``INSERT``: the whole
record as ``model_dump(mode="json")`` in ``record`` plus the columns that queries filter
or sort on. Readers turn ORM rows back into records or storage value types.
"""

from __future__ import annotations

from typing import Any

from shadoweval.outcome_redaction import OutcomeRedactor
from shadoweval.pair_facts import pack_pair_facts, uncovered_scripts
from shadoweval.pair_flags import flags_mask, pair_flags
from shadoweval.records import (
    CANARY_OBSERVATION_COLUMNS,
    PAIR_KEY_FIELDS,
    Exchange,
    HumanLabel,
    ModelIdentity,
    PairJudgement,
    PairScore,
    ReplayOutcome,
    StepVerdict,
    same_named,
)
from shadoweval.storage.models import (
    CanaryObservationRow,
    CanaryRatingRow,
    CanaryRow,
    CanaryStepRow,
    HumanLabelRow,
    RejectedRecordRow,
    RunRow,
)
from shadoweval.storage.types import (
    CanaryInfo,
    CanaryObservation,
    CanaryRating,
    CanaryState,
    CanaryStepInfo,
    RejectedRecord,
    RunInfo,
    RunStatus,
)


def nul_safe(value: Any) -> Any:
    """``value`` (JSON-like) with U+0000 in strings replaced by U+FFFD, as PostgreSQL stores it."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {k: nul_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [nul_safe(v) for v in value]
    return value


_SCORE_COLUMNS = (
    *PAIR_KEY_FIELDS,
    "captured_at",
    "similarity",
    "candidate_error",
    "baseline_error",
)
_LABEL_TAIL = ("note", "labeller", "labelled_at", "source", "sample")
_REJECTED_TAIL = ("location", "reason", "detail", "raw", "created_at", "fingerprint")
_OBSERVATION_FIELDS = ("exchange_id", "step_index", *CANARY_OBSERVATION_COLUMNS)
_RATING_FIELDS = ("canary_id", "exchange_id", "rater", "rating", "note", "rated_at")
_RUN_FIELDS = (
    "run_id",
    "name",
    "created_at",
    "candidate_base_url",
    "policy_hash",
    "policy_yaml",
    "source",
)
_CANARY_FIELDS = (
    "canary_id",
    "run_id",
    "name",
    "created_at",
    "updated_at",
    "policy_hash",
    "policy_yaml",
    "split_dir",
    "step_index",
    "candidate_share",
    "split_revision",
    "step_started_at",
    "error_breach_since",
)
_STEP_FIELDS = (
    "canary_id",
    "step_index",
    "share",
    "started_at",
    "ended_at",
    "outcome",
    "evaluations",
    "last_decision",
    "last_evaluated_at",
)


def exchange_row(exchange: Exchange) -> dict[str, Any]:
    """Column values of ``exchange`` for the ``exchange`` table."""
    return {
        "exchange_id": exchange.exchange_id,
        "captured_at": exchange.captured_at,
        "task_type": exchange.task_type,
        "route": exchange.route,
        "outcome": exchange.outcome.value,
        "source": exchange.source,
        "record": exchange.model_dump(mode="json"),
        "cache_hit": exchange.response is not None and exchange.response.cache_hit,
    }


def outcome_row(outcome: ReplayOutcome, redactor: OutcomeRedactor) -> dict[str, Any]:
    """Column values of ``outcome`` for the ``replay_outcome`` table, its answer, raw body
    and error texts redacted first (:mod:`shadoweval.outcome_redaction`, issue 30: every
    write of an outcome passes here)."""
    outcome = redactor.redact(outcome)
    return {
        "run_id": outcome.run_id,
        "exchange_id": outcome.exchange_id,
        "target": outcome.target.value,
        "attempt": outcome.attempt,
        "error_kind": None if outcome.error_kind is None else outcome.error_kind.value,
        "warmup": outcome.warmup,
        "replayed_at": outcome.replayed_at,
        "e2e_ms": outcome.timings.e2e_ms,
        "ttft_ms": outcome.timings.ttft_ms,
        "ttfc_ms": outcome.timings.ttfc_ms,
        "cache_hit": outcome.response is not None and outcome.response.cache_hit,
        "record": outcome.model_dump(mode="json"),
    }


def pair_score_row(score: PairScore) -> dict[str, Any]:
    """Column values of ``score`` for the ``pair_score`` table (``facts``: its packed
    :mod:`shadoweval.pair_facts`)."""
    return {
        **same_named(score, _SCORE_COLUMNS),
        "flags": flags_mask(pair_flags(score)),
        "scored_at": score.scored_at,
        "record": score.model_dump(mode="json"),
        "facts": pack_pair_facts(score),
        "uncovered_scripts": uncovered_scripts(score) or None,
    }


def label_row(label: HumanLabel) -> dict[str, Any]:
    """Column values of ``label`` for the ``human_label`` table (``id`` is assigned)."""
    return {
        **same_named(label, PAIR_KEY_FIELDS),
        "label": label.label.value,
        **same_named(label, _LABEL_TAIL),
    }


def judgement_row(judgement: PairJudgement) -> dict[str, Any]:
    """Column values of ``judgement`` for the ``pair_judgement`` table (``id`` is assigned)."""
    return {
        **same_named(judgement, PAIR_KEY_FIELDS),
        "source": judgement.source.value,
        "outcome": None if judgement.outcome is None else judgement.outcome.value,
        "judged_at": judgement.judged_at,
        "record": judgement.model_dump(mode="json"),
    }


def human_label(row: HumanLabelRow) -> HumanLabel:
    """The :class:`HumanLabel` of a ``human_label`` row."""
    return HumanLabel.model_validate(
        {**same_named(row, PAIR_KEY_FIELDS), "label": row.label, **same_named(row, _LABEL_TAIL)}
    )


def rejected_row(record: RejectedRecord) -> dict[str, Any]:
    """Column values of ``record`` for the ``rejected_record`` table (``id`` is assigned)."""
    return {
        "run_id": record.run_id,
        "stage": str(record.stage),
        **same_named(record, _REJECTED_TAIL),
    }


def run_info(row: RunRow) -> RunInfo:
    """The :class:`RunInfo` of a ``run`` row."""
    return RunInfo(
        **same_named(row, _RUN_FIELDS),
        baseline=ModelIdentity.model_validate(row.baseline_model),
        candidate=ModelIdentity.model_validate(row.candidate_model),
        status=RunStatus(row.status),
        settings=dict(row.settings),
    )


def rejected_record(row: RejectedRecordRow) -> RejectedRecord:
    """The :class:`RejectedRecord` of a ``rejected_record`` row."""
    return RejectedRecord(
        id=row.id, run_id=row.run_id, stage=row.stage, **same_named(row, _REJECTED_TAIL)
    )


def canary_info(row: CanaryRow) -> CanaryInfo:
    """The :class:`CanaryInfo` of a ``canary`` row."""
    return CanaryInfo(
        **same_named(row, _CANARY_FIELDS),
        state=CanaryState(row.state),
        ingest_state=dict(row.ingest_state),
    )


def canary_step_info(row: CanaryStepRow) -> CanaryStepInfo:
    """The :class:`CanaryStepInfo` of a ``canary_step`` row."""
    return CanaryStepInfo(
        **same_named(row, _STEP_FIELDS),
        last_verdict=(
            None if row.last_verdict is None else StepVerdict.from_json(row.last_verdict)
        ),
    )


def canary_observation_row(canary_id: str, observation: CanaryObservation) -> dict[str, Any]:
    """Column values of ``observation`` of canary ``canary_id`` for the
    ``canary_observation`` table (``id`` is assigned)."""
    return {
        "canary_id": canary_id,
        **same_named(observation, _OBSERVATION_FIELDS),
        "detail": dict(observation.detail),
    }


def canary_observation(row: CanaryObservationRow) -> CanaryObservation:
    """The :class:`CanaryObservation` of a ``canary_observation`` row."""
    return CanaryObservation(**same_named(row, _OBSERVATION_FIELDS), detail=dict(row.detail))


def canary_rating_row(rating: CanaryRating) -> dict[str, Any]:
    """Column values of ``rating`` for the ``canary_rating`` table (``id`` is assigned)."""
    return same_named(rating, _RATING_FIELDS)


def canary_rating(row: CanaryRatingRow) -> CanaryRating:
    """The :class:`CanaryRating` of a ``canary_rating`` row."""
    return CanaryRating(**same_named(row, _RATING_FIELDS))

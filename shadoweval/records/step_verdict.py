"""The canary step's records: :class:`StepCheck` (a :class:`Check` with the canary's role
and level) and :class:`StepVerdict` (PROMOTE / HOLD / ROLLBACK of one poll of one step).

One check record and one decision enum serve the shadow gate and the canary
(:mod:`shadoweval.stats.engine`). The stored and served JSON of a step verdict is
:meth:`StepVerdict.to_json` (``decision``, ``reasons``, ``checks`` — each with ``name``,
``role``, ``status``, ``estimate``, ``low``, ``high``, ``threshold``, ``level``,
``detail`` — and the counts), the form the controller has always stored.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import AwareDatetime, JsonValue

from shadoweval.records.base import POOLED, _Record
from shadoweval.records.enums import CheckOutcome, Decision
from shadoweval.records.verdicts import Check

__all__ = [
    "CANARY_OBSERVATION_COLUMNS",
    "LIVE_ANSWER_COLUMNS",
    "CheckRole",
    "StepCheck",
    "StepStatus",
    "StepVerdict",
    "finite_or_none",
]

LIVE_ANSWER_COLUMNS: tuple[str, ...] = (
    "error",
    "format_expected",
    "format_ok",
    "harmed",
    "cache_hit",
    "e2e_ms",
    "ttft_ms",
)
"""The columns of a canary observation that one live answer shows on its own (the facts of
:func:`shadoweval.compare.live_side.live_side_facts`, under the same names)."""

CANARY_OBSERVATION_COLUMNS: tuple[str, ...] = (
    "arm",
    "observed_at",
    "session",
    *LIVE_ANSWER_COLUMNS,
)
"""What a step verdict reads of one live request of a canary step: the columns of its
``observations`` frame (:func:`shadoweval.stats.canary.verdict.step_verdict`), stored as they
are with the request (``canary_observation`` table, beside ``exchange_id`` and ``step_index``)."""

StepStatus = Literal["pass", "fail", "not_enough_data", "breach"]
"""A canary check's status: ``fail`` a promote/validity check not met, ``breach`` a rollback
condition shown, ``not_enough_data`` neither shown nor ruled out."""


class CheckRole(enum.StrEnum):
    """What a canary check decides."""

    PROMOTE = "promote"
    """Must pass to advance."""
    ROLLBACK = "rollback"
    """A breach rolls back."""
    VALIDITY = "validity"
    """Must pass to advance: the data can be trusted and is enough."""


def finite_or_none(value: float | None) -> float | None:
    """``value`` as a float, ``None`` when it is ``None``, NaN or infinite."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


_OUTCOME: dict[str, CheckOutcome] = {
    "pass": CheckOutcome.PASS,
    "fail": CheckOutcome.FAIL,
    "breach": CheckOutcome.FAIL,
    "not_enough_data": CheckOutcome.INCONCLUSIVE,
}


class StepCheck(Check):
    """One canary check: a :class:`Check` (``metric`` its name, ``ci_low``/``ci_high`` its
    one-sided bounds, ``margin`` the policy's threshold, ``reason`` its sentence) with the
    canary's ``role`` and the one-sided ``level`` its test ran at (``None`` for
    non-statistical checks). ``task_type`` is :data:`POOLED` (a canary judges all traffic).

    The outcome maps to the canary's status: FAIL of a rollback check is a ``breach``,
    INCONCLUSIVE is ``not_enough_data``.
    """

    role: CheckRole
    level: float | None = None

    @classmethod
    def of(
        cls,
        name: str,
        role: CheckRole | str,
        status: StepStatus,
        bounds: tuple[float | None, float | None, float | None],
        threshold: float | None,
        level: float | None,
        detail: str,
        *,
        statistic: str,
    ) -> StepCheck:
        """A check from the canary's terms: ``bounds`` is (estimate, low, high)."""
        estimate, low, high = bounds
        return cls(
            metric=name,
            task_type=POOLED,
            statistic=statistic,
            estimate=estimate,
            ci_low=low,
            ci_high=high,
            margin=threshold,
            outcome=_OUTCOME[status],
            reason=detail,
            role=CheckRole(role),
            level=level,
        )

    @property
    def name(self) -> str:
        """``error_rate``, ``harm_rate``, ``format_failure``, ``latency_ratio.<key>``,
        ``latency_limit.<key>``, ``spot_check_bad``, ``srm``, ``window``, ``min_requests``."""
        return self.metric

    @property
    def status(self) -> StepStatus:
        """``pass``, ``fail``, ``breach`` (a rollback check's FAIL) or ``not_enough_data``."""
        if self.outcome == CheckOutcome.PASS:
            return "pass"
        if self.outcome == CheckOutcome.INCONCLUSIVE:
            return "not_enough_data"
        return "breach" if self.role == CheckRole.ROLLBACK else "fail"

    @property
    def low(self) -> float | None:
        """The one-sided lower bound (``None`` when unbounded or not computed)."""
        return self.ci_low

    @property
    def high(self) -> float | None:
        """The one-sided upper bound (``None`` when unbounded or not computed)."""
        return self.ci_high

    @property
    def threshold(self) -> float | None:
        """The policy's number the check compares with."""
        return self.margin

    @property
    def detail(self) -> str:
        """One human sentence with the numbers."""
        return self.reason

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StepCheck:
        """The check of its stored JSON form (:meth:`to_json`). The statistic's name is not
        stored: it reads back empty.

        Raises:
            pydantic.ValidationError: a field is missing or of the wrong type, naming it.
            KeyError: ``status`` is none of ``pass``, ``fail``, ``breach``,
                ``not_enough_data``.
        """
        return cls.of(
            str(data["name"]),
            str(data["role"]),
            data["status"],
            (data.get("estimate"), data.get("low"), data.get("high")),
            data.get("threshold"),
            data.get("level"),
            str(data.get("detail", "")),
            statistic=str(data.get("statistic", "")),
        )

    def to_json(self) -> dict[str, JsonValue]:
        """The stored JSON form (NaN/inf → ``None``)."""
        return {
            "name": self.name,
            "role": self.role.value,
            "status": self.status,
            "estimate": finite_or_none(self.estimate),
            "low": finite_or_none(self.low),
            "high": finite_or_none(self.high),
            "threshold": finite_or_none(self.threshold),
            "level": finite_or_none(self.level),
            "detail": self.detail,
        }


class StepVerdict(_Record):
    """The verdict of one poll of one canary step.

    Attributes:
        decision: PROMOTE (advance; at the last step: complete), HOLD, or ROLLBACK.
        reasons: human sentences: why this decision.
        checks: every check's outcome (validity, rollback, promote).
        error_breach_since: when the current error-rate excess breach began (the first
            ``now`` that saw it), ``None`` when it is not breaching; the caller stores it
            and passes it back on the next poll.
        n_baseline, n_candidate: requests of the step per arm (all of them; cache hits
            are left out of latency only).
        sessions_baseline, sessions_candidate: sessions first seen in the step, per arm
            (a request without a session is its own session).
        look: the promote checkpoint index reached (0: none).
        rollback_look: the rollback checkpoint index reached (0: none).
    """

    decision: Decision
    reasons: tuple[str, ...]
    checks: tuple[StepCheck, ...]
    error_breach_since: AwareDatetime | None
    n_baseline: int
    n_candidate: int
    sessions_baseline: int
    sessions_candidate: int
    look: int
    rollback_look: int = 0

    def acted_on(self, decision: Decision, reasons: tuple[str, ...]) -> StepVerdict:
        """This verdict with the decision and reasons the controller acted on (a split
        changed by hand turns PROMOTE into HOLD and adds its reason)."""
        return self.model_copy(update={"decision": decision, "reasons": reasons})

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StepVerdict:
        """The verdict of its stored JSON form (:meth:`to_json`): what storage reads back
        from ``canary_step.last_verdict``, so every face gets it typed.

        Raises:
            pydantic.ValidationError: a field is missing or of the wrong type, naming it.
            KeyError: a check's ``status`` is unknown.
        """
        checks = data.get("checks") or []
        return cls.model_validate(
            {
                **{k: v for k, v in data.items() if k != "checks"},
                "checks": tuple(StepCheck.from_json(c) for c in checks),
            }
        )

    def to_json(self) -> dict[str, JsonValue]:
        """The stored JSON form (no NaN; datetimes as ISO 8601 strings)."""
        return {
            "decision": self.decision.value,
            "reasons": list(self.reasons),
            "checks": [c.to_json() for c in self.checks],
            "error_breach_since": (
                None if self.error_breach_since is None else self.error_breach_since.isoformat()
            ),
            "n_baseline": self.n_baseline,
            "n_candidate": self.n_candidate,
            "sessions_baseline": self.sessions_baseline,
            "sessions_candidate": self.sessions_candidate,
            "look": self.look,
            "rollback_look": self.rollback_look,
        }

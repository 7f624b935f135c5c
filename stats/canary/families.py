"""The canary's check families, registered in the order the step verdict lists them
within a role (validity, then rollback, then promote: :data:`ROLE_ORDER`).

A new canary check is one new module with a function ``(StepContext) -> list[CanaryJudged]``
and one line here.
"""

from __future__ import annotations

from shadoweval.records import CheckRole
from shadoweval.stats.canary.latency_checks import latency_limits, latency_ratios
from shadoweval.stats.canary.proportion_checks import promote_rates, rollback_rates, spot_checks
from shadoweval.stats.canary.step import CanaryJudged, StepContext
from shadoweval.stats.canary.validity_checks import min_requests, sample_ratio, window
from shadoweval.stats.engine import CheckFamily

__all__ = ["CANARY_FAMILIES", "ROLE_ORDER"]

CANARY_FAMILIES: tuple[CheckFamily[StepContext, CanaryJudged], ...] = (
    CheckFamily("window", window),
    CheckFamily("min_requests", min_requests),
    CheckFamily("srm", sample_ratio),
    CheckFamily("rollback_rates", rollback_rates),
    CheckFamily("latency_limits", latency_limits),
    CheckFamily("spot_checks", spot_checks),
    CheckFamily("promote_rates", promote_rates),
    CheckFamily("latency_ratios", latency_ratios),
)
"""Every canary check family, in order."""

ROLE_ORDER: dict[CheckRole, int] = {
    CheckRole.VALIDITY: 0,
    CheckRole.ROLLBACK: 1,
    CheckRole.PROMOTE: 2,
}
"""The order of a step verdict's checks by role (stable within a role)."""

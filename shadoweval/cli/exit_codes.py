"""Exit status of every ``shadow-eval`` command, in one place.

``gate`` and ``evaluate`` exit with the decision; everything that is not a decision —
bad input, an unreachable database, a usage error, an unexpected crash — exits 3, so a CI
job can never read an error as HOLD (1) or ROLLBACK (2) (reference failure case 12).
"""

from __future__ import annotations

from shadoweval.records import Decision

EXIT_CODES: dict[Decision, int] = {Decision.PROMOTE: 0, Decision.HOLD: 1, Decision.ROLLBACK: 2}
"""Exit status per decision."""

EXIT_ERROR = 3
"""Exit status of anything that is not a decision."""

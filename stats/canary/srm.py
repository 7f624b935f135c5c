"""Sample-ratio mismatch (SRM): is the canary getting the share of sessions it was sent?

Routing is sticky by session, so the counts are **sessions**, not requests (requests of
one session are not independent draws of the router). A canary whose arm holds more or
fewer sessions than its configured share has a routing, logging or crash bug, and its
metric comparisons cannot be trusted.

The check is re-run on every refresh, so a fixed-n χ² test read at every poll inflates
alarms (gate-statistics.md pitfall 11: 44,000 vs 45,000 gives fixed p = 0.0008 but
always-valid p = 0.109). The decision uses the always-valid Beta-binomial mixture Bayes
factor of Lindon & Malek, "Anytime-valid inference for multinomial count data"
(NeurIPS 2022; PyPI ``savvi``), two categories; the χ² p-value is reported beside it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import numpy.typing as npt
from scipy import special
from scipy import stats as scipy_stats

from shadoweval.stats.inputs import InvalidDataError, check_alpha, count

__all__ = ["SrmResult", "sample_ratio_mismatch", "srm_log_bayes_factor"]


@dataclass(frozen=True)
class SrmResult:
    """Result of :func:`sample_ratio_mismatch`.

    Attributes:
        n_candidate: sessions routed to the candidate.
        n_baseline: sessions routed to the baseline.
        expected_share: the candidate's configured share s of sessions.
        observed_share: ``n_candidate / (n_candidate + n_baseline)`` (NaN when no sessions).
        bayes_factor: the mixture Bayes factor against share = s (``inf`` on overflow).
        log_bayes_factor: natural log of the Bayes factor.
        p_always_valid: ``min(1, 1/BF)``, valid at every poll (Ville's inequality).
        p_fixed_n: the fixed-n χ² goodness-of-fit p-value (``scipy.stats.chisquare``;
            NaN when there are no sessions), for display only: not valid under peeking.
        alpha: the level.
        concentration: the prior concentration c (prior Beta(c·s, c·(1−s))).
        mismatch: ``p_always_valid <= alpha``.
    """

    n_candidate: int
    n_baseline: int
    expected_share: float
    observed_share: float
    bayes_factor: float
    log_bayes_factor: float
    p_always_valid: float
    p_fixed_n: float
    alpha: float
    concentration: float
    mismatch: bool

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict; NaN (and an overflowed ``inf`` Bayes factor) become ``None``."""
        return {
            key: None if isinstance(value, float) and not math.isfinite(value) else value
            for key, value in asdict(self).items()
        }


def _share(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidDataError(f"{name} must be a number, got {value!r}", name=name)
    value = float(value)
    if not 0.0 < value < 1.0:
        raise InvalidDataError(f"{name} must be in (0, 1), got {value}", name=name)
    return value


def srm_log_bayes_factor(
    n_candidate: npt.ArrayLike,
    n_baseline: npt.ArrayLike,
    expected_share: float,
    concentration: float = 100.0,
) -> npt.NDArray[np.float64]:
    """Log Beta-binomial mixture Bayes factor for share ≠ s (Lindon & Malek 2022, k = 2).

    With prior θ ~ Beta(a, b), ``a = c·s``, ``b = c·(1−s)`` (the Dirichlet prior
    ``Dirichlet(c·θ0)`` of Lindon & Malek centred on θ0 = (s, 1−s)), the mixture
    likelihood ratio after x candidate and y baseline sessions is::

        BF = B(a + x, b + y) / (B(a, b) · s^x · (1−s)^y).

    It is a nonnegative martingale with mean 1 under H0 (the ratio of a prior-predictive
    to the null likelihood), so ``P_H0(∃n: BF_n ≥ 1/α) ≤ α``.
    Works elementwise on numpy arrays of counts too (no input checks here: the public
    entry point is :func:`sample_ratio_mismatch`).
    T21 (gate-statistics.md, s = ½, c = 100): [600, 400] → BF = 2.667e7;
    [44000, 45000] → BF = 9.145.
    """
    a = concentration * expected_share
    b = concentration * (1.0 - expected_share)
    x = np.asarray(n_candidate, dtype=float)
    y = np.asarray(n_baseline, dtype=float)
    return np.asarray(
        special.betaln(a + x, b + y)
        - special.betaln(a, b)
        - x * math.log(expected_share)
        - y * math.log1p(-expected_share)
    )


def sample_ratio_mismatch(
    n_candidate: int,
    n_baseline: int,
    expected_share: float,
    alpha: float = 0.001,
    concentration: float = 100.0,
) -> SrmResult:
    """Always-valid sample-ratio-mismatch test on session counts.

    Decision: ``mismatch = p_always_valid <= alpha`` with ``p_always_valid = min(1, 1/BF)``
    and BF from :func:`srm_log_bayes_factor` (Lindon & Malek, "Anytime-valid inference for
    multinomial count data", NeurIPS 2022). The default α = 0.001 follows the usual SRM
    practice of a strict level (an SRM alarm blocks the whole canary). The fixed-n χ²
    p-value (``scipy.stats.chisquare`` against expected counts ``n·s``, ``n·(1−s)``) is
    reported beside it for comparison with dashboards.

    Args:
        n_candidate: sessions routed to the candidate, ≥ 0.
        n_baseline: sessions routed to the baseline, ≥ 0.
        expected_share: the candidate's configured share s, in (0, 1).
        alpha: level in (0, 1).
        concentration: prior concentration c > 0 (larger: the prior hugs s more tightly,
            more power against small mismatches, less against large ones).

    Raises:
        InvalidDataError: a negative or non-integer count, a share, alpha or
            concentration out of range (the message names the argument and value).
    """
    n_candidate = count(n_candidate, "n_candidate")
    n_baseline = count(n_baseline, "n_baseline")
    expected_share = _share(expected_share, "expected_share")
    alpha = check_alpha(alpha)
    if (
        isinstance(concentration, bool)
        or not isinstance(concentration, int | float)
        or not math.isfinite(concentration)
        or concentration <= 0
    ):
        raise InvalidDataError(
            f"concentration must be a finite number > 0, got {concentration!r}",
            name="concentration",
        )
    concentration = float(concentration)
    n = n_candidate + n_baseline
    log_bf = float(srm_log_bayes_factor(n_candidate, n_baseline, expected_share, concentration))
    bf = math.exp(log_bf) if log_bf < 700.0 else math.inf
    p_av = 1.0 if log_bf <= 0.0 else math.exp(-log_bf)
    if n > 0:
        p_fixed = float(
            scipy_stats.chisquare(
                [n_candidate, n_baseline], [n * expected_share, n * (1.0 - expected_share)]
            ).pvalue
        )
        observed = n_candidate / n
    else:
        p_fixed = math.nan
        observed = math.nan
    return SrmResult(
        n_candidate=n_candidate,
        n_baseline=n_baseline,
        expected_share=expected_share,
        observed_share=observed,
        bayes_factor=bf,
        log_bayes_factor=log_bf,
        p_always_valid=p_av,
        p_fixed_n=p_fixed,
        alpha=alpha,
        concentration=concentration,
        mismatch=p_av <= alpha,
    )

"""Independent SRM Bayes factor by numeric integration (no closed form used).

BF = ∫₀¹ Beta(θ; c·s, c·(1−s)) · θ^x (1−θ)^y dθ / (s^x (1−s)^y), integrated with
``scipy.integrate.quad`` in a scaled form: the integrand is divided by its value at the
posterior mode so it never underflows, and the log of that scale is added back.
"""

from __future__ import annotations

import math

from scipy import integrate, special


def srm_bayes_factor_quad(x: int, y: int, share: float, concentration: float) -> float:
    """Log Bayes factor of the Beta-binomial mixture against θ = share, by quadrature."""
    a = concentration * share
    b = concentration * (1.0 - share)

    def log_f(t: float) -> float:
        return (a + x - 1) * math.log(t) + (b + y - 1) * math.log1p(-t)

    mode = (a + x - 1) / (a + b + x + y - 2)
    peak = log_f(mode)
    sd = math.sqrt(mode * (1 - mode) / (a + b + x + y))
    points = (
        [max(1e-12, mode - k * sd) for k in (10, 3)]
        + [mode]
        + [min(1 - 1e-12, mode + k * sd) for k in (3, 10)]
    )
    value, _ = integrate.quad(
        lambda t: math.exp(log_f(t) - peak),
        0.0,
        1.0,
        points=points,
        limit=500,
        epsabs=0.0,
        epsrel=1e-11,
    )
    return float(
        math.log(value) + peak - special.betaln(a, b) - x * math.log(share) - y * math.log1p(-share)
    )

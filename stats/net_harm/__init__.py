"""The direction of a change: net harm from judged pairs, stratified by divergence.

Every real upgrade changes answers; the gate asks whether the candidate is at least as
good. Per analysis unit (a task type, or the pooled pairs) with ``n`` pairs, each pair has
a **quality** ``y_i``: +1 the candidate's answer is worse, −1 better, 0 a tie (from a
judge, an analyst or a reference checker: :mod:`shadoweval.stats.judgements`). The **net harm** is

    Δ = P(candidate worse) − P(candidate better) = E[y]

over *all* pairs of the traffic. A pair whose answers did not change beyond the noise
(:mod:`shadoweval.stats.change`) is a tie by definition (``y = 0``, never judged; a judgement of
such a pair is counted in :attr:`NetHarmEstimate.judged_unchanged` and not read). Ground
truth that differs between the sides (reference correctness, analysts' labels) makes a
pair changed whatever its divergence, so on an unchanged pair it can only be a tie; where
nothing else marks such a pair changed it is in the "ground truth only" stratum
(:func:`ground_truth_stratum`), a census read exactly. The
changed pairs fall into strata ``h`` by divergence (:func:`divergence_strata`); a random
sample of each stratum is judged (the judge budget), so the estimator is **stratified**:

    Δ̂ = Σ_h w_h·ȳ_h,   w_h = N_h / n,

``N_h`` the changed pairs of stratum h, ``n_h`` the judged ones, ``ȳ_h`` their mean
quality (Cochran 1977, *Sampling Techniques*, 3rd ed., ch. 5, eq. 5.1). The judge budget
samples each task type apart, so the pooled unit stratifies by task type × divergence
stratum (:func:`pooled_strata`): its estimate is the traffic-weighted sum of the task
types' estimates.

**Variance: two phases.** The gate's question is about the traffic, not only about the
``n`` captured pairs: the pairs are a random sample of the traffic (phase 1, which also
classifies them into unchanged and changed strata) and the judged pairs a stratified
random subsample of the changed ones (phase 2): *double sampling for stratification*
(Neyman 1938, "Contribution to the theory of sampling human populations", JASA
33:101–116; Cochran 1977 §12.2–12.3; Rao 1973, Biometrika 60:125–133). By the law of total
variance, to first order,

    Var(Δ̂) = σ²/n + Σ_h w_h²·(1 − n_h/N_h)·S_h²/n_h,

the first term the phase-1 sampling of pairs from the traffic (σ² the variance of ``y``
over the traffic), the second the phase-2 subsampling within each stratum with its
finite population correction — Cochran's eq. 5.6 for the ``n`` captured pairs. The
estimate uses ``s_h²`` for ``S_h²`` and ``σ̂² = Σ_h w_h·(v_h + (ȳ_h − Δ̂)²) + w_0·Δ̂²``
(within plus between strata, the unchanged pairs ``w_0`` all at 0), capped at 1, the
largest variance of a value in [−1, 1]. :attr:`NetHarmEstimate.se` is this standard error
and decides; :attr:`NetHarmEstimate.se_finite` is the phase-2 term alone (Cochran 5.6:
the uncertainty about these ``n`` pairs only), reported. The finite-population variance
alone is 0 once every changed pair is judged: a unit of 200 pairs with 20 changed, all
judged, one worse and 19 ties would "prove" harm at any level; with the traffic's variance
its one-sided p is 0.27 (McNemar's mid-p on the same counts: 0.25). In simulation
(tests/stats/test_net_harm.py) the finite-population interval covers the traffic's net
harm in 0% of such fully judged units, the two-phase one in 96%.

**Small strata.** The within-stratum variance ``v_h`` used for a stratum with judged
pairs is:

* ``n_h = 1``: 1, the largest variance of a value in [−1, 1] (``s_h²`` is undefined);
* ``n_h ≥ 2``: ``max(s_h², s̃_h²)`` (``s_h²`` with ddof 1), capped at 1, where ``s̃_h²``
  is the variance of the stratum's judged outcomes after adding one pseudo-observation of
  each possible outcome (−1, 0, +1) — the three-outcome analogue of the pseudo-counts of
  Agresti & Caffo (2000, "Simple and effective confidence intervals for proportions and
  differences of proportions result from adding two successes and two failures", The
  American Statistician 54:280–288). Ten judged pairs all "better" have ``s_h² = 0`` but
  ``s̃_h² = 0.331``, so they do not give a zero-width interval.

**Unjudged strata.** A changed stratum with ``N_h > 0`` and no judged pair has an unknown
mean in [−1, 1]: the estimate takes the midpoint 0 and every bound is widened by ``w_h``
on its side (worst-case bounds; Manski 2003, *Partial Identification of Probability
Distributions*), so the interval stays valid; such a unit never passes
(:func:`net_harm_check`).

**Shares.** ``P(worse)`` and ``P(better)`` are the same estimator on the indicators
``1{y = +1}`` and ``1{y = −1}`` (values in [0, 1]: variance 1/4 at ``n_h = 1``,
pseudo-counts of 0 and 1, midpoint 1/2 and half-width 1/2 for an unjudged stratum).

**Intervals and sequential validity.** The interval at a one-sided level ``a`` is
``Δ̂ ± z_{1−a}·se`` (normal approximation; widened as above). The gate reads it at the
look's spent level ``levels.alpha_k`` (:class:`~shadoweval.stats.looks.LookLevels`): ``Σ_k α_k ≤ α``
over all looks, so by the union bound the probability that the interval of *any* look
misses Δ on a side is at most α, under any dependence between the looks — the argument
that makes the quantile-ratio checks valid (docs/gate.md) and the one that holds here
although judgements keep arriving between looks. A look re-evaluated because its pairs'
judgements changed is one more test: :func:`judgement_levels` splits the look's levels
over its evaluations, and the caller passes those levels here. PASS when the
upper bound is below the margin (non-inferiority at α_k), FAIL when the lower bound lies
wholly above it; the one-sided p-value of "net harm > 0" (:meth:`NetHarmEstimate.p_harm`)
joins the gate's rollback Holm family at ``alpha_RB_k``.

**Assumption.** Within a stratum the judged pairs are a random sample of its changed pairs
(the judge's budget draws them at random). Labels that analysts chose to give, or a
reference checker covering every pair, are read the same way; a human who labels only the
suspicious pairs of a stratum biases its mean.

Test vectors: tests/stats/test_net_harm.py, against an independent implementation
(tests/stats/reference/net_harm_reference.py), a hand-computed example and simulations
of unbiasedness and coverage.

The package's modules: :mod:`~shadoweval.stats.net_harm.strata` (divergence strata, the
pooled unit's strata), :mod:`~shadoweval.stats.net_harm.stratified` (the two-phase
stratified mean), :mod:`~shadoweval.stats.net_harm.estimate` (:func:`estimate_net_harm`,
:class:`NetHarmEstimate`) and :mod:`~shadoweval.stats.net_harm.check`
(:func:`net_harm_check`, :func:`judgement_levels`); every name is imported from here.
"""

from __future__ import annotations

from shadoweval.stats.net_harm.check import (
    NET_HARM_METRIC,
    NET_HARM_STATISTIC,
    judgement_levels,
    net_harm_check,
)
from shadoweval.stats.net_harm.estimate import (
    BETTER as BETTER,
)
from shadoweval.stats.net_harm.estimate import (
    NOT_REACHABLE,
    NetHarmEstimate,
    StratumEstimate,
    estimate_net_harm,
)
from shadoweval.stats.net_harm.estimate import (
    TIE as TIE,
)
from shadoweval.stats.net_harm.estimate import (
    WORSE as WORSE,
)
from shadoweval.stats.net_harm.strata import (
    GROUND_TRUTH_STRATUM_NAME,
    divergence_strata,
    ground_truth_stratum,
    pooled_strata,
    stratum_label,
    stratum_names,
)
from shadoweval.stats.net_harm.stratified import StratifiedMean

__all__ = [
    "GROUND_TRUTH_STRATUM_NAME",
    "NET_HARM_METRIC",
    "NET_HARM_STATISTIC",
    "NOT_REACHABLE",
    "NetHarmEstimate",
    "StratifiedMean",
    "StratumEstimate",
    "divergence_strata",
    "estimate_net_harm",
    "ground_truth_stratum",
    "judgement_levels",
    "net_harm_check",
    "pooled_strata",
    "stratum_label",
    "stratum_names",
]

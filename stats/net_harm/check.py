"""The net-harm check of one unit, and the levels of a look evaluated again.

:func:`net_harm_check` reads a unit's :class:`~shadoweval.stats.net_harm.estimate.NetHarmEstimate`
at the look's spent level and says PASS, FAIL or INCONCLUSIVE with its reason;
:func:`judgement_levels` splits a look's levels over its evaluations (the method and the
union-bound argument: :mod:`shadoweval.stats.net_harm`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shadoweval.records import POOLED, Check, CheckOutcome
from shadoweval.stats.looks import LookLevels
from shadoweval.stats.net_harm.estimate import NOT_REACHABLE, NetHarmEstimate, StratumEstimate
from shadoweval.stats.net_harm.strata import stratum_label
from shadoweval.stats.net_harm.stratified import StratifiedMean
from shadoweval.stats.policy import NetHarmPolicy

if TYPE_CHECKING:
    from shadoweval.stats.checks.reasons import CheckNumbers

__all__ = ["NET_HARM_METRIC", "NET_HARM_STATISTIC", "judgement_levels", "net_harm_check"]

NET_HARM_METRIC = "net_harm"
"""The metric name of the net-harm check."""
NET_HARM_STATISTIC = "stratified_net_harm_z"
"""The net-harm check's method: stratified two-phase estimator, normal interval at α_k."""

# shadoweval.stats.checks.reasons is imported inside the functions that use it:
# shadoweval.stats.checks (its package __init__ and the check modules) may import
# shadoweval.stats.change, which imports this package; a top-level import would be circular.


def judgement_levels(levels: LookLevels, judgement_look: int) -> LookLevels:
    """The net-harm levels of the ``judgement_look``-th evaluation of one look.

    Judgements keep arriving after a checkpoint's pairs are fixed, so one look can be
    evaluated several times with different judgements
    (:attr:`~shadoweval.records.Verdict.judgement_look`), each a new test of net harm on
    more judged pairs. The look's levels ``α_k`` and ``α_RB,k`` are therefore split over
    its evaluations: the j-th gets ``6/(π²j²)`` of them (``Σ_j 6/(π²j²) = 1``), so the
    union bound over looks and their re-evaluations still totals at most α (the first
    evaluation reads 0.608·α_k, the second 0.152·α_k, the tenth 0.0061·α_k).
    ``judgement_look`` 0 (no judgement history) counts as the first. Only the net-harm
    check needs this: the other checks read the look's fixed pairs, the same test each time.

    Raises:
        ValueError: ``judgement_look`` < 0.
    """
    if judgement_look < 0:
        raise ValueError(f"judgement_look must be >= 0, got {judgement_look}")
    share = 6.0 / (math.pi**2 * max(1, judgement_look) ** 2)
    return dataclasses.replace(
        levels, alpha_k=levels.alpha_k * share, alpha_harm_k=levels.alpha_harm_k * share
    )


def _unit(task_type: str) -> str:
    return "the pooled pairs" if task_type == POOLED else f"`{task_type}`"


def _sources_text(sources: Mapping[str, int]) -> str:
    order = ["judge", "human", "reference"]
    keys = order + sorted(k for k in sources if k not in order)
    parts = [f"{k} {int(sources.get(k, 0))}" for k in keys if k in order or sources.get(k, 0)]
    return ", ".join(parts)


def _share(name: str, share: StratifiedMean) -> str:
    """``P(worse) 12.0%``; with unjudged strata the worst-case range of the share, not
    its midpoint (``P(worse) 0.0% to 70.0% (unjudged strata)``)."""
    from shadoweval.stats.checks.reasons import fmt_pct

    if share.unknown <= 0.0:
        return f"{name} {fmt_pct(share.estimate)}"
    low = max(0.0, share.estimate - share.unknown)
    high = min(1.0, share.estimate + share.unknown)
    return f"{name} {fmt_pct(low)} to {fmt_pct(high)} (unjudged strata)"


def _unchanged_text(e: NetHarmEstimate, truth_ties: int) -> str:
    """``153 unchanged pairs counted as ties (ground truth: a tie on 150 of them; 3 judge
    judgements not read)``: the unchanged pairs and what is known of them. Ground truth
    on an unchanged pair is always a tie (a difference would have made it changed)."""
    text = f"{e.n - e.changed} unchanged pairs counted as ties"
    ties = min(truth_ties, e.judged_unchanged)
    others = e.judged_unchanged - ties
    if ties and others:
        return f"{text} (ground truth: a tie on {ties} of them; {others} judge judgements not read)"
    if ties:
        return f"{text} (ground truth: a tie on {ties} of them)"
    if others:
        return f"{text} (their {others} judgements not read)"
    return text


def _joined(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


@dataclass(frozen=True)
class _Reading:
    """One unit's estimate read at the look's spent level: what the check's reasons share."""

    estimate: NetHarmEstimate
    task_type: str
    block: NetHarmPolicy
    levels: LookLevels
    sources: Mapping[str, int]
    truth_ties: int = 0

    @property
    def unit(self) -> str:
        return _unit(self.task_type)

    @property
    def unjudged(self) -> list[StratumEstimate]:
        """The changed strata without a judged pair."""
        return [r for r in self.estimate.strata if r.judged == 0]

    @property
    def missing(self) -> str:
        """The unjudged strata for a reason: ``D >= 0.35 (3 changed), …``."""
        return ", ".join(f"{self.stratum_name(r)} ({r.size} changed)" for r in self.unjudged)

    @property
    def needed(self) -> int:
        """The judged changed pairs needed: ``min_judged``, or every changed pair of a unit
        with fewer (a census of its changed pairs, not more pairs than it has)."""
        return min(self.block.min_judged, self.estimate.changed)

    @property
    def short(self) -> int:
        """How many judged changed pairs :attr:`needed` still lacks."""
        return max(0, self.needed - self.estimate.judged)

    @property
    def counts(self) -> str:
        e = self.estimate
        return (
            f"{e.judged} of {e.changed} changed pairs judged ({_sources_text(self.sources)}): "
            f"{e.better} better, {e.ties} tie, {e.worse} worse"
        )

    @property
    def tail(self) -> str:
        """The unchanged pairs counted as ties, closing every reason."""
        return f"; {_unchanged_text(self.estimate, self.truth_ties)}"

    def stratum_name(self, row: StratumEstimate) -> str:
        if row.name is not None:
            return row.name
        if 0 <= row.stratum <= len(self.block.strata_edges) + 2:
            return stratum_label(row.stratum, self.block.strata_edges)
        return f"stratum {row.stratum}"

    def check(
        self,
        outcome: CheckOutcome,
        reason: str,
        numbers: CheckNumbers,
        p: float | None,
        reach: tuple[int | None, str] = (None, ""),
    ) -> tuple[Check, float | None]:
        """The unit's ``net_harm`` check with this outcome, and the harm p-value ``p``."""
        from shadoweval.stats.checks.reasons import make_check

        statistic = f"{NET_HARM_STATISTIC}; {self.levels.describe()}"
        made = make_check(
            NET_HARM_METRIC,
            self.task_type,
            statistic,
            self.block.margin,
            outcome,
            reason,
            numbers,
            critical=self.block.critical,
            reach=reach,
        )
        return made, p

    def more(self) -> tuple[str, str]:
        """("judge K more changed pairs in …" or "", why judging alone cannot pass or "")."""
        from shadoweval.stats.checks.reasons import fmt_pp

        e, margin, unit = self.estimate, self.block.margin, self.unit
        k = e.judged_needed(margin, self.levels.alpha_k, min_judged=self.needed)
        if k != NOT_REACHABLE:
            return (f"judge {k} more changed pairs in {unit}" if k > 0 else ""), ""
        floor = max(self.short, len(self.unjudged))
        judge = f"judge {floor} more changed pairs in {unit}" if floor else ""
        if e.estimate >= margin and e.judged >= e.changed:
            return judge, (
                f"all {e.changed} changed pairs are judged and the net harm estimate "
                f"{fmt_pp(e.estimate)} is not below the margin {fmt_pp(margin)}: only more "
                "traffic with a lower estimate can pass the unit"
            )
        if e.estimate >= margin:
            return judge, (
                f"the net harm estimate {fmt_pp(e.estimate)} is not below the margin "
                f"{fmt_pp(margin)}: while it stays there no number of judged pairs passes the "
                "unit (more judgements narrow the interval; only a lower estimate can pass)"
            )
        if e.judged == 0:
            # No judged pair: no spread to extrapolate from; judging decides.
            return judge, ""
        return judge, self.pairs_needed()

    @property
    def need(self) -> int:
        """The pairs at which the unit's bound clears the margin with every changed pair
        judged, at the same shares and level: ``⌈n·(z·σ/√n / (margin − Δ̂))²⌉``."""
        e, margin = self.estimate, self.block.margin
        half = e.upper_bound_after(e.changed - e.judged, self.levels.alpha_k) - e.estimate
        return math.ceil(e.n * (half / (margin - e.estimate)) ** 2) if half > 0 else e.n

    def pairs_needed(self) -> str:
        """Why judging cannot pass the unit, and how many pairs it needs instead.

        With every changed pair judged the bound is ``Δ̂ + z·σ/√n`` (the phase-2 term is
        0), so at the same shares and level it clears the margin from
        ``n* = ⌈n·(z·σ/√n / (margin − Δ̂))²⌉`` pairs (docs/gate.md, "What the numbers mean
        for sample size").
        """
        from shadoweval.stats.checks.reasons import fmt_pp

        e, margin, alpha_k = self.estimate, self.block.margin, self.levels.alpha_k
        all_judged = e.judged >= e.changed
        upper = e.upper_bound_after(e.changed - e.judged, alpha_k)
        need = self.need
        head = (
            f"all {e.changed} changed pairs are judged and the upper bound {fmt_pp(upper)} is "
            f"not below the margin {fmt_pp(margin)}"
            if all_judged
            else f"even with all {e.changed} changed pairs judged the upper bound "
            f"({fmt_pp(upper)}) would not clear the margin {fmt_pp(margin)}"
        )
        return (
            f"{head}: net harm in {self.unit} needs about {need:,} pairs at this spread and "
            f"level (alpha_k {alpha_k:.3g}), {max(need - e.n, 1):,} more than its {e.n:,}"
        )


def net_harm_check(
    estimate: NetHarmEstimate,
    *,
    task_type: str,
    block: NetHarmPolicy,
    levels: LookLevels,
    sources: Mapping[str, int],
    alpha: float | None = None,
    power: float | None = None,
    truth_ties: int = 0,
) -> tuple[Check, float | None]:
    """The ``net_harm`` check of one unit and its one-sided harm p-value.

    Read at the look's spent level ``levels.alpha_k`` (:mod:`shadoweval.stats.net_harm`:
    union bound over looks; :func:`judgement_levels` for a re-evaluated look):

    * no pair: INCONCLUSIVE; no changed pair: PASS, estimate 0 ("no pair changed beyond
      the noise: N pairs, all ties");
    * no judged changed pair: INCONCLUSIVE, "judge K more changed pairs in …";
    * FAIL when the lower bound lies wholly above ``block.margin`` (whatever the counts);
    * fewer than ``block.min_judged`` judged changed pairs (or, in a unit with fewer
      changed pairs than that, not every changed pair judged), or a changed stratum without a
      judged pair: INCONCLUSIVE, the reason led by "judge K more changed pairs in …" (K
      from :meth:`NetHarmEstimate.judged_needed` at ``alpha_k``) naming the strata;
    * PASS when the upper bound is below the margin; else INCONCLUSIVE
      ("non-inferiority not shown yet").

    Every reason gives better / tie / worse among the judged changed pairs, the sources'
    counts, P(worse) and P(better), the net harm with its interval and margin, and the
    unchanged pairs counted as ties. The check's ``p_value`` is the non-inferiority
    p-value (H0: Δ ≥ margin, :meth:`NetHarmEstimate.p_noninferior`); its interval is
    clipped to [−1, 1].

    Args:
        estimate: the unit's :func:`estimate_net_harm` (stratum names from ``names``,
            else :func:`stratum_label` of ``block.strata_edges`` where the code is one).
        task_type: the unit (a task type or ``POOLED``).
        block: the unit's ``net_harm`` policy (margin, critical, min_judged, edges).
        levels: the look's levels.
        sources: judged changed pairs per source (``judge``, ``human``, ``reference``;
            others such as ``failed`` are shown when non-zero).
        alpha, power: accepted for the gate's common call; the minimum is
            ``block.min_judged``, not a power calculation, so they are not read.
        truth_ties: unchanged pairs whose ground truth (reference, analyst) is a tie:
            read, and named apart from judge judgements of unchanged pairs.

    Returns:
        The :class:`~shadoweval.records.Check` and the one-sided p-value of H0: Δ ≤ 0
        (:meth:`NetHarmEstimate.p_harm`) for the gate's rollback Holm family at
        ``levels.alpha_harm_k``; ``None`` when there is nothing to test (no pair, no
        changed pair, or no judged changed pair).
    """
    del alpha, power
    from shadoweval.stats.checks.reasons import CheckNumbers

    e = estimate
    reading = _Reading(e, task_type, block, levels, sources, truth_ties)
    if e.n == 0:
        return reading.check(
            CheckOutcome.INCONCLUSIVE, "no pairs; cannot judge", CheckNumbers(), None
        )
    if e.changed == 0:
        ties = min(truth_ties, e.judged_unchanged)
        others = e.judged_unchanged - ties
        notes = [f"ground truth: a tie on {ties}"] if ties else []
        if others:
            notes.append(f"judgements of {others} unchanged pairs not read")
        note = f" ({'; '.join(notes)})" if notes else ""
        return reading.check(
            CheckOutcome.PASS,
            f"no pair changed beyond the noise: {e.n} pairs, all ties{note}",
            CheckNumbers(0.0, 0.0, 0.0, e.n, None),
            None,
        )
    bounds = e.bounds(levels.alpha_k)
    shown = e.interval(levels.alpha_k)
    if e.judged == 0:
        return _none_judged(reading)
    return _judged(reading, bounds, shown)


def _none_judged(r: _Reading) -> tuple[Check, float | None]:
    """INCONCLUSIVE: changed pairs, none of them judged."""
    from shadoweval.stats.checks.reasons import CheckNumbers

    e = r.estimate
    judge, unreachable = r.more()
    return r.check(
        CheckOutcome.INCONCLUSIVE,
        _joined(
            f"{judge or f'judge changed pairs in {r.unit}'}: none of the {e.changed} "
            f"changed pairs is judged ({r.missing})",
            unreachable,
            f"sources {_sources_text(r.sources)}{r.tail}",
        ),
        CheckNumbers(None, None, None, e.n, None),
        None,
    )


def _judged(
    r: _Reading, bounds: tuple[float, float], shown: tuple[float, float]
) -> tuple[Check, float | None]:
    """The check of a unit with judged changed pairs, from its unclipped ``bounds`` and the
    ``shown`` (clipped) interval at ``alpha_k``: FAIL, INCONCLUSIVE or PASS."""
    from shadoweval.stats.checks.reasons import CheckNumbers, fmt_g, fmt_p, fmt_pp, margin_words

    e, block, alpha_k = r.estimate, r.block, r.levels.alpha_k
    margin = block.margin
    low, high = bounds
    shown_low, shown_high = shown
    p_harm = e.p_harm()
    label = f"interval at alpha_k {fmt_g(alpha_k)} per side (look {r.levels.look})"
    net = (
        f"net harm {fmt_pp(e.estimate)}, {label} {fmt_pp(shown_low)} to {fmt_pp(shown_high)}, "
        f"margin {fmt_pp(margin)}"
    )
    shares = (
        f"{_share('P(worse)', e.worse_share)}, {_share('P(better)', e.better_share)} over all "
        f"{e.n} pairs; one-sided p of net harm > 0: {fmt_p(p_harm)}"
    )
    unjudged = r.unjudged
    if unjudged:
        net += f" (widened for {len(unjudged)} unjudged strata)"
    numbers = CheckNumbers(e.estimate, shown_low, shown_high, e.n, e.p_noninferior(margin))
    body = f"{net}; {r.counts}; {shares}{r.tail}"
    if low > margin:
        return r.check(
            CheckOutcome.FAIL,
            f"net harm worse than the margin: {net}: the interval lies wholly above the "
            f"margin; {r.counts}; {shares}{r.tail}",
            numbers,
            p_harm,
        )
    if r.short or unjudged:
        return r.check(CheckOutcome.INCONCLUSIVE, _judge_more(r, body), numbers, p_harm)
    if high < margin:
        return r.check(
            CheckOutcome.PASS,
            f"non-inferior: {body} (on >= min_judged {block.min_judged})"
            if r.needed == block.min_judged
            else f"non-inferior: {body} (all {e.changed} changed pairs judged: fewer than "
            f"min_judged {block.min_judged} changed)",
            numbers,
            p_harm,
        )
    judge, unreachable = r.more()
    reach: tuple[int | None, str] = (None, "")
    if not judge and unreachable and e.estimate < margin:
        # Every changed pair that could be judged is: only more pairs can pass the unit.
        reach = (
            max(r.need, e.n + 1),
            f"{margin_words(margin)} margin with every changed pair judged, at net harm "
            f"{fmt_pp(e.estimate)} and this spread (interval at alpha_k {fmt_g(alpha_k)})",
        )
    return r.check(
        CheckOutcome.INCONCLUSIVE,
        f"non-inferiority not shown yet: {_joined(judge, unreachable, body)}",
        numbers,
        p_harm,
        reach,
    )


def _judge_more(r: _Reading, body: str) -> str:
    """The reason of a unit short of ``min_judged`` or with an unjudged changed stratum."""
    e, block = r.estimate, r.block
    judge, unreachable = r.more()
    why = []
    if r.short:
        why.append(
            f"{e.judged} < min_judged {block.min_judged}"
            if r.needed == block.min_judged
            else f"{e.judged} of its {e.changed} changed pairs judged; all are needed "
            f"below min_judged {block.min_judged}"
        )
    if r.unjudged:
        why.append(f"no judged pair in {r.missing}")
    return _joined(
        f"{judge or f'judge more changed pairs in {r.unit}'} ({'; '.join(why)})",
        unreachable,
        body,
    )

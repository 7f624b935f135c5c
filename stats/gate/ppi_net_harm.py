"""The ``net_harm`` check of a unit read by prediction-powered inference.

When a unit's changed pairs carry enough labels of a *random* sample (the export's
``--ppi-sample``; policy ``net_harm.ppi_min_labels``), the gate estimates its net harm with
:func:`shadoweval.stats.net_harm.ppi.ppi_net_harm` instead of the stratified judged-pairs
estimator. The predictor of a pair (:func:`pair_predictions`) is, in order: an analyst's
label chosen by hand or a reference judgement (ground truth known on that pair), the LLM
judge's verdict, else the harm detectors and tool checks (:func:`detector_prediction`); a
random-sample label is never its own pair's prediction (that would make the correction 0).

The check reads the interval at the look's spent level ``α_k`` like every net-harm check:
PASS when the upper bound is below the margin, FAIL when the lower bound lies above it,
else INCONCLUSIVE with how many more random labels would decide at this margin
(:meth:`PPIEstimate.labels_needed`, split per task type). Its reason names the method, the
predictor, the labels used, ``λ``, and the widths of the labels alone and the predictor
alone (the latter is not a valid interval: a biased predictor moves it).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from shadoweval.records import POOLED, Check, CheckOutcome
from shadoweval.stats.checks.pair_arrays import FloatArray, PairArrays
from shadoweval.stats.looks import LookLevels
from shadoweval.stats.net_harm import NOT_REACHABLE
from shadoweval.stats.net_harm.check import NET_HARM_METRIC
from shadoweval.stats.net_harm.ppi import PPI_METHOD, PPIEstimate, ppi_net_harm
from shadoweval.stats.policy import NetHarmPolicy

__all__ = [
    "PPI_STATISTIC",
    "detector_prediction",
    "pair_predictions",
    "ppi_net_harm_check",
    "ppi_unit_check",
]

PPI_STATISTIC = "net harm P(worse) - P(better), prediction-powered (PPI++, cross-fitted, t)"
"""The check's ``statistic`` when PPI decided it."""

BoolArray = npt.NDArray[np.bool_]


def _one(x: FloatArray) -> BoolArray:
    hit: BoolArray = x == 1.0
    return hit


def _zero(x: FloatArray) -> BoolArray:
    hit: BoolArray = x == 0.0
    return hit


def detector_prediction(arrays: PairArrays) -> FloatArray:
    """The detectors' direction per pair: +1 only the candidate shows a defect, −1 only the
    baseline does, 0 otherwise (both, neither, or no signal); shape ``(n,)``.

    A side's defects: it failed for a model reason (``*_fail``), its format did not parse
    where one was expected, a harm detector fired on it (any
    :class:`~shadoweval.records.HarmKind`), it answered in text where tools were offered
    (``*_tool_text``). Tool changes without a side (function, arguments, order) carry no
    direction.
    """
    expected = arrays.format_expected
    cand = (
        (_one(arrays.cand_fail) & _zero(arrays.base_fail))
        | (expected & _zero(arrays.cand_format_ok) & _one(arrays.base_format_ok))
        | (arrays.cand_harm.any(axis=1) & ~arrays.base_harm.any(axis=1))
        | (_one(arrays.cand_tool_text) & _zero(arrays.base_tool_text))
    )
    base = (
        (_one(arrays.base_fail) & _zero(arrays.cand_fail))
        | (expected & _zero(arrays.base_format_ok) & _one(arrays.cand_format_ok))
        | (arrays.base_harm.any(axis=1) & ~arrays.cand_harm.any(axis=1))
        | (_one(arrays.base_tool_text) & _zero(arrays.cand_tool_text))
    )
    out: FloatArray = cand.astype(np.float64) - base.astype(np.float64)
    return out


def pair_predictions(arrays: PairArrays, changed: BoolArray) -> tuple[FloatArray, str]:
    """Per pair the PPI predictor's quality (no NaN) and a sentence naming the predictor
    on the ``changed`` pairs (the ones it predicts; unchanged pairs are ties).

    ``ppi_prediction`` where the pairs table carries one (a hand-chosen label, a reference,
    the judge: :data:`shadoweval.stats.frame.PPIColumns`), else :func:`detector_prediction`.
    """
    given = ~np.isnan(arrays.ppi_prediction)
    detectors = detector_prediction(arrays)
    prediction: FloatArray = np.where(given, arrays.ppi_prediction, detectors)
    n_changed = int(np.count_nonzero(changed))
    n_given = int(np.count_nonzero(given & changed))
    if n_given == n_changed:
        what = f"judge or ground truth on all {n_changed} changed pairs"
    elif n_given == 0:
        what = "harm detectors and tool checks (no judge)"
    else:
        what = (
            f"judge or ground truth on {n_given} changed pairs, detectors on {n_changed - n_given}"
        )
    return prediction, what


def _needed_text(e: PPIEstimate, margin: float, alpha_k: float, unit: str) -> str:
    from shadoweval.stats.checks.reasons import fmt_pp

    more = e.labels_needed(margin, alpha_k)
    if more == NOT_REACHABLE:
        if e.estimate >= margin:
            return (
                f"the net harm estimate {fmt_pp(e.estimate)} is not below the margin "
                f"{fmt_pp(margin)}: while it stays there no number of random labels passes the "
                "unit (more labels narrow the interval and move the estimate: label more to "
                "see where it settles)"
            )
        return (
            f"even with every changed pair of {unit} labelled the bound would not clear the "
            f"margin {fmt_pp(margin)}: it needs more pairs, not more labels"
        )
    split = e.per_stratum_needed(margin, alpha_k)
    where = ", ".join(f"{k} more of {name!r}" for name, k in split.items()) or f"{more} more"
    return (
        f"label {where} (random sample: export --ppi-sample) to decide at this margin "
        f"({more} more random labels in all)"
    )


def ppi_net_harm_check(
    estimate: PPIEstimate,
    *,
    task_type: str,
    block: NetHarmPolicy,
    levels: LookLevels,
    predictor: str,
    hand_labels: int = 0,
) -> tuple[Check, float]:
    """The unit's ``net_harm`` check from its prediction-powered estimate.

    Args:
        estimate: :func:`shadoweval.stats.net_harm.ppi.ppi_net_harm` of the unit.
        task_type: the unit.
        block: its ``net_harm`` policy (margin, critical).
        levels: the look's levels (read at ``alpha_k``; the harm p-value joins the gate's
            rollback Holm family as the stratified estimator's does).
        predictor: the sentence of :func:`pair_predictions`.
        hand_labels: labels chosen by hand on the unit's changed pairs (counted as labels:
            they are those pairs' predictions, not the PPI sample).

    Returns:
        The check (PASS / FAIL / INCONCLUSIVE; ``p_value`` the non-inferiority p) and the
        one-sided p-value of net harm > 0.
    """
    from shadoweval.stats.checks.reasons import CheckNumbers, fmt_g, fmt_p, fmt_pp, make_check

    e, margin, alpha_k = estimate, block.margin, levels.alpha_k
    unit = "the pooled pairs" if task_type == POOLED else repr(task_type)
    low, high = e.bounds(alpha_k)
    shown_low, shown_high = e.interval(alpha_k)
    t = e.quantile(alpha_k)
    hand = (
        f"; {hand_labels} labels chosen by hand count as labels (their pairs' predictions), "
        "not as the PPI sample"
        if hand_labels
        else ""
    )
    body = (
        f"net harm by prediction-powered inference ({PPI_METHOD}; λ {e.lam:.2f}): "
        f"{fmt_pp(e.estimate)}, interval at alpha_k {fmt_g(alpha_k)} per side (look "
        f"{levels.look}) {fmt_pp(shown_low)} to {fmt_pp(shown_high)}, margin {fmt_pp(margin)}; "
        f"predictor: {predictor}, corrected by {e.labelled} random labels of {e.changed} "
        f"changed pairs{hand}; P(worse) "
        f"{100 * e.p_worse:.1f}%, P(better) {100 * e.p_better:.1f}% over all {e.n} pairs; "
        f"labels alone ±{100 * t * e.labels_se:.1f} pp, predictor alone "
        f"{fmt_pp(e.predictor_estimate)} (not a valid interval); one-sided p of net harm > 0: "
        f"{fmt_p(e.p_harm())}"
    )
    numbers = CheckNumbers(e.estimate, shown_low, shown_high, e.n, e.p_noninferior(margin))
    statistic = f"{PPI_STATISTIC}; {levels.describe()}"
    if low > margin:
        outcome, reason = (
            CheckOutcome.FAIL,
            f"net harm worse than the margin: the interval lies wholly above it; {body}",
        )
    elif high < margin:
        outcome, reason = CheckOutcome.PASS, f"non-inferior: {body}"
    else:
        outcome = CheckOutcome.INCONCLUSIVE
        reason = f"non-inferiority not shown yet: {_needed_text(e, margin, alpha_k, unit)}; {body}"
    check = make_check(
        NET_HARM_METRIC,
        task_type,
        statistic,
        margin,
        outcome,
        reason,
        numbers,
        critical=block.critical,
    )
    return check, e.p_harm()


def ppi_unit_check(
    task_type: str,
    arrays: PairArrays,
    keep: BoolArray,
    changed: BoolArray,
    task_types: npt.NDArray[np.object_],
    block: NetHarmPolicy,
    levels: LookLevels,
) -> tuple[Check, float] | str:
    """The unit's PPI check, or why the gate keeps the stratified estimator ("" when the
    unit has no random-sample label at all).

    Args:
        task_type: the unit (a task type or the pooled unit's name).
        arrays: the unit's pairs; ``keep`` its rows without an infrastructure error (the
            net-harm rows), ``changed`` its changed rows, ``task_types`` each row's task
            type (the PPI strata), all shape ``(n,)``.
        block: the unit's ``net_harm`` policy: ``ppi_min_labels`` random labels on changed
            pairs are needed for PPI, at least two per changed task type.
        levels: the look's levels.
    """
    rows = np.flatnonzero(keep)
    sub = arrays.take(rows)
    ch = changed[rows]
    labelled = ch & ~np.isnan(sub.ppi_label)
    n_labels = int(np.count_nonzero(labelled))
    if n_labels == 0:
        return ""
    n_changed = int(np.count_nonzero(ch))
    if n_changed < block.ppi_min_labels:
        return (
            f"PPI not used: {n_labels} random labels of {n_changed} changed pairs; a unit "
            f"with fewer changed pairs than net_harm.ppi_min_labels {block.ppi_min_labels} "
            "is read on its labels and judgements (label them all: a census needs no "
            "predictor)"
        )
    if n_labels < block.ppi_min_labels:
        return (
            f"PPI not used: {n_labels} random labels on changed pairs, fewer than "
            f"net_harm.ppi_min_labels {block.ppi_min_labels} (label "
            f"{block.ppi_min_labels - n_labels} more of a random sample — export "
            "--ppi-sample — for a prediction-powered estimate)"
        )
    prediction, what = pair_predictions(sub, ch)
    estimate = ppi_net_harm(sub.ppi_label, prediction, ch, task_types[rows])
    if isinstance(estimate, str):
        return f"PPI not used: {estimate} (at least 2 per changed task type)"
    hand = ch & ~labelled & np.isin(sub.quality_source.astype(str), ("human",))
    return ppi_net_harm_check(
        estimate,
        task_type=task_type,
        block=block,
        levels=levels,
        predictor=what,
        hand_labels=int(np.count_nonzero(hand)),
    )

"""The harm-detector checks: ``harm_<kind>``, one paired binary check per detector.

Each :class:`~shadoweval.records.HarmKind` in the unit's ``harm.detectors`` is a yes/no
fact about each side of a pair (``baseline_harm_<kind>`` / ``candidate_harm_<kind>``,
:mod:`shadoweval.stats.frame`; the detectors' definitions and sources are in
:mod:`shadoweval.compare.harms`),
compared like ``error_rate`` (:mod:`shadoweval.stats.checks.binary`): δ = P(candidate shows it) −
P(baseline shows it), non-inferiority against ``harm.margin`` by the look's sequential
interval, harm by the one-sided McNemar mid-p — harm is the candidate showing it where the
baseline did not (b) more often than the reverse (c). A baseline that degenerates where
the candidate answers (c > b) is an improvement and can never fail the check.

Pairs used: both sides answered. A pair with an infrastructure error on either side is
left out (counted; ``infra_error_rate`` gates it), and so is a pair where either side
failed (an error or an empty answer: ``error_rate`` gates it) — a side that did not answer
has no answer to flag, so counting it as "not harmful" would dilute the rate; those pairs
are counted in the reason ("N pairs where a side failed (see error_rate) were left out").
On a pair whose ground truth (reference correctness or an analyst's label) says the
candidate is not worse, a flag on the candidate alone does not count: the pair is
concordant, and the reason says how many flags were overruled
(:mod:`shadoweval.stats.checks.truth`).

With ``harm.critical`` (default true) the harm p-value is in the gate's rollback Holm
family: significant harm rolls back. Without it the check is report-and-block: its FAIL
holds the run (:mod:`shadoweval.stats.gate`), it never rolls back by itself.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from shadoweval.records import HarmKind
from shadoweval.stats.checks.binary import BinaryAnalysis, analyse_binary
from shadoweval.stats.checks.pair_arrays import PairArrays
from shadoweval.stats.checks.truth import Overruled, overrule_candidate_flags, truth_not_worse
from shadoweval.stats.looks import LookLevels
from shadoweval.stats.policy import BinaryMetricPolicy, HarmPolicy

__all__ = ["HARM_LABELS", "HARM_METRIC_PREFIX", "harm_analyses", "harm_metric"]

HARM_METRIC_PREFIX = "harm_"
"""Prefix of the harm checks' metric names: ``harm_degeneration``, ``harm_refusal``, …"""

HARM_LABELS: dict[HarmKind, tuple[str, str]] = {
    HarmKind.DEGENERATION: ("degeneration", "degenerate"),
    HarmKind.RUNAWAY_LENGTH: ("runaway length", "run away in length"),
    HarmKind.REFUSAL: ("refusal", "refuse"),
    HarmKind.MISSING_FINISH_REASON: ("missing finish_reason", "lack a finish_reason"),
    HarmKind.TEMPLATE_MARKERS: ("template marker", "show template markers"),
    HarmKind.LANGUAGE_SWITCH: ("language switch", "switch language"),
    HarmKind.PLACEHOLDER_JSON: ("placeholder JSON", "give placeholder JSON"),
}
"""Per detector: what its rate is called in a reason ("candidate degeneration rate") and
the verb of a discordant pair ("12 pairs degenerate only on the candidate")."""

_KINDS = list(HarmKind)


def harm_metric(kind: HarmKind) -> str:
    """The check's metric name: ``harm_<kind>``."""
    return f"{HARM_METRIC_PREFIX}{kind.value}"


def harm_analyses(
    arrays: PairArrays,
    *,
    task_type: str,
    block: HarmPolicy,
    min_pairs: int,
    levels: LookLevels,
    alpha: float,
    power: float,
) -> list[BinaryAnalysis]:
    """One :class:`~shadoweval.stats.checks.binary.BinaryAnalysis` per detector in
    ``block.detectors``.

    Args:
        arrays: the unit's pairs.
        task_type: task type or ``POOLED``.
        block: the unit's ``harm`` policy (detectors, margin, critical).
        min_pairs: the unit's floor on the pairs needed to pass.
        levels: the look's levels.
        alpha: the policy's one-sided NI level (power calculation).
        power: the policy's design power (power calculation).

    Returns:
        The analyses in ``block.detectors`` order; decide each with
        :func:`shadoweval.stats.checks.binary.binary_check` after the gate's Holm adjustment.
    """
    infra = arrays.infra
    failed = arrays.model_failed & ~infra
    keep = ~infra & ~failed
    n_infra = int(np.count_nonzero(infra))
    n_failed = int(np.count_nonzero(failed))
    policy = BinaryMetricPolicy(margin=block.margin, critical=block.critical)
    # One gather of the used rows, column-major so that each detector is contiguous.
    base = np.asfortranarray(arrays.base_harm[keep], dtype=np.float64)
    cand = np.asfortranarray(arrays.cand_harm[keep], dtype=np.float64)
    # Ground truth overrules a candidate-only flag on a pair it calls not worse
    # (:mod:`shadoweval.stats.checks.truth`).
    cleared, sources = truth_not_worse(arrays)[keep], arrays.quality_source[keep]
    overruled = [Overruled()] * len(_KINDS)
    candidate_only = cleared[:, None] & (cand == 1.0) & (base == 0.0)
    for col in np.flatnonzero(np.any(candidate_only, axis=0)).tolist():
        cand[:, col], overruled[col] = overrule_candidate_flags(
            base[:, col], cand[:, col], cleared, sources
        )
    # Detectors with the same 2×2 table (most often: none fired on either side) have the
    # same statistics: analysed once, relabelled (a verdict over 1,000,000 pairs runs
    # seven detectors in each of ~20 units).
    only_cand = np.count_nonzero((cand == 1.0) & (base == 0.0), axis=0)
    only_base = np.count_nonzero((base == 1.0) & (cand == 0.0), axis=0)
    base_total = np.count_nonzero(base == 1.0, axis=0)
    cand_total = np.count_nonzero(cand == 1.0, axis=0)
    done: dict[tuple[int, int, int, int, Overruled], BinaryAnalysis] = {}
    analyses: list[BinaryAnalysis] = []
    for kind in block.detectors:
        j = _KINDS.index(kind)
        label, event = HARM_LABELS[kind]
        table = (
            int(only_cand[j]),
            int(only_base[j]),
            int(base_total[j]),
            int(cand_total[j]),
            overruled[j],
        )
        known = done.get(table)
        if known is not None:
            analyses.append(
                dataclasses.replace(known, metric=harm_metric(kind), label=label, event=event)
            )
            continue
        analysis = analyse_binary(
            base[:, j],
            cand[:, j],
            metric=harm_metric(kind),
            task_type=task_type,
            label=label,
            block=policy,
            min_pairs=min_pairs,
            levels=levels,
            alpha=alpha,
            power=power,
            excluded=n_failed,
            infra_excluded=n_infra,
            event=event,
            excluded_what="pairs where a side failed (see error_rate)",
        )
        done[table] = dataclasses.replace(analysis, overruled=overruled[j].describe())
        analyses.append(done[table])
    return analyses

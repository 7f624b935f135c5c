"""The gate: per-task-type and pooled checks combined into PROMOTE / HOLD / ROLLBACK.

The question is "is the candidate at least as good?" (issue 11), not "did the answers
change?": divergence beyond the noise floor marks a pair *changed* (:mod:`shadoweval.stats.change`),
which selects it for a quality judgement and never rolls back by itself unless the policy
says ``change.mode: no_change``; the direction comes from the harm detectors
(:mod:`shadoweval.stats.checks.harms`), tool behaviour (:mod:`shadoweval.stats.checks.tools`) and
the net harm
of the judged pairs (:mod:`shadoweval.stats.net_harm`).

Decision rule (gate-statistics.md §2.3; Spotify's risk-aware rule without a success
metric, Kayenta's ``critical`` semantics, Diffy's noise floor; docs/gate.md):

1. No pairs ⇒ HOLD ("no data").
2. Validity (pair completeness, gate-statistics.md §1.7): replay coverage (paired /
   captured) below ``min_coverage`` for the run or for any captured task type, a task
   mix that differs from the capture log's (Pearson χ² at the look's spent
   ``validity.mix_alpha``, naming the worst task type), or duplicated exchanges ⇒ HOLD
   (invalid); only a significant critical harm may still roll back.
3. Infrastructure errors are not quality regressions (reference failure case 11): pairs
   with an infrastructure error on either side are left out of every quality check and
   counted; ``infra_error_rate`` gates them. Its FAIL anywhere ⇒ **HOLD, never
   ROLLBACK**, and — as for invalid runs — only a significant critical harm on the pairs
   both sides did answer may still roll back.
4. ROLLBACK if any critical check shows significant harm (one-sided McNemar mid-p of a
   paired binary check or the net-harm p-value, Holm-adjusted across task types ×
   critical metrics, at the look's spent ``alpha_harm``) or any roll-back check's
   sequential interval lies wholly beyond its margin on the harmful side — pooled or in
   any task type, whatever its share. Non-critical harm detectors, the non-critical tool
   check and non-critical net harm are report-and-block: their FAIL holds.
5. PROMOTE only if every blocking check passes in the pooled analysis and in every task
   type with at least ``min_traffic_share`` of the pairs, each on at least its minimum
   pairs — the guardrails, the harm detectors, ``tool_text_answer`` and, where pairs
   changed, ``net_harm`` (``similarity`` blocks only in ``no_change`` mode, or when its
   similarities cannot be read) — and the pairs span ``observation.min_window_hours`` of
   capture time.
6. Otherwise HOLD, naming what would decide it ("judge 140 more changed pairs in
   `koala`", the observation window, too few pairs). At the sample cap (the final look)
   this is a final HOLD, "inconclusive at the sample cap", never an implicit promote.

The first reason of every verdict says what decided it (a degenerate noise floor leads a
HOLD that no validity or infrastructure problem decided).

The run's design, not the data, picks the similarity method: a run that sent baseline
repeats (``Coverage.baseline_repeat_replayed``) is judged against the noise floor in
every unit, and a unit without a usable repeat (all failed, or none sampled) is
INCONCLUSIVE with the counts of repeats sent and failed — never judged by the looser
absolute limit, which only a run without any baseline repeat uses.

Validity under repeated polling (gate-statistics.md §2.4) comes from the look's levels
(:func:`shadoweval.stats.looks.look_levels`): confidence sequences for the mean-type metrics
(or α spending with a sample cap), union-bound α spending for quantile ratios, exact
tests and net harm (split over the look's judgement evaluations:
:func:`shadoweval.stats.net_harm.judgement_levels`).
:func:`shadoweval.stats.checkpoints.evaluate_poll` chooses
the look and the prefix of pairs; this module judges the pairs it is given as that look.
"""

from __future__ import annotations

from shadoweval.stats.gate.evaluate import INCONCLUSIVE_AT_CAP, evaluate_gate
from shadoweval.stats.gate.validity import (
    environment_reasons,
    infra_sha256,
    judgements_sha256,
    latency_cache_hits,
    unevaluated_reasons,
)

__all__ = [
    "INCONCLUSIVE_AT_CAP",
    "environment_reasons",
    "evaluate_gate",
    "infra_sha256",
    "judgements_sha256",
    "latency_cache_hits",
    "unevaluated_reasons",
]

"""The gate's validity rules (coverage, routes, policy names, task mix, duplicates) and
the verdict's context lines."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from shadoweval.errors import ShadowEvalError
from shadoweval.records import (
    UNKNOWN_MODEL,
    Coverage,
    LatencyCacheHits,
    RouteCoverage,
)
from shadoweval.stats.frame import OPTIONAL_PAIRS_COLUMNS
from shadoweval.stats.looks import LookLevels
from shadoweval.stats.policy import (
    GatePolicy,
    policy_traffic_problems,
)
from shadoweval.stats.validity import coverage_by_task_type, task_mix_chi2


def _coverage_problem(coverage: Coverage, policy: GatePolicy) -> str | None:
    share = coverage.share
    if share != share or share < policy.min_coverage:  # NaN or too low
        return (
            f"invalid run: replay coverage {share:.1%} ({coverage.paired} paired of "
            f"{coverage.captured} captured) is below min_coverage {100 * policy.min_coverage:g}%; "
            "promotion is blocked"
        )
    return None


def _models(counts: Mapping[str, int]) -> str:
    """``'base-v1' (55 exchanges), 'base-v1.1' (55)``, most exchanges first."""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(
        f"{name!r} ({n} exchange{'s' if n != 1 else ''})" if i == 0 else f"{name!r} ({n})"
        for i, (name, n) in enumerate(ranked)
    )


def baseline_model_problems(coverage: Coverage, policy: GatePolicy) -> tuple[list[str], list[str]]:
    """The live (baseline) model changed while capturing: HOLD reasons and notes.

    Several baseline models among the run's exchanges and no ``baseline_model`` in the
    policy: a blocking reason naming each with its count (the pairs would blend two
    baselines, and a verdict against a blend is a verdict against neither). A policy
    ``baseline_model`` that names none of them blocks too; one that names one gates only
    its exchanges (the caller scoped the pairs and coverage), and a note counts the
    exchanges set aside.

    Exchanges that recorded no model name (:data:`~shadoweval.records.UNKNOWN_MODEL`: a
    failed response without a ``model`` field, and no name configured) name no model: they
    are not a second baseline (the real llama.cpp run: 41 exchanges of 'live' and 3 failed
    ones read as "the baseline model changed").
    """
    seen = coverage.per_baseline_model
    named = {name: n for name, n in seen.items() if name != UNKNOWN_MODEL}
    chosen = policy.baseline_model
    if chosen is None:
        if len(named) <= 1:
            return [], []
        unnamed = seen.get(UNKNOWN_MODEL, 0)
        also = f"; {unnamed} recorded no model name" if unnamed else ""
        return [
            f"baseline model changed within the capture: {_models(named)}{also}; the pairs "
            "would blend two baselines, so promotion is blocked until the policy names the "
            "one that counts (baseline_model: in the policy; a new run)"
        ], []
    if seen and chosen not in seen:
        return [
            f"policy: baseline_model {chosen!r} matches none of the capture's baseline "
            f"models ({_models(seen)}); promotion is blocked (correct the name: a "
            "corrected policy is a new run)"
        ], []
    others = {name: n for name, n in seen.items() if name != chosen}
    if not others:
        return [], []
    return [], [
        f"baseline model: only exchanges of {chosen!r} (policy baseline_model) are gated; "
        f"set aside: {_models(others)}"
    ]


def _skip_reasons(counts: RouteCoverage) -> str:
    """``reason: <detail>``, or ``reasons: <detail> (n), …`` (at most three, most frequent
    first); ``no skip reason recorded`` when none was."""
    reasons = list(counts.skip_reasons.items())
    if not reasons:
        return "no skip reason recorded"
    if len(reasons) == 1:
        return f"reason: {reasons[0][0]}"
    shown = ", ".join(f"{detail} ({n})" for detail, n in reasons[:3])
    more = f", and {len(reasons) - 3} more" if len(reasons) > 3 else ""
    return f"reasons: {shown}{more}"


def _route_shortfall(route: str, counts: RouteCoverage, policy: GatePolicy) -> str:
    """What was not evaluated on one route: never replayed, replayed but not scored, or
    replayed below ``min_coverage``."""
    n = counts.captured
    noun = "exchange" if n == 1 else "exchanges"
    if counts.paired == 0 and counts.replayed == 0:
        return f"{n} {noun} on {route} were captured but not replayed ({_skip_reasons(counts)})"
    if counts.paired == 0:
        return (
            f"{n} {noun} on {route} were captured and {counts.replayed} replayed, but none "
            "was scored (run shadow-eval compare)"
        )
    share = counts.paired / n
    skipped = f"; {counts.skipped} skipped, {_skip_reasons(counts)}" if counts.skipped else ""
    return (
        f"route {route} has replay coverage {share:.1%} ({counts.paired} paired of {n} "
        f"captured{skipped}), below min_coverage {100 * policy.min_coverage:g}%"
    )


def _route_problems(coverage: Coverage, policy: GatePolicy) -> tuple[list[str], list[str]]:
    """Routes whose captured traffic was not evaluated (paired / captured below
    ``min_coverage``; a route with no pair at all is the plain case): HOLD reasons for
    required routes, notes for those the policy exempts (``routes.<route>.required``)."""
    blocking: list[str] = []
    notes: list[str] = []
    for route, counts in sorted(coverage.per_route.items()):
        if counts.captured == 0 or counts.paired / counts.captured >= policy.min_coverage:
            continue
        what = _route_shortfall(route, counts, policy)
        if policy.route_required(route):
            blocking.append(
                f"{what}; unevaluated traffic is not a pass: promotion is blocked until the "
                f"route is replayed, or exempted in the policy (routes: {{{route}: "
                "{required: false}})"
            )
        else:
            notes.append(
                f"{what}; exempt by the policy (routes.{route}.required false): reported, "
                "not blocking; those exchanges still count in the coverage"
            )
    return blocking, notes


def _policy_problems(
    policy: GatePolicy, coverage: Coverage, pairs: pd.DataFrame
) -> tuple[list[str], list[str]]:
    """Policy keys that match no traffic (:func:`shadoweval.stats.policy.policy_traffic_problems`):
    a task type is a HOLD reason (its thresholds apply to nothing, so a typo would change
    the verdict silently); a route listed as required a HOLD reason too (nothing on it
    was evaluated); a route listed with ``required: false`` a note (an unmatched
    exemption exempts nothing)."""
    seen = {t for t, n in coverage.per_task_type.items() if n > 0}
    if len(pairs):
        seen |= set(pairs["task_type"].astype(str).unique())
    routes = set(coverage.per_route) if coverage.per_route else None
    blocking: list[str] = []
    notes: list[str] = []
    for problem in policy_traffic_problems(policy, task_types=seen, routes=routes):
        if problem.field.startswith("task_types."):
            blocking.append(
                f"policy: {problem.describe()}: its thresholds apply to no pair, so the "
                "verdict would not be the one the policy asks for; promotion is blocked "
                "(correct the name: a corrected policy is a new run)"
            )
        elif policy.route_required(problem.name):
            # Listed as required: the operator expects traffic there, and none came (a
            # typo, or traffic that goes elsewhere) — nothing on it was evaluated.
            blocking.append(
                f"policy: {problem.describe()}: the policy requires this route to be "
                "evaluated and no exchange on it was captured; promotion is blocked "
                "(correct the route, or list it with required: false)"
            )
        else:
            notes.append(f"policy: {problem.describe()}: the entry has no effect")
    return blocking, notes


def _script_notes(pairs: pd.DataFrame) -> list[str]:
    """A note when some pairs have an answer in a script the embedding model is not
    declared to cover (``uncovered_scripts``): their similarity may not measure change
    (an English-only model such as the default all-MiniLM-L6-v2 maps most Chinese text
    close together), so the similarity checks say less about those pairs. A warning,
    not a HOLD: the direction checks (harms, judged and labelled pairs) still apply."""
    if "uncovered_scripts" not in pairs.columns or not len(pairs):
        return []
    marked = pairs["uncovered_scripts"].fillna("").astype(str)
    affected = int((marked != "").sum())
    if not affected:
        return []
    per_script: dict[str, int] = {}
    for value in marked[marked != ""]:
        for script in value.split(","):
            per_script[script] = per_script.get(script, 0) + 1
    shown = ", ".join(
        f"{script} {n}" for script, n in sorted(per_script.items(), key=lambda i: (-i[1], i[0]))
    )
    share = 100.0 * affected / len(pairs)
    return [
        f"similarity: {affected} of {len(pairs)} pairs ({share:.1f}%) have an answer in a "
        f"script the embedding model is not declared to cover ({shown}; "
        "compare.model_scripts): their similarity may not measure how much changed; score "
        "with a model that covers them (compare.model_path) or read the direction checks"
    ]


def _load_note(coverage: Coverage) -> str:
    """The words every latency reason gets when a replay pass started its measured
    requests below :data:`~shadoweval.records.RATE_SHORTFALL_SHARE` of the asked rate
    (the worst pass); empty otherwise."""
    short = coverage.load_shortfalls()
    if not short:
        return ""
    more = (
        f" (and {len(short) - 1} more replay pass(es) below the asked rate)"
        if len(short) > 1
        else ""
    )
    return (
        f"measured under a different load than asked: measured at {short[0].describe_load()}{more}"
    )


def _coverage_line(coverage: Coverage, paired: Mapping[str, int]) -> str:
    """``coverage: 200 of 215 captured exchanges paired (93.0%); by route: …; by task
    type: …`` — every verdict says what it evaluated, per route and per task type."""
    line = (
        f"coverage: {coverage.paired} of {coverage.captured} captured exchanges paired "
        f"({coverage.share:.1%})"
    )
    if coverage.per_route:
        parts = []
        for route, counts in sorted(coverage.per_route.items()):
            part = f"{route} {counts.paired} of {counts.captured}"
            if counts.skipped:
                part += f" ({counts.skipped} skipped)"
            parts.append(part)
        line += "; by route: " + ", ".join(parts)
    captured = {t: n for t, n in coverage.per_task_type.items() if n > 0}
    if captured:
        line += "; by task type: " + ", ".join(
            f"{t} {paired.get(t, 0)} of {n}" for t, n in sorted(captured.items())
        )
    if coverage.rejected:
        line += f"; {_rejected_lines(coverage)}"
    if failed := sum(f.count for f in coverage.environment_failures):
        line += (
            f"; {failed} of the paired failed for reasons of the environment (no answer to judge)"
        )
    return line


def _rejected_lines(coverage: Coverage) -> str:
    """The capture lines the run rejected, conflicting duplicates named as such:
    ``3 unreadable capture lines, 2 conflicting duplicate lines: same exchange id, other
    content (the first kept)``."""
    conflicting = coverage.conflicting_duplicates
    unreadable = coverage.rejected - conflicting
    parts = [f"{unreadable} unreadable capture lines"] if unreadable or not conflicting else []
    if conflicting:
        parts.append(
            f"{conflicting} conflicting duplicate lines: same exchange id, other content "
            "(the first kept)"
        )
    return ", ".join(parts)


def environment_reasons(coverage: Coverage) -> list[str]:
    """What a verdict without checks (before the first checkpoint) says first when candidate
    requests failed for reasons of the environment (:attr:`Coverage.environment_failures`:
    a wrong key, a wrong URL, a server that is down): the causes with their counts, so a
    setup to fix is not hidden behind "waiting for the first checkpoint". Empty when none.
    """
    found = coverage.environment_failures
    if not found:
        return []
    causes = "; ".join(f.describe() for f in found)
    return [
        f"infrastructure: {sum(f.count for f in found)} of {coverage.paired} candidate "
        f"requests so far failed for reasons of the environment, not the model: {causes}; "
        "there is no answer to judge on those pairs: fix the setup and run the same run "
        "again (same --run-id): those requests are replayed again"
    ]


def unevaluated_reasons(pairs: pd.DataFrame, policy: GatePolicy, coverage: Coverage) -> list[str]:
    """What a verdict without checks (no data, or before the first checkpoint) still says:
    routes not evaluated, policy names that match no traffic (blocking ones first, then
    notes), and the coverage by route and by task type."""
    route_blocking, route_notes = _route_problems(coverage, policy)
    policy_blocking, policy_notes = _policy_problems(policy, coverage, pairs)
    baseline_blocking, baseline_notes = baseline_model_problems(coverage, policy)
    policy_blocking += baseline_blocking
    policy_notes += baseline_notes
    paired: Mapping[str, int] = coverage.paired_per_task_type
    if len(pairs):
        paired = {str(t): int(c) for t, c in pairs["task_type"].astype(str).value_counts().items()}
    return [
        *route_blocking,
        *policy_blocking,
        *route_notes,
        *policy_notes,
        _coverage_line(coverage, paired),
    ]


def _task_type_problems(
    paired: Mapping[str, int], coverage: Coverage, policy: GatePolicy, levels: LookLevels
) -> list[str]:
    """Per-task-type coverage and the task-mix χ² test against the capture log."""
    captured = {t: n for t, n in coverage.per_task_type.items() if n > 0}
    if not captured:
        return []
    problems: list[str] = []
    try:
        low = coverage_by_task_type(paired, captured, policy.min_coverage)
        mix = task_mix_chi2(paired, captured, alpha=levels.alpha_mix_k)
    except ShadowEvalError as exc:
        return [
            f"invalid run: the pairs do not match the capture log ({exc}); promotion is blocked"
        ]
    below = f"min_coverage {100 * policy.min_coverage:g}%"
    if len(low) == 1:
        [(task_type, share)] = low
        problems.append(
            f"invalid run: task type {task_type!r} has replay coverage {share:.1%} "
            f"({paired.get(task_type, 0)} paired of {captured[task_type]} captured), below "
            f"{below}; promotion is blocked"
        )
    elif low:
        # One line naming every such task type: 28 empty task types must not bury the rest.
        each = ", ".join(
            f"{t!r} {share:.1%} ({paired.get(t, 0)} of {captured[t]})" for t, share in low
        )
        problems.append(
            f"invalid run: {len(low)} task types have replay coverage below {below} "
            f"(paired of captured: {each}); promotion is blocked"
        )
    if not mix.ok:
        least = min(captured, key=lambda t: (paired.get(t, 0) / captured[t], t))
        problems.append(
            f"invalid run: the replayed task mix differs from the capture log's (chi-square "
            f"{mix.statistic:.1f}, {mix.dof} dof, p {mix.p_value:.2g} < alpha_k "
            f"{levels.alpha_mix_k:.3g} at look {levels.look}; largest deviation: task type "
            f"{mix.worst_task_type!r}; least replayed: task type {least!r}, "
            f"{paired.get(least, 0) / captured[least]:.1%} of its captures); promotion is "
            "blocked"
        )
    return problems


def _duplicates_problem(pairs: pd.DataFrame) -> str | None:
    duplicated = int(pairs["exchange_id"].duplicated().sum())
    if duplicated:
        return f"invalid data: {duplicated} exchanges appear more than once in the pairs"
    return None


def latency_cache_hits(pairs: pd.DataFrame) -> LatencyCacheHits:
    """How many of ``pairs`` had an answer served from a cache (columns
    ``baseline_cache_hit`` / ``candidate_cache_hit``; a missing flag reads as false):
    pairs with either side cached, and the cached sides. Such pairs are left out of every
    latency check (:mod:`shadoweval.stats.checks.latency`)."""
    if len(pairs) == 0:
        return LatencyCacheHits()
    base = pairs["baseline_cache_hit"].fillna(False).astype(bool).to_numpy()
    cand = pairs["candidate_cache_hit"].fillna(False).astype(bool).to_numpy()
    return LatencyCacheHits(
        pairs=int(np.count_nonzero(base | cand)),
        baseline=int(np.count_nonzero(base)),
        candidate=int(np.count_nonzero(cand)),
    )


def _trailer(levels: LookLevels, n: int, coverage: Coverage, cache_hits: LatencyCacheHits) -> str:
    means = (
        f"mean-type metrics by {100 * (1 - 2 * levels.alpha):g}% confidence sequences "
        f"(N* {levels.n_star})"
        if levels.mean_method == "cs"
        else "mean-type metrics at alpha_k (spending over the capped schedule)"
    )
    repeats = (
        f"; baseline repeats: {coverage.baseline_repeat_replayed} sent, "
        f"{coverage.baseline_repeat_errored} failed"
        if coverage.baseline_repeat_replayed
        else ""
    )
    since = ""
    if levels.skipped:
        before = (
            f"the previous look taken, at {levels.previous_n} pairs"
            if levels.previous_look
            else "0 pairs (the run's first look)"
        )
        since = (
            f", alpha spent since {before}: the checkpoints not looked at left their levels "
            "to this look"
        )
    return (
        f"sequential: look {levels.look} on the first {n} pairs by capture time "
        f"(checkpoint {levels.n_k}{since}); quantile ratios and Tango at alpha_k "
        f"{levels.alpha_k:.3g}, harm family at alpha_RB_k {levels.alpha_harm_k:.3g}, {means}; "
        f"counted, not dropped: {coverage.errored} errored and {coverage.warmup} warm-up "
        f"replays, {coverage.skipped} skipped{_skipped_by_route(coverage)}, "
        f"{_rejected_lines(coverage)}"
        f"{repeats}{_cache_hit_note(cache_hits)}"
    )


def _skipped_by_route(coverage: Coverage) -> str:
    """`` (/v1/responses 15, /v1/chat/completions 1)``: where the skipped replays were."""
    routes = [(r, c.skipped) for r, c in sorted(coverage.per_route.items()) if c.skipped]
    if not coverage.skipped or not routes:
        return ""
    return " (" + ", ".join(f"{route} {n}" for route, n in routes) + ")"


def _cache_hit_note(cache_hits: LatencyCacheHits) -> str:
    """The trailer's words on pairs left out of latency because a cache served them."""
    if not cache_hits.pairs:
        return ""
    return (
        f"; {cache_hits.pairs} pairs left out of latency because an answer was served from a "
        f"cache ({cache_hits.baseline} baseline, {cache_hits.candidate} candidate; quality "
        "checks still use them)"
    )


def judgements_sha256(pairs: pd.DataFrame) -> str:
    """SHA-256 of the pairs' resolved judgements: ``exchange_id``, ``quality`` and
    ``quality_source`` of every judged row (``quality`` not NaN), in exchange-id order; a
    row with prediction-powered inputs (``ppi_prediction`` / ``ppi_label``, issue 31) adds
    them, so a new random-sample label or a new judge verdict on a labelled pair is new
    evidence too. Tables without those columns, or rows where both are NaN, hash as before.

    Two evaluations of one look read the same judgements exactly when their fingerprints
    agree (:func:`shadoweval.stats.checkpoints.evaluate_poll` re-evaluates a look otherwise). The
    pairs table must have ``exchange_id``, ``quality`` and ``quality_source``.
    """
    ppi = [c for c in OPTIONAL_PAIRS_COLUMNS if c in pairs.columns]
    has_ppi = pairs[ppi].notna().any(axis=1) if ppi else pd.Series(False, index=pairs.index)
    judged = pairs.loc[
        pairs["quality"].notna() | has_ppi, ["exchange_id", "quality", "quality_source", *ppi]
    ]
    judged = judged.sort_values("exchange_id", kind="mergesort")
    digest = hashlib.sha256()
    for row in judged.itertuples(index=False, name=None):
        exchange_id, quality, source, *extra = row
        line = f"{exchange_id}\t{float(quality):+.0f}\t{source}"
        if any(not math.isnan(float(x)) for x in extra):
            line += "\tppi " + ",".join(f"{float(x):+.0f}" for x in extra)
        digest.update(f"{line}\n".encode())
    return digest.hexdigest()


def infra_sha256(pairs: pd.DataFrame) -> str:
    """SHA-256 of the exchange ids of the pairs with an infrastructure or environment error
    on either side, in exchange-id order (issue 29).

    A re-run that replays the environment's failures again changes it, and
    :func:`shadoweval.stats.checkpoints.evaluate_poll` then evaluates the look again: the
    pairs left out before are now answered. The pairs table must have ``exchange_id``,
    ``baseline_infra_error`` and ``candidate_infra_error``.
    """
    infra = pairs["baseline_infra_error"].to_numpy(bool) | pairs["candidate_infra_error"].to_numpy(
        bool
    )
    digest = hashlib.sha256()
    for exchange_id in sorted(pairs.loc[infra, "exchange_id"].astype(str)):
        digest.update(f"{exchange_id}\n".encode())
    return digest.hexdigest()


def _hours(hours: float) -> str:
    return f"{hours:.1f} h"


def _window_problem(pairs: pd.DataFrame, policy: GatePolicy) -> tuple[float, str | None]:
    """The capture-time span of the judged pairs (hours) and, when it is shorter than
    ``observation.min_window_hours``, the HOLD reason that says so."""
    need = policy.observation.min_window_hours
    captured = pd.to_datetime(pairs["captured_at"], utc=True).dropna()
    span = (captured.max() - captured.min()).total_seconds() / 3600.0 if len(captured) else 0.0
    if need <= 0 or span >= need:
        return span, None
    cycles = need / 24.0
    cycle = ""
    if cycles == 1:
        cycle = " (a full daily cycle)"
    elif cycles.is_integer():
        cycle = f" ({cycles:g} full daily cycles)"
    return span, (
        f"observation window: the pairs span {_hours(span)} of capture time; the policy asks "
        f"for {need:g} h{cycle} before a promote (observation.min_window_hours)"
    )

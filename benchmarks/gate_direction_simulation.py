"""The gate's direction rules by simulation: change, harm and net harm under repeated polls.

Usage::

    nice -n 5 .venv/bin/python benchmarks/gate_direction_simulation.py --reps 200 --only aa
    nice -n 5 .venv/bin/python benchmarks/gate_direction_simulation.py --reps 100 --only better
    nice -n 5 .venv/bin/python benchmarks/gate_direction_simulation.py --only better --n-max
    nice -n 5 .venv/bin/python benchmarks/gate_direction_simulation.py --only better --top-up
    nice -n 5 .venv/bin/python benchmarks/gate_direction_simulation.py --budget 1500

About 2.5 s of CPU per polled run (12–15 gate evaluations of up to 12,800 pairs); the
default of 200 runs for every scenario is ≈ 25 min of CPU.

Each run is one synthetic shadow run (:func:`direction_pairs`, built on
:func:`gate_simulation.synthetic_pairs`): three task types (``chat`` 40%, ``summarize``
35%, ``extract`` 25% with a format requested), a baseline that *samples* — its baseline
repeat is a second draw of the same model, similarity around 0.7 with spread
(``noise_identical`` 0, ``sampled`` 1) — harm-detector flags at realistic base rates on
both sides, answer lengths, and capture times spread evenly over :data:`HOURS_AT_DESIGN`
hours at the design size. Every pair carries the outcome a judge *would* give it
(:func:`judge_truth`), revealed only when the budget selects it.

A run is polled at 50 evenly spaced sizes up to its size, as a CI job that also runs the
judge would (:func:`poll_run`): at each poll the operator first runs ``judge run`` on the
pairs so far — :func:`shadoweval.stats.change.classify_changes` and
:func:`shadoweval.judge.selection.select_pairs`
with the policy's ``net_harm.max_judged_per_task_type`` (stratified by divergence, pairs
judged before counting against the budget), exactly what ``shadoweval.application.judging`` does —
and
then polls the gate through :func:`shadoweval.stats.checkpoints.evaluate_poll` with ``previous=``
the
stored verdict: a look whose prefix got new judgements is re-evaluated as its next
``judgement_look`` (the net-harm level split over the evaluations), an unchanged one is
returned as stored, PROMOTE and ROLLBACK are terminal. A run's outcome is its first terminal
verdict, or its last HOLD.

Scenarios (the issue's acceptance; default policy unless ``--budget``, ``--margin`` or
``--n-max``; the selection's own top-up always applies, ``--top-up`` adds an operator rule
on the checkpoint prefix, :func:`poll_run`):

* ``aa`` — A/A: the candidate is the baseline model sampling again. Changed pairs are the 5%
  noise tail and pairs whose harm flags, format or errors differ; the judge's outcomes are
  symmetric (better 30%, worse 30%, tie 40%; a pair with a defect on one side only is
  judged against that side 90% of the time). Polled up to twice the design total.
  Target: false ROLLBACK ≤ 1%.
* ``better`` — a better candidate: it rewrites half of the answers (divergence + U(0.1,
  0.4)), judged better 37% / worse 25% / tie 38%, so that P(better) − P(worse) ≈ +0.10
  among all changed pairs (the realised value is printed); no guardrail regression. Polled
  up to the design total (the smallest task type reaches ``design_sample_size``).
  Target: PROMOTE ≥ 80% by the design size.
* ``degenerate`` — the better candidate, and 5% of the candidate's answers degenerate into
  repetition loops (candidate degeneration flag, 6–12k characters, similarity lower by
  0.3–0.6), each judged worse. Polled up to the design total. Target: never PROMOTE.
* ``degenerate_aa`` — the same 5% degenerate answers on an otherwise A/A candidate.

Printed: a ``#`` line per run (decision, look, judgement look, evaluations, judged pairs per
task type, causes), then one row per scenario and policy: PROMOTE / HOLD / ROLLBACK counts
with 95% Wilson intervals, the looks at which runs decided, the causes of the runs not
promoted (:func:`causes_of`), the first reasons and the seconds. Results are recorded in
docs/gate-simulation.md (section "Direction: change, harm and net harm").
"""

from __future__ import annotations

import argparse
import math
import re
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt
import pandas as pd
from gate_simulation import RunSim, TaskSim, coverage_of, paired_flags, synthetic_pairs
from statsmodels.stats.proportion import proportion_confint

from shadoweval.judge.selection import sample_order, select_pairs
from shadoweval.records import Decision, HarmKind, Verdict
from shadoweval.stats.change import classify_changes, classify_pair_arrays
from shadoweval.stats.checkpoints import evaluate_poll
from shadoweval.stats.checks.pair_arrays import PairArrays
from shadoweval.stats.frame import PAIRS_COLUMNS, harm_column
from shadoweval.stats.looks import design_sample_size
from shadoweval.stats.policy import GatePolicy, effective, parse_policy
from shadoweval.stats.sequential import checkpoint_schedule, latest_checkpoint

T0 = datetime(2024, 6, 1, tzinfo=UTC)
DECIDED = datetime(2024, 6, 4, tzinfo=UTC)
POLLS = 50
HOURS_AT_DESIGN = 36.0
"""Capture hours spanned by the design total (13,816 pairs under the default policy: the
smallest task type reaches the design sample size). The last checkpoint below it (12,800
pairs, look 7) then spans 33.4 h and the one before (6,400) 16.7 h, so the 24 h observation
window is met from look 7 on."""

WORSE, TIE, BETTER = 1.0, 0.0, -1.0

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class HarmRate:
    """One detector's per-side rate and discordance (share of pairs flagged on one side
    only), the same on both sides (A/A); ``format_only``: only where a format is requested."""

    rate: float
    discordance: float
    format_only: bool = False


HARM_RATES: dict[HarmKind, HarmRate] = {
    HarmKind.REFUSAL: HarmRate(0.01, 0.01),
    HarmKind.DEGENERATION: HarmRate(0.003, 0.004),
    HarmKind.RUNAWAY_LENGTH: HarmRate(0.005, 0.006),
    HarmKind.MISSING_FINISH_REASON: HarmRate(0.001, 0.002),
    HarmKind.LANGUAGE_SWITCH: HarmRate(0.002, 0.003),
    HarmKind.PLACEHOLDER_JSON: HarmRate(0.005, 0.006, format_only=True),
}
"""Base rates per side: refusals 1% (half of them on both sides of a pair: the prompt
asks for something refused), degeneration 0.3%, ``finish_reason = length`` 0.5%, missing
``finish_reason`` 0.1%, a language switch 0.2%, placeholder JSON 0.5% of the structured
answers; template markers never (a correctly configured server)."""

OUTPUT_CHARS = {"chat": 1200.0, "summarize": 700.0, "extract": 300.0}
"""Median answer length per task type (characters); lognormal σ 0.6, the candidate's =
the baseline's × lognormal(0, 0.25)."""


@dataclass(frozen=True)
class Direction:
    """What the candidate does to the answers and what a judge says of them.

    Attributes:
        rewrite_share: share of pairs the candidate answers differently from how the
            baseline model would (its divergence from the baseline is the sampling one
            plus ``U(rewrite_drop)``).
        rewrite_drop: range of the extra divergence of a rewritten answer.
        rewrite_judged: P(better), P(worse) of a rewritten pair (the rest: tie).
        same_judged: P(better), P(worse) of a pair whose two answers are two samples of
            the same model (A/A, and the candidate's answers it did not rewrite).
        defect_judged: P(the judge prefers the side without a defect) for a pair with a
            defect on one side only (a harm flag, a format failure or an error); else tie.
        degenerate_share: share of pairs where the candidate's answer degenerates into a
            repetition loop (its degeneration flag, 6–12k characters, divergence + 0.3–0.6),
            always judged worse.
    """

    rewrite_share: float = 0.0
    rewrite_drop: tuple[float, float] = (0.1, 0.4)
    rewrite_judged: tuple[float, float] = (0.30, 0.30)
    same_judged: tuple[float, float] = (0.30, 0.30)
    defect_judged: float = 0.9
    degenerate_share: float = 0.0


AA = Direction()
BETTER_CANDIDATE = Direction(rewrite_share=0.5, rewrite_judged=(0.37, 0.25))
"""Half the answers rewritten, judged +12 points net; with the symmetric noise-tail and
defect pairs among the changed ones the net win among all changed pairs is ≈ +10 points."""


def sim_run() -> RunSim:
    """The run's three task types; similarities of the baseline model with itself ≈ 0.7."""
    return RunSim(
        tasks={
            "chat": TaskSim(0.40, similarity_mean=0.68),
            "summarize": TaskSim(0.35, similarity_mean=0.72),
            "extract": TaskSim(0.25, format_expected=True, similarity_mean=0.80),
        }
    )


def design_total(policy: GatePolicy, run: RunSim) -> int:
    """Pairs at which the smallest task type reaches :func:`design_sample_size`."""
    smallest = min(t.share for t in run.tasks.values())
    return math.ceil(design_sample_size(policy) / smallest)


def _runaway_by_ratio(frame: pd.DataFrame, policy: GatePolicy) -> tuple[BoolArray, BoolArray]:
    """``shadoweval.stats.frame.pairs_frame``'s length-ratio rule: a side longer than the task
    type's
    ``harm.length_ratio_max`` × the other side's and at least ``harm.min_runaway_chars``."""
    views = {t: effective(policy, str(t)).harm for t in frame["task_type"].unique()}
    ratio = frame["task_type"].map({t: v.length_ratio_max for t, v in views.items()})
    floor = frame["task_type"].map({t: v.min_runaway_chars for t, v in views.items()})
    base = frame["baseline_output_chars"].to_numpy(dtype=np.float64)
    cand = frame["candidate_output_chars"].to_numpy(dtype=np.float64)
    r = ratio.to_numpy(dtype=np.float64)
    f = floor.to_numpy(dtype=np.float64)
    return (base >= f) & (base > r * cand), (cand >= f) & (cand > r * base)


def direction_pairs(
    run: RunSim,
    direction: Direction,
    n: int,
    rng: np.random.Generator,
    policy: GatePolicy,
    *,
    hours: float,
) -> tuple[pd.DataFrame, FloatArray]:
    """A pairs table (:data:`shadoweval.stats.frame.PAIRS_COLUMNS`) of ``n`` pairs and the judge's
    outcome of each pair (+1 worse, 0 tie, −1 better; :func:`judge_truth`).

    The guardrail columns come from :func:`gate_simulation.synthetic_pairs` (errors,
    formats, latencies, tokens; A/A); the candidate's similarity is its sampling
    similarity minus the rewrite and degeneration drops of ``direction``; harm flags per
    side from :data:`HARM_RATES` (none on a failed side), the runaway length ratio as
    ``pairs_frame`` applies it; capture times evenly spaced over ``hours``; no pair judged
    (``quality`` NaN) yet.
    """
    frame = synthetic_pairs(run, n, rng)
    failed_b = (frame["baseline_fail"] | frame["baseline_infra_error"]).to_numpy()
    failed_c = (frame["candidate_fail"] | frame["candidate_infra_error"]).to_numpy()
    fmt = frame["format_expected"].to_numpy()

    rewrite = rng.random(n) < direction.rewrite_share
    degenerate = ~failed_c & (rng.random(n) < direction.degenerate_share)
    low, high = direction.rewrite_drop
    drop = np.where(rewrite, rng.uniform(low, high, n), 0.0)
    drop = np.where(degenerate, rng.uniform(0.3, 0.6, n), drop)
    frame["similarity"] = np.clip(frame["similarity"].to_numpy() - drop, -1.0, 1.0)

    flags: dict[str, BoolArray] = {}
    for kind in HarmKind:
        base = np.zeros(n, dtype=bool)
        cand = np.zeros(n, dtype=bool)
        spec = HARM_RATES.get(kind)
        if spec is not None:
            rows = fmt if spec.format_only else np.ones(n, dtype=bool)
            b, c = paired_flags(rng, int(rows.sum()), spec.rate, spec.discordance, 0.0)
            base[rows], cand[rows] = b, c
        if kind is HarmKind.DEGENERATION:
            cand |= degenerate
        flags[harm_column("baseline", kind)] = base & ~failed_b
        flags[harm_column("candidate", kind)] = cand & ~failed_c

    median = frame["task_type"].map(OUTPUT_CHARS).to_numpy(dtype=np.float64)
    base_chars = np.round(median * rng.lognormal(0.0, 0.6, n)) + 1.0
    cand_chars = np.round(base_chars * rng.lognormal(0.0, 0.25, n)) + 1.0
    cand_chars = np.where(degenerate, rng.uniform(6000.0, 12000.0, n).round(), cand_chars)
    frame["baseline_output_chars"] = np.where(failed_b, np.nan, base_chars)
    frame["candidate_output_chars"] = np.where(failed_c, np.nan, cand_chars)
    for name, values in flags.items():
        frame[name] = values
    base_long, cand_long = _runaway_by_ratio(frame, policy)
    runaway = HarmKind.RUNAWAY_LENGTH
    frame[harm_column("baseline", runaway)] |= base_long
    frame[harm_column("candidate", runaway)] |= cand_long

    step = pd.Timedelta(hours=hours) / max(n, 1)
    frame["captured_at"] = pd.Timestamp(T0) + step * np.arange(n)
    frame = frame.astype(PAIRS_COLUMNS)
    truth = judge_truth(frame, direction, rewrite, degenerate, rng)
    return frame, truth


def judge_truth(
    frame: pd.DataFrame,
    direction: Direction,
    rewrite: BoolArray,
    degenerate: BoolArray,
    rng: np.random.Generator,
) -> FloatArray:
    """The judge's outcome of every pair, shape ``(n,)``: +1 worse, 0 tie, −1 better.

    A degenerate candidate answer: worse. A defect on one side only (any harm flag, a
    format-parse failure, a model failure): the other side wins with probability
    ``direction.defect_judged``, else a tie. Otherwise a rewritten pair draws from
    ``rewrite_judged`` and any other pair from ``same_judged``.
    """
    n = len(frame)
    base_harm = np.zeros(n, dtype=bool)
    cand_harm = np.zeros(n, dtype=bool)
    for kind in HarmKind:
        base_harm |= frame[harm_column("baseline", kind)].to_numpy()
        cand_harm |= frame[harm_column("candidate", kind)].to_numpy()
    base_bad = base_harm | frame["baseline_fail"].to_numpy()
    cand_bad = cand_harm | frame["candidate_fail"].to_numpy()
    fb = frame["baseline_format_ok"].to_numpy()
    fc = frame["candidate_format_ok"].to_numpy()
    base_bad |= (fb == 0.0) & (fc == 1.0)
    cand_bad |= (fc == 0.0) & (fb == 1.0)

    u = rng.random(n)
    better, worse = np.where(
        rewrite[:, None], np.array(direction.rewrite_judged), np.array(direction.same_judged)
    ).T
    truth = np.where(u < better, BETTER, np.where(u < better + worse, WORSE, TIE))
    decisive = rng.random(n) < direction.defect_judged
    truth = np.where(cand_bad & ~base_bad, np.where(decisive, WORSE, TIE), truth)
    truth = np.where(base_bad & ~cand_bad, np.where(decisive, BETTER, TIE), truth)
    truth = np.where(degenerate, WORSE, truth)
    return truth.astype(np.float64)


@dataclass
class PollOutcome:
    """One run's outcome: its first terminal verdict (or last HOLD) and what it took."""

    decision: Decision
    look: int
    judgement_look: int
    pairs_polled: int
    reason: str
    evaluations: int
    judged: dict[str, int] = field(default_factory=dict)
    topped_up: int = 0
    causes: frozenset[str] = frozenset()


_LINE = re.compile(r"^(?:task type '[^']*'|pooled), ([a-z0-9_]+): ")


def causes_of(verdict: Verdict) -> frozenset[str]:
    """What holds or rolls back a verdict, from its reason lines: a check's metric
    (``net_harm`` split into "net_harm: harm" — significant net harm, or worse than the
    margin —, "net_harm: unjudged stratum" — a changed stratum without a judged pair — and
    "net_harm: not shown"), or "observation window"."""
    found: set[str] = set()
    for reason in verdict.reasons:
        match = _LINE.match(reason)
        if match is not None:
            metric = match.group(1)
            if metric == "net_harm":
                if "significant net harm" in reason or "worse than the margin" in reason:
                    metric += ": harm"
                elif "no judged pair in" in reason or "none of the" in reason:
                    metric += ": unjudged stratum"
                else:
                    metric += ": not shown"
            found.add(metric)
        elif reason.startswith("observation window:"):
            found.add("observation window")
    return frozenset(found)


def poll_run(
    pairs: pd.DataFrame,
    truth: FloatArray,
    policy: GatePolicy,
    *,
    run_id: str,
    polls: int = POLLS,
    top_up: bool = False,
) -> PollOutcome:
    """Poll ``pairs`` (capture order) ``polls`` times, judging within budget before each.

    At poll ``i`` the first ``n_i = round(len(pairs)·i/polls)`` pairs have arrived. The
    operator's ``judge run`` classifies them (:func:`shadoweval.stats.change.classify_pair_arrays`,
    what :func:`~shadoweval.stats.change.classify_changes` runs) and selects changed pairs within
    the
    budget (:func:`shadoweval.judge.selection.select_pairs`; pairs judged before count and are never
    sent again); the selected pairs get their judge outcome (``truth``, source ``judge``).
    The gate is then polled with the stored verdict (``evaluate_poll(…, previous=)``).

    Two shortcuts that change nothing: the selection is skipped when no task type has
    room left in its budget and an unjudged changed pair, and no changed stratum lacks a
    judged pair (``select_pairs`` would choose nothing: neither within the budget nor by
    its top-up), and the gate is not called when the poll's checkpoint is the stored
    verdict's look and no judgement landed in its prefix since (``evaluate_poll`` would
    return the stored verdict: same look, same judgements fingerprint).

    ``top_up``: an operator rule on top of ``select_pairs``' own top-up (which judges one
    pair of every changed stratum without one among all the pairs so far): after the
    selection, the poll's checkpoint prefix is classified as the gate will classify it, and
    every task type × divergence stratum *of the prefix* with changed pairs and none judged
    gets its first changed pair in sample order judged, beyond the budget — what the
    net-harm check's HOLD asks for ("judge 1 more changed pairs in … (no judged pair in
    chat: D 0.1-0.2)"). Counted in :attr:`PollOutcome.topped_up`.
    """
    n_total = len(pairs)
    quality = np.full(n_total, np.nan)
    source = np.full(n_total, "", dtype=object)
    exchange_ids = pairs["exchange_id"].astype(str).tolist()
    task_types = pairs["task_type"].astype(str).tolist()
    codes, found = pd.factorize(pairs["task_type"].astype(str), sort=True)
    names = [str(t) for t in found]
    budget = np.array([effective(policy, t).net_harm.max_judged_per_task_type for t in names])
    budgets = dict(zip(names, budget.tolist(), strict=True))
    arrays = PairArrays.from_frame(pairs)
    task_arr = pairs["task_type"].to_numpy(dtype=object)
    judged_ids: set[str] = set()
    seq = policy.sequential
    previous: Verdict | None = None
    new_rows: list[int] = []  # rows judged since the stored verdict was evaluated
    evaluations = 0
    topped = 0
    n = 0
    for i in range(1, polls + 1):
        n = max(1, round(n_total * i / polls))
        changes = classify_pair_arrays(arrays.slice(0, n), task_arr[:n], policy)
        judged = ~np.isnan(quality[:n])
        c = codes[:n]
        spent = np.bincount(c[changes.changed & judged], minlength=len(names))
        waiting = np.bincount(c[changes.changed & ~judged], minlength=len(names))
        cell = c * 64 + changes.stratum
        unjudged_stratum = np.setdiff1d(cell[changes.changed], cell[changes.changed & judged])
        if np.any((spent < budget) & (waiting > 0)) or unjudged_stratum.size:
            # Only changed rows can be chosen: passing those alone chooses the same pairs.
            rows_changed = np.flatnonzero(changes.changed).tolist()
            selection = select_pairs(
                run_id=run_id,
                exchange_ids=[exchange_ids[r] for r in rows_changed],
                task_types=[task_types[r] for r in rows_changed],
                changed=np.ones(len(rows_changed), dtype=bool),
                stratum=changes.stratum[rows_changed],
                already_judged=judged_ids,
                max_per_task_type=budgets,
            )
            rows = [int(e[2:]) for e in selection.exchange_ids]  # exchange ids are ex<row>
            quality[rows] = truth[rows]
            source[rows] = "judge"
            judged_ids.update(selection.exchange_ids)
            new_rows += rows
        checkpoint = latest_checkpoint(
            n, first=seq.first_checkpoint, factor=seq.factor, n_max=seq.n_max
        )
        if top_up and checkpoint is not None:
            n_k = checkpoint[1]
            prefix = classify_pair_arrays(arrays.slice(0, n_k), task_arr[:n_k], policy)
            judged = ~np.isnan(quality[:n_k])
            cell = codes[:n_k] * 64 + prefix.stratum
            empty = np.setdiff1d(cell[prefix.changed], cell[prefix.changed & judged])
            for key in empty.tolist():
                rows_in = np.flatnonzero(prefix.changed & (cell == key)).tolist()
                first = min(rows_in, key=lambda r: sample_order(run_id, exchange_ids[r]))
                quality[first] = truth[first]
                source[first] = "judge"
                judged_ids.add(exchange_ids[first])
                new_rows.append(first)
                topped += 1
        if (
            previous is not None
            and checkpoint is not None
            and previous.look == checkpoint[0]
            and not any(r < checkpoint[1] for r in new_rows)
        ):
            continue  # evaluate_poll would return the stored verdict
        seen = pairs.iloc[:n].copy()
        seen["quality"] = quality[:n]
        seen["quality_source"] = source[:n]
        verdict = evaluate_poll(
            seen,
            policy,
            run_id=run_id,
            coverage=coverage_of(seen),
            decided_at=DECIDED,
            previous=previous,
        )
        if verdict is not previous:
            evaluations += 1
            new_rows = []
        previous = verdict
        if verdict.decision is not Decision.HOLD:
            break
    assert previous is not None
    counts = {t: int(np.count_nonzero(~np.isnan(quality) & (task_arr == t))) for t in names}
    return PollOutcome(
        previous.decision,
        previous.look,
        previous.judgement_look,
        n,
        previous.reasons[0],
        evaluations,
        counts,
        topped,
        causes_of(previous),
    )


@dataclass(frozen=True)
class Scenario:
    """One scenario: the candidate's direction, the pairs polled, the target."""

    name: str
    direction: Direction
    total_factor: float
    target: str


SCENARIOS = (
    Scenario("aa", AA, 2.0, "false ROLLBACK <= 1%"),
    Scenario("better", BETTER_CANDIDATE, 1.0, "PROMOTE >= 80% by the design size"),
    Scenario(
        "degenerate",
        Direction(rewrite_share=0.5, rewrite_judged=(0.37, 0.25), degenerate_share=0.05),
        1.0,
        "never PROMOTE",
    ),
    Scenario("degenerate_aa", Direction(degenerate_share=0.05), 1.0, "never PROMOTE"),
)


def wilson(k: int, n: int) -> str:
    """``k/n = p% [low, high]``: the 95% Wilson score interval (Wilson 1927)."""
    if n == 0:
        return "–"
    low, high = proportion_confint(k, n, alpha=0.05, method="wilson")
    return f"{k}/{n} = {100 * k / n:.1f}% [{100 * low:.1f}, {100 * high:.1f}]"


def realised_net_win(
    pairs: pd.DataFrame, truth: FloatArray, policy: GatePolicy
) -> tuple[float, float]:
    """P(better) − P(worse) among the run's changed pairs, and the changed share."""
    changes = classify_changes(pairs, policy)
    changed = changes.changed
    if not changed.any():
        return 0.0, 0.0
    return float(-truth[changed].mean()), float(changed.mean())


def run_scenario(
    scenario: Scenario,
    policy: GatePolicy,
    reps: int,
    seed: int,
    label: str,
    *,
    top_up: bool = False,
) -> dict[str, object]:
    """Replicate one scenario ``reps`` times under ``policy``; return its table row."""
    run = sim_run()
    design = design_total(policy, run)
    n = math.ceil(design * scenario.total_factor)
    hours = HOURS_AT_DESIGN * n / design
    counts: Counter[Decision] = Counter()
    decided_at: dict[Decision, list[int]] = {d: [] for d in Decision}
    reasons: Counter[str] = Counter()
    causes: Counter[str] = Counter()
    nets: list[float] = []
    shares: list[float] = []
    looks: dict[Decision, list[int]] = {d: [] for d in Decision}
    evaluations = 0
    topped = 0
    max_j = 0
    start = time.perf_counter()
    for r in range(reps):
        rng = np.random.default_rng([seed, r, zlib.crc32(scenario.name.encode())])
        pairs, truth = direction_pairs(run, scenario.direction, n, rng, policy, hours=hours)
        if r < 20:
            net, share = realised_net_win(pairs.iloc[:design], truth[:design], policy)
            nets.append(net)
            shares.append(share)
        out = poll_run(pairs, truth, policy, run_id=f"sim-{scenario.name}-{r}", top_up=top_up)
        counts[out.decision] += 1
        decided_at[out.decision].append(out.pairs_polled)
        looks[out.decision].append(out.look)
        topped += out.topped_up
        evaluations += out.evaluations
        max_j = max(max_j, out.judgement_look)
        print(
            f"# {scenario.name} run {r}: {out.decision.value} look {out.look} "
            f"j {out.judgement_look} polled {out.pairs_polled} evals {out.evaluations} "
            f"judged {out.judged} topped {out.topped_up} causes {sorted(out.causes)}",
            flush=True,
        )
        if out.decision is not Decision.PROMOTE:
            reasons[f"{out.decision.value}: {out.reason[:90]}"] += 1
            causes.update(f"{out.decision.value}: {c}" for c in out.causes)
    seconds = time.perf_counter() - start

    seq = policy.sequential

    def at(decision: Decision) -> str:
        found = Counter(looks[decision])
        if not found:
            return "–"
        if seq.n_max is not None:
            schedule = checkpoint_schedule(seq.first_checkpoint, seq.factor, seq.n_max)
        else:
            schedule = checkpoint_schedule(seq.first_checkpoint, seq.factor, limit=max(found))
        return ", ".join(f"look {k} ({schedule[k - 1]:,}): {v}" for k, v in sorted(found.items()))

    promote_by_design = sum(1 for x in decided_at[Decision.PROMOTE] if x <= design)
    return {
        "scenario": scenario.name,
        "policy": label,
        "pairs polled": f"{n:,} ({hours:.0f} h)",
        "net win among changed": f"{np.mean(nets):+.3f} (changed {100 * np.mean(shares):.0f}%)",
        "PROMOTE": wilson(counts[Decision.PROMOTE], reps),
        f"PROMOTE by {design:,}": wilson(promote_by_design, reps),
        "HOLD": wilson(counts[Decision.HOLD], reps),
        "ROLLBACK": wilson(counts[Decision.ROLLBACK], reps),
        "PROMOTE at": at(Decision.PROMOTE),
        "ROLLBACK at": at(Decision.ROLLBACK),
        "evaluations/run": f"{evaluations / reps:.1f} (max judgement_look {max_j})",
        "topped up/run": f"{topped / reps:.1f}" if top_up else "–",
        "target": scenario.target,
        "s": f"{seconds:.0f}",
        "not promoted, by cause (runs)": "; ".join(f"{k} ×{v}" for k, v in causes.most_common()),
        "top first reasons": "; ".join(f"{k} ×{v}" for k, v in reasons.most_common(2)),
    }


def _table(rows: list[dict[str, object]]) -> str:
    if not rows:
        return ""
    head = list(rows[0])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(r.get(h, "")) for h in head) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200, help="runs per scenario (default 200)")
    parser.add_argument("--seed", type=int, default=20240611)
    parser.add_argument("--only", nargs="*", default=None, help="scenario names to run")
    parser.add_argument(
        "--budget", type=int, default=None, help="net_harm.max_judged_per_task_type to use"
    )
    parser.add_argument("--margin", type=float, default=None, help="net_harm.margin to use")
    parser.add_argument(
        "--n-max", action="store_true", help="cap the schedule at the design total (n_max)"
    )
    parser.add_argument(
        "--pairs-factor",
        type=float,
        default=None,
        help="poll up to this many times the design total (default: the scenario's)",
    )
    parser.add_argument(
        "--top-up",
        action="store_true",
        help="also judge one pair of every changed stratum of the checkpoint prefix left "
        "without a judged pair, beyond the budget (poll_run's top_up)",
    )
    args = parser.parse_args(argv)
    net: dict[str, object] = {}
    if args.budget is not None:
        net["max_judged_per_task_type"] = args.budget
    if args.margin is not None:
        net["margin"] = args.margin
    raw: dict[str, object] = {"net_harm": net} if net else {}
    label = ", ".join(f"{k} {v}" for k, v in net.items()) or "default"
    if args.n_max:
        raw["sequential"] = {"n_max": design_total(GatePolicy(), sim_run())}
        label += ", n_max = design total"
    if args.top_up:
        label += ", prefix top-up"
    policy = parse_policy(raw) if raw else GatePolicy()
    print(
        f"design sample size {design_sample_size(policy)} pairs per task type, design total "
        f"{design_total(policy, sim_run()):,} pairs; policy: {label}; {args.reps} runs per "
        f"scenario, {POLLS} polls each, seed {args.seed}\n",
        flush=True,
    )
    rows = []
    for scenario in SCENARIOS:
        if args.only is not None and scenario.name not in args.only:
            continue
        if args.pairs_factor is not None:
            scenario = replace(scenario, total_factor=args.pairs_factor)
        rows.append(run_scenario(scenario, policy, args.reps, args.seed, label, top_up=args.top_up))
        print(_table(rows[-1:]), flush=True)
        print(flush=True)
    print(_table(rows))


if __name__ == "__main__":
    main()

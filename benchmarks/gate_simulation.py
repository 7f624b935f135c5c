"""Calibration of the sequential gate by simulation: A/A, planted regressions, Kayenta's misses.

Usage::

    .venv/bin/python benchmarks/gate_simulation.py            # full: 500 / 250 replications
    .venv/bin/python benchmarks/gate_simulation.py --quick    # 200 / 100 replications
    .venv/bin/python benchmarks/gate_simulation.py --reps 500 --seed 7 --only aa_capped

Each replication draws one synthetic run (:func:`synthetic_pairs`: four task types with
40/30/20/10% of the traffic, paired binary outcomes, similarities with a baseline-repeat
noise floor, paired latencies, output tokens), orders it by capture time and **polls the
gate at 50 evenly spaced points** up to the run's size, exactly as a CI job would:
:func:`shadoweval.stats.checkpoints.evaluate_poll` maps each poll to its latest checkpoint (a poll
between checkpoints returns that checkpoint's verdict; each checkpoint is evaluated once
and cached here), and PROMOTE / ROLLBACK are terminal. The outcome of a replication is its
first terminal decision, or HOLD.

Since issue 11 the gate also asks for the *direction* of a change (changed pairs need a
passed net-harm check) and for an observation window of 24 h of capture time. This
calibration of the guardrails is direction-neutral: every pair is judged a tie
(:func:`judged_ties`: ``quality`` 0, source ``judge``) and the observation window is off
(:data:`NEUTRAL`: ``observation.min_window_hours`` 0), so neither decides here.
``benchmarks/gate_direction_simulation.py`` simulates both (change, harm detectors, a
judge on its budget, net harm).

Scenarios (each under the default policy with :data:`NEUTRAL` unless said):

* ``aa_capped`` — A/A (the candidate behaves as the baseline) with the sample cap
  ``n_max`` = the design sample size (:func:`shadoweval.stats.looks.design_sample_size` pairs in
  the smallest task type, i.e. 10× that in total): α spending over the capped schedule.
* ``aa_uncapped`` — the same A/A run without a cap (confidence sequences, α·6/(π²k²)),
  polled up to 2× the design total (checkpoints 200 … 51,200).
* ``aa_batch_once`` / ``aa_batch_once_capped`` — the A/A run of ``aa_capped``'s size
  gated once, as a batch imported at once (no cap: one look at its latest checkpoint,
  spending the α of every checkpoint up to it; with the cap at its size: all of α).
* ``aa_dense`` — A/A with 50 checkpoints (``factor`` chosen so the 50th is the cap): α
  spending over the most looks the acceptance asks for; every poll is a new look.
* ``aa_dense_uncapped`` — the same 50 looks without a cap: confidence sequences and
  α·6/(π²k²) spending (false ROLLBACK only; PROMOTE needs more pairs there).
* ``format_drop`` — the candidate's format-parse success drops by 2 points (97% → 95%) in
  one task type (``extract``, format expected; 20% of traffic): twice the default margin.
* ``p95_slower`` — the slowest 15% of the candidate's latencies are 30% slower (p95 ratio
  1.3, p50 unchanged).
* ``errors_0_to_6`` — a 200-pair run: the baseline has no errors, the candidate 6.
* ``kayenta_sparse_errors`` — sparse new errors (kayenta #426: 4 in 600 pairs vs none).
* ``kayenta_variance`` — the candidate's latency variance blows up (σ of the log latency
  0.5 → 0.9 around the same median; kayenta #780).
* ``kayenta_7_of_10`` — 7 of 10 values jump from 1 to 100 (spinnaker #6278): 70% of the
  candidate's output-token counts ×100 (the 10-pair version is the edge case below).
* edge cases, one run each: no data, all errors, NaN metrics, one task type with no
  replays, 10 pairs with 7 jumping 1 → 100. Each must be HOLD with a reason and a non-zero
  exit status (exit codes of ``shadow-eval gate``: 0 PROMOTE, 1 HOLD, 2 ROLLBACK).

Printed: one row per scenario with the share of PROMOTE / HOLD / ROLLBACK and its Monte
Carlo standard error ``√(p(1 − p)/R)``, the median look of the decision and the seconds.
Results are recorded in docs/gate-simulation.md.
"""

from __future__ import annotations

import argparse
import math
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import numpy as np
import pandas as pd

from shadoweval.pair_facts import (
    FACT_BITS,
    FLOAT_FACTS,
    LATENCY_SOURCES,
    PAIR_FACTS_DTYPE,
    PAIR_FACTS_LAYOUT,
    TRI_FACTS,
    TRI_MISSING,
    PairFacts,
)
from shadoweval.records import Coverage, Decision, Verdict
from shadoweval.stats.checkpoints import evaluate_poll
from shadoweval.stats.frame import pairs_frame_from_facts
from shadoweval.stats.looks import design_sample_size
from shadoweval.stats.policy import GatePolicy, parse_policy
from shadoweval.stats.sequential import latest_checkpoint

T0 = datetime(2024, 6, 1, tzinfo=UTC)
DECIDED = datetime(2024, 6, 2, tzinfo=UTC)
EXIT = {Decision.PROMOTE: 0, Decision.HOLD: 1, Decision.ROLLBACK: 2}


@dataclass(frozen=True)
class TaskSim:
    """One task type of a synthetic run; rates per pair, A/A by default.

    Binary outcomes are paired (:func:`paired_flags`): both arms fail at the same rate
    with the given discordance ψ (the share of pairs where exactly one arm fails), and the
    candidate additionally fails ``cand_error_extra`` / ``format_drop`` of the pairs the
    baseline got right. A/A defaults: model errors 1% with ψ = 1.5% (nearly independent
    arms), format failures 3% with ψ = 2% (the design's planned discordance),
    infrastructure errors 0.2% per arm, independent.
    """

    share: float
    format_expected: bool = False
    error_rate: float = 0.01
    error_discordance: float = 0.015
    cand_error_extra: float = 0.0
    format_fail: float = 0.03
    format_discordance: float = 0.02
    format_drop: float = 0.0
    infra_rate: float = 0.002
    similarity_mean: float = 0.85
    latency_sigma: float = 0.5
    cand_latency_sigma: float | None = None
    tail_factor: float = 1.0
    token_jump_share: float = 0.0
    streamed: float = 0.7


@dataclass(frozen=True)
class RunSim:
    """A synthetic run: its task types, size and baseline-repeat share."""

    tasks: dict[str, TaskSim] = field(
        default_factory=lambda: {
            "chat": TaskSim(0.4),
            "summarize": TaskSim(0.3),
            "extract": TaskSim(0.2, format_expected=True),
            "classify": TaskSim(0.1, format_expected=True),
        }
    )
    repeat_share: float = 1.0


def paired_flags(
    rng: np.random.Generator, n: int, rate: float, discordance: float, extra: float
) -> tuple[np.ndarray, np.ndarray]:
    """Baseline and candidate failure flags, both failing with probability ``rate`` and
    exactly one failing with probability ``discordance`` (≤ 2·rate), plus ``extra``: the
    candidate also fails that share of the baseline's ok pairs."""
    base = rng.random(n) < rate
    half = discordance / 2.0
    stay = 1.0 - half / rate if rate > 0 else 0.0  # P(candidate fails | baseline fails)
    new = half / (1.0 - rate)  # P(candidate fails | baseline ok)
    cand = np.where(base, rng.random(n) < stay, rng.random(n) < new)
    if extra:
        cand |= ~base & (rng.random(n) < extra)
    return base, cand


def synthetic_pairs(sim: RunSim, n: int, rng: np.random.Generator) -> pd.DataFrame:
    """A pairs table (:data:`shadoweval.stats.frame.PAIRS_COLUMNS`) of ``n`` pairs in capture order.

    Task types are drawn i.i.d. with their shares; per pair: model errors, infrastructure
    errors, format outcomes, similarities (candidate and baseline-repeat share a
    per-request component), latencies (candidate = baseline × lognormal(0, 0.1), both
    measured on the shadow), output tokens (lognormal, candidate = baseline × lognormal
    (0, 0.15)). Fully vectorised: 1,000,000 pairs in a few seconds.

    The table is built by the product's own code: the simulated values are packed as pair
    facts (:data:`shadoweval.pair_facts.PAIR_FACTS_DTYPE`, every other fact at its
    "unknown / no" value: NaN floats, unknown tri-states, clear bits) and turned into the
    table by :func:`shadoweval.stats.frame.pairs_frame_from_facts`, as the gate reads a
    stored run. A column ``stats.frame`` gains is filled as for a stored pair that lacks
    the fact, so this table cannot fall behind the frame's columns again.
    """
    names = list(sim.tasks)
    shares = np.array([sim.tasks[t].share for t in names])
    codes = rng.choice(len(names), size=n, p=shares / shares.sum())
    cols: dict[str, np.ndarray] = {
        "base_fail": np.zeros(n, bool),
        "cand_fail": np.zeros(n, bool),
        "base_infra": np.zeros(n, bool),
        "cand_infra": np.zeros(n, bool),
        "format_expected": np.zeros(n, bool),
        "base_fmt": np.full(n, np.nan),
        "cand_fmt": np.full(n, np.nan),
        "sim_mean": np.zeros(n),
        "lat_sigma": np.zeros(n),
        "cand_lat_sigma": np.zeros(n),
        "tail": np.ones(n),
        "jump": np.zeros(n, bool),
        "streamed": np.zeros(n, bool),
    }
    for i, name in enumerate(names):
        t = sim.tasks[name]
        idx = np.flatnonzero(codes == i)
        m = idx.size
        base, cand = paired_flags(rng, m, t.error_rate, t.error_discordance, t.cand_error_extra)
        cols["base_fail"][idx], cols["cand_fail"][idx] = base, cand
        cols["base_infra"][idx] = rng.random(m) < t.infra_rate
        cols["cand_infra"][idx] = rng.random(m) < t.infra_rate
        if t.format_expected:
            fb, fc = paired_flags(rng, m, t.format_fail, t.format_discordance, t.format_drop)
            cols["format_expected"][idx] = True
            cols["base_fmt"][idx] = np.where(fb, 0.0, 1.0)
            cols["cand_fmt"][idx] = np.where(fc, 0.0, 1.0)
        cols["sim_mean"][idx] = t.similarity_mean
        cols["lat_sigma"][idx] = t.latency_sigma
        cols["cand_lat_sigma"][idx] = (
            t.cand_latency_sigma if t.cand_latency_sigma is not None else t.latency_sigma
        )
        cols["tail"][idx] = t.tail_factor
        cols["jump"][idx] = rng.random(m) < t.token_jump_share
        cols["streamed"][idx] = rng.random(m) < t.streamed
    base_fail = cols["base_fail"] & ~cols["base_infra"]
    cand_fail = cols["cand_fail"] & ~cols["cand_infra"]
    either = base_fail | cand_fail | cols["base_infra"] | cols["cand_infra"]
    prompt = rng.normal(0.0, 0.06, n)
    similarity = np.clip(cols["sim_mean"] + prompt + rng.normal(0.0, 0.05, n), -1.0, 1.0)
    noise = np.clip(cols["sim_mean"] + prompt + rng.normal(0.0, 0.05, n), -1.0, 1.0)
    repeat = rng.random(n) < sim.repeat_share
    z = rng.normal(0.0, 1.0, n)
    base_e2e = 800.0 * np.exp(cols["lat_sigma"] * z)
    cand_e2e = 800.0 * np.exp(cols["cand_lat_sigma"] * z) * rng.lognormal(0.0, 0.1, n)
    slow = base_e2e > np.quantile(base_e2e, 0.85) if n else np.zeros(0, bool)
    cand_e2e = np.where(slow, cand_e2e * cols["tail"], cand_e2e)
    base_ttft = base_e2e * 0.2 * rng.lognormal(0.0, 0.2, n)
    cand_ttft = base_ttft * rng.lognormal(0.0, 0.1, n)
    base_tok = np.round(200.0 * rng.lognormal(0.0, 0.6, n))
    cand_tok = np.round(base_tok * rng.lognormal(0.0, 0.15, n))
    cand_tok = np.where(cols["jump"], cand_tok * 100.0, cand_tok)
    base_out = base_fail | cols["base_infra"]
    cand_out = cand_fail | cols["cand_infra"]
    fmt_ok = cols["format_expected"]
    facts = _unknown_facts(n)
    facts["captured_at_us"] = int(T0.timestamp()) * 1_000_000 + np.arange(n) * 1_000_000
    floats = {
        "similarity": np.where(either, np.nan, similarity),
        "noise_similarity": np.where(repeat & ~cols["base_infra"], noise, np.nan),
        "baseline_e2e_ms": np.where(base_out, np.nan, base_e2e),
        "candidate_e2e_ms": np.where(cand_out, np.nan, cand_e2e),
        # No reasoning and no caches in the simulation: the first content is the first
        # token, and every answer came from the model.
        "baseline_ttft_ms": np.where(cols["streamed"] & ~base_out, base_ttft, np.nan),
        "candidate_ttft_ms": np.where(cols["streamed"] & ~cand_out, cand_ttft, np.nan),
        "baseline_ttfc_ms": np.where(cols["streamed"] & ~base_out, base_ttft, np.nan),
        "candidate_ttfc_ms": np.where(cols["streamed"] & ~cand_out, cand_ttft, np.nan),
        "baseline_output_tokens": np.where(base_out, np.nan, base_tok),
        "candidate_output_tokens": np.where(cand_out, np.nan, cand_tok),
        # Sent one per second in capture order (the Newey-West widening reads it).
        "candidate_sent_at_s": T0.timestamp() + np.arange(n, dtype=float),
    }
    for name, column in floats.items():
        facts[name] = column
    bits = {
        "streamed": cols["streamed"],
        "baseline_error": base_fail,
        "candidate_error": cand_fail,
        "baseline_infra_error": cols["base_infra"],
        "candidate_infra_error": cols["cand_infra"],
        "format_expected": fmt_ok,
    }
    for name, flags in bits.items():
        facts["bits"] |= np.where(flags, FACT_BITS[name], 0)
    # The same format outcome under every success flag the policy may choose.
    for side, key, infra in (
        ("baseline", "base_fmt", "base_infra"),
        ("candidate", "cand_fmt", "cand_infra"),
    ):
        ok = np.where(fmt_ok & ~cols[infra], cols[key], np.nan)
        facts[f"{side}_format_ok"] = _tri_codes(ok)[:, None]
    # Sampled requests; the baseline repeat never returned the captured answer; exact
    # comparison sees no change beyond the embedding's.
    facts["sampled"] = 1
    facts["noise_identical"] = np.where(repeat & ~cols["base_infra"], 0, TRI_MISSING)
    facts["exact_differs"] = 0
    # The shadow's latencies: a replica request co-timed with the candidate's (issue 29:
    # latency is gated on co-timed pairs only), else the live one's.
    facts["latency_baseline_source"] = np.where(
        repeat, LATENCY_SOURCES.index("co_timed"), LATENCY_SOURCES.index("live")
    )
    # No harm detector fires, no tools offered, no stream cut, no context-window failure,
    # no finish-length shift, no judgements, no PPI label sample, every answer in a script
    # the embedding model covers: the facts' "unknown / no" values above.
    pair_facts = PairFacts(
        exchange_ids=tuple(f"ex{i:08d}" for i in range(n)),
        task_types=tuple(np.array(names, dtype=object)[codes]),
        uncovered_scripts=("",) * n,
        values=facts,
    )
    return pairs_frame_from_facts(pair_facts, GatePolicy())


def _unknown_facts(n: int) -> np.ndarray:
    """``n`` packed pair facts with every value unknown or absent: NaN floats, unknown
    tri-states, no bits, harms or tool changes, the latency source ``missing``."""
    facts = np.zeros(n, PAIR_FACTS_DTYPE)
    facts["layout"] = PAIR_FACTS_LAYOUT
    for name in FLOAT_FACTS:
        facts[name] = np.nan
    for name in TRI_FACTS:
        facts[name] = TRI_MISSING
    facts["baseline_format_ok"] = TRI_MISSING
    facts["candidate_format_ok"] = TRI_MISSING
    facts["latency_baseline_source"] = LATENCY_SOURCES.index("missing")
    return facts


def _tri_codes(values: np.ndarray) -> np.ndarray:
    """1.0 / 0.0 / NaN as the packed tri-state codes 1 / 0 / ``TRI_MISSING``."""
    return np.where(np.isnan(values), TRI_MISSING, values).astype(np.int8)


NEUTRAL: dict[str, object] = {"observation": {"min_window_hours": 0}}
"""The policy change of every scenario here: no observation window (module docstring)."""


def judged_ties(pairs: pd.DataFrame) -> pd.DataFrame:
    """``pairs`` with every pair judged a tie by the judge (``quality`` 0): the net-harm
    check then passes on its judged pairs and the guardrails alone decide."""
    judged = pairs.copy()
    judged["quality"] = 0.0
    judged["quality_source"] = "judge"
    return judged


def coverage_of(pairs: pd.DataFrame) -> Coverage:
    """Full coverage: every captured exchange was paired (task mix = the pairs').

    The pairs whose baseline latency came from a baseline repeat are the repeats the
    run sent (all answered): the gate reads the run's design from these counts.
    """
    n = len(pairs)
    counts = {str(t): int(c) for t, c in pairs["task_type"].value_counts().items()}
    repeats = int((pairs["latency_baseline_source"] == "baseline_repeat").sum())
    return Coverage(
        captured=n,
        replayed=n,
        paired=n,
        errored=int((pairs["candidate_fail"] | pairs["candidate_infra_error"]).sum()),
        warmup=0,
        skipped=0,
        share=1.0 if n else 0.0,
        per_task_type=counts,
        baseline_repeat_replayed=repeats,
    )


@dataclass(frozen=True)
class Outcome:
    """The first terminal decision of a polled run (or HOLD), its look and poll."""

    decision: Decision
    look: int
    n: int
    reason: str


def poll_run(pairs: pd.DataFrame, policy: GatePolicy, polls: int = 50) -> Outcome:
    """Poll ``pairs`` (capture order) at ``polls`` evenly spaced sizes, like a CI job.

    Each poll sees the first ``n`` pairs and the coverage of those; a poll between two
    checkpoints gets the cached verdict of the latest one (what a caller caching by look
    would return; :func:`evaluate_poll` would recompute the same verdict). Each poll passes
    the latest verdict as ``previous``, so the gate spends α at the looks it actually took
    (``Verdict.looks_taken``). ``polls = 1`` is a batch gated once at its full size. Stops
    at the first PROMOTE or ROLLBACK (terminal).
    """
    seq = policy.sequential
    cache: dict[int, Verdict] = {}
    verdict: Verdict | None = None
    total = len(pairs)
    for i in range(1, polls + 1):
        n = max(1, round(total * i / polls))
        cp = latest_checkpoint(n, first=seq.first_checkpoint, factor=seq.factor, n_max=seq.n_max)
        if cp is None:
            continue
        look, n_k = cp
        final = seq.n_max is not None and n >= seq.n_max
        key = look * 2 + int(final)
        if key not in cache:
            seen = pairs.iloc[:n]
            cache[key] = evaluate_poll(
                seen,
                policy,
                run_id="sim",
                coverage=coverage_of(seen),
                decided_at=DECIDED,
                previous=verdict,
            )
        verdict = cache[key]
        if verdict.decision is not Decision.HOLD:
            return Outcome(verdict.decision, verdict.look, n_k, verdict.reasons[0])
    if verdict is None:
        return Outcome(Decision.HOLD, 0, 0, "no checkpoint reached")
    return Outcome(verdict.decision, verdict.look, total, verdict.reasons[0])


@dataclass(frozen=True)
class Scenario:
    name: str
    sim: RunSim
    n: int
    policy: GatePolicy
    expect: str
    polls: int = 50


def _with(sim: RunSim, task: str, **changes: object) -> RunSim:
    tasks = dict(sim.tasks)
    tasks[task] = replace(tasks[task], **changes)  # type: ignore[arg-type]
    return replace(sim, tasks=tasks)


def _all_tasks(sim: RunSim, **changes: object) -> RunSim:
    return replace(
        sim,
        tasks={t: replace(s, **changes) for t, s in sim.tasks.items()},  # type: ignore[arg-type]
    )


def scenarios() -> list[Scenario]:
    """The scenarios of the module docstring."""
    base = RunSim()
    default = parse_policy(NEUTRAL)
    design = design_sample_size(default)
    smallest = min(t.share for t in base.tasks.values())
    total = math.ceil(design / smallest)
    capped = parse_policy({**NEUTRAL, "sequential": {"n_max": total}})
    dense_factor = (total / 200.0) ** (1.0 / 49.0)
    dense = parse_policy(
        {**NEUTRAL, "sequential": {"n_max": total, "factor": round(dense_factor, 6)}}
    )
    dense_open = parse_policy({**NEUTRAL, "sequential": {"factor": round(dense_factor, 6)}})
    return [
        Scenario("aa_capped", base, total, capped, "PROMOTE >= 80%, ROLLBACK <= 1%"),
        Scenario("aa_uncapped", base, 2 * total, default, "ROLLBACK <= 1%"),
        Scenario("aa_batch_once", base, total, default, "ROLLBACK <= 1%", polls=1),
        Scenario("aa_batch_once_capped", base, total, capped, "ROLLBACK <= 1%", polls=1),
        Scenario("aa_dense", base, total, dense, "ROLLBACK <= 1%"),
        Scenario("aa_dense_uncapped", base, total, dense_open, "ROLLBACK <= 1%"),
        Scenario(
            "format_drop",
            _with(base, "extract", format_drop=0.02 / 0.97),
            total,
            capped,
            "never PROMOTE",
        ),
        Scenario("p95_slower", _all_tasks(base, tail_factor=1.3), total, capped, "never PROMOTE"),
        Scenario(
            "errors_0_to_6",
            _all_tasks(base, error_rate=0.0, error_discordance=0.0, cand_error_extra=0.03),
            200,
            default,
            "never PROMOTE",
        ),
        Scenario(
            "kayenta_sparse_errors",
            _all_tasks(base, error_rate=0.0, error_discordance=0.0, cand_error_extra=4 / 600),
            600,
            default,
            "HOLD or ROLLBACK",
        ),
        Scenario(
            "kayenta_variance",
            _all_tasks(base, cand_latency_sigma=0.9),
            total,
            capped,
            "HOLD or ROLLBACK",
        ),
        Scenario(
            "kayenta_7_of_10",
            _all_tasks(base, token_jump_share=0.7),
            total,
            capped,
            "HOLD or ROLLBACK",
        ),
    ]


def _share(counts: Counter[Decision], decision: Decision, reps: int) -> str:
    p = counts[decision] / reps
    return f"{100 * p:5.1f}% ± {100 * math.sqrt(p * (1 - p) / reps):.1f}"


def run_scenario(scenario: Scenario, reps: int, seed: int) -> dict[str, object]:
    """Replicate one scenario ``reps`` times; return its table row."""
    counts: Counter[Decision] = Counter()
    looks: list[int] = []
    promoted_at: list[int] = []
    reasons: Counter[str] = Counter()
    start = time.perf_counter()
    for r in range(reps):
        rng = np.random.default_rng([seed, r, zlib.crc32(scenario.name.encode())])
        pairs = judged_ties(synthetic_pairs(scenario.sim, scenario.n, rng))
        outcome = poll_run(pairs, scenario.policy, scenario.polls)
        counts[outcome.decision] += 1
        looks.append(outcome.look)
        if outcome.decision is Decision.PROMOTE:
            promoted_at.append(outcome.n)
        if outcome.decision is not Decision.PROMOTE:
            reasons[outcome.reason.split(":")[0][:70]] += 1
    seconds = time.perf_counter() - start
    design = math.ceil(design_sample_size(GatePolicy()) / 0.1)  # the smallest share is 10%
    marks = sorted(m for m in {design // 2, design, scenario.n} if m <= scenario.n)
    by_n = ", ".join(
        f"{m:,}: {100 * sum(1 for x in promoted_at if x <= m) / reps:.0f}%" for m in marks
    )
    return {
        "scenario": scenario.name,
        "pairs": scenario.n,
        "reps": reps,
        "PROMOTE": _share(counts, Decision.PROMOTE, reps),
        "HOLD": _share(counts, Decision.HOLD, reps),
        "ROLLBACK": _share(counts, Decision.ROLLBACK, reps),
        "median look": int(np.median(looks)),
        "PROMOTE by n pairs": by_n if promoted_at else "–",
        "target": scenario.expect,
        "s": f"{seconds:.0f}",
        "top reason": reasons.most_common(1)[0][0] if reasons else "",
    }


def edge_cases() -> list[dict[str, object]]:
    """One run each: no data, all errors, NaN metrics, a task type with no replays, 7 of 10."""
    policy = parse_policy(NEUTRAL)
    rng = np.random.default_rng(3)
    base = judged_ties(synthetic_pairs(RunSim(), 800, rng))
    rows: list[dict[str, object]] = []

    def add(name: str, pairs: pd.DataFrame, coverage: Coverage | None = None) -> None:
        verdict = evaluate_poll(
            pairs, policy, run_id="edge", coverage=coverage or coverage_of(pairs),
            decided_at=DECIDED,
        )  # fmt: skip
        rows.append(
            {
                "case": name,
                "decision": verdict.decision.value.upper(),
                "exit": EXIT[verdict.decision],
                "reason": verdict.reasons[0][:110],
            }
        )

    add("no data", base.iloc[0:0])
    errors = base.copy()
    errors["candidate_infra_error"] = True
    errors["candidate_fail"] = False
    errors["candidate_e2e_ms"] = errors["candidate_ttft_ms"] = errors["candidate_ttfc_ms"] = np.nan
    errors["candidate_output_tokens"] = errors["similarity"] = np.nan
    add("all errors (every candidate request failed)", errors)
    nan = base.copy()
    nan["similarity"] = np.nan
    add("NaN metrics (similarity scorer returned NaN)", nan)
    missing = base[base["task_type"] != "extract"].reset_index(drop=True)
    cover = coverage_of(base)
    add(
        "one task type with no replays (extract)",
        missing,
        cover.model_copy(update={"paired": len(missing), "share": len(missing) / len(base)}),
    )
    tiny = judged_ties(synthetic_pairs(RunSim(), 10, rng))
    tiny["baseline_output_tokens"] = 1.0
    tiny["candidate_output_tokens"] = [100.0] * 7 + [1.0] * 3
    add("10 pairs, 7 jump from 1 to 100", tiny)
    return rows


def _table(rows: list[dict[str, object]]) -> str:
    if not rows:
        return ""
    head = list(rows[0])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(r[h]) for h in head) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="200 replications per A/A scenario, 100 otherwise"
    )
    parser.add_argument(
        "--reps",
        type=int,
        default=None,
        help="replications of the A/A scenarios aa_capped/aa_uncapped (default 500, --quick 200); "
        "every other scenario runs max(reps // 2, 50)",
    )
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--only", nargs="*", default=None, help="scenario names to run")
    args = parser.parse_args(argv)
    reps = args.reps or (200 if args.quick else 500)
    policy = GatePolicy()
    design = design_sample_size(policy)
    print(
        f"design sample size {design} pairs per task type (default policy); "
        f"{reps} replications of aa_capped/aa_uncapped, max({reps} // 2, 50) of the others, "
        f"50 polls each, seed {args.seed}\n"
    )
    rows = []
    chosen: list[Scenario] = [s for s in scenarios() if args.only is None or s.name in args.only]
    for scenario in chosen:
        # The dense schedule costs 50 evaluations per replication: half the replications.
        reps_here = reps if scenario.name in ("aa_capped", "aa_uncapped") else max(reps // 2, 50)
        rows.append(run_scenario(scenario, reps_here, args.seed))
        print(_table(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(_table(rows))
    print()
    print(_table(edge_cases()))


if __name__ == "__main__":
    main()

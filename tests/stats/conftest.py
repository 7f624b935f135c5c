"""Synthetic pair scores for the gate tests, built from seeded generators.

The ``simulate`` fixture builds :class:`PairScore` records per task type from keyword
specs (see :class:`TaskSpec`), so each test states only what it plants (an error burst, a
format drop, a latency tail). Helpers are fixtures, not imports, so the tests work under
any pytest import mode.

Pairs are captured one a minute (:data:`CAPTURE_STEP`), so a run of 1,440 pairs or more
spans the default policy's 24-hour observation window. Since issue 11 a PROMOTE also
needs the direction of the pairs that changed: the ``tie_judgements`` fixture judges
every pair a tie (an A/A run's changed pairs are neither better nor worse).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from shadoweval.records import (
    Coverage,
    FormatFlags,
    JudgementSource,
    PairJudgement,
    PairScore,
    QualityOutcome,
    SidePair,
)

T0 = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
CAPTURE_STEP = timedelta(minutes=1)
"""Capture-time step between two simulated pairs."""


@dataclass
class TaskSpec:
    """How to simulate one task type's pairs.

    Rates are per pair. Format outcomes are correlated between the arms: the baseline
    fails with ``base_format_fail``; the candidate copies the baseline's outcome and
    then fails an ok pair with ``cand_format_extra_fail`` or recovers a failed one with
    ``cand_format_recover``.

    ``base_error`` / ``cand_error`` are model errors (e.g. HTTP 400: ``*_error`` without
    ``*_infra_error``); ``base_infra`` / ``cand_infra`` are infrastructure errors
    (timeout, connect, 5xx: ``*_error`` and ``*_infra_error``, which wins over a model
    error drawn for the same side); ``cand_empty`` is an empty candidate answer
    (similarity 0, latency measured). Candidate latencies are the baseline's times
    ``cand_latency_factor`` times lognormal noise of sigma ``latency_noise`` (0 makes
    them equal pair by pair). Output tokens: the baseline's are Poisson(``tokens_mean``),
    the candidate's the baseline's times ``cand_token_factor`` times lognormal noise of
    sigma ``token_noise`` (``tokens_mean = 0`` leaves them unknown). ``noise_similarity``
    (a baseline-repeat similarity) is drawn like ``similarity`` when
    ``noise_similarity_mean`` is set. The infrastructure, empty, token and noise draws
    come from a second generator, so adding them leaves every other draw of a seed
    unchanged.
    """

    n: int
    base_error: float = 0.005
    cand_error: float = 0.005
    base_infra: float = 0.0
    cand_infra: float = 0.0
    cand_empty: float = 0.0
    format_expected: bool = False
    base_format_fail: float = 0.02
    cand_format_extra_fail: float = 0.005
    cand_format_recover: float = 0.005
    similarity_mean: float = 0.85
    similarity_sd: float = 0.08
    e2e_median_ms: float = 800.0
    ttft_median_ms: float = 150.0
    latency_sigma: float = 0.4
    latency_noise: float = 0.1
    cand_latency_factor: float = 1.0
    cand_tail_factor: float = 1.0
    latency_source: str = "co_timed"
    streamed: bool = True
    nan_similarity: int = 0
    tokens_mean: float = 200.0
    cand_token_factor: float = 1.0
    token_noise: float = 0.2
    noise_similarity_mean: float | None = None
    extra: dict[str, object] = field(default_factory=dict)


def make_scores(
    specs: dict[str, dict[str, object]], *, seed: int = 7, run_id: str = "run-test"
) -> list[PairScore]:
    """Simulate pair scores; ``specs`` maps task type to :class:`TaskSpec` keywords."""
    rng = np.random.default_rng(seed)
    extra_rng = np.random.default_rng([seed, 1])
    scores: list[PairScore] = []
    i = 0
    for task_type, kwargs in specs.items():
        spec = TaskSpec(**kwargs)  # type: ignore[arg-type]
        base_err = rng.random(spec.n) < spec.base_error
        cand_err = rng.random(spec.n) < spec.cand_error
        base_fmt = rng.random(spec.n) >= spec.base_format_fail
        flip_fail = rng.random(spec.n) < spec.cand_format_extra_fail
        flip_ok = rng.random(spec.n) < spec.cand_format_recover
        cand_fmt = np.where(base_fmt, ~flip_fail, flip_ok)
        sim = np.clip(rng.normal(spec.similarity_mean, spec.similarity_sd, spec.n), -1.0, 1.0)
        base_e2e = rng.lognormal(np.log(spec.e2e_median_ms), spec.latency_sigma, spec.n)
        base_ttft = rng.lognormal(np.log(spec.ttft_median_ms), spec.latency_sigma, spec.n)
        noise = rng.lognormal(0.0, spec.latency_noise, (2, spec.n))
        tail = np.where(base_e2e > np.quantile(base_e2e, 0.85), spec.cand_tail_factor, 1.0)
        cand_e2e = base_e2e * noise[0] * spec.cand_latency_factor * tail
        cand_ttft = base_ttft * noise[1] * spec.cand_latency_factor
        base_infra = extra_rng.random(spec.n) < spec.base_infra
        cand_infra = extra_rng.random(spec.n) < spec.cand_infra
        cand_empty = extra_rng.random(spec.n) < spec.cand_empty
        base_tokens = extra_rng.poisson(max(spec.tokens_mean, 1.0), spec.n).astype(float)
        cand_tokens = np.round(
            base_tokens
            * spec.cand_token_factor
            * extra_rng.lognormal(0.0, spec.token_noise, spec.n)
        )
        noise_sim = np.clip(
            extra_rng.normal(spec.noise_similarity_mean or 0.0, spec.similarity_sd, spec.n),
            -1.0,
            1.0,
        )
        base_err |= base_infra
        cand_err |= cand_infra
        cand_empty &= ~cand_err
        nan_left = spec.nan_similarity
        for k in range(spec.n):
            either = bool(base_err[k] or cand_err[k])
            similarity: float | None = None if either else float(sim[k])
            if not either and cand_empty[k]:
                similarity = 0.0  # exactly one output is empty
            elif not either and nan_left > 0:
                similarity, nan_left = float("nan"), nan_left - 1
            fmt = {}
            if spec.format_expected:
                fmt = {
                    "baseline_format": None
                    if base_err[k]
                    else FormatFlags(
                        strict=bool(base_fmt[k]),
                        fence_stripped=bool(base_fmt[k]),
                        extracted=bool(base_fmt[k]),
                    ),
                    "candidate_format": None
                    if cand_err[k] or cand_empty[k]
                    else FormatFlags(
                        strict=bool(cand_fmt[k]),
                        fence_stripped=bool(cand_fmt[k]),
                        extracted=bool(cand_fmt[k]),
                    ),
                }
            scores.append(
                PairScore(
                    run_id=run_id,
                    exchange_id=f"ex{i:07d}",
                    task_type=task_type,
                    captured_at=T0 + i * CAPTURE_STEP,
                    similarity=similarity,
                    streamed=spec.streamed,
                    format_expected=spec.format_expected,
                    baseline_error=bool(base_err[k]),
                    candidate_error=bool(cand_err[k]),
                    baseline_infra_error=bool(base_infra[k]),
                    candidate_infra_error=bool(cand_infra[k]),
                    candidate_empty=bool(cand_empty[k]),
                    e2e_ms=SidePair(
                        baseline=None if base_err[k] else float(base_e2e[k]),
                        candidate=None if cand_err[k] else float(cand_e2e[k]),
                    ),
                    ttft_ms=SidePair(
                        baseline=None if base_err[k] else float(base_ttft[k]),
                        candidate=None if cand_err[k] else float(cand_ttft[k]),
                    ),
                    # No reasoning: a stream's first content is its first token; a
                    # non-streamed answer shows at e2e.
                    ttfc_ms=SidePair(
                        baseline=None
                        if base_err[k]
                        else float(base_ttft[k] if spec.streamed else base_e2e[k]),
                        candidate=None
                        if cand_err[k]
                        else float(cand_ttft[k] if spec.streamed else cand_e2e[k]),
                    ),
                    latency_baseline_source=spec.latency_source,
                    output_tokens=SidePair(
                        baseline=None if base_err[k] or not spec.tokens_mean else base_tokens[k],
                        candidate=None
                        if cand_err[k] or not spec.tokens_mean
                        else (0.0 if cand_empty[k] else float(cand_tokens[k])),
                    ),
                    noise_similarity=None
                    if base_err[k] or spec.noise_similarity_mean is None
                    else float(noise_sim[k]),
                    **fmt,
                    **spec.extra,
                )
            )
            i += 1
    return scores


def full_coverage(n: int) -> Coverage:
    """Coverage of a run in which every captured exchange was paired."""
    return Coverage(
        captured=n, replayed=n, paired=n, errored=0, warmup=0, skipped=0, share=1.0 if n else 0.0
    )


def tie_judgements(
    scores: list[PairScore], outcome: QualityOutcome = QualityOutcome.TIE
) -> dict[str, PairJudgement]:
    """One resolved judgement per pair (``outcome``, source judge), by exchange id."""
    return {
        s.exchange_id: PairJudgement(
            run_id=s.run_id,
            exchange_id=s.exchange_id,
            task_type=s.task_type,
            source=JudgementSource.JUDGE,
            outcome=outcome,
        )
        for s in scores
    }


@pytest.fixture
def ties() -> Callable[..., dict[str, PairJudgement]]:
    """:func:`tie_judgements`: every pair judged (a tie by default)."""
    return tie_judgements


@pytest.fixture
def simulate() -> Callable[..., list[PairScore]]:
    """The :func:`make_scores` simulator."""
    return make_scores


@pytest.fixture
def coverage_for() -> Callable[[int], Coverage]:
    """:func:`full_coverage`: a run in which every captured exchange was paired."""
    return full_coverage

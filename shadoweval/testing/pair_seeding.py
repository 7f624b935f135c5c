"""A realistic run for the dashboard: exchanges, replays and pair scores of a seeded run.

:func:`seed_run` writes, through :class:`~shadoweval.storage.Repository` in batches, a run
of ``sum(TASK_MIX.values())`` pairs (or any mix) over task types that differ the way real
traffic does:

* ``chat`` (streamed), ``summarize`` (not streamed: no TTFT), ``extraction`` (JSON asked
  for with ``response_format``: format flags on both sides, a few candidate format
  regressions) and ``code`` (streamed, a few template leaks);
* half of the pairs have a baseline repeat: a noise-floor similarity and the repeat's
  latency as the baseline latency, co-timed (``latency_baseline_source = co_timed``); the
  others use the live latency;
* candidate model errors (HTTP 400), infrastructure errors (timeouts), a few baseline
  errors, empty answers, changed finish reasons, warm-up replays;
* texts: the baseline's answer and the candidate's, which replaces a share of the words
  that grows as the similarity falls (so the word diff has something to show).

Everything is drawn from ``numpy.random.default_rng(seed)``: the same seed gives the same
run. :func:`add_labels` stores a few human labels. The run's frozen policy (its YAML and
hash) is the caller's: this module seeds storage only, it does not gate. The dashboard
tests (``tests/dashboard/conftest.py``) and the benchmark
(``benchmarks/dashboard_render.py``) pass the default policy
(:func:`shadoweval.application.gating.load_gate_policy`) and gate the seeded run with
:func:`shadoweval.application.gating.gate_run`, exactly as ``shadow-eval gate`` does; the benchmark
builds its 200,000-pair run with the same code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import orjson

from shadoweval.records import (
    Exchange,
    FinishReason,
    FormatFlags,
    HumanLabel,
    LabelValue,
    ModelIdentity,
    PairScore,
    ReplayErrorKind,
    ReplayOutcome,
    RequestRecord,
    ResponseRecord,
    SidePair,
    Timings,
    TimingSource,
    Usage,
    UsageSource,
    same_named,
)
from shadoweval.storage import Repository, RunInfo

TASK_MIX: dict[str, int] = {"chat": 160, "summarize": 120, "extraction": 100, "code": 60}
"""Pairs per task type of the test run (440 pairs: looks at 200 and 400)."""

STREAMED = {"chat": True, "summarize": False, "extraction": False, "code": True}
SIMILARITY_MEAN = {"chat": 0.86, "summarize": 0.8, "extraction": 0.9, "code": 0.84}
T0 = datetime(2025, 5, 1, 8, 0, tzinfo=UTC)
BASELINE = ModelIdentity(name="llama-3.1-8b-instruct", base_url="http://live:8000/v1")
CANDIDATE = ModelIdentity(name="llama-3.3-8b-instruct", base_url="http://shadow:8000/v1")

_PROSE = (
    "the model answers questions about orders invoices refunds shipping accounts and "
    "billing it should be concise accurate and polite when the customer asks for a status "
    "update we look up the order number check the warehouse and reply with the expected "
    "delivery date if a refund is due we explain the steps and the time it takes"
)
_SYNONYM_PROSE = (
    "reply respond customer client order purchase quickly promptly check verify parcel "
    "package date day refund reimbursement steps stages"
)
_WORDS = _PROSE.split()
_SYNONYMS = _SYNONYM_PROSE.split()


@dataclass(frozen=True)
class _Draws:
    """Per-pair random draws of one batch (arrays of length n)."""

    similarity: np.ndarray
    noise: np.ndarray
    repeat: np.ndarray
    cand_model_error: np.ndarray
    cand_infra: np.ndarray
    base_error: np.ndarray
    cand_empty: np.ndarray
    base_format_fail: np.ndarray
    cand_format_fail: np.ndarray
    leak: np.ndarray
    finish_changed: np.ndarray
    base_e2e: np.ndarray
    cand_e2e: np.ndarray
    base_ttft: np.ndarray
    cand_ttft: np.ndarray
    base_tokens: np.ndarray
    cand_tokens: np.ndarray
    words: np.ndarray


def _draws(rng: np.random.Generator, task_type: str, n: int) -> _Draws:
    base_e2e = rng.lognormal(np.log(800.0), 0.4, n)
    base_ttft = rng.lognormal(np.log(150.0), 0.4, n)
    base_tokens = rng.poisson(180, n).astype(float)
    return _Draws(
        similarity=np.clip(rng.normal(SIMILARITY_MEAN[task_type], 0.08, n), -1.0, 1.0),
        noise=np.clip(rng.normal(0.9, 0.05, n), -1.0, 1.0),
        repeat=rng.random(n) < 0.5,
        cand_model_error=rng.random(n) < 0.01,
        cand_infra=rng.random(n) < 0.015,
        base_error=rng.random(n) < 0.005,
        cand_empty=rng.random(n) < 0.005,
        base_format_fail=rng.random(n) < 0.03,
        cand_format_fail=rng.random(n) < 0.06,
        leak=rng.random(n) < (0.02 if task_type == "code" else 0.0),
        finish_changed=rng.random(n) < 0.03,
        base_e2e=base_e2e,
        cand_e2e=base_e2e * rng.lognormal(0.0, 0.1, n) * 1.02,
        base_ttft=base_ttft,
        cand_ttft=base_ttft * rng.lognormal(0.0, 0.1, n) * 1.02,
        base_tokens=base_tokens,
        cand_tokens=np.round(base_tokens * rng.lognormal(0.0, 0.15, n)),
        words=rng.integers(12, 48, n),
    )


def _texts(
    rng: np.random.Generator, task_type: str, i: int, n_words: int, similarity: float
) -> tuple[str, str]:
    """Baseline and candidate answers; the candidate swaps ~(1 − similarity)·2 of words."""
    if task_type == "extraction":
        amount = int(rng.integers(5, 500))
        baseline = orjson.dumps({"order": f"A-{i:06d}", "amount_eur": amount}).decode()
        candidate = orjson.dumps({"order": f"A-{i:06d}", "amount_eur": amount + 1}).decode()
        return baseline, candidate
    words = [str(w) for w in rng.choice(_WORDS, n_words)]
    swapped = list(words)
    for k in range(len(swapped)):
        if rng.random() < min(1.0, 2.0 * (1.0 - similarity)):
            swapped[k] = str(rng.choice(_SYNONYMS))
    return " ".join(words).capitalize() + ".", " ".join(swapped).capitalize() + "."


def _request(task_type: str, i: int, streamed: bool) -> RequestRecord:
    body: dict[str, object] = {
        "model": BASELINE.name,
        "messages": [
            {"role": "system", "content": f"You are the {task_type} assistant of ACME."},
            {"role": "user", "content": f"Request {i}: where is my order A-{i:06d}?"},
        ],
        "temperature": 0.2,
        "max_tokens": 256,
        "stream": streamed,
    }
    if task_type == "extraction":
        body["response_format"] = {"type": "json_object"}
    return RequestRecord(body=orjson.dumps(body).decode())


def _ttft(value: float, streamed: bool) -> float | None:
    """TTFT exists only for streamed requests."""
    return float(value) if streamed else None


def _ttfc(ttft: float, e2e: float, streamed: bool) -> float:
    """No reasoning in the seeded answers: the first content is the first token of a
    stream; a non-streamed answer shows all at once (TTFC = e2e)."""
    return float(ttft) if streamed else float(e2e)


def _flags(parses: bool) -> FormatFlags:
    return FormatFlags(strict=parses, fence_stripped=parses, extracted=parses)


def _answer(
    model: str, text: str, finish: FinishReason, tokens: float, streamed: bool
) -> ResponseRecord:
    """One side's successful answer (HTTP 200, reported usage)."""
    return ResponseRecord(
        status_code=200,
        streamed=streamed,
        model=model,
        text=text,
        finish_reason_raw=finish.value,
        finish_reason=finish,
        usage=Usage(completion_tokens=int(tokens), usage_source=UsageSource.REPORTED),
    )


def _measured(ttft: float, e2e: float, streamed: bool) -> Timings:
    """One side's measured timings (TTFT only when streamed)."""
    return Timings(
        ttft_ms=_ttft(ttft, streamed),
        ttfc_ms=_ttfc(ttft, e2e, streamed),
        e2e_ms=float(e2e),
        source=TimingSource.MEASURED,
    )


@dataclass(frozen=True)
class _Fate:
    """What happened to one pair: its ids, which side failed, and the candidate's ending."""

    exchange_id: str
    captured_at: datetime
    task_type: str
    streamed: bool
    infra: bool
    cand_error: bool
    base_error: bool
    cand_empty: bool
    cand_finish: FinishReason
    error_kind: ReplayErrorKind | None


def _fate(prefix: str, i: int, k: int, task_type: str, d: _Draws) -> _Fate:
    """The fate of exchange ``i`` (global index) from draw ``k`` of its task type's batch."""
    infra = bool(d.cand_infra[k])
    cand_error = infra or bool(d.cand_model_error[k])
    error_kind = (
        ReplayErrorKind.TIMEOUT if infra else (ReplayErrorKind.HTTP_STATUS if cand_error else None)
    )
    return _Fate(
        exchange_id=f"{prefix}{i:07d}",
        captured_at=T0 + timedelta(seconds=i),
        task_type=task_type,
        streamed=STREAMED[task_type],
        infra=infra,
        cand_error=cand_error,
        base_error=bool(d.base_error[k]) and not cand_error,
        cand_empty=bool(d.cand_empty[k]) and not cand_error,
        cand_finish=FinishReason.LENGTH if d.finish_changed[k] else FinishReason.STOP,
        error_kind=error_kind,
    )


def _exchange(f: _Fate, i: int, k: int, d: _Draws, baseline_text: str) -> Exchange:
    """The captured exchange (the live baseline's side)."""
    return Exchange(
        exchange_id=f.exchange_id,
        captured_at=f.captured_at,
        task_type=f.task_type,
        request=_request(f.task_type, i, f.streamed),
        response=None
        if f.base_error
        else _answer(BASELINE.name, baseline_text, FinishReason.STOP, d.base_tokens[k], f.streamed),
        timings=Timings() if f.base_error else _measured(d.base_ttft[k], d.base_e2e[k], f.streamed),
        baseline_model=BASELINE,
        source="sidecar:pod-1",
        error_detail="upstream reset" if f.base_error else None,
    )


def _outcome(run_id: str, f: _Fate, i: int, k: int, d: _Draws, text: str) -> ReplayOutcome:
    """The candidate's replay of the exchange."""
    return ReplayOutcome(
        run_id=run_id,
        exchange_id=f.exchange_id,
        model=CANDIDATE,
        pinned_params={"temperature": 0.2, "max_tokens": 256},
        response=None
        if f.cand_error
        else _answer(CANDIDATE.name, text, f.cand_finish, d.cand_tokens[k], f.streamed),
        timings=Timings() if f.cand_error else _measured(d.cand_ttft[k], d.cand_e2e[k], f.streamed),
        error_kind=f.error_kind,
        error_detail=None if f.error_kind is None else f"{f.error_kind.value}: after 30 s",
        warmup=i < 5,
        replayed_at=f.captured_at + timedelta(hours=1),
    )


def _side_pair(f: _Fate, baseline: float | None, candidate: float | None) -> SidePair:
    """A metric of both sides, ``None`` on a side that failed."""
    return SidePair(
        baseline=None if f.base_error else baseline,
        candidate=None if f.cand_error else candidate,
    )


def _score(run_id: str, f: _Fate, i: int, k: int, d: _Draws) -> PairScore:
    """The pair's scores, as the compare worker would store them."""
    extraction = f.task_type == "extraction"
    either = f.cand_error or f.base_error
    baseline_format = _flags(not d.base_format_fail[k]) if extraction and not f.base_error else None
    candidate_format = (
        _flags(not d.cand_format_fail[k])
        if extraction and not (f.cand_error or f.cand_empty)
        else None
    )
    similarity: float | None = None if either else float(d.similarity[k])
    if f.cand_empty and not either:
        similarity = 0.0
    streamed = f.streamed
    return PairScore(
        run_id=run_id,
        **same_named(f, ("exchange_id", "task_type", "captured_at")),
        similarity=similarity,
        noise_similarity=float(d.noise[k]) if d.repeat[k] and not f.base_error else None,
        streamed=streamed,
        format_expected=extraction,
        baseline_format=baseline_format,
        candidate_format=candidate_format,
        baseline_error=f.base_error,
        candidate_error=f.cand_error,
        candidate_infra_error=f.infra,
        candidate_error_kind=f.error_kind,
        candidate_empty=f.cand_empty,
        baseline_finish_reason=FinishReason.UNKNOWN if f.base_error else FinishReason.STOP,
        candidate_finish_reason=FinishReason.UNKNOWN if f.cand_error else f.cand_finish,
        output_tokens=_side_pair(
            f, float(d.base_tokens[k]), 0.0 if f.cand_empty else float(d.cand_tokens[k])
        ),
        template_leaks=("<|im_start|>",) if d.leak[k] and not f.cand_error else (),
        ttft_ms=_side_pair(f, _ttft(d.base_ttft[k], streamed), _ttft(d.cand_ttft[k], streamed)),
        ttfc_ms=_side_pair(
            f,
            _ttfc(d.base_ttft[k], d.base_e2e[k], streamed),
            _ttfc(d.cand_ttft[k], d.cand_e2e[k], streamed),
        ),
        e2e_ms=_side_pair(f, float(d.base_e2e[k]), float(d.cand_e2e[k])),
        latency_baseline_source="co_timed" if d.repeat[k] else "live",
        candidate_warmup=i < 5,
        scored_at=f.captured_at + timedelta(hours=2),
    )


def _pair(
    run_id: str,
    prefix: str,
    i: int,
    k: int,
    task_type: str,
    d: _Draws,
    rng: np.random.Generator,
) -> tuple[Exchange, ReplayOutcome, PairScore]:
    """Exchange ``i`` (global index) from draw ``k`` of its task type's batch."""
    fate = _fate(prefix, i, k, task_type, d)
    baseline_text, candidate_text = _texts(
        rng, task_type, i, int(d.words[k]), float(d.similarity[k])
    )
    if fate.cand_empty:
        candidate_text = ""
    return (
        _exchange(fate, i, k, d, baseline_text),
        _outcome(run_id, fate, i, k, d, candidate_text),
        _score(run_id, fate, i, k, d),
    )


def _interleaved(mix: Mapping[str, int]) -> Iterator[str]:
    """Task types in capture order: spread evenly over time, as live traffic is."""
    total = sum(mix.values())
    positions = sorted(
        ((j + 0.5) * total / n, task_type) for task_type, n in mix.items() for j in range(n)
    )
    for _, task_type in positions:
        yield task_type


def seed_run(
    repo: Repository,
    *,
    policy_yaml: str,
    policy_hash: str,
    mix: Mapping[str, int] = TASK_MIX,
    seed: int = 5,
    run_id: str = "run-dash",
    prefix: str = "dx",
    batch_size: int = 2_000,
    created_at: datetime = T0 - timedelta(minutes=5),
    progress: Callable[[int], None] | None = None,
) -> RunInfo:
    """Create run ``run_id`` frozen with ``policy_yaml`` and store its pairs (see module).

    Args:
        repo: the results database (at the current schema).
        policy_yaml: the run's frozen gate policy, fully resolved YAML.
        policy_hash: its sha256 (as the policy loader computes it).
        mix: pairs per task type (task types of :data:`STREAMED`).
        seed: the seed of every draw.
        run_id: the run created.
        prefix: starts every exchange id (exchange ids are global: two runs in one
            database need two prefixes).
        batch_size: pairs written per repository call.
        created_at: the run's creation time.
        progress: called with the pairs stored so far, after each batch.

    Raises:
        StorageError: a run with this ``run_id`` already exists, or the database failed.
    """
    run = repo.create_run(
        run_id=run_id,
        name=f"{BASELINE.name} → {CANDIDATE.name}",
        baseline=BASELINE,
        candidate=CANDIDATE,
        policy_hash=policy_hash,
        policy_yaml=policy_yaml,
        candidate_base_url=CANDIDATE.base_url,
        source="capture/2025-05-01.jsonl",
        created_at=created_at,
        command="shadow-eval evaluate",
    )
    rng = np.random.default_rng(seed)
    draws = {t: _draws(rng, t, n) for t, n in mix.items()}
    used = dict.fromkeys(mix, 0)
    batch: list[tuple[Exchange, ReplayOutcome, PairScore]] = []
    stored = 0

    def flush() -> None:
        nonlocal stored
        repo.save_exchanges(run_id, [b[0] for b in batch])
        repo.save_outcomes([b[1] for b in batch])
        repo.save_pair_scores([b[2] for b in batch])
        stored += len(batch)
        batch.clear()
        if progress is not None:
            progress(stored)

    for i, task_type in enumerate(_interleaved(mix)):
        k = used[task_type]
        used[task_type] += 1
        batch.append(_pair(run_id, prefix, i, k, task_type, draws[task_type], rng))
        if len(batch) >= batch_size:
            flush()
    if batch:
        flush()
    return run


LABELS: tuple[tuple[int, str, LabelValue, str], ...] = (
    (0, "ana", LabelValue.CANDIDATE_WORSE, "drops the delivery date"),
    (1, "ana", LabelValue.CANDIDATE_BETTER, ""),
    (2, "ana", LabelValue.SAME, ""),
    (3, "ana", LabelValue.CANDIDATE_WORSE, "wrong amount"),
    (4, "ben", LabelValue.CANDIDATE_BETTER, "shorter"),
    (5, "ben", LabelValue.BOTH_BAD, ""),
    (6, "ben", LabelValue.CANDIDATE_WORSE, ""),
    (7, "ben", LabelValue.SAME, ""),
    (8, "ana", LabelValue.CANDIDATE_BETTER, ""),
    (9, "ben", LabelValue.CANDIDATE_WORSE, ""),
    (10, "ana", LabelValue.SAME, ""),
    (11, "ben", LabelValue.CANDIDATE_BETTER, ""),
)
"""(pair index among the labelled pairs, labeller, label, note)."""


def add_labels(repo: Repository, run: RunInfo, *, stride: int = 7) -> list[HumanLabel]:
    """Label every ``stride``-th pair of the run (capture order) as :data:`LABELS` says."""
    scores = repo.load_pair_scores(run.run_id)
    labels = [
        HumanLabel(
            run_id=run.run_id,
            exchange_id=scores[index * stride].exchange_id,
            task_type=scores[index * stride].task_type,
            label=value,
            note=note,
            labeller=labeller,
            labelled_at=T0 + timedelta(days=1, minutes=index),
            source="import" if labeller == "ben" else "dashboard",
        )
        for index, labeller, value, note in LABELS
    ]
    repo.save_labels(labels)
    return labels


SECRET_KEY = "sk-live-CANARYxyz1234567890"
SECRET_EMAIL = "jane.doe@example-corp.com"
"""Canaries the body redactor's ``secret_key`` and ``email`` rules must catch."""


def add_secret_pair(
    repo: Repository, run: RunInfo, *, index: int = 90_000, prefix: str = "dx"
) -> PairScore:
    """Store one ``chat`` pair whose request, baseline and candidate answers carry
    :data:`SECRET_KEY` and :data:`SECRET_EMAIL` (as a table import could), with the run's
    lowest similarity (0.01) so it heads the Samples page and the Divergence previews."""
    rng = np.random.default_rng(1)
    clean = dataclasses.replace(
        _draws(rng, "chat", 1),
        similarity=np.array([0.01]),
        cand_model_error=np.array([False]),
        cand_infra=np.array([False]),
        base_error=np.array([False]),
        cand_empty=np.array([False]),
    )
    exchange, outcome, score = _pair(run.run_id, prefix, index, 0, "chat", clean, rng)
    leak = f"key {SECRET_KEY}, mail {SECRET_EMAIL}"
    body = {
        "model": BASELINE.name,
        "messages": [
            {"role": "system", "content": f"You are the chat assistant. Use {leak}."},
            {"role": "user", "content": [{"type": "text", "text": f"My account: {leak}"}]},
        ],
        "user": SECRET_EMAIL,
        "stream": True,
    }
    assert exchange.response is not None
    assert outcome.response is not None
    exchange = exchange.model_copy(
        update={
            "request": RequestRecord(body=orjson.dumps(body).decode()),
            "response": exchange.response.model_copy(
                update={"text": f"Baseline: I will use {leak} for the refund."}
            ),
        }
    )
    outcome = outcome.model_copy(
        update={
            "response": outcome.response.model_copy(
                update={"text": f"Candidate: noted {leak}; the refund is on its way."}
            )
        }
    )
    repo.save_exchanges(run.run_id, [exchange])
    repo.save_outcomes([outcome])
    repo.save_pair_scores([score])
    return score

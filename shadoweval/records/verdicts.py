"""The gate's records: Check, Coverage, Verdict and their parts."""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from typing import Literal

from pydantic import (
    AwareDatetime,
    Field,
)

from shadoweval.records.base import (
    SCHEMA_VERSION,
    _Record,
    utc_now,
)
from shadoweval.records.enums import (
    INTERRUPTED_WORDS,
    INTERRUPTION_BURST_SHARE,
    CheckOutcome,
    Decision,
)
from shadoweval.records.environment import EnvironmentFailure

REPORT_ONLY = "report only"
"""How a face shows a check that did not pass in a PROMOTE: it did not decide
(:meth:`Verdict.check_status`)."""
NOT_POWERED = "not powered yet"
"""How a face shows a check of a PROMOTE that is open only for want of pairs (too few to
be powered; it did not decide)."""


class Check(_Record):
    """One gate check: one metric in one task type (or pooled).

    ``estimate`` and the interval are on the metric's own scale (a difference in
    proportions, a mean divergence, a quantile ratio); ``margin`` is the policy's
    threshold on that scale; ``p_value`` is one-sided unless ``statistic`` says otherwise.
    ``pairs_needed``: for an open check, the pairs (in its unit) at which it would pass with
    its rates and spread as observed, from the check's own interval and power code; ``None``
    when not computed or out of reach. ``pairs_needed_basis`` says at what it was computed
    (``1-point margin at zero discordance (95% confidence sequence (N* 3454))``).
    ``blocking``: ``False`` where the check cannot hold or promote this verdict — report
    only (latency not co-timed with a replica, similarity in judge mode) or its task type
    below ``min_traffic_share``; set by the gate, default ``True`` (records written before
    the field existed).
    """

    metric: str
    task_type: str
    statistic: str
    estimate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    margin: float | None = None
    n: int = 0
    p_value: float | None = None
    outcome: CheckOutcome
    reason: str
    critical: bool = False
    pairs_needed: int | None = None
    pairs_needed_basis: str = ""
    blocking: bool = True


class RouteCoverage(_Record):
    """One route's part of a run's coverage (:attr:`Coverage.per_route`).

    ``captured``: the run's exchanges on the route; ``replayed``: candidate replays sent;
    ``skipped``: candidate outcomes deliberately not sent, with ``skip_reasons`` (reason →
    count; a reason is the skip detail up to its first ``": "`` when that names a number,
    e.g. ``size``); ``paired``: scored pairs. A captured route with no pair is traffic the
    gate did not evaluate.
    """

    captured: int
    replayed: int = 0
    skipped: int = 0
    paired: int = 0
    skip_reasons: dict[str, int] = Field(default_factory=dict)


class ReplayPace(enum.StrEnum):
    """How a replay spaced its request starts."""

    UNPACED = "unpaced"
    """As fast as the concurrency allows."""
    RATE = "rate"
    """``--rate``: starts ``1 / rate`` seconds apart."""
    CAPTURE = "capture"
    """``--pace capture``: at the captured inter-arrival times, divided by ``--pace-speed``."""


RATE_SHORTFALL_SHARE = 0.95
"""A replay whose measured requests started at less than this share of the asked rate ran
under a different load than asked: its latency checks say so."""
MIN_RATE_STARTS = 20
"""Fewer measured starts than this in a replay pass make no achieved rate (a resumed pass
that sent a handful of requests says nothing about the load)."""


class ReplayPass(_Record):
    """One replay pass over a run's source (a capture log to its end, or one Kafka worker's
    life): how its starts were paced, and the load the measured requests saw.

    ``asked_rate_per_s``: ``--rate``, or for ``--pace capture`` the captured arrival rate
    of the measured requests times ``pace_speed``; ``None`` unpaced. ``achieved_rate_per_s``:
    the start rate of the measured (not warm-up, not skipped) requests, (n − 1) / (last
    start − first start); ``None`` with fewer than 2. ``warmup_starts``: warm-up requests,
    sent and completed before the first measured one of their target. ``concurrency``:
    the replay's ``--concurrency``, requests in flight at most (``None``: not recorded);
    ``streamed`` and ``interrupted``: per target, the streamed replays sent and those that
    were an interrupted stream (:meth:`interruption_advice`). ``translated``: candidate
    replays sent translated to another API, by the route sent to; ``translation_losses``:
    what those translations dropped, by field (:func:`translation_loss_fields`;
    :func:`translation_note`).
    """

    source: Literal["capture_log", "kafka"]
    pace: ReplayPace = ReplayPace.UNPACED
    pace_speed: float | None = None
    asked_rate_per_s: float | None = None
    achieved_rate_per_s: float | None = None
    measured_starts: int = 0
    warmup_starts: int = 0
    concurrency: int | None = None
    streamed: dict[str, int] = Field(default_factory=dict)
    interrupted: dict[str, int] = Field(default_factory=dict)
    translated: dict[str, int] = Field(default_factory=dict)
    translation_losses: dict[str, int] = Field(default_factory=dict)
    finished_at: AwareDatetime = Field(default_factory=utc_now)

    def interruption_advice(self) -> str | None:
        """What to do about a server that interrupts running streams under concurrency:
        a target whose streamed replays were :data:`INTERRUPTED_WORDS` at least
        :data:`INTERRUPTION_BURST_SHARE` of the time while ``concurrency`` > 1 (the worst
        target named); ``None`` otherwise."""
        if self.concurrency is None or self.concurrency <= 1:
            return None
        bursts = [
            (cut / sent, target, cut, sent)
            for target, sent in self.streamed.items()
            if sent and (cut := self.interrupted.get(target, 0)) >= INTERRUPTION_BURST_SHARE * sent
        ]
        if not bursts:
            return None
        share, target, cut, sent = max(bursts)
        return (
            f"the {target} server interrupts running streams under concurrency: {cut} of "
            f"{sent} streamed replays ({share:.0%}) were an {INTERRUPTED_WORDS} at "
            f"--concurrency {self.concurrency}; lower --concurrency (to 1) or fix the "
            "server setting (llama-cpp-python: --interrupt_requests False) and replay again"
        )

    @property
    def shortfall(self) -> bool:
        """The measured requests started at less than :data:`RATE_SHORTFALL_SHARE` of the
        asked rate (on at least :data:`MIN_RATE_STARTS` starts)."""
        return (
            self.asked_rate_per_s is not None
            and self.asked_rate_per_s > 0
            and self.achieved_rate_per_s is not None
            and self.measured_starts >= MIN_RATE_STARTS
            and self.achieved_rate_per_s < RATE_SHORTFALL_SHARE * self.asked_rate_per_s
        )

    def describe_load(self) -> str:
        """``"13.9 req/s of 500 asked"`` (the achieved and asked start rates)."""
        achieved = self.achieved_rate_per_s or 0.0
        asked = self.asked_rate_per_s or 0.0
        how = (
            f" (--pace capture at speed {self.pace_speed:g})"
            if self.pace is ReplayPace.CAPTURE
            else ""
        )
        return f"{achieved:.3g} req/s of {asked:.4g} asked{how}"


class Coverage(_Record):
    """How much of the capture log the run actually compared.

    ``captured`` counts every line of the run's capture log: the decoded exchanges (their
    task types in ``per_task_type``) plus the ``rejected`` lines that could not be decoded.
    ``share`` = ``paired`` / ``captured``: an unreadable line or a skipped replay lowers it.
    ``conflicting_duplicates``: of the ``rejected`` lines, those that reuse an exchange id
    with other content (readable, but the first line with that id is kept); 0 in records
    written before it existed.

    ``replayed``, ``errored``, ``warmup`` and ``skipped`` count candidate outcomes.
    ``baseline_repeat_replayed`` counts the baseline-repeat outcomes that were sent (not
    skipped) and ``baseline_repeat_errored`` those of them with an error: a run whose
    design includes baseline repeats (``baseline_repeat_replayed > 0``) is judged against
    the noise floor even when every repeat failed (0 for records written before these
    counts existed).

    ``per_route``: the same counts by route (:class:`RouteCoverage`; the route without a
    trailing slash), so traffic on a route that was captured but never replayed is named;
    ``paired_per_task_type``: scored pairs by task type (beside ``per_task_type``, the
    captured ones); ``replay_passes``: how each replay pass was paced and the load its
    measured requests saw (:class:`ReplayPass`). Empty in records written before they
    existed. ``environment_failures``: the candidate's pairs that failed for reasons of the
    environment, by cause with an example (:class:`EnvironmentFailure`, issue 29; filled
    by the gate from the pairs and their replays, empty elsewhere).
    ``per_baseline_model``: members by the baseline (live) model their exchange
    recorded — more than one name means the live model changed while capturing.
    ``judge_not_voting``: task type → the sentence of why the LLM judge does not vote there
    (its agreement with labels below the policy's ``judge.min_agreement``: the unit's
    net-harm check holds; :func:`shadoweval.stats.judge_quality.judge_standings`; filled by
    the gate, empty elsewhere).
    """

    captured: int
    replayed: int
    paired: int
    errored: int
    warmup: int
    skipped: int
    share: float
    per_task_type: dict[str, int] = Field(default_factory=dict)
    rejected: int = 0
    conflicting_duplicates: int = 0
    baseline_repeat_replayed: int = 0
    baseline_repeat_errored: int = 0
    per_route: dict[str, RouteCoverage] = Field(default_factory=dict)
    paired_per_task_type: dict[str, int] = Field(default_factory=dict)
    replay_passes: tuple[ReplayPass, ...] = ()
    environment_failures: tuple[EnvironmentFailure, ...] = ()
    per_baseline_model: dict[str, int] = Field(default_factory=dict)
    judge_not_voting: dict[str, str] = Field(default_factory=dict)

    def unevaluated_routes(self) -> dict[str, RouteCoverage]:
        """Routes with captured exchanges and not one scored pair, by name."""
        return {
            route: counts
            for route, counts in sorted(self.per_route.items())
            if counts.captured > 0 and counts.paired == 0
        }

    def interruption_advice(self) -> str | None:
        """The latest replay pass's :meth:`ReplayPass.interruption_advice` that has one."""
        for replay_pass in reversed(self.replay_passes):
            advice = replay_pass.interruption_advice()
            if advice is not None:
                return advice
        return None

    def load_shortfalls(self) -> tuple[ReplayPass, ...]:
        """The replay passes whose measured requests started below the asked rate
        (:attr:`ReplayPass.shortfall`), the worst (lowest achieved / asked) first."""
        short = [p for p in self.replay_passes if p.shortfall]
        return tuple(
            sorted(short, key=lambda p: (p.achieved_rate_per_s or 0) / (p.asked_rate_per_s or 1))
        )


class LatencyCacheHits(_Record):
    """Pairs of a verdict's look left out of the latency checks because an answer was
    served from a cache (:attr:`PairScore.baseline_cache_hit` /
    :attr:`PairScore.candidate_cache_hit`).

    ``pairs`` counts pairs with a cache hit on either side; ``baseline`` and
    ``candidate`` count the sides (a pair cached on both sides counts in both, once in
    ``pairs``). Counted over all the look's pairs, before any other latency exclusion
    (each latency check's reason says how many of its own unit's pairs it left out).
    """

    pairs: int = 0
    baseline: int = 0
    candidate: int = 0


class Verdict(_Record):
    """A gate decision with one check per task type × metric (DESIGN §4).

    ``look`` is the checkpoint index of the pairs judged. Quality judgements (judge,
    human, reference) keep arriving after a checkpoint's pairs are fixed, so a look is
    re-evaluated when they change: ``judgements_sha256`` fingerprints the resolved
    judgements of the look's pairs and ``judgement_look`` counts the evaluations of this
    look with different judgements (1 for the first); the net-harm check spends its level
    over them (:mod:`shadoweval.stats.net_harm`). 0 / ``None`` in verdicts stored before judgements
    existed. ``latency_cache_hits`` counts the pairs left out of latency because an
    answer came from a cache (zeros in verdicts stored before it existed).
    ``infra_sha256`` fingerprints the look's pairs with an infrastructure or environment
    error: a re-run that replays them again re-evaluates the look (``None`` before it
    existed, read as "no such pair").
    ``looks_taken`` are the checkpoint indices of the looks the gate actually made for
    the run, oldest first, ending with ``look``: the α of a look is spent since the look
    before it (:func:`shadoweval.stats.looks.look_levels`), so the levels can be
    recomputed from it. Empty in verdicts stored before it existed (read as every
    checkpoint up to ``look``) and in a verdict before the first checkpoint.
    """

    schema_version: Literal[1] = SCHEMA_VERSION
    run_id: str
    decided_at: AwareDatetime = Field(default_factory=utc_now)
    decision: Decision
    reasons: tuple[str, ...] = ()
    checks: tuple[Check, ...] = ()
    coverage: Coverage
    policy_hash: str
    look: int = 1
    judgement_look: int = 0
    judgements_sha256: str | None = None
    infra_sha256: str | None = None
    latency_cache_hits: LatencyCacheHits = LatencyCacheHits()
    looks_taken: tuple[int, ...] = ()

    def looks_so_far(self) -> tuple[int, ...]:
        """:attr:`looks_taken`, or ``(1, …, look)`` for a verdict stored before it existed
        (the gate then spent α at every checkpoint); ``()`` before the first checkpoint."""
        if self.looks_taken or self.look < 1:
            return self.looks_taken
        return tuple(range(1, self.look + 1))

    def check_status(self, check: Check) -> str:
        """What ``check`` shows on every face (CLI, dashboard, summary rows): its outcome
        (``pass``, ``fail``, ``inconclusive``), except where a check that did not pass
        cannot have decided — every open check of a PROMOTE (every blocking check passed),
        and an inconclusive check that is not :attr:`Check.blocking` in any verdict —
        which shows :data:`NOT_POWERED` when it is open for too few pairs, else
        :data:`REPORT_ONLY` (a report-only check, or a check of a task type below
        ``min_traffic_share``). A FAIL shows as such outside a PROMOTE."""
        if check.outcome is CheckOutcome.PASS:
            return check.outcome.value
        if self.decision is not Decision.PROMOTE and (
            check.blocking or check.outcome is CheckOutcome.FAIL
        ):
            return check.outcome.value
        if check.reason.startswith(("too few", "no ")):
            return NOT_POWERED
        return REPORT_ONLY


def translation_loss_fields(missing_params: tuple[str, ...]) -> dict[str, int]:
    """The request fields an API translation dropped, counted: ``("top_k: no
    chat-completions field, dropped", "messages[2].content[0].cache_control: prompt-caching
    hint dropped")`` → ``{"top_k": 1, "messages[].content[].cache_control": 1}`` (indices
    folded, so the same field of other messages counts together). Entries of
    ``missing_params`` that are sampling parameters left to the server (no ``": "``) are
    not losses and are left out.
    """
    counts: dict[str, int] = {}
    for entry in missing_params:
        name, sep, _ = entry.partition(": ")
        if not sep:
            continue
        key = re.sub(r"\[\d+\]", "[]", name)
        counts[key] = counts.get(key, 0) + 1
    return counts


def translation_note(passes: Sequence[ReplayPass]) -> str | None:
    """Who else is at work when the candidate was reached through an API translation (the
    replay passes' ``translated`` and ``translation_losses`` summed): the gate's note, or
    ``None`` when no replay was translated.

    ``"the candidate was replayed through an API translation (12 as /v1/chat/completions;
    dropped: top_k ×12, thinking ×3): …"`` — the five most frequent losses.
    """
    sent: dict[str, int] = {}
    losses: dict[str, int] = {}
    for replay_pass in passes:
        for route, n in replay_pass.translated.items():
            sent[route] = sent.get(route, 0) + n
        for name, n in replay_pass.translation_losses.items():
            losses[name] = losses.get(name, 0) + n
    if not sent:
        return None
    routes = ", ".join(f"{n} as {route}" for route, n in sorted(sent.items()))
    top = sorted(losses.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    lost = ", ".join(f"{name} ×{n}" for name, n in top) or "nothing"
    return (
        f"the candidate was replayed through an API translation ({routes}; dropped: {lost}): "
        "a difference on a translated route may be the translation, not the model; "
        "prompt-token ratios of translated pairs are not read as tokenizer or template "
        "evidence (two APIs count prompt tokens differently)"
    )

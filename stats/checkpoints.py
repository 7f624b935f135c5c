"""Polling the gate: checkpoints on a fixed prefix of pairs, and terminal verdicts.

A CI job polls the verdict many times while traffic accumulates and acts on it, so a
verdict must mean the same whatever the number of polls (gate-statistics.md §2.1, §2.4):

* **Checkpoints.** Pairs are ordered by capture time (ties by exchange id). A poll with
  n pairs evaluates the first ``n_k`` of them, ``n_k`` the latest checkpoint of the
  geometric schedule ``first_checkpoint · factor^(k−1) ≤ n`` (capped at ``n_max``;
  :func:`shadoweval.stats.sequential.latest_checkpoint`). The verdict's ``look`` is ``k``. A poll
  between two checkpoints evaluates the same prefix and returns the same verdict, so
  polling is deterministic; a caller may cache the verdict per (look, coverage). Fewer
  pairs than the first checkpoint give HOLD ("waiting for the first checkpoint") with
  ``look = 0``.
* **Levels per look**: :func:`shadoweval.stats.looks.look_levels` (confidence sequences tuned at
  the design sample size, or α spending with a cap; union-bound spending for the
  quantile ratios and exact tests), applied by :func:`shadoweval.stats.gate.evaluate_gate`.
  α is spent at the looks the gate actually took, not at every checkpoint the pair count
  passed (Lan & DeMets 1983; Jennison & Turnbull 2000, ch. 7): a look spends what the
  spending function allots between the previous look taken and this one. The looks taken
  are kept in each verdict (:attr:`~shadoweval.records.Verdict.looks_taken`), so the
  next poll (``previous``) knows them and the spent α can be recomputed.
* **Sample cap.** At ``n ≥ n_max`` the last look is final: a gate still undecided there
  is a final HOLD ("inconclusive at the sample cap"), never an implicit PROMOTE.
* **Terminal verdicts.** PROMOTE and ROLLBACK end a run for the evidence they saw:
  :func:`evaluate_poll` returns a terminal ``previous`` verdict unchanged while the
  resolved judgements of its look's pairs are the ones it read (its
  ``judgements_sha256``). New ground truth — a reference import, analysts' labels — or
  new judge outcomes of those pairs reopen the gate (issue 29): the look is evaluated
  again as below, its reasons end with :data:`REOPENED` naming the terminal verdict, and
  the run's verdict history keeps both.
* **Judgements arrive later.** A judge, an analyst or a reference import can judge a
  look's pairs after its checkpoint was evaluated; a look is evaluated once *per set of
  judgements*: a poll of the stored verdict's look with the same judgements
  (:func:`shadoweval.stats.gate.judgements_sha256` of the prefix) returns it, a poll with different
  ones re-evaluates the look as its next ``judgement_look`` (the net-harm checks spend the
  look's levels over these evaluations: :func:`shadoweval.stats.net_harm.judgement_levels`).
* **The environment's failures are replayed again** (issue 29). A look is evaluated again
  when the set of its pairs with an infrastructure or environment error changed
  (:func:`shadoweval.stats.gate.infra_sha256`): a re-run of the run replayed them, and the
  pairs left out of every quality check before are now answered (with the same
  judgements, as the same judgement look).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

import pandas as pd

from shadoweval.records import Coverage, Decision, Verdict, translation_note, utc_now
from shadoweval.stats.gate import (
    environment_reasons,
    evaluate_gate,
    infra_sha256,
    judgements_sha256,
    unevaluated_reasons,
)
from shadoweval.stats.inputs import InvalidDataError
from shadoweval.stats.policy import GatePolicy, policy_hash
from shadoweval.stats.sequential import checkpoint_schedule, latest_checkpoint

__all__ = ["REOPENED", "WAITING", "at_sample_cap", "evaluate_poll", "ordered_by_capture"]

WAITING = "waiting for the first checkpoint"
"""Start of the reason of a verdict given before the first checkpoint (look 0)."""
REOPENED = "reopened"
"""Start of the last reason of a verdict that reopened a terminal one."""


def at_sample_cap(verdict: Verdict, policy: GatePolicy) -> bool:
    """Whether ``verdict`` is the look at the sample cap ``sequential.n_max`` (the capped
    schedule's last checkpoint).

    Such a look is final: more pairs map to the same checkpoint, and :func:`evaluate_poll`
    returns its verdict unchanged unless the judgements of its pairs change (new labels,
    judgements or reference) or a re-run replays its environment failures. So a HOLD
    there (a final HOLD) cannot change while traffic accumulates. False without a cap.
    """
    seq = policy.sequential
    if seq.n_max is None or verdict.look < 1:
        return False
    return verdict.look >= len(checkpoint_schedule(seq.first_checkpoint, seq.factor, seq.n_max))


def ordered_by_capture(pairs: pd.DataFrame) -> pd.DataFrame:
    """``pairs`` ordered by ``captured_at`` then ``exchange_id``, index 0..n−1.

    A frame from :func:`shadoweval.stats.frame.pairs_frame` is already in this order and is
    returned as is (checked in O(n)); any other frame is sorted (stable).
    """
    captured = pairs["captured_at"]
    if captured.is_monotonic_increasing and not bool(captured.duplicated().any()):
        return pairs if isinstance(pairs.index, pd.RangeIndex) else pairs.reset_index(drop=True)
    ordered = pairs.sort_values(["captured_at", "exchange_id"], kind="mergesort")
    return ordered.reset_index(drop=True)


def _waiting(
    pairs: pd.DataFrame,
    policy: GatePolicy,
    run_id: str,
    coverage: Coverage,
    decided_at: datetime,
) -> Verdict:
    """The look-0 HOLD: waiting for the first checkpoint (or no data), followed by what
    will hold the run at the checkpoint too (:func:`shadoweval.stats.gate.unevaluated_reasons`)."""
    n = len(pairs)
    first = policy.sequential.first_checkpoint
    reason = (
        f"{WAITING}: {n} of {first} pairs (sequential.first_checkpoint); the gate decides "
        "only at checkpoints, so that repeated polls stay valid"
    )
    if n == 0:
        reason = "no data: no scored pairs for this run; nothing can be promoted"
    translated = translation_note(coverage.replay_passes)
    return Verdict(
        run_id=run_id,
        decided_at=decided_at,
        decision=Decision.HOLD,
        reasons=(
            *environment_reasons(coverage),
            reason,
            *unevaluated_reasons(pairs, policy, coverage),
            *([translated] if translated else []),
        ),
        checks=(),
        coverage=coverage,
        policy_hash=policy_hash(policy),
        look=0,
    )


def evaluate_poll(
    pairs: pd.DataFrame,
    policy: GatePolicy,
    *,
    run_id: str,
    coverage: Coverage,
    decided_at: datetime | None = None,
    previous: Verdict | None = None,
) -> Verdict:
    """Evaluate one poll of a run: the gate on the prefix of its latest checkpoint.

    Args:
        pairs: all pairs of the run so far (columns of :data:`shadoweval.stats.frame.PAIRS_COLUMNS`,
            any order; ordered here by capture time).
        policy: the run's frozen policy (its ``sequential`` block sets the schedule).
        run_id: the run.
        coverage: the run's replay coverage now (validity is judged on it and on the
            task mix of *all* pairs so far, not only the prefix).
        decided_at: time of the decision, default now (UTC).
        previous: the run's latest verdict, if any: a PROMOTE or ROLLBACK is terminal
            and returned unchanged unless the judgements of its look's pairs changed
            since (:func:`_reopens`: then the gate is evaluated again, the reasons end
            with :data:`REOPENED`); a verdict of the same look ``k ≥ 1`` under the same
            policy and with the same judgements of the prefix (its
            ``judgements_sha256``; a verdict stored before judgements existed matches a
            prefix without judgements) is returned unchanged too, so each checkpoint is
            evaluated once per set of judgements. Pairs scored out of capture order
            (concurrent replays, Kafka) would otherwise change the prefix between two
            polls of one look and test new data at the same ``α_k`` — a quiet form of
            peeking. With different judgements the look is re-evaluated as judgement
            look ``previous.judgement_look + 1`` — or as the same judgement look when the
            previous evaluation read no judgement at all (it spent no net-harm level).
            Its :attr:`~shadoweval.records.Verdict.looks_taken` say which checkpoints the
            gate looked at: a new look spends the α allotted since the last of them.

    Returns:
        The verdict, with ``look`` = the checkpoint index (0 before the first
        checkpoint, when the verdict is HOLD without checks).

    Raises:
        InvalidDataError: ``pairs`` lacks a required column.
    """
    reopened: Verdict | None = None
    if previous is not None and previous.decision in (Decision.PROMOTE, Decision.ROLLBACK):
        if not _reopens(pairs, policy, previous):
            return previous
        reopened = previous
    decided = decided_at if decided_at is not None else utc_now()
    seq = policy.sequential
    n = len(pairs)
    checkpoint = latest_checkpoint(
        n, first=seq.first_checkpoint, factor=seq.factor, n_max=seq.n_max
    )
    if checkpoint is None:
        if "captured_at" not in pairs.columns:
            raise InvalidDataError("pairs table lacks columns: captured_at")
        return _waiting(pairs, policy, run_id, coverage, decided)
    look, n_k = checkpoint
    ordered = ordered_by_capture(pairs)
    looks_taken = _looks_taken(previous, look)
    judgement_look = _judgement_look(previous, ordered.iloc[:n_k], look, policy, coverage)
    if judgement_look == 0 and previous is not None:
        return previous
    paired_counts: Mapping[str, int] = {
        str(t): int(c) for t, c in ordered["task_type"].astype(str).value_counts().items()
    }
    final = seq.n_max is not None and n >= seq.n_max
    verdict = evaluate_gate(
        ordered.iloc[:n_k],
        policy,
        run_id=run_id,
        coverage=coverage,
        look=look,
        decided_at=decided,
        final=final,
        paired_per_task_type=paired_counts,
        judgement_look=judgement_look,
        looks_taken=looks_taken,
    )
    if reopened is None:
        return verdict
    return verdict.model_copy(update={"reasons": (*verdict.reasons, _reopened_reason(reopened))})


def _judgement_look(
    previous: Verdict | None,
    prefix: pd.DataFrame,
    look: int,
    policy: GatePolicy,
    coverage: Coverage,
) -> int:
    """The judgement look of evaluating checkpoint ``look`` on ``prefix`` again, or 0 when
    the stored ``previous`` verdict of that look read the same evidence (return it).

    The same evidence: the same resolved judgements and PPI inputs
    (:func:`shadoweval.stats.gate.judgements_sha256`), the same pairs with infrastructure
    errors (:func:`infra_sha256`) and the same task types where the LLM judge does not vote
    (``coverage.judge_not_voting``, issue 31). An evaluation that read no judgement spent
    nothing of the net-harm level (with no judged pair its check can neither pass a changed
    unit nor find harm), so the first evaluation with judgements is judgement look 1 —
    e.g. the gate at the end of ``evaluate``, before ``labels import-reference`` or
    ``judge run``, costs nothing.
    """
    if previous is None or previous.look != look or previous.policy_hash != policy_hash(policy):
        return 1
    fingerprint = judgements_sha256(prefix)
    nothing = judgements_sha256(prefix.iloc[:0])
    stored = previous.judgements_sha256 or nothing
    same_infra = (previous.infra_sha256 or infra_sha256(prefix.iloc[:0])) == infra_sha256(prefix)
    same_floor = previous.coverage.judge_not_voting == coverage.judge_not_voting
    if stored == fingerprint and same_infra and same_floor:
        return 0
    previous_look = max(previous.judgement_look, 1)
    # The same judgements read again (a changed floor only holds a PASS: it never adds a
    # FAIL), or none read before: no new test of the net-harm level.
    return previous_look if stored in (nothing, fingerprint) else previous_look + 1


def _look_prefix(pairs: pd.DataFrame, policy: GatePolicy, look: int) -> pd.DataFrame:
    """The first ``n_k`` pairs by capture time of checkpoint ``look`` (all pairs when the
    schedule or the pairs end before it; none for look 0)."""
    if look <= 0:
        return pairs.iloc[:0]
    seq = policy.sequential
    schedule = checkpoint_schedule(seq.first_checkpoint, seq.factor, seq.n_max, limit=max(64, look))
    n_k = schedule[min(look, len(schedule)) - 1]
    return ordered_by_capture(pairs).iloc[:n_k]


def _reopens(pairs: pd.DataFrame, policy: GatePolicy, terminal: Verdict) -> bool:
    """Whether a terminal verdict is reopened: the resolved judgements of its look's pairs
    (:func:`shadoweval.stats.gate.judgements_sha256`) differ from the ones it read
    (``judgements_sha256``; ``None``, stored before judgements existed, read none).
    Under another policy than the run's it never reopens (the policy is frozen)."""
    if terminal.policy_hash != policy_hash(policy):
        return False
    prefix = _look_prefix(pairs, policy, terminal.look)
    seen = terminal.judgements_sha256 or judgements_sha256(prefix.iloc[:0])
    return judgements_sha256(prefix) != seen


def _reopened_reason(terminal: Verdict) -> str:
    """The reason that says which terminal verdict new evidence reopened."""
    decided = terminal.decided_at.isoformat(timespec="seconds")
    return (
        f"{REOPENED}: the {terminal.decision.value.upper()} of {decided} (look "
        f"{terminal.look}) is terminal only for the evidence it saw; judgements of its pairs "
        "arrived after it (ground truth: a reference import or analysts' labels, or judge "
        "outcomes), so the gate was evaluated again"
    )


def _looks_taken(previous: Verdict | None, look: int) -> tuple[int, ...]:
    """The run's looks taken, ending with ``look``: the previous verdict's, plus ``look``
    when it is a new checkpoint.

    A look re-evaluated (same checkpoint, new judgements) keeps the looks as they were;
    a poll that finds fewer pairs than the previous look (pairs deleted) is tested at the
    smallest levels, as if every checkpoint up to it had been looked at.
    """
    before = previous.looks_so_far() if previous is not None else ()
    if not before or before[-1] < look:
        return (*before, look)
    if before[-1] == look:
        return before
    return tuple(range(1, look + 1))

"""The gate's lines on *why* sides failed, where the error kind says less than the cause:
interrupted streams and the candidate's context length
(:mod:`shadoweval.llm_protocol.interruption`, one rule and one wording everywhere).

Interrupted streams (HTTP 200, cut before their finish_reason) are infrastructure errors:
left out of every quality check and gated by ``infra_error_rate``, never scored as empty
answers. A failure at the candidate's own context window is gated with them under
``infra_error_rate.context_length: hold`` (the default) and counted as the candidate's
error under ``rollback``; the line says which the policy chose, so the decision never
contradicts its reasons.
"""

from __future__ import annotations

import pandas as pd

from shadoweval.records import CONTEXT_LENGTH_WORDS, INTERRUPTED_WORDS, Coverage
from shadoweval.stats.policy import GatePolicy

__all__ = ["failure_cause_lines"]


def _count(pairs: pd.DataFrame, column: str) -> int:
    return int(pairs[column].sum()) if column in pairs.columns else 0


def _shared_context_failures(pairs: pd.DataFrame) -> int:
    """Pairs where the candidate failed at its context window and the baseline failed too
    (an error or an infrastructure error): the request was too long for both sides (the
    real llama.cpp run's deliberately over-context prompt, 2,261 tokens against n_ctx
    2,048 on both)."""
    if "candidate_context_length" not in pairs.columns:
        return 0
    failed = pairs["baseline_fail"].astype(bool) | pairs["baseline_infra_error"].astype(bool)
    return int((pairs["candidate_context_length"].astype(bool) & failed).sum())


def failure_cause_lines(pairs: pd.DataFrame, policy: GatePolicy, coverage: Coverage) -> list[str]:
    """The reason lines on interrupted streams and context-length failures of the look's
    ``pairs`` (counts over all pairs; empty when there are none), with the replay's advice
    on a server that interrupts running streams under concurrency
    (:meth:`~shadoweval.records.Coverage.interruption_advice`)."""
    n = len(pairs)
    lines: list[str] = []
    candidate = _count(pairs, "candidate_interrupted")
    baseline = _count(pairs, "baseline_interrupted")
    advice = coverage.interruption_advice()
    if candidate or baseline or advice:
        sides = [
            f"{count} of {n} {side} answers"
            for count, side in ((candidate, "candidate"), (baseline, "live baseline"))
            if count
        ]
        line = (
            f"{INTERRUPTED_WORDS}: {' and '.join(sides) or 'replays'} were interrupted: "
            "infrastructure, not the model's answers (left out of every quality check and "
            "gated by infra_error_rate, never scored as empty answers)"
        )
        lines.append(f"{line}; {advice}" if advice else line)
    context = _count(pairs, "candidate_context_length")
    if context:
        shared = _shared_context_failures(pairs)
        also = (
            f"; {shared} of them failed on the baseline too (a request longer than either "
            "side's context: the traffic's, not the candidate's configuration)"
            if shared
            else ""
        )
        what = (
            f"{CONTEXT_LENGTH_WORDS}: {context} of {n} candidate requests failed at the "
            "candidate's context window (a stream cut after content without a finish chunk "
            f"or [DONE], or an HTTP error naming the context length){also}"
        )
        if shared == context:
            lines.append(
                f"{what}: gated with the infrastructure errors; nothing to change on the candidate"
            )
            return lines
        if policy.infra_error_rate.context_length == "rollback":
            lines.append(
                f"{what}: policy infra_error_rate.context_length is rollback, so they count "
                "as the candidate's errors (error_rate)"
            )
        else:
            lines.append(
                f"{what}: policy infra_error_rate.context_length is hold, so they are gated "
                "with the infrastructure errors and alone never roll the candidate back; "
                "raise the candidate's context length (e.g. llama.cpp n_ctx) and replay again"
            )
    return lines

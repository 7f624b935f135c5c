"""Several candidates on one shadow sample (issue 31 item 4).

Each candidate gets its own run — run id ``<group>-<name>``, the group being ``--run-id``
or a fresh id, recorded in the run's settings as ``candidate_group`` / ``candidate_name``
— and every run replays the same captured requests, is scored against the same baseline
(live) answers and gated by its own gate, unchanged. The runs are then compared
(:func:`shadoweval.stats.candidates.compare_candidates`: which are no worse with Holm's
family-wise control, which is best by Bonferroni-adjusted paired sign tests).

Used by ``shadow-eval evaluate`` and ``replay run`` with more than one ``--candidate-url``,
and by the dashboard's Candidates page (:func:`stored_comparison`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from shadoweval.application.candidate_runs import (
    CandidateTarget,
    candidate_run_requests,
    evaluated_so_far,
    parse_candidate_targets,
    same_url_warnings,
)
from shadoweval.application.database import open_repository
from shadoweval.application.evaluation import (
    EvaluationRequest,
    EvaluationResult,
    evaluate_in,
    judge_preflight,
)
from shadoweval.application.gating import GateResult, gate_run
from shadoweval.application.judging.cost import check_judge_arms, request_arms
from shadoweval.application.replaying import replay_pacing
from shadoweval.application.run_views.direction import with_judgements
from shadoweval.application.run_views.pairs import frozen_policy_pairs
from shadoweval.application.target_preflight import naming_evaluated, preflight_candidates
from shadoweval.compare.encoders import Encoder
from shadoweval.config import Settings
from shadoweval.records import Decision
from shadoweval.stats.candidates import (
    DIRECTION_NOTE,
    CandidateComparison,
    CandidateEvidence,
    compare_candidates,
    request_direction,
)
from shadoweval.stats.judge_quality import apply_judge_floor
from shadoweval.stats.judgements import resolve_judgements
from shadoweval.storage import Repository, RunInfo

__all__ = [
    "DIRECTION_NOTE",
    "CandidateComparison",
    "CandidateTarget",
    "CandidatesEvaluation",
    "candidate_run_requests",
    "candidate_runs",
    "compare_gate_results",
    "evaluate_candidates",
    "evaluated_so_far",
    "gate_candidates",
    "overall_decision",
    "parse_candidate_targets",
    "same_url_warnings",
    "stored_comparison",
]


def compare_gate_results(named: Sequence[tuple[str, GateResult]]) -> CandidateComparison:
    """The comparison of gated runs, at the first run's policy ``alpha`` (the runs of one
    sample share their policy)."""
    evidence = [
        CandidateEvidence(name, gate.verdict, request_direction(gate.pairs)) for name, gate in named
    ]
    return compare_candidates(evidence, alpha=float(named[0][1].policy.alpha))


def overall_decision(comparison: CandidateComparison) -> Decision:
    """The decision several candidates exit with: PROMOTE when a candidate is no worse
    (the pick, or a tie, exists); else HOLD when some candidate's gate held (or promoted
    without surviving Holm's adjustment); else ROLLBACK (every candidate rolled back)."""
    if comparison.no_worse:
        return Decision.PROMOTE
    if any(r.decision is not Decision.ROLLBACK for r in comparison.candidates):
        return Decision.HOLD
    return Decision.ROLLBACK


@dataclass(frozen=True, slots=True)
class CandidatesEvaluation:
    """Each candidate's evaluation (in the order given) and their comparison."""

    results: tuple[tuple[str, EvaluationResult], ...]
    comparison: CandidateComparison

    @property
    def decision(self) -> Decision:
        """:func:`overall_decision`."""
        return overall_decision(self.comparison)

    def report(self) -> dict[str, Any]:
        """The JSON report: ``decision`` (:func:`overall_decision`), ``comparison``
        (:meth:`CandidateComparison.as_dict`), and ``candidates``: per candidate its name,
        run id, model, decision, reasons, no-worse flag, and its full one-candidate report
        (:meth:`EvaluationResult.report`) under ``report``."""
        by_name = {r.name: r for r in self.comparison.candidates}
        return {
            "decision": self.decision.value,
            "comparison": self.comparison.as_dict(),
            "candidates": [
                {
                    "name": name,
                    "run_id": result.run.run_id,
                    "candidate": result.run.candidate.model_dump(mode="json"),
                    "decision": result.gate.verdict.decision.value,
                    "reasons": list(result.gate.verdict.reasons),
                    "no_worse": by_name[name].no_worse,
                    "report": result.report(),
                }
                for name, result in self.results
            ],
        }

    def write_report(self, path: Path) -> None:
        """Write :meth:`report` as indented JSON (UTF-8), creating the parent directory.

        Raises:
            OSError: the file cannot be written.
        """
        import json

        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.report(), indent=2, ensure_ascii=False) + "\n", "utf-8")


def evaluate_candidates(
    request: EvaluationRequest,
    targets: Sequence[CandidateTarget],
    settings: Settings,
    *,
    console: Console | None = None,
) -> CandidatesEvaluation:
    """Evaluate every candidate on the request's capture log, one run each (replayed one
    after the other, each to the log's end; the encoder loaded once, the judge's
    preflight sent once), and compare them.

    All or nothing up front: every candidate's model is resolved and every target (each
    candidate, the baseline replica once) preflighted before any run is created or
    replayed (:func:`shadoweval.application.target_preflight.preflight_candidates`), and
    a judge that is any candidate is refused then. An error after that (the database, a
    resumed run that differs) names the candidate it stopped and the candidates already
    evaluated, with their run ids (:func:`evaluated_so_far`).

    Raises:
        ShadowEvalError: as :func:`shadoweval.application.evaluation.evaluate`; a
            :class:`~shadoweval.errors.PreflightError` names the candidate.
        FileNotFoundError: the capture log does not exist.
    """
    replay_pacing(settings.replay)
    judge = judge_preflight(request, settings)
    named = candidate_run_requests(request.run, targets)
    run_requests = preflight_candidates(
        request.capture_log,
        [(t, r) for t, (_, r) in zip(targets, named, strict=True)],
        settings,
        console=console,
    )
    if request.judge:  # each candidate's resolved name and URL, before anything is replayed
        for r in run_requests:
            arms = request_arms(
                r.candidate_url, r.candidate_model, r.baseline_repeat_url, r.baseline_repeat_model
            )
            check_judge_arms(judge[0].model, judge[0].url, arms)
    encoders: dict[str, Encoder] = {}
    results: list[tuple[str, EvaluationResult]] = []
    with open_repository(
        settings.database.url, body_redaction=settings.capture.body_redaction
    ) as repo:
        for target, run_request in zip(targets, run_requests, strict=True):
            if console is not None:
                console.print(
                    f"candidate {target.name}: {run_request.candidate_url}", highlight=False
                )
            done = [(name, r.run.run_id) for name, r in results]
            with naming_evaluated(target, str(run_request.run_id), done):
                result = evaluate_in(
                    repo,
                    request,
                    run_request,
                    settings,
                    judge=judge,
                    console=console,
                    encoders=encoders,
                    preflighted=True,
                )
            results.append((target.name, result))
    comparison = compare_gate_results([(n, r.gate) for n, r in results])
    return CandidatesEvaluation(tuple(results), comparison)


def stored_comparison(
    repo: Repository, runs: Sequence[tuple[str, RunInfo]]
) -> CandidateComparison | None:
    """The comparison of stored runs by their latest verdicts (nothing is gated or
    written): each run's pairs under its frozen policy with their resolved judgements.
    ``None`` when a run has no verdict yet.

    Raises:
        ConfigError: a frozen policy no longer parses.
        StorageError: the database failed.
    """
    evidence = []
    alpha = 0.025
    for name, run in runs:
        verdict = repo.latest_verdict(run.run_id)
        if verdict is None:
            return None
        policy, pairs = frozen_policy_pairs(repo, run, None)
        labels = repo.load_labels(run.run_id)
        # As the gate reads them: a judge below its floor does not vote.
        voting = apply_judge_floor(repo.list_judgements(run.run_id), labels, policy.judge).voting
        resolved = resolve_judgements(voting, labels)
        evidence.append(
            CandidateEvidence(name, verdict, request_direction(with_judgements(pairs, resolved)))
        )
        alpha = float(policy.alpha)
    return compare_candidates(evidence, alpha=alpha)


def gate_candidates(
    repo: Repository, run: RunInfo, *, command: str
) -> tuple[list[tuple[str, RunInfo, GateResult]], CandidateComparison]:
    """Gate every run of ``run``'s candidate group (:func:`candidate_runs`, each under its
    frozen policy: :func:`shadoweval.application.gating.gate_run`, verdicts stored) and
    compare them (:func:`compare_gate_results`): the pick after a Kafka replay, or after
    ground truth arrived for runs ``evaluate`` compared before.

    Raises:
        ConfigError: a frozen policy no longer parses.
        StorageError: the database failed.
    """
    gated = [
        (name, member, gate_run(repo, member, command=command))
        for name, member in candidate_runs(repo, run)
    ]
    return gated, compare_gate_results([(name, gate) for name, _, gate in gated])


def candidate_runs(repo: Repository, run: RunInfo) -> list[tuple[str, RunInfo]]:
    """The runs of ``run``'s candidate group with their candidate names (``run`` alone,
    named by its candidate model, when it has no group)."""
    group = run.settings.get("candidate_group")
    if not isinstance(group, str):
        return [(run.candidate.name, run)]
    members = [r for r in repo.list_runs() if r.settings.get("candidate_group") == group]
    return [
        (str(r.settings.get("candidate_name") or r.candidate.name), r)
        for r in sorted(members, key=lambda r: (r.created_at, r.run_id))
    ]

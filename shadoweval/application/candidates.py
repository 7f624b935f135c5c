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

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from shadoweval.application.database import open_repository
from shadoweval.application.evaluation import (
    EvaluationRequest,
    EvaluationResult,
    evaluate_in,
    judge_preflight,
)
from shadoweval.application.gating import GateResult
from shadoweval.application.replaying import replay_pacing
from shadoweval.application.run_views.direction import with_judgements
from shadoweval.application.run_views.pairs import frozen_policy_pairs
from shadoweval.application.runs import RunRequest
from shadoweval.compare.encoders import Encoder
from shadoweval.config import Settings
from shadoweval.errors import ConfigError
from shadoweval.records import Decision
from shadoweval.stats.candidates import (
    CandidateComparison,
    CandidateEvidence,
    compare_candidates,
    request_direction,
)
from shadoweval.stats.judgements import resolve_judgements
from shadoweval.storage import Repository, RunInfo

__all__ = [
    "CandidateTarget",
    "CandidatesEvaluation",
    "candidate_run_requests",
    "candidate_runs",
    "compare_gate_results",
    "evaluate_candidates",
    "overall_decision",
    "parse_candidate_targets",
    "stored_comparison",
]

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,40}")
_NAMED_URL = re.compile(r"^([A-Za-z0-9_.-]{1,40})=(.+)$")


@dataclass(frozen=True, slots=True)
class CandidateTarget:
    """One candidate: its name (unique on the sample), base URL and model name (``None``:
    its ``/v1/models``)."""

    name: str
    url: str
    model: str | None = None


def parse_candidate_targets(
    urls: Sequence[str], models: Sequence[str] | None = None
) -> list[CandidateTarget]:
    """``--candidate-url`` values (``URL`` or ``NAME=URL``) and ``--candidate-model``
    values (none, or one per URL, in the same order) → the candidates.

    A candidate without a name is named by its model when given, else ``c<i>`` (1-based).

    Raises:
        ConfigError: no URL, a model count other than 0 or the URLs', a name that is not
            1–40 of ``[A-Za-z0-9_.-]``, or a repeated name (each naming the value).
    """
    if not urls:
        raise ConfigError("--candidate-url: at least one is needed", field="candidate_url")
    models = list(models or [])
    if models and len(models) != len(urls):
        raise ConfigError(
            f"--candidate-model given {len(models)} times for {len(urls)} --candidate-url: "
            "give none or one per candidate, in the same order",
            field="candidate_model",
            value=", ".join(models),
        )
    targets = []
    for i, text in enumerate(urls):
        model = models[i] if models else None
        match = _NAMED_URL.match(text)
        name, url = (match.group(1), match.group(2)) if match else (model or f"c{i + 1}", text)
        if not _NAME.fullmatch(name):
            raise ConfigError(
                f"--candidate-url {text!r}: candidate name {name!r} must be 1-40 of "
                "letters, digits, '_', '.', '-' (write NAME=URL)",
                field="candidate_url",
                value=text,
            )
        targets.append(CandidateTarget(name, url, model))
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise ConfigError(
            f"--candidate-url: candidate names must differ, got {names} (write NAME=URL)",
            field="candidate_url",
            value=", ".join(names),
        )
    return targets


def candidate_run_requests(
    base: RunRequest, targets: Sequence[CandidateTarget]
) -> list[tuple[str, RunRequest]]:
    """One run request per candidate: ``base`` with the candidate's URL and model, run id
    ``<group>-<name>`` (the group: ``base.run_id``, else a fresh 12-hex-digit id), name
    ``<base name> [<name>]`` when ``base`` names the run, and the group recorded."""
    group = base.run_id or uuid.uuid4().hex[:12]
    return [
        (
            t.name,
            replace(
                base,
                candidate_url=t.url,
                candidate_model=t.model,
                run_id=f"{group}-{t.name}",
                run_name=f"{base.run_name} [{t.name}]" if base.run_name else None,
                candidate_name=t.name,
                candidate_group=group,
            ),
        )
        for t in targets
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

    Raises:
        ShadowEvalError: as :func:`shadoweval.application.evaluation.evaluate`.
        FileNotFoundError: the capture log does not exist.
    """
    replay_pacing(settings.replay)
    judge = judge_preflight(request, settings)
    encoders: dict[str, Encoder] = {}
    results: list[tuple[str, EvaluationResult]] = []
    with open_repository(
        settings.database.url, body_redaction=settings.capture.body_redaction
    ) as repo:
        for name, run_request in candidate_run_requests(request.run, targets):
            if console is not None:
                console.print(f"candidate {name}: {run_request.candidate_url}", highlight=False)
            result = evaluate_in(
                repo,
                request,
                run_request,
                settings,
                judge=judge,
                console=console,
                encoders=encoders,
            )
            results.append((name, result))
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
        resolved = resolve_judgements(
            repo.list_judgements(run.run_id), repo.load_labels(run.run_id)
        )
        evidence.append(
            CandidateEvidence(name, verdict, request_direction(with_judgements(pairs, resolved)))
        )
        alpha = float(policy.alpha)
    return compare_candidates(evidence, alpha=alpha)


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

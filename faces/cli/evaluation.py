"""One whole evaluation: capture log → replay → scores → verdict → report.

Used by ``shadow-eval evaluate`` and ``shadow-eval demo``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import JsonValue

from application.database import open_repository
from application.gating import GateResult, gate_run
from faces.cli.pipeline import (
    StageTimer,
    TargetConfig,
    _policy_path,
    baseline_identity,
    compare_run,
    make_encoder,
    replay_capture_log,
    run_async,
)
from faces.cli.render import summary_records

if TYPE_CHECKING:
    from rich.console import Console

    from compare.worker import CompareReport
    from replay.runner import ReplayReport
    from shadoweval.config import Settings
    from shadoweval.storage import Repository, RunInfo


@dataclass(frozen=True, slots=True)
class EvaluationRequest:
    """What to evaluate and how (the ``evaluate`` command's options, resolved)."""

    capture_log: Path
    candidate_url: str
    candidate_model: str | None = None
    baseline_repeat_url: str | None = None
    baseline_repeat_model: str | None = None
    baseline_repeat_share: float = 0.1
    policy_path: Path | None = None
    run_name: str | None = None
    run_id: str | None = None
    encoder: str = "minilm"
    device: str = "cpu"
    structured_task_types: frozenset[str] = frozenset()
    progress: bool = True
    command: str = "shadow-eval evaluate"


@dataclass(slots=True)
class EvaluationResult:
    """Everything one evaluation produced."""

    run: RunInfo
    replay: ReplayReport
    compare: CompareReport
    gate: GateResult
    stages_s: dict[str, float] = field(default_factory=dict)
    rejected: dict[str, int] = field(default_factory=dict)

    def report(self) -> dict[str, Any]:
        """The JSON report: run, stage timings, replay and compare counts, table, verdict."""
        run = self.run
        return {
            "run": {
                "run_id": run.run_id,
                "name": run.name,
                "baseline": run.baseline.model_dump(mode="json"),
                "candidate": run.candidate.model_dump(mode="json"),
                "candidate_base_url": run.candidate_base_url,
                "source": run.source,
                "policy_hash": run.policy_hash,
            },
            "stages_s": self.stages_s,
            "replay": self.replay.as_dict(),
            "compare": self.compare.as_dict(),
            "rejected": self.rejected,
            "per_task_type": summary_records(self.gate.summary),
            "verdict": self.gate.verdict.model_dump(mode="json"),
        }

    def write_report(self, path: Path) -> None:
        """Write :meth:`report` as indented JSON."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.report(), indent=2, ensure_ascii=False) + "\n", "utf-8")


def prepare_run(
    repo: Repository, request: EvaluationRequest, settings: Settings
) -> tuple[RunInfo, list[TargetConfig]]:
    """Create the run (or resume ``request.run_id``) and resolve the replay targets.

    The baseline identity comes from the capture log; the candidate's from the request or
    the server's ``/v1/models``. The policy is frozen into the run (YAML and hash).

    Raises:
        ConfigError: the run exists with another candidate or baseline model, or under a
            different policy (a new model or policy means a new run).
        ShadowEvalError: the capture log holds no exchange, or a model name cannot be read.
    """
    from faces.cli.pipeline import resolve_run

    return resolve_run(
        repo,
        request,
        settings,
        baseline=baseline_identity(request.capture_log),
        source=str(request.capture_log),
    )


def audit_policy(
    repo: Repository,
    run: RunInfo,
    presented_hash: str,
    *,
    command: str,
    policy_path: Path | None,
    detail: dict[str, JsonValue] | None = None,
) -> bool:
    """Record in the run's policy audit log that ``command`` presented a policy for it.

    The same hash as the run's frozen policy is a ``used`` row; another hash is a
    ``refused`` row holding both hashes (the caller then refuses: a different policy
    means a new run). ``policy_path`` is ``None`` for the shipped default policy, or when
    the command applies the run's own frozen policy without reading a file.

    Returns:
        True when the presented policy is the run's.

    Raises:
        StorageError: the row cannot be written.
    """
    from shadoweval.storage import PolicyAuditAction

    matches = presented_hash == run.policy_hash
    extra: dict[str, JsonValue] = {"policy_path": _policy_path(policy_path), **(detail or {})}
    if not matches:
        extra |= {"run_policy_hash": run.policy_hash, "presented_policy_hash": presented_hash}
    repo.record_policy_audit(
        run_id=run.run_id,
        policy_hash=presented_hash,
        action=PolicyAuditAction.USED if matches else PolicyAuditAction.REFUSED,
        command=command,
        detail=extra,
    )
    return matches


def evaluate(
    request: EvaluationRequest, settings: Settings, *, console: Console | None = None
) -> EvaluationResult:
    """Run one evaluation end to end and return what it produced.

    Raises:
        ShadowEvalError: bad input (unreadable log, bad policy, unreachable database).
            Candidate failures are not errors: they are counted and gated.
    """
    timer = StageTimer()
    with open_repository(settings.database.url) as repo:
        with timer.stage("setup"):
            run, targets = prepare_run(repo, request, settings)
        with timer.stage("replay"):
            replay = run_async(
                replay_capture_log(
                    repo,
                    run.run_id,
                    request.capture_log,
                    targets,
                    settings.replay,
                    progress=request.progress,
                    console=console,
                )
            )
        with timer.stage("load_encoder"):
            encoder = make_encoder(request.encoder, device=request.device)
        with timer.stage("compare"):
            compared = compare_run(
                repo, run.run_id, encoder, structured_task_types=request.structured_task_types
            )
        with timer.stage("gate"):
            gate = gate_run(repo, run, command=request.command)
            run = repo.get_run(run.run_id) or run
        rejected = repo.count_rejected(run.run_id)
    return EvaluationResult(run, replay, compared, gate, timer.seconds, rejected)

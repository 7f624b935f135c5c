"""The judgement summary of a run: sources, outcomes per task type, the judge, its tokens."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shadoweval.application.judging.cost import run_arms
from shadoweval.judge.arms import self_preference_risks
from shadoweval.judge.prompt import prompt_format
from shadoweval.records import (
    HumanLabel,
    JudgeIdentity,
    JudgementSource,
    PairJudgement,
    QualityOutcome,
)
from shadoweval.stats.judge_quality import JudgeFloor, apply_judge_floor
from shadoweval.stats.judgements import judge_human_agreement, resolve_judgements, source_counts
from shadoweval.stats.policy import JudgePolicy, parse_policy_yaml
from shadoweval.storage import Repository


@dataclass
class JudgementSummary:
    """The quality judgements of a run, as the gate uses them and apart from them.

    Attributes:
        run_id: the run.
        stored: per source, ``{"ok": n, "failed": n}`` of the stored judgements (human:
            labelled pairs).
        resolved: pairs per source of the judgement the gate uses (human > reference >
            judge, successful first), and ``failed`` (pairs whose only judgements failed):
            :func:`shadoweval.stats.judgements.source_counts`.
        per_task_type: task type → outcome → count of the resolved judgements, plus
            ``judge``/``human``/``reference``/``failed`` counts.
        judge: the run's frozen judge, or ``None``; endpoint: where its pairs went;
        judge_response_format: the frozen judge's response format (``text``,
            ``json_schema``, ``json_object``; read from its prompt hash, ``None`` when no
            judge or an unknown prompt).
        judge_prompt_tokens, judge_completion_tokens: the judge's tokens over all its
            stored votes (apart from the run's own accounting).
        agreement: judge–human agreement (:class:`shadoweval.stats.judgements.Agreement`) as a dict:
            ``n``, ``kappa``, ``low``, ``high``, ``observed_agreement``, ``confidence``,
            ``method``, ``table``, ``text``.
        judge_quality: the judge's agreement with labels (analysts' and references'), its
            position-flip and first-position rates per task type and pooled, each with
            ``n`` and a Wilson interval, and whether it votes under the run's floor
            (:meth:`shadoweval.stats.judge_quality.JudgeFloor.as_dict`).
        self_preference: one line per arm of the run that shares the frozen judge's family
            (:func:`shadoweval.judge.arms.self_preference_risks`); empty without a judge.
    """

    run_id: str
    stored: dict[str, dict[str, int]]
    resolved: dict[str, int]
    per_task_type: dict[str, dict[str, int]]
    judge: JudgeIdentity | None
    endpoint: str | None
    judge_response_format: str | None
    judge_prompt_tokens: int
    judge_completion_tokens: int
    agreement: dict[str, Any]
    judge_quality: dict[str, Any] = field(default_factory=dict)
    self_preference: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form (NaN → ``None``): the ``judgement`` section of a report."""
        return {
            "run_id": self.run_id,
            "sources": {"stored": self.stored, "resolved": self.resolved},
            "per_task_type": self.per_task_type,
            "judge": None if self.judge is None else self.judge.model_dump(mode="json"),
            "endpoint": self.endpoint,
            "judge_response_format": self.judge_response_format,
            "judge_tokens": {
                "prompt": self.judge_prompt_tokens,
                "completion": self.judge_completion_tokens,
            },
            "agreement": {k: _json_number(v) for k, v in self.agreement.items()},
            "judge_quality": self.judge_quality,
            "self_preference_risks": self.self_preference,
        }


def _json_number(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else value


def summarize_judgements(
    run_id: str,
    judgements: Sequence[PairJudgement],
    labels: Sequence[HumanLabel],
    judge: JudgeIdentity | None,
    resolved: Mapping[str, PairJudgement] | None = None,
    *,
    floor: JudgeFloor | None = None,
) -> JudgementSummary:
    """The :class:`JudgementSummary` of already loaded judgements and labels.

    ``floor`` is :func:`shadoweval.stats.judge_quality.apply_judge_floor` of the two under the
    run's policy (default: under the default floor); ``resolved`` is
    :func:`shadoweval.stats.judgements.resolve_judgements` of its voting judgements and the
    labels when the caller has it already (the gate does).
    """
    if floor is None:
        floor = apply_judge_floor(judgements, labels, JudgePolicy())
    chosen = dict(resolved) if resolved is not None else resolve_judgements(floor.voting, labels)
    stored: dict[str, dict[str, int]] = {s.value: {"ok": 0, "failed": 0} for s in JudgementSource}
    prompt_tokens = completion_tokens = 0
    for j in judgements:
        stored[JudgementSource(j.source).value]["failed" if j.outcome is None else "ok"] += 1
        for vote in j.votes:
            prompt_tokens += vote.prompt_tokens or 0
            completion_tokens += vote.completion_tokens or 0
    stored[JudgementSource.HUMAN.value]["ok"] += len({(x.exchange_id) for x in labels})
    per_task_type: dict[str, dict[str, int]] = {}
    for j in chosen.values():
        row = per_task_type.setdefault(
            j.task_type,
            {o.value: 0 for o in QualityOutcome}
            | {s.value: 0 for s in JudgementSource}
            | {"failed": 0},
        )
        if j.outcome is None:
            row["failed"] += 1
            continue
        row[QualityOutcome(j.outcome).value] += 1
        row[JudgementSource(j.source).value] += 1
    agreement = judge_human_agreement(judgements, labels)
    return JudgementSummary(
        run_id=run_id,
        stored=stored,
        resolved=source_counts(chosen),
        per_task_type=dict(sorted(per_task_type.items())),
        judge=judge,
        endpoint=None if judge is None else judge.endpoint,
        judge_response_format=None if judge is None else prompt_format(judge.prompt_sha256),
        judge_prompt_tokens=prompt_tokens,
        judge_completion_tokens=completion_tokens,
        agreement={
            "n": agreement.n,
            "kappa": agreement.kappa,
            "low": agreement.low,
            "high": agreement.high,
            "observed_agreement": agreement.observed_agreement,
            "confidence": agreement.confidence,
            "method": agreement.method,
            "table": [list(row) for row in agreement.table],
            "text": agreement.describe(),
        },
        judge_quality=floor.as_dict(),
    )


def judgement_summary(repo: Repository, run_id: str) -> JudgementSummary:
    """Load the run's judgements, labels and judge, and summarize them under the run's
    frozen ``judge`` floor (the default floor for a run not stored), with the
    self-preference risks of the frozen judge against the run's arms.

    Raises:
        ConfigError: the run's frozen policy no longer parses.
        StorageError: on database failure.
    """
    judgements, labels = repo.list_judgements(run_id), repo.load_labels(run_id)
    run = repo.get_run(run_id)
    judge = repo.run_judge(run_id)
    block = JudgePolicy() if run is None else parse_policy_yaml(run.policy_yaml).judge
    summary = summarize_judgements(
        run_id,
        judgements,
        labels,
        judge,
        floor=apply_judge_floor(judgements, labels, block),
    )
    if judge is not None and run is not None:
        summary.self_preference = self_preference_risks(judge.model, run_arms(run))
    return summary

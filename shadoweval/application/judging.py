"""Quality judgements of a run's pairs: the LLM judge, reference correctness, and a summary.

The only code that joins the judge stage (:mod:`shadoweval.judge`), the gate's change classification
(:mod:`shadoweval.stats.change`), the reference readers (:mod:`shadoweval.export.reference_import`)
and storage.

* :func:`run_judge` — ``shadow-eval judge run``: refuses unless sending pairs is switched
  on (:func:`check_judge_settings`); freezes the judge's identity with the run (a
  different judge is refused, naming both, and audited); classifies the run's pairs
  (:func:`shadoweval.stats.change.classify_changes`); selects the changed pairs within the budget
  (:func:`shadoweval.judge.selection.select_pairs`: stratified by divergence, at most
  ``net_harm.max_judged_per_task_type`` per task type in total, already judged counting);
  builds each prompt from what the capture stored and runs the configured body redaction
  over it (:func:`shadoweval.application.redaction.body_redaction`); judges each pair in both orders
  and stores every judgement as it completes (failed ones too, as data).
* :func:`import_reference` — ``shadow-eval labels import-reference``: BFCL's official
  per-item scores of both models → ``reference`` judgements.
* :func:`judgement_summary` — sources, outcomes per task type, the frozen judge and its
  endpoint, the judge's tokens (apart from the run's own accounting) and the judge–human
  agreement (:func:`shadoweval.stats.judgements.judge_human_agreement`); ``judge summary`` and the
  gate's JSON report show it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from shadoweval.application.redaction import body_redaction
from shadoweval.config import JudgeSettings
from shadoweval.errors import ConfigError, ShadowEvalError
from shadoweval.export.reference_import import (
    REFERENCE_PRESETS,
    CategoryTally,
    ReferencePair,
    read_bfcl_scores,
    reference_judgements,
)
from shadoweval.judge import (
    Answer,
    JudgeClient,
    PairText,
    judge_pairs,
    public_endpoint,
    select_pairs,
)
from shadoweval.judge.prompt import prompt_format
from shadoweval.judge.selection import Selection
from shadoweval.records import (
    HumanLabel,
    JudgeIdentity,
    JudgementSource,
    PairJudgement,
    QualityOutcome,
)
from shadoweval.stats.change import classify_changes
from shadoweval.stats.frame import pairs_frame
from shadoweval.stats.judgements import judge_human_agreement, resolve_judgements, source_counts
from shadoweval.stats.policy import GatePolicy, effective, parse_policy_yaml
from shadoweval.storage import Repository, RunInfo
from shadoweval.storage.samples import Sample

__all__ = [
    "JUDGE_COMMAND",
    "REFERENCE_COMMAND",
    "JudgePlan",
    "JudgeRunReport",
    "JudgementSummary",
    "ReferenceImportResult",
    "TaskTypeJudging",
    "check_judge_settings",
    "describe_identity_change",
    "import_reference",
    "judge_identity",
    "judgement_summary",
    "plan_judging",
    "run_judge",
    "summarize_judgements",
]

JUDGE_COMMAND = "shadow-eval judge run"
REFERENCE_COMMAND = "shadow-eval labels import-reference"
SEND_PAIRS_VARIABLE = "SHADOWEVAL_JUDGE__SEND_PAIRS"

_SAVE_EVERY = 25
"""Judgements stored per transaction while a judge run goes on."""
_SAMPLE_CHUNK = 500


# ------------------------------------------------------------------ settings


def check_judge_settings(settings: JudgeSettings, *, send_pairs: bool = False) -> None:
    """Refuse a judge run the settings do not allow.

    Sending captured pairs to a judge is an explicit decision, never a default: it needs
    ``settings.send_pairs`` (``SHADOWEVAL_JUDGE__SEND_PAIRS=true``) or ``send_pairs``
    (``--send-pairs``). The judge's URL and model must be set.

    Raises:
        ConfigError: sending is not switched on (the message names
            ``SHADOWEVAL_JUDGE__SEND_PAIRS`` and ``--send-pairs``), or the URL or model
            is missing (names ``SHADOWEVAL_JUDGE__URL`` / ``SHADOWEVAL_JUDGE__MODEL``).
    """
    if not (settings.send_pairs or send_pairs):
        where = f" to {public_endpoint(settings.url)}" if settings.url else ""
        raise ConfigError(
            f"sending pairs to a judge is off: judge run sends the run's changed pairs (the "
            f"request and both answers, as the capture stored them, redacted){where}; set "
            f"{SEND_PAIRS_VARIABLE}=true or pass --send-pairs to allow it",
            field=SEND_PAIRS_VARIABLE,
            value=settings.send_pairs,
        )
    if not settings.url:
        raise ConfigError(
            "no judge endpoint: set SHADOWEVAL_JUDGE__URL (e.g. http://127.0.0.1:8000/v1)",
            field="SHADOWEVAL_JUDGE__URL",
        )
    if not settings.model.strip():
        raise ConfigError(
            "no judge model: set SHADOWEVAL_JUDGE__MODEL", field="SHADOWEVAL_JUDGE__MODEL"
        )


def _client(
    settings: JudgeSettings, transport: httpx.AsyncBaseTransport | None = None
) -> JudgeClient:
    redactor = body_redaction()
    return JudgeClient(
        settings.url or "",
        model=settings.model,
        api_key=None if settings.api_key is None else settings.api_key.get_secret_value(),
        concurrency=settings.concurrency,
        timeout_s=settings.timeout_s,
        connect_timeout_s=settings.connect_timeout_s,
        retries=settings.retries,
        backoff_s=settings.backoff_s,
        temperature=settings.temperature,
        max_tokens=settings.max_tokens,
        seed=settings.seed,
        redact=redactor.redact,
        response_format=settings.response_format,
        transport=transport,
    )


def judge_identity(settings: JudgeSettings) -> JudgeIdentity:
    """The identity the settings' judge would have (public endpoint, model, prompt hash —
    that of its response format — and sampling).

    Raises:
        ConfigError: a bad URL or an empty model.
    """
    return JudgeClient(
        settings.url or "",
        model=settings.model,
        response_format=settings.response_format,
        **_sampling(settings),
    ).identity


def response_format_of(identity: JudgeIdentity) -> str | None:
    """The response format (``text``, ``json_schema``, ``json_object``) a frozen judge's
    prompt hash stands for, ``None`` for a hash no shipped prompt has (the faces read it
    here: they do not import the judge stage)."""
    return prompt_format(identity.prompt_sha256)


def _sampling(settings: JudgeSettings) -> dict[str, Any]:
    return {
        "temperature": settings.temperature,
        "max_tokens": settings.max_tokens,
        "seed": settings.seed,
    }


def _prompt_text(sha256: str) -> str:
    """``'27b29b07201d' (text answers)``: a prompt hash and, when known, its format."""
    fmt = prompt_format(sha256)
    return f"{sha256[:12]}" + ("" if fmt is None else f" ({fmt} answers)")


def describe_identity_change(frozen: JudgeIdentity, presented: JudgeIdentity) -> str:
    """The fields in which ``presented`` differs from ``frozen``: ``model 'a' → 'b'; …``.

    A changed prompt hash names each side's response format where it is known
    (``prompt_sha256 '27b29b07201d…' (text answers) → 'cf0ccdf71211…' (json_schema
    answers)``).
    """
    old, new = frozen.model_dump(mode="json"), presented.model_dump(mode="json")
    changes: list[str] = []
    for name in old:
        if old[name] == new[name]:
            continue
        if name == "prompt_sha256":
            changes.append(
                f"prompt_sha256 {_prompt_text(str(old[name]))} → {_prompt_text(str(new[name]))}"
            )
        else:
            changes.append(f"{name} {old[name]!r} → {new[name]!r}")
    return "; ".join(changes) or "no field differs"


def _describe(identity: JudgeIdentity) -> str:
    seed = "" if identity.seed is None else f", seed {identity.seed}"
    return (
        f"{identity.model!r} at {identity.endpoint} (prompt "
        f"{_prompt_text(identity.prompt_sha256)}, temperature {identity.temperature:g}, "
        f"max_tokens {identity.max_tokens}{seed})"
    )


# ------------------------------------------------------------------- planning


@dataclass(frozen=True)
class JudgePlan:
    """Which pairs a judge run would send, and why.

    Attributes:
        run: the run.
        policy: its frozen policy.
        selection: the budget's choice (:func:`shadoweval.judge.selection.select_pairs`).
        judged_before: exchange ids with a successful judge judgement before this run.
        budgets: the per-task-type budget applied.
    """

    run: RunInfo
    policy: GatePolicy
    selection: Selection
    judged_before: frozenset[str]
    budgets: dict[str, int]


def plan_judging(
    repo: Repository, run: RunInfo, *, max_per_task_type: int | None = None
) -> JudgePlan:
    """Select the changed pairs of ``run`` to send to the judge (no request is sent).

    The pairs table is built under the run's frozen policy and classified by
    :func:`shadoweval.stats.change.classify_changes`; the budget per task type is
    ``max_per_task_type`` or the policy's ``net_harm.max_judged_per_task_type`` of that
    task type.

    Raises:
        ConfigError: ``max_per_task_type`` < 1.
        StorageError: on database failure.
    """
    if max_per_task_type is not None and max_per_task_type < 1:
        raise ConfigError(
            f"--max-per-task-type {max_per_task_type} must be >= 1",
            field="--max-per-task-type",
            value=max_per_task_type,
        )
    policy = parse_policy_yaml(run.policy_yaml)
    frame = pairs_frame(repo.load_pair_scores(run.run_id), policy)
    changes = classify_changes(frame, policy)
    judged_before = frozenset(
        j.exchange_id
        for j in repo.list_judgements(run.run_id, JudgementSource.JUDGE)
        if j.outcome is not None
    )
    task_types = [str(t) for t in frame["task_type"]]
    budgets = {
        t: max_per_task_type
        if max_per_task_type is not None
        else effective(policy, t).net_harm.max_judged_per_task_type
        for t in sorted(set(task_types))
    }
    selection = select_pairs(
        run_id=run.run_id,
        exchange_ids=[str(e) for e in frame["exchange_id"]],
        task_types=task_types,
        changed=changes.changed,
        stratum=changes.stratum,
        already_judged=judged_before,
        max_per_task_type=budgets,
    )
    return JudgePlan(run, policy, selection, judged_before, budgets)


def pair_text(sample: Sample, stratum: int | None) -> PairText:
    """What the judge is shown of one pair: the stored request and both stored answers."""
    tools = sample.request_params.get("tools")
    return PairText(
        run_id=sample.run_id,
        exchange_id=sample.exchange_id,
        task_type=sample.task_type,
        messages=sample.request_messages,
        tools=tools if isinstance(tools, list) else None,
        baseline=Answer(text=sample.baseline_text, tool_calls=sample.baseline_tool_calls),
        candidate=Answer(
            text=sample.candidate_text,
            tool_calls=sample.candidate_tool_calls,
            error=sample.candidate_error_kind,
        ),
        stratum=stratum,
    )


# ---------------------------------------------------------------- judge run


@dataclass
class TaskTypeJudging:
    """One task type of a judge run.

    Attributes:
        task_type: the task type.
        pairs: its pairs; changed: its changed pairs.
        already_judged: changed pairs judged successfully before this run.
        budget: the budget applied; selected: pairs sent now.
        judged: of those, judged successfully; failed: judgements that failed (kept).
        better, tie, worse: outcomes of the pairs judged now.
        disagreements: ties because the two orders disagreed (position bias).
        prompt_tokens, completion_tokens: the judge's tokens for this task type (votes
            that reported usage), apart from the run's own accounting.
    """

    task_type: str
    pairs: int
    changed: int
    already_judged: int
    budget: int
    selected: int
    judged: int = 0
    failed: int = 0
    better: int = 0
    tie: int = 0
    worse: int = 0
    disagreements: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, judgement: PairJudgement) -> None:
        """Count one judgement of this run."""
        for vote in judgement.votes:
            self.prompt_tokens += vote.prompt_tokens or 0
            self.completion_tokens += vote.completion_tokens or 0
        if judgement.outcome is None:
            self.failed += 1
            return
        self.judged += 1
        if judgement.outcome is QualityOutcome.CANDIDATE_BETTER:
            self.better += 1
        elif judgement.outcome is QualityOutcome.CANDIDATE_WORSE:
            self.worse += 1
        else:
            self.tie += 1
            if judgement.rationale.startswith("orders disagree"):
                self.disagreements += 1


@dataclass
class JudgeRunReport:
    """What a judge run did: the judge, where the pairs went, and the counts per task type.

    Attributes:
        run_id: the run.
        identity: the run's (frozen) judge.
        endpoint: where the pairs were sent (the judge's public base URL).
        first_use: this run froze the judge.
        task_types: task type → :class:`TaskTypeJudging`.
        failures: the first failed judgements' errors (at most 10), for the operator.
        released: every call of this run failed, so the judge it froze was unfrozen
            (audit ``judge_released``): a corrected judge may judge the run.
    """

    run_id: str
    identity: JudgeIdentity
    endpoint: str
    first_use: bool
    task_types: dict[str, TaskTypeJudging]
    failures: list[str] = field(default_factory=list)
    released: bool = False

    @property
    def selected(self) -> int:
        """Pairs sent to the judge."""
        return sum(t.selected for t in self.task_types.values())

    @property
    def judged(self) -> int:
        """Pairs the judge gave an outcome for in this run."""
        return sum(t.judged for t in self.task_types.values())

    @property
    def all_failed(self) -> bool:
        """Pairs were sent and not one was judged (wrong URL, model or key, an outage)."""
        return self.selected > 0 and self.judged == 0

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form."""
        return {
            "run_id": self.run_id,
            "endpoint": self.endpoint,
            "judge": self.identity.model_dump(mode="json"),
            "first_use": self.first_use,
            "released": self.released,
            "task_types": [asdict(t) for t in self.task_types.values()],
            "failures": self.failures,
        }


def _freeze(repo: Repository, run: RunInfo, identity: JudgeIdentity, command: str) -> bool:
    """Freeze or check the run's judge; returns whether this call froze it."""
    freeze = repo.freeze_judge(run.run_id, identity, command=command)
    if not freeze.accepted:
        raise ConfigError(
            f"run {run.run_id} is judged by {_describe(freeze.frozen)}; the configured judge "
            f"{_describe(identity)} differs ({describe_identity_change(freeze.frozen, identity)}). "
            "A run keeps one judge: configure the frozen one, or judge in a new run",
            field="judge",
            value=identity.model_dump(mode="json"),
        )
    return freeze.action.value == "judge_frozen"


def run_judge(
    repo: Repository,
    run_id: str,
    settings: JudgeSettings,
    *,
    send_pairs: bool = False,
    max_per_task_type: int | None = None,
    command: str = JUDGE_COMMAND,
    transport: httpx.AsyncBaseTransport | None = None,
) -> JudgeRunReport:
    """Judge the run's selected changed pairs and store the judgements (module docstring).

    Args:
        repo: the results database.
        run_id: the run.
        settings: the judge settings (``settings.judge``).
        send_pairs: ``--send-pairs`` (else ``settings.send_pairs`` must be true).
        max_per_task_type: the budget per task type instead of the policy's.
        command: what asked (the audit log's ``command``).
        transport: an httpx transport seam for tests.

    Raises:
        ConfigError: sending is off, the URL or model is missing, the run has another
            judge (both named), or a bad budget; ShadowEvalError: unknown run.
        StorageError: on database failure.

    When this call froze the judge and every call failed, the freeze is removed again
    (:meth:`Repository.release_judge`, ``report.released``).
    """
    check_judge_settings(settings, send_pairs=send_pairs)
    run = repo.get_run(run_id)
    if run is None:
        raise ShadowEvalError(f"run {run_id!r} not found")
    client = _client(settings, transport)
    identity = client.identity
    first_use = _freeze(repo, run, identity, command)
    plan = plan_judging(repo, run, max_per_task_type=max_per_task_type)
    report = JudgeRunReport(
        run_id=run_id,
        identity=identity,
        endpoint=client.endpoint,
        first_use=first_use,
        task_types={
            t: TaskTypeJudging(
                task_type=t,
                pairs=s.pairs,
                changed=s.changed,
                already_judged=s.already_judged,
                budget=s.budget,
                selected=len(s.selected),
            )
            for t, s in plan.selection.task_types.items()
        },
    )
    ids = plan.selection.exchange_ids
    if not ids:
        return report
    pairs: list[PairText] = []
    for start in range(0, len(ids), _SAMPLE_CHUNK):
        chunk = ids[start : start + _SAMPLE_CHUNK]
        pairs.extend(
            pair_text(sample, plan.selection.stratum_of[sample.exchange_id])
            for sample in repo.samples_by_ids(run_id, chunk)
        )
    pending: list[PairJudgement] = []

    def on_judged(judgement: PairJudgement) -> None:
        report.task_types[judgement.task_type].add(judgement)
        if judgement.outcome is None and len(report.failures) < 10:
            report.failures.append(f"{judgement.exchange_id}: {judgement.error}")
        pending.append(judgement)
        if len(pending) >= _SAVE_EVERY:
            repo.save_judgements(pending)
            pending.clear()

    async def judge_all() -> None:
        async with client:
            await judge_pairs(client, pairs, on_judged=on_judged)

    try:
        asyncio.run(judge_all())
    finally:
        if pending:
            repo.save_judgements(pending)
    if first_use and report.all_failed:
        # The freeze came before the first call; a judge that answered nothing must not
        # bind the run, or the corrected judge would be refused.
        report.released = repo.release_judge(
            run_id,
            identity,
            command=command,
            reason=f"all {report.selected} judge calls failed; first: "
            + (report.failures[0] if report.failures else "unknown"),
        )
    return report


# ----------------------------------------------------------------- reference


@dataclass(frozen=True)
class ReferenceImportResult:
    """What a reference import stored.

    Attributes:
        preset: the reference format (``bfcl``).
        stored: judgements written.
        pairs: scored pairs of the run; pairs_without_item: pairs not from a BFCL result
            file; pairs_without_scores: per category, pairs without a score file on one
            side; pairs_out_of_range: pairs beyond the category's item count.
        categories: per category, items / matched / not in run / better / tie / worse and
            the official accuracies.
    """

    preset: str
    stored: int
    pairs: int
    pairs_without_item: int
    pairs_without_scores: dict[str, int]
    pairs_out_of_range: int
    categories: dict[str, CategoryTally]


def import_reference(
    repo: Repository,
    run_id: str,
    *,
    preset: str,
    baseline_scores: Path,
    candidate_scores: Path,
) -> ReferenceImportResult:
    """Store per-item reference correctness of both sides as ``reference`` judgements.

    ``bfcl``: the two models' official score folders
    (:func:`shadoweval.export.reference_import.read_bfcl_scores`); each scored pair of the run is
    matched to its BFCL item by its exchange's import origin
    (:func:`shadoweval.export.reference_import.bfcl_item`). A repeat import replaces the stored
    reference judgements. Unmatched pairs and items are counted, never dropped silently.

    Raises:
        ConfigError: an unknown preset, a missing folder, or score files of different
            questions; RecordDecodeError: a score file fails its checks;
            ShadowEvalError: unknown run.
        StorageError: on database failure.
    """
    if preset not in REFERENCE_PRESETS:
        raise ConfigError(
            f"--preset {preset!r}: known reference presets are {', '.join(REFERENCE_PRESETS)}",
            field="--preset",
            value=preset,
        )
    if repo.get_run(run_id) is None:
        raise ShadowEvalError(f"run {run_id!r} not found")
    baseline = read_bfcl_scores(baseline_scores)
    candidate = read_bfcl_scores(candidate_scores)
    pairs = [
        ReferencePair(o.exchange_id, o.task_type, o.source)
        for o in repo.scored_pair_origins(run_id)
    ]
    found = reference_judgements(pairs, run_id=run_id, baseline=baseline, candidate=candidate)
    stored = repo.save_judgements(found.judgements) if found.judgements else 0
    return ReferenceImportResult(
        preset=preset,
        stored=stored,
        pairs=found.pairs,
        pairs_without_item=found.pairs_without_item,
        pairs_without_scores=found.pairs_without_scores,
        pairs_out_of_range=found.pairs_out_of_range,
        categories=found.categories,
    )


# ------------------------------------------------------------------- summary


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
        }


def _json_number(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else value


def summarize_judgements(
    run_id: str,
    judgements: Sequence[PairJudgement],
    labels: Sequence[HumanLabel],
    judge: JudgeIdentity | None,
    resolved: Mapping[str, PairJudgement] | None = None,
) -> JudgementSummary:
    """The :class:`JudgementSummary` of already loaded judgements and labels.

    ``resolved`` is :func:`shadoweval.stats.judgements.resolve_judgements` of the two when the
    caller has it already (the gate does).
    """
    chosen = dict(resolved) if resolved is not None else resolve_judgements(judgements, labels)
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
    )


def judgement_summary(repo: Repository, run_id: str) -> JudgementSummary:
    """Load the run's judgements, labels and judge, and summarize them.

    Raises:
        StorageError: on database failure.
    """
    return summarize_judgements(
        run_id, repo.list_judgements(run_id), repo.load_labels(run_id), repo.run_judge(run_id)
    )

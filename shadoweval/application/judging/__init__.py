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
  gate's JSON report show it, with the judge's agreement with labels, flip and
  first-position rates and whether it votes (:func:`judge_quality_report`,
  :func:`judge_quality_rows`; :mod:`shadoweval.stats.judge_quality`).
"""

from shadoweval.application.judging.identity import (
    SEND_PAIRS_VARIABLE as SEND_PAIRS_VARIABLE,
)
from shadoweval.application.judging.identity import (
    check_judge_settings,
    describe_identity_change,
    judge_identity,
)
from shadoweval.application.judging.identity import (
    response_format_of as response_format_of,
)
from shadoweval.application.judging.judge_run import (
    JUDGE_COMMAND,
    JudgeRunReport,
    TaskTypeJudging,
    preflight_judge_endpoint,
    run_judge,
)
from shadoweval.application.judging.planning import JudgePlan, plan_judging
from shadoweval.application.judging.planning import pair_text as pair_text
from shadoweval.application.judging.quality_view import (
    JUDGE_QUALITY_COLUMNS,
    judge_quality_report,
    judge_quality_rows,
)
from shadoweval.application.judging.reference import (
    REFERENCE_COMMAND,
    ReferenceImportResult,
    import_reference,
)
from shadoweval.application.judging.summary import (
    JudgementSummary,
    judgement_summary,
    summarize_judgements,
)

__all__ = [
    "JUDGE_COMMAND",
    "JUDGE_QUALITY_COLUMNS",
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
    "judge_quality_report",
    "judge_quality_rows",
    "judgement_summary",
    "plan_judging",
    "preflight_judge_endpoint",
    "run_judge",
    "summarize_judgements",
]

"""Reading a run for display: its pairs table, per-task-type summary and policy integrity.

What the dashboard shows of a run is computed here, from storage and the statistics
stage, so the pages only render it:

* :class:`PairsCache` — the run's :func:`shadoweval.stats.frame.pairs_frame`, read once and then
  extended with only the pairs scored since (a live run's overview stays warm);
* :func:`task_summary` — :func:`shadoweval.stats.summary.task_type_summary` of that table with the
  stored verdict's checks;
* :func:`judged_pairs` — the rows of one task type without an infrastructure error on
  either side (:func:`shadoweval.stats.checks.infra_pairs`): what the latency and similarity views
  are drawn from;
* :func:`policy_integrity` — whether the run's frozen policy YAML still hashes to the run's
  policy hash;
* :func:`direction_summary` — the direction of the change per task type and pooled:
  changed pairs (:func:`shadoweval.stats.change.classify_changes` under the frozen policy), judged
  pairs by source, better / tie / worse with Wilson intervals, the net-harm estimate
  (:func:`shadoweval.stats.net_harm.estimate_net_harm`) with its interval, the degenerate noise
  floor's sentence and the judge–human agreement
  (:func:`shadoweval.stats.judgements.judge_human_agreement`); :func:`direction_of` is its pure
  core;
* :func:`judged_pairs_view` — one page of the run's judgements (every source, failures
  included) with both votes, the stratum and both answers, redacted;
* :func:`changed_unjudged_ids` — the exchange ids of the pairs that changed and have no
  successful judgement of any source (the export's ``changed_unjudged`` selection);
  :func:`changed_ids` — those of every changed pair, judged or not (the population of the
  export's random label sample, ``ppi_sample``).
"""

from shadoweval.application.run_views.direction import (
    DIRECTION_COLUMNS,
    DIRECTION_CONFIDENCE,
    RunDirection,
    changed_ids,
    changed_pairs,
    changed_unjudged,
    changed_unjudged_ids,
    direction_of,
    direction_summary,
    direction_table,
    pair_quality,
)
from shadoweval.application.run_views.judged import (
    FAILED,
    JUDGED_OUTCOMES,
    MAX_JUDGED_PAGE_SIZE,
    JudgedPair,
    JudgedPairsPage,
    judged_pairs_view,
    judged_records,
    redact_judgement,
)
from shadoweval.application.run_views.pairs import (
    PairsCache,
    PolicyIntegrity,
    judged_pairs,
    policy_integrity,
    task_summary,
    task_type_rows,
)

__all__ = [
    "DIRECTION_COLUMNS",
    "DIRECTION_CONFIDENCE",
    "FAILED",
    "JUDGED_OUTCOMES",
    "MAX_JUDGED_PAGE_SIZE",
    "JudgedPair",
    "JudgedPairsPage",
    "PairsCache",
    "PolicyIntegrity",
    "RunDirection",
    "changed_ids",
    "changed_pairs",
    "changed_unjudged",
    "changed_unjudged_ids",
    "direction_of",
    "direction_summary",
    "direction_table",
    "judged_pairs",
    "judged_pairs_view",
    "judged_records",
    "pair_quality",
    "policy_integrity",
    "redact_judgement",
    "task_summary",
    "task_type_rows",
]

"""Canary rollouts (issue 16): what a canary observed, read from the Envoy front's capture log.

The Envoy front end records which cluster served each captured exchange
(``Exchange.served_by``, :mod:`shadoweval.capture.canary_split`). :func:`ingest_capture_log` reads
the
capture-log lines written since the last call (``canary.ingest_state``: per file, the
lines consumed and the byte offset reached, so a poll reads only what was appended),
judges each exchange alone (:func:`shadoweval.compare.live_side.live_side_facts`), assigns it to the
canary step whose window holds its ``captured_at``, and stores it as a
``canary_observation`` (insert-or-ignore per exchange, so a re-read stores nothing twice).
A line that does not decode is kept as a ``rejected_record`` (stage ``canary``) with its
reason and counted; the reader moves on. The last line of the newest segment is left for
the next call while it may still be being written (no trailing newline, or a gzip member
not yet closed).

A package (it was one module; every public name is re-exported here): ``ingest`` (capture
log and topic → observations), ``rollout`` (start, rollback), ``frames`` (the step
verdict's input frames), ``controller`` (evaluate, tick, run), ``ratings`` (spot checks),
``views`` (what the faces read).
"""

from __future__ import annotations

from shadoweval.application.canary.controller import (
    TickAction,
    TickReport,
    evaluate_canary,
    ingest_source,
    run_canary,
    tick_canary,
)
from shadoweval.application.canary.frames import (
    OBSERVATION_COLUMNS,
    RATING_COLUMNS,
    observation_frame,
    rating_frame,
)
from shadoweval.application.canary.ingest import (
    CANARY_REJECT_STAGE,
    IngestReport,
    canary_group,
    ingest_bus,
    ingest_capture_log,
    observation_of,
)
from shadoweval.application.canary.ratings import (
    RatingImportResult,
    SpotCheckSheet,
    import_canary_ratings,
    spot_check_sheet,
)
from shadoweval.application.canary.rollout import (
    ROLLBACK_ATTEMPTS,
    rollback_canary,
    rollback_split,
    rollback_without_database,
    start_canary,
)
from shadoweval.application.canary.views import (
    CanaryView,
    SharePoint,
    SplitSpec,
    canary_view,
    list_canaries,
    optional_split_spec,
    share_timeline,
    split_spec_from_settings,
    view_json,
)
from shadoweval.export.canary_ratings import RATING_STAGE, rating_sheet_bytes
from shadoweval.records import StepVerdict
from shadoweval.stats.canary.policy import load_canary_policy

__all__ = [
    "CANARY_REJECT_STAGE",
    "OBSERVATION_COLUMNS",
    "RATING_COLUMNS",
    "RATING_STAGE",
    "ROLLBACK_ATTEMPTS",
    "CanaryView",
    "IngestReport",
    "RatingImportResult",
    "SharePoint",
    "SplitSpec",
    "SpotCheckSheet",
    "StepVerdict",
    "TickAction",
    "TickReport",
    "canary_group",
    "canary_view",
    "evaluate_canary",
    "import_canary_ratings",
    "ingest_bus",
    "ingest_capture_log",
    "ingest_source",
    "list_canaries",
    "load_canary_policy",
    "observation_frame",
    "observation_of",
    "optional_split_spec",
    "rating_frame",
    "rating_sheet_bytes",
    "rollback_canary",
    "rollback_split",
    "rollback_without_database",
    "run_canary",
    "share_timeline",
    "split_spec_from_settings",
    "spot_check_sheet",
    "start_canary",
    "tick_canary",
    "view_json",
]

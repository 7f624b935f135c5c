"""Reading a run's pairs to show them: pages of samples, every text redacted.

A capture log imported from a table may carry secrets and e-mail addresses the capture
sidecar never saw. The export redacts them (:func:`shadoweval.application.redaction.body_redaction`:
the capture sidecar's body rules as configured); what a face shows must be redacted with
the same redactor: :func:`redacted_page` reads a page (:meth:`Repository.sample_page`)
and passes every :class:`~shadoweval.storage.samples.Sample` through
:func:`redact_sample`, so each match becomes ``[REDACTED:<rule>]``.
"""

from __future__ import annotations

import dataclasses

from shadoweval.export.redaction import Redact, redact_json
from shadoweval.storage import Repository
from shadoweval.storage.samples import Sample, SampleCursor, SampleFilter, SamplePage

__all__ = ["Redact", "redact_json", "redact_sample", "redacted_page"]


def redact_sample(sample: Sample, redact: Redact) -> Sample:
    """``sample`` with its request (messages and parameters), both answers and both tool
    call lists redacted; ids, scores, flags and the label are kept."""
    return dataclasses.replace(
        sample,
        request_messages=redact_json(sample.request_messages, redact),
        request_params=redact_json(sample.request_params, redact),
        baseline_text=redact(sample.baseline_text) if sample.baseline_text else "",
        candidate_text=redact(sample.candidate_text) if sample.candidate_text else "",
        baseline_tool_calls=redact_json(sample.baseline_tool_calls, redact),
        candidate_tool_calls=redact_json(sample.candidate_tool_calls, redact),
    )


def redacted_page(
    repo: Repository,
    run_id: str,
    flt: SampleFilter,
    *,
    redact: Redact,
    after: SampleCursor | None = None,
    limit: int,
) -> SamplePage:
    """One page of the run's pairs matching ``flt`` (:meth:`Repository.sample_page`: pairs
    without a similarity first unless a similarity bound is set, then by similarity
    ascending, then exchange id), every sample through :func:`redact_sample`.

    Args:
        repo: the results database.
        run_id: the run.
        flt: which pairs (task types, flags that must all be set, similarity band).
        redact: text → text with every rule's matches replaced by ``[REDACTED:<rule>]``.
        after: the cursor of the previous page's last pair (``None``: the first page).
        limit: most pairs on the page.

    Raises:
        StorageError: the database failed.
    """
    page = repo.sample_page(run_id, flt, after=after, limit=limit)
    return dataclasses.replace(page, samples=tuple(redact_sample(s, redact) for s in page.samples))

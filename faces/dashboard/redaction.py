"""Redaction of every request and answer text the dashboard shows.

A capture log imported from a table may carry secrets and e-mail addresses the capture
sidecar never saw. The export redacts them (:func:`faces.cli.export_cmd.body_redaction`:
the capture sidecar's body rules as configured); the pages must not show them either. So
every :class:`~shadoweval.storage.samples.Sample` a page displays (the Samples cards with
their word diff, the Divergence previews) goes through :func:`redact_sample` with the same
redactor first: each match becomes ``[REDACTED:<rule>]``.

The redactor is built once per process (:func:`redactor`, ``st.cache_resource``); when the
redaction settings are invalid, :func:`page_redactor` shows the error and stops the page —
nothing is shown unredacted.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import streamlit as st

from export import ExportRedaction
from export.redaction import Redact
from faces.dashboard.formatting import md_escape
from shadoweval.errors import ShadowEvalError
from shadoweval.storage.samples import Sample

__all__ = ["page_redactor", "redact_json", "redact_sample", "redactor"]


@st.cache_resource(show_spinner=False)
def redactor() -> ExportRedaction:
    """The exports' redactor (:func:`faces.cli.export_cmd.body_redaction`), built once.

    Raises:
        ConfigError: the redaction settings are invalid (not cached: fixed settings are
            picked up by the next call).
    """
    from application.redaction import body_redaction

    return body_redaction()


def page_redactor() -> ExportRedaction:
    """:func:`redactor`, or an error on the page and ``st.stop()`` when it cannot be built."""
    try:
        return redactor()
    except ShadowEvalError as exc:
        st.error(
            f"**Cannot redact the stored texts, so they are not shown.** {md_escape(str(exc))}"
        )
        st.stop()


def redact_json(value: Any, redact: Redact) -> Any:
    """A copy of a JSON value with every string (not the object keys) redacted."""
    if isinstance(value, str):
        return redact(value) if value else value
    if isinstance(value, list | tuple):
        return [redact_json(item, redact) for item in value]
    if isinstance(value, dict):
        return {key: redact_json(item, redact) for key, item in value.items()}
    return value


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

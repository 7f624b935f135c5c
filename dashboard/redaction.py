"""The redactor of every request and answer text the dashboard shows.

A capture log imported from a table may carry secrets and e-mail addresses the capture
sidecar never saw. The export redacts them (:func:`shadoweval.application.redaction.body_redaction`:
the capture sidecar's body rules as configured); the pages must not show them either. So
every :class:`~shadoweval.storage.samples.Sample` a page displays (the Samples cards with
their word diff, the Divergence previews) goes through
:func:`shadoweval.application.samples.redact_sample` with the same redactor first (pages read them
with :func:`shadoweval.application.samples.redacted_page`): each match becomes
``[REDACTED:<rule>]``.

The redactor is built once per process (:func:`redactor`, ``st.cache_resource``); when the
redaction settings are invalid, :func:`page_redactor` shows the error and stops the page —
nothing is shown unredacted.
"""

from __future__ import annotations

import streamlit as st

from shadoweval.application.exporting import ExportRedaction
from shadoweval.application.redaction import body_redaction
from shadoweval.dashboard.formatting import md_escape
from shadoweval.errors import ShadowEvalError

__all__ = ["page_redactor", "redactor"]


@st.cache_resource(show_spinner=False)
def redactor() -> ExportRedaction:
    """The exports' redactor (:func:`shadoweval.application.redaction.body_redaction`), built once.

    Raises:
        ConfigError: the redaction settings are invalid (not cached: fixed settings are
            picked up by the next call).
    """
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

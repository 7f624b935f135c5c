"""The text redactor of exports, dashboard pages and API downloads, built from the settings.

The rules are the capture sidecar's body rules (:mod:`shadoweval.body_redaction`), so what an
analyst sees or downloads is redacted exactly as a capture would have been.
"""

from __future__ import annotations

from shadoweval.body_redaction import BodyRedactor, RedactionHits
from shadoweval.config import load_settings
from shadoweval.export import ExportRedaction


def body_redaction() -> ExportRedaction:
    """The exports' text redactor: the capture sidecar's body rules, as configured.

    Built from :class:`shadoweval.body_redaction.BodyRedactor` with
    ``settings.capture.body_redaction`` (``SHADOWEVAL_CAPTURE__BODY_REDACTION__*``):
    ``secret_key``, ``email``, ``card_number`` and ``phone`` by default, plus any
    ``extra_patterns``. Shared by the command line, the API and the dashboard download.

    Raises:
        ConfigError: the settings are invalid (an unknown rule, a bad pattern).
    """
    redactor = BodyRedactor(load_settings().capture.body_redaction)

    def redact(text: str) -> str:
        return redactor.redact_text(text, "export", RedactionHits())

    return ExportRedaction(redact=redact, rules=redactor.rule_names)

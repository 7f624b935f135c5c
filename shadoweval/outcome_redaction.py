"""Replay outcomes redacted before they are stored: the live side's rules, the other sides.

The capture sidecar redacts the live answer before it is written
(:mod:`shadoweval.capture.response_assembly`); the candidate's and the baseline replica's
answers come back from the replay client unredacted. :class:`OutcomeRedactor` passes them
through the same rules — :class:`~shadoweval.body_redaction.BodyRedactor` built from
``capture.body_redaction``, header rules of :mod:`shadoweval.redaction` — before the
repository writes them (:meth:`shadoweval.storage.Repository.save_outcomes` and
``replace_failed_outcomes``, the one path every writer takes; issue 30). Fields, with the
locations the hits are counted at:

* ``response.text``, ``response.reasoning_text``, ``response.tool_calls[i].arguments``;
* ``response.error_message`` (capture-style: ``user:password@`` in a URL removed first,
  rule ``url_credentials``) and the outcome's ``error_detail`` (same);
* ``response.body`` (the raw body): scrubbed as text, or dropped (hit
  ``raw_body_dropped``) when the response streamed and a rule fired in the reassembled
  fields or it had several choices — a secret split over stream events would survive a
  text scrub of the raw events, as on the live side;
* ``response.headers``: sensitive headers removed (``headers_removed``).

The outcome's :attr:`~shadoweval.records.ReplayOutcome.redaction` records the hits and the
rules' :attr:`~shadoweval.body_redaction.BodyRedactor.version`. An outcome already carrying
that version is returned unchanged (redaction is idempotent; a second pass changes nothing).
"""

from __future__ import annotations

from shadoweval.body_redaction import BodyRedactor, RedactionHits
from shadoweval.config import BodyRedactionSettings
from shadoweval.records import RedactionReport, ReplayOutcome, ResponseRecord
from shadoweval.redaction import redact_headers, scrub_url_credentials

__all__ = ["OutcomeRedactor"]

_REASSEMBLED = ("response.text", "response.reasoning_text", "response.tool_calls")


class OutcomeRedactor:
    """Redacts replay outcomes with the capture sidecar's body rules.

    Args:
        settings: the body rules (``capture.body_redaction``); the defaults when ``None``.

    Raises:
        ConfigError: an unknown rule or a bad extra pattern (from
            :class:`~shadoweval.body_redaction.BodyRedactor`).
    """

    def __init__(self, settings: BodyRedactionSettings | None = None) -> None:
        self.redactor = BodyRedactor(settings or BodyRedactionSettings())
        self.version = self.redactor.version

    def redact(self, outcome: ReplayOutcome) -> ReplayOutcome:
        """``outcome`` with every field of the module doc redacted and ``redaction`` set
        (hits merged with any earlier report, ``rules_version`` this redactor's)."""
        earlier = outcome.redaction
        if earlier is not None and earlier.rules_version == self.version:
            return outcome
        hits = RedactionHits()
        if earlier is not None:
            hits.extend(earlier.hits)
        removed: tuple[str, ...] = ()
        response = outcome.response
        if response is not None:
            response, removed = self._response(response, hits)
        detail = outcome.error_detail
        if detail is not None:
            detail = self.error_text(detail, "error_detail", hits)
        headers = tuple(sorted(set(removed) | set(earlier.headers_removed if earlier else ())))
        report = RedactionReport(
            headers_removed=headers, hits=hits.to_hits(), rules_version=self.version
        )
        return outcome.model_copy(
            update={"response": response, "error_detail": detail, "redaction": report}
        )

    @staticmethod
    def fields_changed(report: RedactionReport) -> int:
        """How many fields a report says were changed: distinct hit locations (a field
        several rules fired in counts once) plus the headers removed."""
        return len({hit.location for hit in report.hits}) + len(report.headers_removed)

    def error_text(self, text: str, location: str, hits: RedactionHits) -> str:
        """An error text redacted as the capture side redacts its error messages: URL
        credentials first (rule ``url_credentials``), then the body rules."""
        text, n = scrub_url_credentials(text)
        if n:
            hits.add("url_credentials", location, n)
        return self.redactor.redact_text(text, location, hits)

    def _response(
        self, response: ResponseRecord, hits: RedactionHits
    ) -> tuple[ResponseRecord, tuple[str, ...]]:
        redact = self.redactor.redact_text
        text = response.text
        reasoning = response.reasoning_text
        update: dict[str, object] = {
            "text": None if text is None else redact(text, "response.text", hits),
            "reasoning_text": (
                None if reasoning is None else redact(reasoning, "response.reasoning_text", hits)
            ),
            "tool_calls": tuple(
                call.model_copy(
                    update={
                        "arguments": redact(
                            call.arguments, f"response.tool_calls[{i}].arguments", hits
                        )
                    }
                )
                for i, call in enumerate(response.tool_calls)
            ),
        }
        if response.error_message is not None:
            update["error_message"] = self.error_text(
                response.error_message, "response.error_message", hits
            )
        body = response.body
        if body is not None:
            if response.streamed and (hits.fired(_REASSEMBLED) or response.choices_count > 1):
                hits.add("raw_body_dropped", "response.body")
                update["body"] = None
            else:
                update["body"] = redact(body, "response.body", hits)
        headers, removed = redact_headers(response.headers)
        if removed:
            update["headers"] = headers
        return response.model_copy(update=update), removed

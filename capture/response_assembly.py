"""The response half of a capture's Exchange: decode, reassemble, time and redact it.

:class:`ResponseAssembler` is step 4-6 of :mod:`shadoweval.capture.builder` (see its module
doc): the recorded body pieces are content-decoded piece by piece
(:mod:`shadoweval.capture.decoding`); the route's dialect
(:func:`~shadoweval.llm_protocol.dialects.dialect_for`: chat completions, legacy completions, …)
reads them: a ``text/event-stream`` response is fed to its stream assembler with each piece's
arrival time (TTFT/e2e/ITL/TPOT from the recorded arrival times, TTFB = first encoded body
byte), any other body to its body parser (TTFB = first body byte, e2e = last body byte). HTTP ≥
400 gives ``error_message`` from the error body. The reassembled text, reasoning, tool-call
arguments, error message and (with ``keep_raw_body``) raw body are redacted; a raw stream body
is dropped when a rule fired on a reassembled field or there is more than one choice. Decoding
problems turn a ``done`` outcome into ``error`` and are listed in ``error_message``.

**Done means done** (:func:`response_complete`): a ``cancelled`` capture — or an ``error``
one whose upstream broke the connection after the response started — whose response
reached its terminal event — ``data: [DONE]``, or for servers that send no ``[DONE]`` a
finish reason together with reported usage; for a non-streamed body, the whole JSON
completion — is ``done``. The official ``openai`` clients close the connection as soon as
they read ``[DONE]``; when the upstream ends its body a few milliseconds later the proxy
sees a disconnect, yet the client got everything. Such an exchange keeps no
"client disconnected" error text.

Runs in the builder worker (a thread or a spawned process), never on the live path.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from shadoweval.body_redaction import BodyRedactor, RedactionHits, parse_json
from shadoweval.capture.decoding import (
    DEFAULT_MAX_OUTPUT_BYTES,
    BodyDecoder,
    ContentDecodingError,
    decode_pieces,
)
from shadoweval.capture.raw import RawCapture
from shadoweval.errors import RecordDecodeError
from shadoweval.llm_protocol.assembler import AssembledResponse
from shadoweval.llm_protocol.dialects import dialect_for
from shadoweval.records import (
    ExchangeOutcome,
    HeaderPair,
    ResponseRecord,
    Timings,
    TimingSource,
    UsageSource,
)
from shadoweval.redaction import scrub_url_credentials

ERROR_MESSAGE_MAX_CHARS = 2000
"""Longest error message kept from an error body that is not OpenAI-style JSON."""

_ENDED_EARLY = (ExchangeOutcome.CANCELLED, ExchangeOutcome.ERROR)
"""Outcomes of a capture that ended before its body did: the client left, or the upstream
broke the connection (an ``error`` with a response: a mid-body failure)."""

_REASSEMBLED_FIELDS = ("response.text", "response.reasoning_text", "response.tool_calls")


def error_text(body: str) -> str:
    """The message of an error body: OpenAI ``{"error": {"message"}}``, ``{"error": "..."}``,
    ``{"message"}``/``{"detail"}``, else the text itself (cut to
    :data:`ERROR_MESSAGE_MAX_CHARS`; ``"(empty error body)"`` for a blank one)."""
    parsed = parse_json(body)
    if isinstance(parsed, dict):
        err = parsed.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])
        if isinstance(err, str):
            return err
        for key in ("message", "detail"):
            if isinstance(parsed.get(key), str):
                return str(parsed[key])
    text = body.strip()
    return text[:ERROR_MESSAGE_MAX_CHARS] if text else "(empty error body)"


def response_complete(result: AssembledResponse, *, body_decoded: bool) -> bool:
    """Whether a reassembled response reached its terminal event (the client has it all).

    Streamed: ``data: [DONE]`` arrived, or — for servers that send no ``[DONE]`` — a finish
    reason and reported usage did, with no error event. Non-streamed: the body parsed as a
    whole completion (a cut JSON body does not parse). ``body_decoded``: the content
    decoder reached its end marker (always true for an identity-encoded body).
    """
    if not body_decoded or result.error_message is not None:
        return False
    if not result.streamed:
        return True
    finished = (
        result.finish_reason_raw is not None and result.usage.usage_source is UsageSource.REPORTED
    )
    return result.done_seen or finished


@dataclass(slots=True)
class ResponseParts:
    """What :meth:`ResponseAssembler.assemble` returns: the record, the timings (ms from
    the capture's start) and the outcome after decoding problems."""

    response: ResponseRecord
    timings: Timings
    outcome: ExchangeOutcome


class ResponseAssembler:
    """Turns a capture's recorded response into a redacted :class:`ResponseRecord`.

    Args:
        redactor: the body rules (applied to reassembled fields, error text, raw body).
        keep_raw_body: record the (scrubbed) raw body too.
        max_decoded_bytes: bound on a content-decoded body (bombs are refused).
    """

    def __init__(
        self,
        redactor: BodyRedactor,
        *,
        keep_raw_body: bool,
        max_decoded_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    ) -> None:
        self.redactor = redactor
        self.keep_raw_body = keep_raw_body
        self.max_decoded_bytes = max_decoded_bytes

    def assemble(
        self,
        raw: RawCapture,
        headers: tuple[HeaderPair, ...],
        outcome: ExchangeOutcome,
        hits: RedactionHits,
    ) -> ResponseParts:
        """The response of ``raw`` (which must have a ``status_code``), with ``headers``
        already redacted; ``outcome`` is the capture's (``truncated`` applied). Redaction
        matches are added to ``hits``. Never raises for a bad body: decoding problems are
        recorded in ``error_message`` and make the outcome ``error``.
        """
        assert raw.status_code is not None
        status = raw.status_code
        content_type = (raw.response_header("content-type") or "").lower()
        streamed = "text/event-stream" in content_type
        first_ns = raw.chunks[0][0] if raw.chunks else None
        last_ns = raw.chunks[-1][0] if raw.chunks else (raw.end_ns or raw.response_start_ns)
        ttfb_ms = _ms(raw, first_ns)
        e2e_ms = _ms(raw, last_ns)
        measured = Timings(
            ttfb_ms=ttfb_ms,
            e2e_ms=e2e_ms,
            source=TimingSource.MEASURED if ttfb_ms is not None else TimingSource.MISSING,
        )
        done = outcome is ExchangeOutcome.DONE

        try:
            decoder = BodyDecoder(
                raw.response_header("content-encoding"), max_output_bytes=self.max_decoded_bytes
            )
            pieces = list(decode_pieces(raw.chunks, decoder))
        except ContentDecodingError as exc:
            message = f"response body could not be decoded ({exc.coding}: {exc.reason}): {exc}"
            return ResponseParts(
                ResponseRecord(
                    status_code=status, headers=headers, streamed=streamed, error_message=message
                ),
                measured,
                outcome if outcome is ExchangeOutcome.CANCELLED else ExchangeOutcome.ERROR,
            )
        problems: list[str] = []
        if not decoder.complete and done and raw.chunks:
            problems.append(f"{'+'.join(decoder.codings)}-encoded body ended before its end marker")

        if status >= 400:
            body = b"".join(p for _, p in pieces).decode("utf-8", errors="replace")
            message = self.redactor.redact_text(error_text(body), "response.error_message", hits)
            response = ResponseRecord(
                status_code=status,
                headers=headers,
                body=self._raw_body(pieces, streamed=False, fields_fired=False, hits=hits),
                streamed=streamed,
                error_message=message,
            )
            return ResponseParts(response, measured, outcome)

        timings: Timings
        dialect = dialect_for(raw.route)
        if streamed:
            asm = dialect.stream_assembler(start_ns=raw.start_ns)
            for arrival_ns, piece in pieces:
                asm.feed(piece, now_ns=arrival_ns)
            result = asm.finish(now_ns=last_ns)
            if ttfb_ms is not None:
                result = replace(result, ttfb_ms=ttfb_ms)  # first encoded byte, not decoded
            if result.error_message is not None:
                problems.append(f"error event in stream: {result.error_message}")
            if result.decode_errors:
                problems.append(f"{result.decode_errors} stream event(s) were not JSON chunks")
            if result.events == 0 and not result.done_seen and done:
                problems.append("stream ended without any completion chunk")
            timings = result.timings()
            if outcome in _ENDED_EARLY and response_complete(result, body_decoded=decoder.complete):
                outcome = ExchangeOutcome.DONE  # the client got the whole stream
        else:
            body_bytes = b"".join(p for _, p in pieces)
            try:
                result = dialect.parse_body(body_bytes, ttfb_ms=ttfb_ms, e2e_ms=e2e_ms)
            except RecordDecodeError as exc:
                # exc's message quotes the body: record only the reason.
                problems.append(f"response body is not a completion ({exc.reason})")
                response = ResponseRecord(
                    status_code=status,
                    headers=headers,
                    body=self._raw_body(pieces, streamed=False, fields_fired=False, hits=hits),
                    error_message=self.problem_text(problems, raw, hits),
                )
                return ResponseParts(response, measured, _failed(outcome))
            timings = result.timings()
            if outcome in _ENDED_EARLY and response_complete(result, body_decoded=decoder.complete):
                outcome = ExchangeOutcome.DONE  # the client got the whole body

        capture_error = raw.error is not None and outcome is not ExchangeOutcome.DONE
        response = self._record(
            result, status, headers, pieces, problems, raw, hits, capture_error=capture_error
        )
        return ResponseParts(response, timings, _failed(outcome) if problems else outcome)

    def problem_text(
        self,
        problems: list[str],
        raw: RawCapture,
        hits: RedactionHits,
        *,
        capture_error: bool = True,
    ) -> str:
        """The error message: decoding ``problems`` joined with ``"; "``, then the
        capture's own error text when ``capture_error`` (which may quote a URL:
        ``user:password@`` is removed, hit ``url_credentials``), then the body rules run
        (location ``response.error_message``)."""
        text = "; ".join(problems)
        if raw.error and capture_error:
            text = f"{text}; capture: {raw.error}" if text else raw.error
        text, n = scrub_url_credentials(text)
        if n:
            hits.add("url_credentials", "response.error_message", n)
        return self.redactor.redact_text(text, "response.error_message", hits)

    def _record(
        self,
        result: AssembledResponse,
        status: int,
        headers: tuple[HeaderPair, ...],
        pieces: list[tuple[int, bytes]],
        problems: list[str],
        raw: RawCapture,
        hits: RedactionHits,
        *,
        capture_error: bool,
    ) -> ResponseRecord:
        redact = self.redactor.redact_text
        text = None if result.text is None else redact(result.text, "response.text", hits)
        reasoning = (
            None
            if result.reasoning_text is None
            else redact(result.reasoning_text, "response.reasoning_text", hits)
        )
        tool_calls = tuple(
            call.model_copy(
                update={
                    "arguments": redact(call.arguments, f"response.tool_calls[{i}].arguments", hits)
                }
            )
            for i, call in enumerate(result.tool_calls)
        )
        fields_fired = hits.fired(_REASSEMBLED_FIELDS)
        error_message = (
            self.problem_text(problems, raw, hits, capture_error=capture_error)
            if problems or capture_error
            else None
        )
        body = self._raw_body(
            pieces,
            streamed=result.streamed,
            fields_fired=fields_fired or result.choices_count > 1,
            hits=hits,
        )
        redacted = replace(
            result,
            text=text,
            reasoning_text=reasoning,
            tool_calls=tool_calls,
            error_message=error_message,
        )
        return redacted.to_response_record(status, headers, body)

    def _raw_body(
        self,
        pieces: list[tuple[int, bytes]],
        *,
        streamed: bool,
        fields_fired: bool,
        hits: RedactionHits,
    ) -> str | None:
        if not self.keep_raw_body:
            return None
        if streamed and fields_fired:
            hits.add("raw_body_dropped", "response.body")
            return None
        text = b"".join(p for _, p in pieces).decode("utf-8", errors="replace")
        return self.redactor.redact_text(text, "response.body", hits)


def _ms(raw: RawCapture, ns: int | None) -> float | None:
    return None if ns is None else (ns - raw.start_ns) / 1e6


def _failed(outcome: ExchangeOutcome) -> ExchangeOutcome:
    """A decoding problem turns ``done`` into ``error``; cancelled/truncated stay."""
    return ExchangeOutcome.ERROR if outcome is ExchangeOutcome.DONE else outcome

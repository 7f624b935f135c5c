"""From a :class:`~shadoweval.capture.raw.RawCapture` to a redacted, serialized Exchange — off the
hot path.

:meth:`ExchangeBuilder.build` runs in the sidecar's builder worker (a thread or, through
:func:`init_worker` / :func:`build_in_worker`, a ``ProcessPoolExecutor``), never on the
live path. Steps:

1. **Headers** → :class:`~shadoweval.records.HeaderPair` (names lower case). Removed and
   listed by name in the report: :data:`shadoweval.redaction.SENSITIVE_HEADERS`
   (``Authorization``, ``Cookie``, ``Set-Cookie``, ``X-Api-Key``...), the configured
   ``extra_sensitive_headers``, the sampling ``session_headers`` (only their salted hash is
   recorded), the client-address headers (``X-Forwarded-For``, ``X-Real-IP``,
   ``Forwarded``...: an IP address is personal data), and any name with a word such as
   ``auth``, ``token``, ``key``, ``secret``, ``session``, ``signature``, ``csrf``, or a word
   ending in ``token``/``secret``/``password``... (:func:`shadoweval.redaction.sensitive_name`:
   ``x-goog-api-key``, ``x-csrftoken``, ``authentication`` go, ``x-ratelimit-remaining-tokens``
   stays). Values of the kept headers are scrubbed with the secret-key rules and the body
   rules (an e-mail address or phone number in ``X-User-Email`` is replaced).
2. **Query string**: values of parameters with sensitive names (``key``, ``api_key``,
   ``token``, ``accessToken``, ``sig``, ``signature``, ``code``...) become
   ``[REDACTED:query_param]``; other values, every parameter name and items without a value
   go through the secret-key and body rules (a name may itself be a key). The recorded
   ``request.path`` is the request target, ``path?query``; ``route`` is the path alone.
3. **Request body**: content-decoded if the request had a ``Content-Encoding``, then
   redacted (:class:`~shadoweval.body_redaction.BodyRedactor`). A body a rule fired on is
   re-serialized as compact JSON — **the replay then sends the redacted prompt**: the
   live answer came from the original prompt, the candidate's from one that says
   ``[REDACTED:email]``, so such a pair is not like for like (an answer that quotes the
   address diverges). The report's hits say which exchanges were redacted and where; a
   task type full of PII shows more divergence than the models alone would. Untouched
   bodies are stored byte for byte. The task type is tagged from the original request.
4. **Response**: decoded piece by piece (:mod:`shadoweval.capture.decoding`); a
``text/event-stream``
   response is fed to :class:`~shadoweval.llm_protocol.ChatStreamAssembler` with each
   piece's arrival time, so TTFT/e2e/ITL/TPOT come from the recorded arrival times; TTFB is
   the arrival of the first (encoded) body byte. Other bodies go to
   :func:`~shadoweval.llm_protocol.parse_completion_body` (TTFB = first body byte, e2e =
   last body byte). HTTP ≥ 400: ``error_message`` from the error body. The reassembled
   text, reasoning, tool-call arguments and error message are redacted.
5. **Raw body** only with ``keep_raw_body``: scrubbed with the body rules, and **dropped**
   (hit ``raw_body_dropped`` at ``response.body``) for a stream on whose reassembled fields
   any rule fired, or with more than one choice — a value split across SSE deltas survives
   a scrub of the raw text, and only choice 0 is reassembled.
6. **Outcome**: the capture's (``cancelled``, ``error``, ``done``), ``truncated`` when the
   copy was cut at the size limit; ``error`` when a finished response cannot be decoded
   (bad content coding, a body that is not a completion, an error event inside a 200
   stream, undecodable events, a stream without any event) — the reason is in
   ``response.error_message``, followed by the capture's own ``error`` text (URL
   ``user:password@`` parts and body-rule matches removed). A capture with no response
   (connect failure, cancelled before headers) has ``response = None``: the Exchange
   record has no field for its reason, which is only logged by the proxy.
   Steps 4-6 live in :mod:`shadoweval.capture.response_assembly` (:class:`ResponseAssembler`).
6a. **Cache hit**: the configured ``cache_hit_rules``
   (:class:`~shadoweval.config.CacheHitRule`) are tested on the received response
   headers; a match sets ``response.cache_hit`` and ``response.cache_hit_headers`` (a
   matched header that step 1 removed keeps its name, value ``[REDACTED:header]``). The
   answer is kept; the gate leaves the pair out of latency (:mod:`shadoweval.cache_hits`).
7. **Identity**: the live model's (:mod:`shadoweval.capture.identity`); when its name is empty or
   ``unknown``, the response's ``model`` field.

Failure policy: :meth:`ExchangeBuilder.build` does not raise for any capture. An
unexpected internal error yields a *minimal* Exchange — outcome ``error``, the request
body and headers left out (they may not have been redacted yet; hit
``request_body_dropped``), the reason (the failing step and exception type, never a
message that could quote data) in ``response.error_message`` when a response started —
and ``BuildResult.fallback_reason`` says so, for the ``build_failed`` count. Only if even
that record cannot be built is :class:`BuildError` raised.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from datetime import UTC
from typing import Any
from urllib.parse import quote, unquote_plus

import orjson

from shadoweval.body_redaction import BodyRedactor, RedactionHits, parse_json
from shadoweval.cache_hits import mark_cache_hit
from shadoweval.capture.decoding import DEFAULT_MAX_OUTPUT_BYTES, BodyDecoder, ContentDecodingError
from shadoweval.capture.identity import resolve_identity
from shadoweval.capture.raw import RawCapture
from shadoweval.capture.response_assembly import ResponseAssembler
from shadoweval.capture.sinks.base import BuiltExchange
from shadoweval.capture.tagging import TaskTag, TaskTagger
from shadoweval.config import BodyRedactionSettings, CaptureSettings
from shadoweval.errors import ShadowEvalError
from shadoweval.lifecycle import freeze_startup_heap
from shadoweval.process_death import die_with_parent
from shadoweval.records import (
    Exchange,
    ExchangeOutcome,
    HeaderPair,
    ModelIdentity,
    RedactionHit,
    RedactionReport,
    RequestRecord,
    ResponseRecord,
    Timings,
)
from shadoweval.redaction import (
    SENSITIVE_HEADERS,
    SENSITIVE_NAME_WORDS,
    SENSITIVE_QUERY_PARAMS,
    sensitive_name,
)

__all__ = [
    "CLIENT_ADDRESS_HEADERS",
    "SENSITIVE_NAME_WORDS",
    "SENSITIVE_QUERY_PARAMS",
    "BuildError",
    "BuildResult",
    "ExchangeBuilder",
    "build_in_worker",
    "default_source",
    "init_worker",
    "sensitive_name",
    "worker_args",
]

logger = logging.getLogger(__name__)

CLIENT_ADDRESS_HEADERS: frozenset[str] = frozenset(
    {"x-forwarded-for", "x-real-ip", "forwarded", "cf-connecting-ip", "true-client-ip"}
)
"""Headers carrying the end client's IP address (personal data): never recorded."""

_NAME_CACHE_MAX = 4096
"""Header names whose removal verdict a builder remembers (names repeat request after
request; a client sending ever new names only makes the check run each time)."""


class BuildError(ShadowEvalError):
    """A capture could not be turned into any Exchange, not even the minimal one."""


@dataclass(frozen=True, slots=True)
class BuildResult:
    """What :meth:`ExchangeBuilder.build` returns (picklable: it crosses process pools).

    * ``built``: the serialized exchange for the sinks.
    * ``exchange_id``: its id.
    * ``redaction_hits``: matches per rule (for the ``redactions_total`` metric); includes
      ``header_removed`` (headers removed) and ``raw_body_dropped``.
    * ``outcome``, ``task_type``, ``tag``: as recorded (``tag`` says where the task type
      came from and whether an invalid task-type header was ignored).
    * ``fallback_reason``: set when an internal error produced the minimal record.
    * ``cache_hit_headers``: names of the response headers a cache-hit rule matched
      (empty when the answer was not served from a cache), for the ``cache_hits`` metric.
    """

    built: BuiltExchange
    exchange_id: str
    redaction_hits: dict[str, int]
    outcome: ExchangeOutcome
    task_type: str
    tag: TaskTag | None = None
    fallback_reason: str | None = None
    cache_hit_headers: tuple[str, ...] = ()


def default_source() -> str:
    """``sidecar:<hostname>``, the ``source`` of records this host captures."""
    return f"sidecar:{socket.gethostname()}"


class ExchangeBuilder:
    """Builds redacted, serialized exchanges from raw captures.

    Args:
        settings: the sidecar's settings (redaction, tagging, ``keep_raw_body``).
        model: the live model's identity (:func:`shadoweval.capture.identity.fetch_live_model`).
        source: the ``source`` recorded (:func:`default_source`: ``sidecar:<host>``).
        max_decoded_bytes: bound on a content-decoded body (bombs are refused).

    Raises:
        ConfigError: invalid body-redaction settings.
    """

    def __init__(
        self,
        settings: CaptureSettings,
        model: ModelIdentity,
        source: str,
        *,
        max_decoded_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    ) -> None:
        self.settings = settings
        self.model = model
        self.source = source
        self.max_decoded_bytes = max_decoded_bytes
        self.redactor = BodyRedactor(settings.body_redaction)
        self.secrets = BodyRedactor(BodyRedactionSettings(rules=("secret_key",)))
        self.tagger = TaskTagger(settings.task_type_header, settings.task_type_rules)
        self.responses = ResponseAssembler(
            self.redactor,
            keep_raw_body=settings.keep_raw_body,
            max_decoded_bytes=max_decoded_bytes,
        )
        self._extra_headers = frozenset(
            h.lower()
            for h in (
                *settings.extra_sensitive_headers,
                *settings.session_headers,
                *CLIENT_ADDRESS_HEADERS,
            )
        )
        self._header_verdicts: dict[str, bool] = {}

    # -- public --------------------------------------------------------------------

    def build(self, raw: RawCapture) -> BuildResult:
        """Build one exchange; never raises for a bad capture (see the module doc).

        Raises:
            BuildError: not even the minimal record could be built.
        """
        step = ["start"]
        try:
            return self._build(raw, step)
        except Exception as exc:
            reason = f"internal error in build step {step[0]!r} ({type(exc).__name__})"
            logger.error("capture %s: %s", raw.exchange_id, reason)
            try:
                return self._fallback(raw, reason)
            except Exception as inner:
                raise BuildError(f"capture {raw.exchange_id}: {reason}; fallback failed") from (
                    inner
                )

    # -- steps ---------------------------------------------------------------------

    def _build(self, raw: RawCapture, step: list[str]) -> BuildResult:
        hits = RedactionHits()
        step[0] = "headers"
        req_headers, removed_req = self._headers(raw.request_headers, "request", hits)
        resp_headers, removed_resp = self._headers(raw.response_headers, "response", hits)
        step[0] = "query"
        query = self._query(raw.query, hits)
        step[0] = "request_body"
        body_text = self._request_text(raw, hits)
        parsed = parse_json(body_text)
        tag = self.tagger.tag(
            route=raw.route,
            header_value=raw.header(self.settings.task_type_header),
            body=parsed if isinstance(parsed, dict) else None,
        )
        body_text = self.redactor.redact_request_body(body_text, hits, parsed)

        step[0] = "response"
        outcome = raw.outcome
        if raw.truncated and outcome is ExchangeOutcome.DONE:
            outcome = ExchangeOutcome.TRUNCATED
        response: ResponseRecord | None = None
        timings = Timings()
        if raw.status_code is not None:
            parts = self.responses.assemble(raw, resp_headers, outcome, hits)
            response, timings, outcome = parts.response, parts.timings, parts.outcome
            step[0] = "cache_hit"
            response = self._cache_hit(response, raw, removed_resp)

        step[0] = "record"
        headers_removed = tuple(sorted(set(removed_req) | set(removed_resp)))
        exchange = Exchange(
            **_captured_fields(raw),
            task_type=tag.task_type,
            request=RequestRecord(
                method=raw.method,
                path=f"{raw.path}?{query}" if query else raw.path,
                headers=req_headers,
                body=body_text,
            ),
            response=response,
            timings=timings,
            outcome=outcome,
            baseline_model=resolve_identity(
                self.model, response.model if response is not None else None
            ),
            redaction=RedactionReport(headers_removed=headers_removed, hits=hits.to_hits()),
            source=self.source,
            error_detail=(
                self.responses.problem_text([], raw, hits)
                if response is None and raw.error
                else None
            ),
        )
        step[0] = "serialize"
        counts = hits.by_rule()
        if headers_removed:
            counts["header_removed"] = len(removed_req) + len(removed_resp)
        return BuildResult(
            built=self._serialize(exchange, raw),
            exchange_id=exchange.exchange_id,
            redaction_hits=counts,
            outcome=outcome,
            task_type=tag.task_type,
            tag=tag,
            cache_hit_headers=tuple(h.name for h in response.cache_hit_headers)
            if response is not None
            else (),
        )

    def _cache_hit(
        self, response: ResponseRecord, raw: RawCapture, removed: tuple[str, ...]
    ) -> ResponseRecord:
        """Mark a response a cache served (``settings.cache_hit_rules`` on the received
        headers). A matched value is scrubbed like a kept header's; a matched header that
        header redaction removed keeps its name with the value ``[REDACTED:header]``."""
        marked = mark_cache_hit(
            response,
            self.settings.cache_hit_rules,
            [(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw.response_headers],
        )
        if not marked.cache_hit:
            return marked
        gone = set(removed)
        scratch = RedactionHits()  # the kept headers' hits are already counted
        kept = tuple(
            HeaderPair(
                name=h.name,
                value="[REDACTED:header]"
                if h.name in gone
                else self.secrets.redact_text(h.value, f"response.headers.{h.name}", scratch),
            )
            for h in marked.cache_hit_headers
        )
        return marked.model_copy(update={"cache_hit_headers": kept})

    def _serialize(self, exchange: Exchange, raw: RawCapture) -> BuiltExchange:
        payload = orjson.dumps(exchange.model_dump(mode="json"))
        key = (raw.session_key_hash or raw.exchange_id).encode("utf-8")
        return BuiltExchange(exchange_id=exchange.exchange_id, key=key, payload=payload)

    def _headers(
        self, pairs: list[tuple[bytes, bytes]], side: str, hits: RedactionHits
    ) -> tuple[tuple[HeaderPair, ...], tuple[str, ...]]:
        out: list[HeaderPair] = []
        removed: set[str] = set()
        for k, v in pairs:
            name = k.decode("latin-1").lower()
            if self._removed_header(name):
                removed.add(name)
                continue
            where = f"{side}.headers.{name}"
            value = self.secrets.redact_text(v.decode("latin-1"), where, hits)
            out.append(HeaderPair(name=name, value=self.redactor.redact_text(value, where, hits)))
        return tuple(out), tuple(sorted(removed))

    def _removed_header(self, name: str) -> bool:
        """Whether header ``name`` (lower case) is left out of the record (step 1 of the
        module doc); answers are remembered for up to :data:`_NAME_CACHE_MAX` names."""
        known = self._header_verdicts.get(name)
        if known is None:
            known = name in SENSITIVE_HEADERS or name in self._extra_headers or sensitive_name(name)
            if len(self._header_verdicts) < _NAME_CACHE_MAX:
                self._header_verdicts[name] = known
        return known

    def _query(self, query: str, hits: RedactionHits) -> str:
        query = query.removeprefix("?")
        if not query:
            return ""
        parts: list[str] = []
        for item in query.split("&"):
            name, sep, value = item.partition("=")
            name = self._query_text(name, "request.query", hits)  # a name may hold a secret
            location = f"request.query.{unquote_plus(name)[:64]}"
            if not sep or not value:
                parts.append(f"{name}{sep}")
            elif sensitive_name(unquote_plus(name)):
                hits.add("query_param", location)
                parts.append(f"{name}=[REDACTED:query_param]")
            else:
                parts.append(f"{name}={self._query_text(value, location, hits)}")
        return "&".join(parts)

    def _query_text(self, encoded: str, location: str, hits: RedactionHits) -> str:
        """One percent-encoded query name or value through the secret and body rules: as
        received when none fired, else the redacted text re-encoded."""
        decoded = unquote_plus(encoded)
        redacted = self.secrets.redact_text(decoded, location, hits)
        redacted = self.redactor.redact_text(redacted, location, hits)
        return encoded if redacted == decoded else quote(redacted, safe="[]:")

    def _request_text(self, raw: RawCapture, hits: RedactionHits) -> str:
        body = raw.request_body
        coding = raw.header("content-encoding")
        if coding:
            try:
                decoder = BodyDecoder(coding, max_output_bytes=self.max_decoded_bytes)
                body = decoder.decode(body) + decoder.finish()
            except ContentDecodingError:
                # Encoded bytes cannot be redacted: leave them out rather than store them.
                hits.add("request_body_dropped", "request.body")
                return ""
        return body.decode("utf-8", errors="replace")

    def _fallback(self, raw: RawCapture, reason: str) -> BuildResult:
        response = None
        if raw.status_code is not None:
            response = ResponseRecord(status_code=raw.status_code, error_message=reason)
        hits = (RedactionHit(rule="request_body_dropped", location="request.body", count=1),)
        exchange = Exchange(
            **_captured_fields(raw),
            request=RequestRecord(method=raw.method, path=raw.path, body=""),
            response=response,
            outcome=ExchangeOutcome.ERROR,
            baseline_model=resolve_identity(self.model, None),
            redaction=RedactionReport(hits=hits),
            source=self.source,
        )
        return BuildResult(
            built=self._serialize(exchange, raw),
            exchange_id=exchange.exchange_id,
            redaction_hits={"request_body_dropped": 1},
            outcome=ExchangeOutcome.ERROR,
            task_type=exchange.task_type,
            fallback_reason=reason,
        )


def _captured_fields(raw: RawCapture) -> dict[str, Any]:
    """The :class:`~shadoweval.records.Exchange` fields the raw capture gives as they are
    (``captured_at`` made UTC-aware when naive), for a built and a fallback exchange alike."""
    at = raw.captured_at
    return {
        "exchange_id": raw.exchange_id,
        "captured_at": at if at.tzinfo is not None else at.replace(tzinfo=UTC),
        "monotonic_start_ns": raw.start_ns,
        "route": raw.route,
        "session_key_hash": raw.session_key_hash,
        "served_by": raw.served_by,
    }


# -- process pool entry points ---------------------------------------------------------

_WORKER: ExchangeBuilder | None = None


def worker_args(
    settings: CaptureSettings, model: ModelIdentity, source: str
) -> tuple[str, str, str]:
    """The ``initargs`` for :func:`init_worker` (JSON strings pickle cheaply).

    Secret settings (``session_salt``) are masked in the JSON; the builder needs none.
    """
    return settings.model_dump_json(), model.model_dump_json(), source


def init_worker(settings_json: str, model_json: str, source: str) -> None:
    """``ProcessPoolExecutor`` initializer: build this process's :class:`ExchangeBuilder`;
    the worker is killed with its parent (:func:`~shadoweval.process_death.die_with_parent`)
    and lowers its own CPU priority by ``settings.builder_nice`` (``os.nice``; a failure is
    logged and ignored), so the relay it serves wins the CPU on a busy host."""
    global _WORKER
    die_with_parent()
    settings = CaptureSettings.model_validate_json(settings_json)
    if settings.builder_nice:
        try:
            os.nice(settings.builder_nice)
        except OSError as exc:
            logger.warning("capture builder: could not lower its CPU priority: %s", exc)
    _WORKER = ExchangeBuilder(settings, ModelIdentity.model_validate_json(model_json), source)
    freeze_startup_heap()


def build_in_worker(raw: RawCapture) -> BuildResult:
    """Build ``raw`` with the builder :func:`init_worker` made in this process.

    Raises:
        BuildError: :func:`init_worker` did not run in this process.
    """
    if _WORKER is None:
        raise BuildError("init_worker() has not run in this process")
    return _WORKER.build(raw)

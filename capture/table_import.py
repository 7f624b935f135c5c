"""Import recorded tables into the capture-log format.

Each :class:`~shadoweval.tables.RecordedRow` becomes one
:class:`~shadoweval.records.Exchange`, as if the sidecar had captured the model answering
that prompt:

* **request**: an OpenAI chat-completions body with ``model``, ``messages``, ``tools`` (only
  when the table has them), ``stream`` and ``stream_options: {"include_usage": true}``
  when importing as streamed, and only the sampling parameters the operator passed
  (never invented: the replay pins what is recorded and lists the rest as missing);
* **response**: a synthesized non-streamed :class:`~shadoweval.records.ResponseRecord`
  (status 200, ``body=None`` because no raw body exists) with the recorded text and
  tool calls; ``finish_reason_raw`` is ``None`` unless the table has a finish-reason
  column; usage is ``reported`` from the token columns, else ``missing`` (never zeros);
* **timings**: from the latency columns with ``source=recorded`` (``e2e_ms`` = latency,
  ``ttft_ms``, ``tpot_ms`` = the recorded mean ITL, or (e2e − TTFT) / (completion
  tokens − 1) when those are known; ``ttfc_ms``, when importing as streamed, from a TTFC
  column (``ttfc_col``), else the recorded TTFT — the first token stands for the first
  content: exact for a model that does not reason, and for one that does it under-states
  the baseline's TTFC, which can only make the candidate look slower (conservative); when
  importing as not streamed, the latency), else ``source=missing``;
* ``task_type``, ``baseline_model`` (the table's model, or the identity passed in),
  ``source = "import:<file>#<row>"``;
* ``captured_at``: the row's ``captured_at_col`` when the mapping has one (the time the
  request was served), else the import time plus one millisecond per row, so rows keep
  their order and the ULID ``exchange_id`` (built from ``captured_at``) sorts the same way.

Rows of a trace preset (``otel_genai``, ``langfuse``, ``litellm``: logs of live traffic)
are imported **as the capture sidecar would have captured them** when :class:`CaptureRules`
are given (the application layer passes the configured ones):

* **redaction**: the request body goes through
  :meth:`~shadoweval.body_redaction.BodyRedactor.redact_request_body`, the answer's text
  and tool-call arguments through ``redact_text`` (locations ``response.text``,
  ``response.tool_calls[i].arguments``), with the hits in ``Exchange.redaction``; a
  rejected row's raw record and detail are redacted too before they are written beside
  the log;
* **task type**: a row the loader could not label (``RecordedRow.untagged``) is tagged
  by :class:`~shadoweval.capture.tagging.TaskTagger` with the row's ``metadata.task_type`` in place
  of
  the task-type header and the request body (plus the recorded ``metadata``) for the
  rules, from the original (unredacted) request, as the builder does;
* **session**: a recorded session id is stored only as its salted hash
  (``session_key_hash``, :func:`shadoweval.capture.sampling.hash_session_key`);
* the route (``/v1/completions`` for a recorded text completion, whose request holds
  ``prompt``), the response's own model name and a cache hit are kept.

Rejected rows (table rows that could not be mapped, or rows that cannot become an
exchange: no model, ``missing_model``; a value the record refuses, such as a negative
latency, ``invalid_record`` naming the field and the value; any other error building it,
``unprocessable``) are reported and appended to ``<out>.rejected.jsonl`` beside the
capture-log directory (not inside it: every ``*.jsonl`` in the directory is read as a
segment), one JSON object per line with ``location``, ``reason``, ``detail`` and the raw
``row``; the import goes on with the next row. Rows whose key repeated an earlier row's
are kept under a renamed key and counted (:attr:`ImportReport.renamed_keys`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypedDict, Unpack

import orjson
from pydantic import ValidationError
from ulid import ULID

from shadoweval.body_redaction import BodyRedactor, RedactionHits
from shadoweval.capture.sampling import hash_session_key
from shadoweval.capture.tagging import TaskTagger, valid_task_type
from shadoweval.capture_log import CaptureLogWriter
from shadoweval.errors import ConfigError, TableMappingError
from shadoweval.llm_protocol import SAMPLING_PARAMS, normalize_finish_reason, tpot_ms
from shadoweval.records import (
    Exchange,
    HeaderPair,
    ModelIdentity,
    RedactionReport,
    RequestRecord,
    ResponseRecord,
    Timings,
    TimingSource,
    Usage,
    UsageSource,
    utc_now,
)
from shadoweval.tables import (
    LoadResult,
    Preset,
    RecordedRow,
    RejectedRow,
    TableFormat,
    TableMapping,
    load_recorded_rows,
    message_text,
)

REJECTED_SUFFIX = ".rejected.jsonl"

COMPLETIONS_ROUTE = "/v1/completions"

IMPORTED_CACHE_HIT = HeaderPair(name="x-shadow-eval-imported-cache-hit", value="true")
"""What an imported cache hit names as its matched header: the log's own cache-hit field
(LiteLLM ``cache_hit``), since an import records no response headers."""


@dataclass(frozen=True, slots=True)
class CaptureRules:
    """What an import applies as the capture sidecar does (see the module doc).

    Attributes:
        redactor: the body rules (``capture.body_redaction``); ``None``: no redaction.
        tagger: the task-type rules (``capture.task_type_header``/``task_type_rules``)
            for rows without a task type of their own; ``None``: such rows are
            ``default`` unless their metadata names a valid task type.
        session_salt: the salt of session key hashes (``capture.session_salt``).
    """

    redactor: BodyRedactor | None = None
    tagger: TaskTagger | None = None
    session_salt: bytes = b"shadow-eval"


@dataclass(frozen=True, slots=True)
class ImportReport:
    """What an import did.

    Attributes:
        files: table files read.
        rows_read: rows in those files.
        written: exchanges written to the capture log.
        rejected: rows not written, each with location, reason and the raw row.
        out_dir: the capture-log directory.
        segments: segment files written.
        rejected_path: the file the rejected rows were appended to (``None`` if none).
        renamed_keys: rows kept under a renamed key because their key repeated an
            earlier row's (:attr:`~shadoweval.tables.LoadResult.renamed_keys`).
        over_limit: mapped rows not written because ``limit`` exchanges were written.
        redacted: exchanges on which a body redaction rule fired.
        notes: what the table does not record, per model (a BFCL prompt-mode model: no
            latency column, so latency is unknown, not zero; :attr:`LoadResult.notes`).
    """

    files: tuple[str, ...]
    rows_read: int
    written: int
    rejected: tuple[RejectedRow, ...]
    out_dir: Path
    segments: tuple[Path, ...]
    rejected_path: Path | None
    renamed_keys: int = 0
    over_limit: int = 0
    redacted: int = 0
    notes: tuple[str, ...] = ()

    def rejected_by_reason(self) -> dict[str, int]:
        """Count rejected rows per reason."""
        counts: dict[str, int] = {}
        for item in self.rejected:
            counts[item.reason] = counts.get(item.reason, 0) + 1
        return counts


def rejected_path_for(out_dir: str | Path) -> Path:
    """Return where rejected rows of an import into ``out_dir`` go: ``<out_dir>.rejected.jsonl``."""
    out = Path(out_dir).resolve()  # "." or "dir/.." have no name of their own
    if not out.name:  # the file-system root
        return out / ("import" + REJECTED_SUFFIX)
    return out.with_name(out.name + REJECTED_SUFFIX)


def _check_sampling(sampling: Mapping[str, Any] | None) -> dict[str, Any]:
    if not sampling:
        return {}
    unknown = sorted(set(sampling) - set(SAMPLING_PARAMS))
    if unknown:
        raise ConfigError(
            f"unknown sampling parameter(s) {unknown}; known: {list(SAMPLING_PARAMS)}",
            field="sampling",
            value=unknown,
        )
    return {k: v for k, v in sampling.items() if v is not None}


def _usage(row: RecordedRow) -> Usage:
    if row.prompt_tokens is None and row.completion_tokens is None:
        return Usage(usage_source=UsageSource.MISSING)
    total = None
    if row.prompt_tokens is not None and row.completion_tokens is not None:
        total = row.prompt_tokens + row.completion_tokens
    return Usage(
        prompt_tokens=row.prompt_tokens,
        completion_tokens=row.completion_tokens,
        total_tokens=total,
        usage_source=UsageSource.REPORTED,
    )


def _timings(row: RecordedRow, *, stream: bool) -> Timings:
    if (
        row.latency_ms is None
        and row.ttft_ms is None
        and row.itl_ms is None
        and (row.ttfc_ms is None)
    ):
        return Timings(source=TimingSource.MISSING)
    tpot = row.itl_ms
    if tpot is None:
        tpot = tpot_ms(row.latency_ms, row.ttft_ms, row.completion_tokens)
    return Timings(
        ttft_ms=row.ttft_ms,
        # Streamed: the recorded TTFC, else the first token stands for the first content
        # (exact without reasoning; otherwise the baseline's TTFC is under-stated, so the
        # candidate/baseline ratio errs high: conservative). Not streamed: the latency, as
        # for any non-streamed response.
        ttfc_ms=(row.ttfc_ms if row.ttfc_ms is not None else row.ttft_ms)
        if stream
        else row.latency_ms,
        e2e_ms=row.latency_ms,
        tpot_ms=tpot,
        source=TimingSource.RECORDED,
    )


def request_body(
    row: RecordedRow, *, model: str, stream: bool, sampling: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Return the request body an import records for ``row``: a chat-completions body,
    or for a row on ``/v1/completions`` a legacy completions body whose ``prompt`` is the
    text of its messages (one message: its text; several: joined by newlines)."""
    body: dict[str, Any]
    if row.route == COMPLETIONS_ROUTE:
        texts = [message_text(m.get("content")) for m in row.messages]
        body = {"model": model, "prompt": "\n".join(texts)}
    else:
        body = {"model": model, "messages": row.messages}
    if row.tools:
        body["tools"] = row.tools
    if row.request_fields:
        body.update(row.request_fields)
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    body.update(_check_sampling(sampling))
    return body


def imported_exchange_id(key: str, captured_at: datetime) -> str:
    """The exchange id of an imported row: a ULID whose time part is ``captured_at`` (ms)
    and whose 80 random bits are the first 10 bytes of SHA-256 of the row's key and time.

    Importing the same log twice gives the same ids, so a replay of overlapping exports
    counts each span, observation or log record once (its duplicates are dropped on the
    id) instead of inflating the sample. ULID spec: https://github.com/ulid/spec.
    """
    ms = int(captured_at.timestamp() * 1000)
    digest = hashlib.sha256(f"{key}\x00{captured_at.isoformat()}".encode()).digest()
    return str(ULID.from_bytes(ms.to_bytes(6, "big") + digest[:10]))


def row_to_exchange(
    row: RecordedRow,
    *,
    stream: bool,
    sampling: dict[str, Any] | None,
    baseline: ModelIdentity | None,
    captured_at: datetime | None = None,
    rules: CaptureRules | None = None,
) -> Exchange:
    """Build the :class:`Exchange` an import writes for one recorded row.

    Args:
        row: the recorded row.
        stream: record the request as streamed (``stream: true`` plus
            ``stream_options.include_usage``) so a replay measures TTFT.
        sampling: sampling parameters to put in the request (names from
            :data:`~shadoweval.llm_protocol.SAMPLING_PARAMS`); ``None`` = none.
        baseline: identity of the model that produced the table; default: the row's model.
        captured_at: capture time to record (default now); the exchange id is a ULID of it
            and the row's key (:func:`imported_exchange_id`).
        rules: redaction, task-type rules and session salt applied as capture does
            (module doc); ``None``: the row as it is.

    Raises:
        TableMappingError: the row has no model and no ``baseline`` was given.
        ConfigError: an unknown sampling parameter.
    """
    identity = baseline
    if identity is None:
        if row.model is None:
            raise TableMappingError(
                f"{row.location}: no model name: map a model column or constant, or pass a baseline"
            )
        identity = ModelIdentity(name=row.model)
    body = request_body(row, model=row.model or identity.name, stream=stream, sampling=sampling)
    rules = rules or CaptureRules()
    task_type = _task_type(row, body, rules.tagger)  # from the original request, as capture
    at = captured_at or utc_now()
    tool_only = row.output_text is None and bool(row.tool_calls)
    # A tool-call-only answer has content null; its text is "" as when a real
    # response is parsed (shadoweval.llm_protocol.parse_completion_body).
    text = "" if tool_only else row.output_text
    calls = row.tool_calls
    body_text = orjson.dumps(body).decode("utf-8")
    hits = RedactionHits()
    if rules.redactor is not None:
        redact = rules.redactor.redact_text
        body_text = rules.redactor.redact_request_body(body_text, hits, body)
        text = None if text is None else redact(text, "response.text", hits)
        calls = tuple(
            call.model_copy(
                update={
                    "arguments": redact(call.arguments, f"response.tool_calls[{i}].arguments", hits)
                }
            )
            for i, call in enumerate(calls)
        )
    response = ResponseRecord(
        status_code=200,
        streamed=False,
        model=row.response_model or row.model or identity.name,
        text=text,
        tool_calls=calls,
        finish_reason_raw=row.finish_reason,
        finish_reason=normalize_finish_reason(row.finish_reason),
        usage=_usage(row),
        cache_hit=row.cache_hit,
        # a cache hit names what said so; an import has no headers, so the log's field
        cache_hit_headers=(IMPORTED_CACHE_HIT,) if row.cache_hit else (),
    )
    session = None
    if row.session_id is not None:
        session = hash_session_key(rules.session_salt, row.session_id.encode("utf-8"))
    return Exchange(
        exchange_id=imported_exchange_id(row.key, at),
        captured_at=at,
        route=row.route,
        task_type=task_type,
        session_key_hash=session,
        request=RequestRecord(path=row.route, body=body_text),
        response=response,
        timings=_timings(row, stream=stream),
        baseline_model=identity,
        redaction=RedactionReport(hits=hits.to_hits()),
        source=f"import:{row.location}",
    )


def _task_type(row: RecordedRow, body: dict[str, Any], tagger: TaskTagger | None) -> str:
    """The row's task type; for an untagged row the capture's rules (module doc)."""
    if not row.untagged:
        return row.task_type
    metadata = row.metadata or {}
    hint = metadata.get("task_type")
    header = hint if isinstance(hint, str) else None
    if tagger is None:
        return header.strip() if header and valid_task_type(header.strip()) else row.task_type
    tag_body = {**body, "metadata": metadata} if metadata else body
    return tagger.tag(route=row.route, header_value=header, body=tag_body).task_type


def _reject_line(item: RejectedRow) -> bytes:
    payload = {
        "location": item.location,
        "reason": item.reason,
        "detail": item.detail,
        "row": item.raw,
    }
    return orjson.dumps(payload, default=str, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"


class _WriteOptions(TypedDict, total=False):
    """The keyword arguments of :func:`import_rows` that :func:`import_table` passes on."""

    stream: bool
    sampling: dict[str, Any] | None
    baseline: ModelIdentity | None
    compress: bool
    rules: CaptureRules | None
    limit: int | None


def import_rows(
    loaded: LoadResult,
    *,
    out: str | Path,
    stream: bool = True,
    sampling: dict[str, Any] | None = None,
    baseline: ModelIdentity | None = None,
    compress: bool = False,
    rules: CaptureRules | None = None,
    limit: int | None = None,
) -> ImportReport:
    """Write already-loaded rows to the capture log at ``out`` (see :func:`import_table`).

    ``rules``: applied as capture does (module doc); ``limit``: write at most this many
    exchanges, count the further mapped rows as :attr:`ImportReport.over_limit`.

    Raises:
        ConfigError: an unknown sampling parameter, or ``limit`` < 1.
    """
    _check_sampling(sampling)
    if limit is not None and limit < 1:
        raise ConfigError(f"limit must be at least 1, got {limit}", field="limit", value=limit)
    out_dir = Path(out)
    redactor = rules.redactor if rules is not None else None
    rejected = [_redacted_reject(item, redactor) for item in loaded.rejected]
    start = utc_now()
    over_limit = 0
    redacted = 0
    with CaptureLogWriter(out_dir, compress=compress) as writer:
        for i, row in enumerate(loaded.rows):
            if limit is not None and writer.records_written >= limit:
                over_limit += 1
                continue
            at = row.captured_at or start + timedelta(milliseconds=i)
            try:
                exchange = row_to_exchange(
                    row,
                    stream=stream,
                    sampling=sampling,
                    baseline=baseline,
                    captured_at=at,
                    rules=rules,
                )
            except TableMappingError as exc:
                item = RejectedRow(row.location, "missing_model", str(exc), _raw(row))
                rejected.append(_redacted_reject(item, redactor))
                continue
            except ValidationError as exc:
                item = RejectedRow(
                    row.location, "invalid_record", _record_error(row, exc), _raw(row)
                )
                rejected.append(_redacted_reject(item, redactor))
                continue
            except Exception as exc:  # whatever a row does, it is kept, not a crash
                detail = f"{row.location}: cannot become an exchange: {type(exc).__name__}: {exc}"
                item = RejectedRow(row.location, "unprocessable", detail, _raw(row))
                rejected.append(_redacted_reject(item, redactor))
                continue
            writer.write(exchange)
            redacted += bool(exchange.redaction.hits)
        written = writer.records_written
        segments = tuple(writer.segments)
    rejected_path = None
    if rejected:
        rejected_path = rejected_path_for(out_dir)
        with rejected_path.open("ab") as fh:
            for item in rejected:
                fh.write(_reject_line(item))
    return ImportReport(
        files=tuple(loaded.files),
        rows_read=loaded.rows_read,
        written=written,
        rejected=tuple(rejected),
        out_dir=out_dir,
        segments=segments,
        rejected_path=rejected_path,
        renamed_keys=loaded.renamed_keys,
        over_limit=over_limit,
        redacted=redacted,
        notes=tuple(loaded.notes),
    )


def _redacted_reject(item: RejectedRow, redactor: BodyRedactor | None) -> RejectedRow:
    """``item`` with its detail and raw record redacted (as is without a redactor)."""
    if redactor is None:
        return item
    hits = RedactionHits()
    raw = redactor.redact_json(item.raw, "rejected", hits)
    detail = redactor.redact_text(item.detail, "rejected.detail", hits)
    return RejectedRow(item.location, item.reason, detail, raw)


def _raw(row: RecordedRow) -> dict[str, Any]:
    """What a rejected mapped row keeps: its key, prompt, answer, timings and tokens."""
    return {
        "key": row.key,
        "messages": row.messages,
        "output_text": row.output_text,
        "tool_calls": [call.model_dump() for call in row.tool_calls],
        "latency_ms": row.latency_ms,
        "ttft_ms": row.ttft_ms,
        "ttfc_ms": row.ttfc_ms,
        "itl_ms": row.itl_ms,
        "prompt_tokens": row.prompt_tokens,
        "completion_tokens": row.completion_tokens,
    }


def _record_error(row: RecordedRow, exc: ValidationError) -> str:
    """A record validation error as ``<location>: field '<dotted>': <message> (value …)``."""
    first = exc.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or exc.title
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"{row.location}: field {field!r}: {message} (value {first.get('input')!r:.80})"


def import_table(
    path: str | Path,
    *,
    out: str | Path,
    mapping: TableMapping | None = None,
    preset: str | Preset | None = None,
    prompts: str | Path | None = None,
    format: TableFormat | None = None,
    **options: Unpack[_WriteOptions],
) -> ImportReport:
    """Read a recorded table and write it as a capture log.

    Args:
        path: the outputs table (file or directory).
        out: capture-log directory (created; new segments are added to what is there).
        mapping, preset, prompts, format: as :func:`~shadoweval.tables.load_recorded_rows`.
        options: how the rows are written (keyword arguments of :func:`import_rows`):
            stream: record requests as streamed (default) or not.
            sampling: sampling parameters to record in every request (only these).
            baseline: model identity to record (default: each row's model).
            compress: gzip the segments.
            rules: redaction, task-type rules and session salt applied as capture does.
            limit: write at most this many exchanges.

    Returns:
        :class:`ImportReport`; rejected rows are also appended to
        ``<out>.rejected.jsonl`` (see :func:`rejected_path_for`).

    Raises:
        TableMappingError, FileNotFoundError, RecordDecodeError: as ``load_recorded_rows``.
        ConfigError: an unknown sampling parameter (raised before anything is written).
    """
    _check_sampling(options.get("sampling"))
    loaded = load_recorded_rows(path, mapping, preset=preset, prompts=prompts, format=format)
    return import_rows(loaded, out=out, **options)

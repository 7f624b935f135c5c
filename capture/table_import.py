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

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError
from ulid import ULID

from shadoweval.capture_log import CaptureLogWriter
from shadoweval.errors import ConfigError, TableMappingError
from shadoweval.llm_protocol import SAMPLING_PARAMS, normalize_finish_reason
from shadoweval.records import (
    Exchange,
    ModelIdentity,
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
)

REJECTED_SUFFIX = ".rejected.jsonl"


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
    """

    files: tuple[str, ...]
    rows_read: int
    written: int
    rejected: tuple[RejectedRow, ...]
    out_dir: Path
    segments: tuple[Path, ...]
    rejected_path: Path | None
    renamed_keys: int = 0

    def rejected_by_reason(self) -> dict[str, int]:
        """Count rejected rows per reason."""
        counts: dict[str, int] = {}
        for item in self.rejected:
            counts[item.reason] = counts.get(item.reason, 0) + 1
        return counts


def rejected_path_for(out_dir: str | Path) -> Path:
    """Return where rejected rows of an import into ``out_dir`` go: ``<out_dir>.rejected.jsonl``."""
    out = Path(out_dir)
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
    tokens = row.completion_tokens
    if (
        tpot is None
        and row.latency_ms is not None
        and row.ttft_ms is not None
        and tokens is not None
        and tokens > 1
    ):
        tpot = (row.latency_ms - row.ttft_ms) / (tokens - 1)
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
    """Return the chat-completions request body an import records for ``row``."""
    body: dict[str, Any] = {"model": model, "messages": row.messages}
    if row.tools:
        body["tools"] = row.tools
    if row.request_fields:
        body.update(row.request_fields)
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    body.update(_check_sampling(sampling))
    return body


def row_to_exchange(
    row: RecordedRow,
    *,
    stream: bool,
    sampling: dict[str, Any] | None,
    baseline: ModelIdentity | None,
    captured_at: datetime | None = None,
) -> Exchange:
    """Build the :class:`Exchange` an import writes for one recorded row.

    Args:
        row: the recorded row.
        stream: record the request as streamed (``stream: true`` plus
            ``stream_options.include_usage``) so a replay measures TTFT.
        sampling: sampling parameters to put in the request (names from
            :data:`~shadoweval.llm_protocol.SAMPLING_PARAMS`); ``None`` = none.
        baseline: identity of the model that produced the table; default: the row's model.
        captured_at: capture time to record (default now); the exchange id is a ULID of it.

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
    at = captured_at or utc_now()
    tool_only = row.output_text is None and bool(row.tool_calls)
    response = ResponseRecord(
        status_code=200,
        streamed=False,
        model=row.model or identity.name,
        # A tool-call-only answer has content null; its text is "" as when a real
        # response is parsed (shadoweval.llm_protocol.parse_completion_body).
        text="" if tool_only else row.output_text,
        tool_calls=row.tool_calls,
        finish_reason_raw=row.finish_reason,
        finish_reason=normalize_finish_reason(row.finish_reason),
        usage=_usage(row),
    )
    return Exchange(
        exchange_id=str(ULID.from_datetime(at)),
        captured_at=at,
        task_type=row.task_type,
        request=RequestRecord(body=orjson.dumps(body).decode("utf-8")),
        response=response,
        timings=_timings(row, stream=stream),
        baseline_model=identity,
        source=f"import:{row.location}",
    )


def _reject_line(item: RejectedRow) -> bytes:
    payload = {
        "location": item.location,
        "reason": item.reason,
        "detail": item.detail,
        "row": item.raw,
    }
    return orjson.dumps(payload, default=str, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"


def import_rows(
    loaded: LoadResult,
    *,
    out: str | Path,
    stream: bool = True,
    sampling: dict[str, Any] | None = None,
    baseline: ModelIdentity | None = None,
    compress: bool = False,
) -> ImportReport:
    """Write already-loaded rows to the capture log at ``out`` (see :func:`import_table`)."""
    _check_sampling(sampling)
    out_dir = Path(out)
    rejected = list(loaded.rejected)
    start = utc_now()
    with CaptureLogWriter(out_dir, compress=compress) as writer:
        for i, row in enumerate(loaded.rows):
            at = row.captured_at or start + timedelta(milliseconds=i)
            try:
                exchange = row_to_exchange(
                    row, stream=stream, sampling=sampling, baseline=baseline, captured_at=at
                )
            except TableMappingError as exc:
                rejected.append(RejectedRow(row.location, "missing_model", str(exc), _raw(row)))
                continue
            except ValidationError as exc:
                rejected.append(
                    RejectedRow(row.location, "invalid_record", _record_error(row, exc), _raw(row))
                )
                continue
            except Exception as exc:  # whatever a row does, it is kept, not a crash
                detail = f"{row.location}: cannot become an exchange: {type(exc).__name__}: {exc}"
                rejected.append(RejectedRow(row.location, "unprocessable", detail, _raw(row)))
                continue
            writer.write(exchange)
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
    )


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
    stream: bool = True,
    sampling: dict[str, Any] | None = None,
    baseline: ModelIdentity | None = None,
    compress: bool = False,
) -> ImportReport:
    """Read a recorded table and write it as a capture log.

    Args:
        path: the outputs table (file or directory).
        out: capture-log directory (created; new segments are added to what is there).
        mapping, preset, prompts, format: as :func:`~shadoweval.tables.load_recorded_rows`.
        stream: record requests as streamed (default) or not.
        sampling: sampling parameters to record in every request (only these).
        baseline: model identity to record (default: each row's model).
        compress: gzip the segments.

    Returns:
        :class:`ImportReport`; rejected rows are also appended to
        ``<out>.rejected.jsonl`` (see :func:`rejected_path_for`).

    Raises:
        TableMappingError, FileNotFoundError, RecordDecodeError: as ``load_recorded_rows``.
        ConfigError: an unknown sampling parameter (raised before anything is written).
    """
    _check_sampling(sampling)
    loaded = load_recorded_rows(path, mapping, preset=preset, prompts=prompts, format=format)
    return import_rows(
        loaded, out=out, stream=stream, sampling=sampling, baseline=baseline, compress=compress
    )

"""The ``otel_genai`` preset: OpenTelemetry GenAI spans in OTLP JSON.

Input: what an OpenTelemetry Collector's ``file`` exporter (or ``otlpjsonfile``
receiver input) holds — OTLP/JSON ``ExportTraceServiceRequest`` documents,
``{"resourceSpans": [{"resource": {...}, "scopeSpans": [{"scope": {...}, "spans":
[...]}]}]}``, one per file or one per line (JSON Lines). Attributes are OTLP ``KeyValue``
lists whose values are ``AnyValue`` objects (``stringValue``, ``intValue`` — a string in
OTLP/JSON —, ``doubleValue``, ``boolValue``, ``arrayValue.values``,
``kvlistValue.values``, ``bytesValue``); times are ``startTimeUnixNano`` /
``endTimeUnixNano`` (decimal strings or numbers). Documents of an OTLP logs export
(``{"resourceLogs": [... "scopeLogs": [... "logRecords": [...]]]}``) in the same files
are read for the content events they carry (below) and joined to their span by
``spanId``.

Sources (OpenTelemetry semantic conventions, ``docs/gen-ai/``):
``gen-ai-spans.md`` (span attributes), ``gen-ai-events.md`` (content events up to v1.36:
``gen_ai.system.message``, ``gen_ai.user.message``, ``gen_ai.assistant.message``,
``gen_ai.tool.message``, ``gen_ai.choice``), ``gen-ai-input-messages.json`` /
``gen-ai-output-messages.json`` (the JSON schemas of ``gen_ai.input.messages`` and
``gen_ai.output.messages`` since v1.37: messages of ``role`` and ``parts``, a part
``{"type": "text", "content"}``, ``{"type": "tool_call", "id", "name", "arguments"}``,
``{"type": "tool_call_response", "id", "response"}``; an output message has
``finish_reason``), and the OTLP/JSON encoding (opentelemetry-proto ``docs/specification``).

One span → one row:

* only spans whose ``gen_ai.operation.name`` is ``chat`` or ``text_completion`` are rows;
  any other span is rejected ``not_chat_span`` (an HTTP span, an agent step, an
  ``embeddings`` call …), counted, never dropped;
* a span with status ``ERROR`` (code 2) or an ``error.type`` attribute is rejected
  ``failed_call`` (the answer is an error, not a recorded output);
* **prompt**: ``gen_ai.input.messages`` (with ``gen_ai.system_instructions`` as a system
  message first), else the content events in time order; **answer**:
  ``gen_ai.output.messages`` (the first message), else the first ``gen_ai.choice`` event
  (``index`` 0). Text parts become ``content``, ``tool_call`` parts the assistant's
  ``tool_calls`` (arguments as JSON text), ``tool_call_response`` parts ``tool``
  messages. A span without either convention is rejected ``no_content``: content capture
  was off (the default of the instrumentations; e.g.
  ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``); with a prompt but no answer,
  ``no_output``; a part of another type in the prompt (an image, a file)
  ``unsupported_part`` — the prompt cannot be replayed as it was sent;
* content events are read from the span's own ``events`` (their attributes hold the
  event body's fields, or the whole body as JSON text in ``gen_ai.event.content``) and
  from log records of the same ``spanId`` (``eventName``, or the ``event.name``
  attribute, and the ``body``);
* ``gen_ai.request.model`` → model, ``gen_ai.response.model`` → the response's model;
  ``gen_ai.usage.input_tokens`` / ``output_tokens`` (older ``prompt_tokens`` /
  ``completion_tokens``) → usage; ``gen_ai.response.finish_reasons[0]`` (or the output
  message's ``finish_reason``; ``tool_call`` is read as ``tool_calls``) → finish reason;
  ``gen_ai.request.max_tokens``, ``temperature``, ``top_p``, ``top_k``, ``seed``,
  ``frequency_penalty``, ``presence_penalty``, ``stop_sequences`` → the request's
  parameters; ``gen_ai.tool.definitions`` → tools;
* start time → ``captured_at``; end − start → the latency (ms); no TTFT (a span does not
  record the first token);
* ``gen_ai.conversation.id``, else ``session.id`` (span, then resource attributes) → the
  session id; the span id → the row key; the task type is tagged at import by the
  capture's rules.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from shadoweval.tables.reader import TableFormat
from shadoweval.tables.rows import LoadResult, RecordedRow
from shadoweval.tables.traces.common import (
    CHAT_ROUTE,
    COMPLETIONS_ROUTE,
    RowCollector,
    chat_messages,
    elapsed_ms,
    export_files,
    finite_number,
    label,
    maybe_json,
    message_output,
    openai_tools,
    read_documents,
    request_parameters,
    token_count,
)
from shadoweval.tables.values import RowRejected

CHAT_OPERATIONS = {"chat": CHAT_ROUTE, "text_completion": COMPLETIONS_ROUTE}
"""``gen_ai.operation.name`` values imported, and the route each was served on."""

MESSAGE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
"""Content events of the prompt (``gen-ai-events.md``) and the role each stands for."""

CHOICE_EVENT = "gen_ai.choice"

_STATUS_ERROR = (2, "2", "STATUS_CODE_ERROR")

_REQUEST_ATTRIBUTES = {
    "gen_ai.request.max_tokens": "max_tokens",
    "gen_ai.request.temperature": "temperature",
    "gen_ai.request.top_p": "top_p",
    "gen_ai.request.top_k": "top_k",
    "gen_ai.request.seed": "seed",
    "gen_ai.request.frequency_penalty": "frequency_penalty",
    "gen_ai.request.presence_penalty": "presence_penalty",
    "gen_ai.request.stop_sequences": "stop",
    "gen_ai.request.choice.count": "n",
}


def any_value(value: Any) -> Any:
    """An OTLP/JSON ``AnyValue`` as plain Python (``kvlistValue`` → dict,
    ``arrayValue`` → list, ``intValue`` text → int, ``bytesValue`` → base64 text kept);
    a plain JSON value (a non-conforming exporter) is returned as it is."""
    if not isinstance(value, Mapping):
        return value
    if "stringValue" in value:
        return value["stringValue"]
    if "intValue" in value:
        raw = value["intValue"]
        try:
            return int(raw)
        except (TypeError, ValueError):
            return raw
    if "doubleValue" in value:
        raw = value["doubleValue"]
        try:
            return float(raw)
        except (TypeError, ValueError):
            return raw
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "arrayValue" in value:
        items = _get(value["arrayValue"], "values")
        return [any_value(item) for item in items] if isinstance(items, list) else None
    if "kvlistValue" in value:
        return attributes(_get(value["kvlistValue"], "values"))
    if "bytesValue" in value:
        return value["bytesValue"]
    return None if not value else dict(value)


def _get(parent: Any, key: str) -> Any:
    """``parent[key]`` of an object, ``None`` for anything else."""
    return parent.get(key) if isinstance(parent, Mapping) else None


class _Problems:
    """Parts of an export that are not OTLP's shape, each reported as ``not_otlp``."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str, Any]] = []

    def children(self, parent: Any, key: str, location: str) -> list[Any]:
        """``parent[key]`` when it is a list; a missing key is no children; any other
        shape (the parent not an object, the value not a list) is a problem."""
        if not isinstance(parent, Mapping):
            self.items.append((location, f"expected an object holding {key!r}", parent))
            return []
        value = parent.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            self.items.append((location, f"{key!r} is not a list", dict(parent)))
            return []
        return value


def attributes(pairs: Any) -> dict[str, Any]:
    """An OTLP ``KeyValue`` list (``[{"key", "value": AnyValue}]``) as a dict."""
    out: dict[str, Any] = {}
    if isinstance(pairs, list):
        for pair in pairs:
            if isinstance(pair, Mapping) and isinstance(pair.get("key"), str):
                out[pair["key"]] = any_value(pair.get("value"))
    return out


def unix_nano(value: Any, field: str) -> int | None:
    """A ``*UnixNano`` time (decimal text or a number), ``None`` when missing or 0.

    Raises:
        RowRejected: ``bad_timestamp`` for text that is not a whole number.
    """
    if value is None or value in ("", "0", 0):
        return None
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise RowRejected("bad_timestamp", f"{field} is not nanoseconds: {value!r}") from exc


def span_id(value: Any) -> str | None:
    """A span id as lower-case hex (OTLP/JSON writes hex; the protobuf JSON mapping
    base64, accepted too)."""
    if not isinstance(value, str) or not value:
        return None
    text = value.strip()
    if len(text) == 16 and all(c in "0123456789abcdefABCDEF" for c in text):
        return text.lower()
    try:
        return base64.b64decode(text, validate=True).hex()
    except ValueError:
        return text


def _event_body(event_attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The body of a content event recorded as a span event: the JSON text of
    ``gen_ai.event.content``, else the attributes themselves (JSON text values parsed)."""
    content = event_attributes.get("gen_ai.event.content")
    if isinstance(content, str):
        parsed = maybe_json(content)
        if isinstance(parsed, dict):
            return parsed
    body: dict[str, Any] = {}
    for key, value in event_attributes.items():
        if key.startswith(("gen_ai.system", "gen_ai.provider", "event.")):
            continue
        body[key] = maybe_json(value) if key in ("tool_calls", "message") else value
    return body


def _event_message(name: str, body: Mapping[str, Any]) -> dict[str, Any]:
    role = body.get("role") if isinstance(body.get("role"), str) else MESSAGE_EVENTS[name]
    message: dict[str, Any] = {"role": role, "content": _content_text(body.get("content"))}
    calls = maybe_json(body.get("tool_calls"))
    if role == "assistant" and isinstance(calls, list) and calls:
        message["tool_calls"] = [_openai_call(call) for call in calls]
    if role == "tool" and label(body.get("id")) is not None:
        message["tool_call_id"] = label(body.get("id"))
    return message


def _content_text(content: Any) -> Any:
    if isinstance(content, (dict, list)) and not _is_parts(content):
        return orjson.dumps(content).decode("utf-8")
    return content


def _is_parts(content: Any) -> bool:
    return isinstance(content, list) and all(
        isinstance(p, Mapping) and isinstance(p.get("type"), str) for p in content
    )


def _openai_call(call: Any) -> Any:
    """An event's tool call with ``function.arguments`` as JSON text (OpenAI's form)."""
    if not isinstance(call, Mapping):
        return call
    function = call.get("function")
    if isinstance(function, Mapping) and not isinstance(function.get("arguments"), str):
        arguments = function.get("arguments")
        text = "" if arguments is None else orjson.dumps(arguments).decode("utf-8")
        return {**call, "function": {**function, "arguments": text}}
    return call


def _arguments(value: Any) -> str:
    if isinstance(value, str):
        return value
    return "" if value is None else orjson.dumps(value).decode("utf-8")


def parts_messages(message: Any, field: str) -> list[dict[str, Any]]:
    """One ``gen_ai.input.messages`` / ``gen_ai.output.messages`` message (``role``,
    ``parts``) as OpenAI chat messages: one message with the text parts joined and the
    ``tool_call`` parts as ``tool_calls``, after one ``tool`` message per
    ``tool_call_response`` part (OpenAI gives each tool result its own message).

    Raises:
        RowRejected: ``bad_messages`` (no role or no parts list), ``unsupported_part``
            (a part that is not text, a tool call, a tool response or reasoning).
    """
    if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
        raise RowRejected("bad_messages", f"{field} has no string role")
    parts = message.get("parts")
    if not isinstance(parts, list):
        raise RowRejected("bad_messages", f"{field} has no parts list")
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    responses: list[dict[str, Any]] = []
    for i, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "text" and isinstance(part.get("content"), str):
            texts.append(part["content"])
        elif kind == "tool_call" and isinstance(part.get("name"), str):
            call: dict[str, Any] = {
                "type": "function",
                "function": {"name": part["name"], "arguments": _arguments(part.get("arguments"))},
            }
            if label(part.get("id")) is not None:
                call = {"id": label(part.get("id")), **call}
            calls.append(call)
        elif kind == "tool_call_response":
            response = part.get("response")
            text = response if isinstance(response, str) else _arguments(response)
            responses.append(
                {"role": "tool", "tool_call_id": label(part.get("id")), "content": text}
            )
        elif kind == "reasoning":
            continue  # the model's thinking: not part of what is sent or shown
        else:
            raise RowRejected(
                "unsupported_part", f"{field}.parts[{i}] has type {kind!r}: cannot be replayed"
            )
    if responses and not texts and not calls:
        return responses
    out: dict[str, Any] = {"role": message["role"], "content": "".join(texts) if texts else None}
    if calls:
        out["tool_calls"] = calls
    elif not texts:
        out["content"] = ""
    return [*responses, out]


def _system_message(value: Any) -> dict[str, Any] | None:
    value = maybe_json(value)
    if isinstance(value, str) and value:
        return {"role": "system", "content": value}
    if isinstance(value, list):
        texts = [
            p["content"]
            for p in value
            if isinstance(p, Mapping)
            and p.get("type") == "text"
            and isinstance(p.get("content"), str)
        ]
        if texts:
            return {"role": "system", "content": "".join(texts)}
    return None


class _Events:
    """The content events of one span, in time order."""

    def __init__(self) -> None:
        self.items: list[tuple[int, int, str, dict[str, Any]]] = []

    def add(self, time_ns: int | None, name: str, body: dict[str, Any]) -> None:
        self.items.append((time_ns or 0, len(self.items), name, body))

    def ordered(self) -> list[tuple[str, dict[str, Any]]]:
        return [(name, body) for _, _, name, body in sorted(self.items)]


def _prompt_and_answer(
    attrs: Mapping[str, Any], events: _Events
) -> tuple[list[dict[str, Any]], Any, str | None]:
    """(messages, the answer message, its finish reason) from either convention."""
    raw_input = maybe_json(attrs.get("gen_ai.input.messages"))
    raw_output = maybe_json(attrs.get("gen_ai.output.messages"))
    messages: list[dict[str, Any]] = []
    answer: Any = None
    finish: str | None = None
    if raw_input is not None:
        if not isinstance(raw_input, list):
            raise RowRejected("bad_messages", "gen_ai.input.messages is not a list of messages")
        system = _system_message(attrs.get("gen_ai.system_instructions"))
        messages = [system] if system else []
        for i, item in enumerate(raw_input):
            messages.extend(parts_messages(item, f"gen_ai.input.messages[{i}]"))
    if raw_output is not None:
        if not isinstance(raw_output, list):
            raise RowRejected("bad_output", "gen_ai.output.messages is not a list of messages")
        if raw_output:
            answer = parts_messages(raw_output[0], "gen_ai.output.messages[0]")[-1]
            reason = (
                raw_output[0].get("finish_reason") if isinstance(raw_output[0], Mapping) else None
            )
            finish = label(reason)
    choices: list[tuple[int, dict[str, Any]]] = []
    event_messages: list[dict[str, Any]] = []
    for name, body in events.ordered():
        if name in MESSAGE_EVENTS:
            event_messages.append(_event_message(name, body))
        elif name == CHOICE_EVENT:
            index = finite_number(body.get("index"), "gen_ai.choice.index")
            choices.append((int(index or 0), body))
    if not messages:
        messages = event_messages
    if answer is None and choices:
        choices.sort(key=lambda item: item[0])
        body = choices[0][1]
        message = maybe_json(body.get("message"))
        if not isinstance(message, Mapping):
            message = {"content": body.get("content"), "tool_calls": body.get("tool_calls")}
        answer = {"role": "assistant", **_event_message("gen_ai.assistant.message", message)}
        finish = label(body.get("finish_reason"))
    return messages, answer, finish


def _finish_reason(attrs: Mapping[str, Any], from_message: str | None) -> str | None:
    reasons = attrs.get("gen_ai.response.finish_reasons")
    raw = from_message
    if raw is None and isinstance(reasons, list) and reasons:
        raw = label(reasons[0])
    elif raw is None:
        raw = label(reasons)
    return "tool_calls" if raw == "tool_call" else raw


def _span_row(
    span: Mapping[str, Any],
    resource: Mapping[str, Any],
    events: _Events,
    location: str,
) -> RecordedRow:
    attrs = attributes(span.get("attributes"))
    operation = label(attrs.get("gen_ai.operation.name"))
    if operation not in CHAT_OPERATIONS:
        what = f"gen_ai.operation.name {operation!r}" if operation else "no gen_ai.operation.name"
        raise RowRejected("not_chat_span", f"span {span.get('name')!r}: {what}")
    raw_status = span.get("status")
    status: Mapping[str, Any] = raw_status if isinstance(raw_status, Mapping) else {}
    if status.get("code") in _STATUS_ERROR or attrs.get("error.type") is not None:
        detail = label(attrs.get("error.type")) or label(status.get("message")) or "status ERROR"
        raise RowRejected("failed_call", f"span ended in an error: {detail}")
    span_events = span.get("events")
    if span_events is not None and not isinstance(span_events, list):
        raise RowRejected("not_otlp", "the span's events is not a list")
    for event in span_events or []:
        if isinstance(event, Mapping) and isinstance(event.get("name"), str):
            name = event["name"]
            if name in MESSAGE_EVENTS or name == CHOICE_EVENT:
                time_ns = unix_nano(event.get("timeUnixNano"), "event.timeUnixNano")
                events.add(time_ns, name, _event_body(attributes(event.get("attributes"))))
    messages, answer, finish = _prompt_and_answer(attrs, events)
    if not messages:
        raise RowRejected(
            "no_content",
            "span has no gen_ai.input.messages and no content events: content capture was off",
        )
    messages = chat_messages(messages, "prompt")
    if answer is None:
        raise RowRejected(
            "no_output", "span has a prompt but no gen_ai.output.messages or gen_ai.choice"
        )
    text, calls = message_output(answer, "answer")
    start_ns = unix_nano(span.get("startTimeUnixNano"), "startTimeUnixNano")
    end_ns = unix_nano(span.get("endTimeUnixNano"), "endTimeUnixNano")
    started = None if start_ns is None else datetime.fromtimestamp(start_ns / 1e9, tz=UTC)
    ended = None if end_ns is None else datetime.fromtimestamp(end_ns / 1e9, tz=UTC)
    elapsed_ms(started, ended, "endTimeUnixNano")  # refuses an end before the start
    latency = None if start_ns is None or end_ns is None else (end_ns - start_ns) / 1e6
    params = {name: attrs.get(key) for key, name in _REQUEST_ATTRIBUTES.items()}
    prompt_tokens = token_count(
        attrs.get("gen_ai.usage.input_tokens", attrs.get("gen_ai.usage.prompt_tokens")),
        "gen_ai.usage.input_tokens",
    )
    completion_tokens = token_count(
        attrs.get("gen_ai.usage.output_tokens", attrs.get("gen_ai.usage.completion_tokens")),
        "gen_ai.usage.output_tokens",
    )
    session = label(attrs.get("gen_ai.conversation.id")) or label(attrs.get("session.id"))
    session = session or label(resource.get("session.id"))
    return RecordedRow(
        key=span_id(span.get("spanId")) or location,
        messages=messages,
        tools=openai_tools(attrs.get("gen_ai.tool.definitions"), "gen_ai.tool.definitions"),
        output_text=text,
        tool_calls=calls,
        task_type="default",
        model=label(attrs.get("gen_ai.request.model")) or label(attrs.get("gen_ai.response.model")),
        latency_ms=latency,
        ttft_ms=None,
        itl_ms=None,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        location=location,
        finish_reason=_finish_reason(attrs, finish),
        request_fields=request_parameters(params, "gen_ai.request"),
        captured_at=started,
        response_model=label(attrs.get("gen_ai.response.model")),
        session_id=session,
        untagged=True,
        route=CHAT_OPERATIONS[operation],
    )


def _log_events(documents: list[tuple[str, Any]], problems: _Problems) -> dict[str, _Events]:
    """Content events carried by log records, by span id."""
    by_span: dict[str, _Events] = {}
    for location, document in documents:
        if not isinstance(document, Mapping):
            continue
        for r, resource_logs in enumerate(problems.children(document, "resourceLogs", location)):
            where = f"{location}/logs{r}"
            for scope_logs in problems.children(resource_logs, "scopeLogs", where):
                for record in problems.children(scope_logs, "logRecords", where):
                    if not isinstance(record, Mapping):
                        problems.items.append((where, "a log record is not an object", record))
                        continue
                    attrs = attributes(record.get("attributes"))
                    name = record.get("eventName") or attrs.get("event.name")
                    sid = span_id(record.get("spanId"))
                    if not isinstance(name, str) or sid is None:
                        continue
                    if not (name in MESSAGE_EVENTS or name == CHOICE_EVENT):
                        continue
                    body = any_value(record.get("body"))
                    body = maybe_json(body) if isinstance(body, str) else body
                    if not isinstance(body, dict):
                        body = {"content": body}
                    try:
                        time_ns = unix_nano(record.get("timeUnixNano"), "timeUnixNano")
                    except RowRejected:
                        time_ns = None
                    by_span.setdefault(sid, _Events()).add(time_ns, name, body)
    return by_span


def load_otel(path: Path, prompts: Path | None, fmt: TableFormat | None) -> LoadResult:
    """Read OTLP/JSON trace exports (a file or a directory of them) into rows.

    Every span is a row or a rejected record (see the module doc for the reasons); a
    line or file that is not JSON is rejected ``invalid_json``; a document that is not an
    OTLP export (no ``resourceSpans`` or ``resourceLogs``) ``not_otlp``.

    Raises:
        FileNotFoundError: nothing at ``path``.
    """
    collected = RowCollector()
    for file in export_files(path):
        collected.files.append(str(file))
        documents = list(read_documents(file))
        problems = _Problems()
        log_events = _log_events([(d.location, d.value) for d in documents], problems)
        for document in documents:
            if document.error is not None:
                collected.reject(document.location, "invalid_json", document.error, document.raw)
                continue
            value = document.value
            if not isinstance(value, Mapping) or not (
                "resourceSpans" in value or "resourceLogs" in value
            ):
                collected.reject(
                    document.location,
                    "not_otlp",
                    "not an OTLP/JSON export (no resourceSpans or resourceLogs)",
                    value,
                )
                continue
            position = 0
            where = document.location
            for resource_spans in problems.children(value, "resourceSpans", where):
                resource = attributes(_get(_get(resource_spans, "resource"), "attributes"))
                for scope_spans in problems.children(resource_spans, "scopeSpans", where):
                    for span in problems.children(scope_spans, "spans", where):
                        location = f"{document.location}/span{position}"
                        position += 1
                        if not isinstance(span, Mapping):
                            collected.reject(location, "not_otlp", "a span is not an object", span)
                            continue
                        sid = span_id(span.get("spanId"))
                        events = log_events.get(sid, _Events()) if sid else _Events()
                        row = functools.partial(_span_row, span, resource, events, location)
                        collected.add_mapped(location, span, row)
        for location, detail, raw in problems.items:
            collected.reject(location, "not_otlp", detail, raw)
    return collected.result()

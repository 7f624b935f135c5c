"""The ``langfuse`` preset: Langfuse generations as the public API or the UI export give them.

Input (JSON document or JSON Lines; a file or a directory of them), any of:

* observations: ``GET /api/public/observations`` pages (``{"data": [...], "meta":
  {...}}``), a JSON array of observations, or one observation per line (the UI's
  JSON/JSONL export);
* traces with their observations (``GET /api/public/traces/{traceId}``: a trace object
  with ``observations: [...]``), alone, in an array or in a ``data`` page: each
  observation then takes the trace's ``sessionId`` (and ``metadata`` when it has none).

Fields read (Langfuse public API reference, ``Observation`` / ``ObservationsView``;
OpenAPI spec at ``cloud.langfuse.com/generated/api/openapi.yml``): ``id``, ``traceId``,
``type`` (only ``GENERATION`` is a row; ``SPAN``, ``EVENT``, … are rejected
``not_generation``), ``level`` (``ERROR`` → rejected ``failed_call`` with
``statusMessage``), ``startTime``, ``endTime``, ``completionStartTime`` (ISO 8601),
``model``, ``modelParameters`` (values may be text; Langfuse's ``"inf"`` for an unset
``max_tokens`` is left out), ``input``, ``output``, ``usageDetails`` (``input``,
``output``; OpenAI-style ``prompt_tokens``/``completion_tokens`` keys too), else
``usage`` (``input``, ``output``), else ``promptTokens``/``completionTokens``,
``metadata``, ``sessionId`` (observations v2, or the trace's).

Mapping:

* **prompt**: ``input`` as an OpenAI message list, or ``{"messages": [...], "tools":
  [...]}`` (what the Langfuse OpenAI integration logs when tools are offered), or text
  (one user message); none → ``no_content``;
* **answer**: ``output`` as an assistant message (``content``, ``tool_calls``), a
  ``{"choices": [...]}`` completion, a list holding one message, or text; none →
  ``no_output``;
* ``completionStartTime − startTime`` → TTFT (ms), ``endTime − startTime`` → latency
  (ms), ``startTime`` → ``captured_at``;
* ``metadata.task_type`` (a valid label) → task type, else the capture's task-type rules
  at import (with ``metadata`` as the request's metadata); ``sessionId`` → session id
  (stored as its salted hash); the observation id → the row key.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from shadoweval.tables.reader import TableFormat
from shadoweval.tables.rows import LoadResult, RecordedRow
from shadoweval.tables.traces.common import (
    RowCollector,
    chat_messages,
    elapsed_ms,
    label,
    maybe_json,
    message_output,
    openai_tools,
    parse_time,
    request_parameters,
    token_count,
)
from shadoweval.tables.values import RowRejected


def _observations(value: Any, location: str) -> Iterator[tuple[str, Any, Mapping[str, Any] | None]]:
    """``(location, observation, its trace)`` of one document (a page, a trace, a list,
    or one observation)."""
    if isinstance(value, Mapping) and isinstance(value.get("data"), list):
        for i, item in enumerate(value["data"]):
            yield from _observations(item, f"{location}/data{i}")
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            yield from _observations(item, f"{location}/{i}")
        return
    if isinstance(value, Mapping) and isinstance(value.get("observations"), list):
        for i, item in enumerate(value["observations"]):
            yield f"{location}/obs{i}", item, value
        return
    yield location, value, None


def _usage(record: Mapping[str, Any]) -> tuple[int | None, int | None]:
    for key in ("usageDetails", "usage"):
        usage = record.get(key)
        if isinstance(usage, Mapping) and usage:
            prompt = usage.get("input", usage.get("prompt_tokens", usage.get("promptTokens")))
            completion = usage.get(
                "output", usage.get("completion_tokens", usage.get("completionTokens"))
            )
            if prompt is not None or completion is not None:
                return token_count(prompt, f"{key}.input"), token_count(completion, f"{key}.output")
    return (
        token_count(record.get("promptTokens"), "promptTokens"),
        token_count(record.get("completionTokens"), "completionTokens"),
    )


def _answer(output: Any) -> Any:
    output = maybe_json(output)
    if isinstance(output, Mapping) and isinstance(output.get("choices"), list):
        choices = output["choices"]
        if not choices:
            return None
        first = choices[0] if isinstance(choices[0], Mapping) else {}
        if isinstance(first.get("message"), Mapping):
            return first["message"]
        return first.get("text")
    if isinstance(output, list):
        messages = [m for m in output if isinstance(m, Mapping)]
        assistant = [m for m in messages if m.get("role") in (None, "assistant")]
        return assistant[-1] if assistant else None
    if (
        isinstance(output, Mapping)
        and "content" not in output
        and "tool_calls" not in output
        and isinstance(output.get("text"), str)
    ):
        return output["text"]
    return output


def _finish(output: Any) -> str | None:
    output = maybe_json(output)
    if (
        isinstance(output, Mapping)
        and isinstance(output.get("choices"), list)
        and output["choices"]
    ):
        first = output["choices"][0]
        if isinstance(first, Mapping):
            return label(first.get("finish_reason"))
    if isinstance(output, Mapping):
        return label(output.get("finish_reason"))
    return None


def _observation_row(
    record: Mapping[str, Any], trace: Mapping[str, Any] | None, location: str
) -> RecordedRow:
    kind = label(record.get("type"))
    if kind != "GENERATION":
        raise RowRejected(
            "not_generation", f"observation type {kind!r} (only GENERATION is a call)"
        )
    if label(record.get("level")) == "ERROR":
        detail = label(record.get("statusMessage")) or "level ERROR"
        raise RowRejected("failed_call", f"the generation failed: {detail}")
    raw_input = maybe_json(record.get("input"))
    tools = None
    if isinstance(raw_input, Mapping) and "messages" in raw_input:
        tools = openai_tools(raw_input.get("tools") or raw_input.get("functions"), "input.tools")
        raw_input = raw_input.get("messages")
    messages = chat_messages(raw_input, "input")
    answer = _answer(record.get("output"))
    if answer is None:
        raise RowRejected("no_output", "output is empty: no answer was recorded")
    text, calls = message_output(answer, "output")
    started = parse_time(record.get("startTime"), "startTime")
    ended = parse_time(record.get("endTime"), "endTime")
    first = parse_time(record.get("completionStartTime"), "completionStartTime")
    latency = elapsed_ms(started, ended, "endTime")
    ttft = elapsed_ms(started, first, "completionStartTime")
    if ttft is not None and latency is not None and ttft > latency:
        ttft = None  # a completion start after the end was not a first token
    prompt_tokens, completion_tokens = _usage(record)
    metadata = maybe_json(record.get("metadata"))
    if not isinstance(metadata, dict) and trace is not None:
        metadata = maybe_json(trace.get("metadata"))
    session = label(record.get("sessionId"))
    if session is None and trace is not None:
        session = label(trace.get("sessionId"))
    nested = record.get("trace")
    if session is None and isinstance(nested, Mapping):
        session = label(nested.get("sessionId"))
    params = maybe_json(record.get("modelParameters"))
    return RecordedRow(
        key=label(record.get("id")) or location,
        messages=messages,
        tools=tools,
        output_text=text,
        tool_calls=calls,
        task_type="default",
        model=label(record.get("model")),
        latency_ms=latency,
        ttft_ms=ttft,
        itl_ms=None,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        location=location,
        finish_reason=_finish(record.get("output")),
        request_fields=request_parameters(
            params if isinstance(params, Mapping) else None, "modelParameters"
        ),
        captured_at=started,
        session_id=session,
        metadata=metadata if isinstance(metadata, dict) else None,
        untagged=True,
    )


def load_langfuse(path: Path, prompts: Path | None, fmt: TableFormat | None) -> LoadResult:
    """Read Langfuse observation or trace exports (a file or a directory) into rows.

    Every observation is a row or a rejected record (module doc); a line that is not
    JSON is rejected ``invalid_json``; a record that is not an object ``not_observation``.

    Raises:
        FileNotFoundError: nothing at ``path``.
    """
    collected = RowCollector()
    for document in collected.documents(path):
        for location, record, trace in _observations(document.value, document.location):
            if not isinstance(record, Mapping):
                collected.reject(location, "not_observation", "not a JSON object", record)
                continue
            row = functools.partial(_observation_row, record, trace, location)
            collected.add_mapped(location, record, row)
    return collected.result()

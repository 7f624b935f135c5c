"""The ``litellm`` preset: LiteLLM ``StandardLoggingPayload`` logs.

Input: JSON Lines (or a JSON array) of the payload LiteLLM hands every logging callback
(``kwargs["standard_logging_object"]``) and writes to its spend logs and logging
integrations (S3/GCS buckets, a custom logger's file). Definition:
``litellm/types/utils.py``, ``class StandardLoggingPayload(TypedDict)``; documented in
LiteLLM's "Logging" page (``What gets logged? StandardLoggingPayload``).

Fields read: ``id`` (row key), ``call_type`` (``completion``/``acompletion`` → a chat
row, ``text_completion``/``atext_completion`` → a ``/v1/completions`` row; anything else
— ``embedding``, ``image_generation``, … — is rejected ``not_chat_call``), ``status``
(``failure`` → rejected ``failed_call`` with ``error_str``), ``stream``, ``messages``,
``response`` (a ``ModelResponse`` as a dict: ``choices[0].message`` with ``content`` and
``tool_calls``, or ``choices[0].text``; ``model``), ``model`` (the deployment's model),
``model_group`` (the model name the client asked the proxy for: the request's
``model``), ``prompt_tokens``, ``completion_tokens``, ``startTime``, ``endTime``,
``completionStartTime`` (Unix epoch seconds, floats), ``model_parameters`` (the
request's optional parameters: sampling parameters, ``tools``, ``tool_choice``,
``response_format``), ``cache_hit``, ``metadata`` (``StandardLoggingMetadata``;
``requester_metadata`` is the ``metadata`` the client sent with the request).

Mapping: ``endTime − startTime`` → latency (ms); ``completionStartTime − startTime`` →
TTFT (ms) only when ``stream`` is true (LiteLLM sets it to the end time for a call that
did not stream); ``startTime`` → ``captured_at``; ``cache_hit`` → the response is marked a
cache hit (the gate leaves it out of latency); the session id from
``metadata.requester_metadata.session_id``, ``metadata.session_id`` or
``litellm_session_id`` (there or at the top level); the task type from
``requester_metadata.task_type`` or ``metadata.task_type``, else the capture's rules at
import (with ``requester_metadata`` as the request's metadata). ``metadata`` itself (API
key hashes, aliases, team ids, the requester's IP) is never written to the capture log.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from shadoweval.tables.reader import TableFormat
from shadoweval.tables.rows import LoadResult, RecordedRow
from shadoweval.tables.traces.common import (
    CHAT_ROUTE,
    COMPLETIONS_ROUTE,
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

CALL_TYPES = {
    "completion": CHAT_ROUTE,
    "acompletion": CHAT_ROUTE,
    "text_completion": COMPLETIONS_ROUTE,
    "atext_completion": COMPLETIONS_ROUTE,
}
"""LiteLLM ``call_type`` values imported, and the route each was served on."""


def _payloads(value: Any, location: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, list):
        for i, item in enumerate(value):
            yield f"{location}/{i}", item
    else:
        yield location, value


def _session(record: Mapping[str, Any], metadata: Mapping[str, Any]) -> str | None:
    requester = metadata.get("requester_metadata")
    requester = requester if isinstance(requester, Mapping) else {}
    for source in (requester, metadata, record):
        for key in ("session_id", "litellm_session_id"):
            found = label(source.get(key))
            if found is not None:
                return found
    return None


def _answer(response: Any, route: str) -> tuple[Any, str | None, str | None]:
    """(the answer message or text, its finish reason, the response's model)."""
    response = maybe_json(response)
    if isinstance(response, str):
        return response, None, None
    if not isinstance(response, Mapping):
        return None, None, None
    model = label(response.get("model"))
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return None, None, model
    first = choices[0]
    finish = label(first.get("finish_reason"))
    if route == COMPLETIONS_ROUTE and isinstance(first.get("text"), str):
        return first["text"], finish, model
    return first.get("message"), finish, model


def _payload_row(record: Mapping[str, Any], location: str) -> RecordedRow:
    call_type = label(record.get("call_type")) or "completion"
    route = CALL_TYPES.get(call_type)
    if route is None:
        raise RowRejected(
            "not_chat_call", f"call_type {call_type!r} is not a chat or text completion"
        )
    if label(record.get("status")) == "failure":
        detail = label(record.get("error_str")) or "status failure"
        raise RowRejected("failed_call", f"the call failed: {detail[:300]}")
    messages = chat_messages(record.get("messages"), "messages")
    message, finish, response_model = _answer(record.get("response"), route)
    if message is None:
        raise RowRejected("no_output", "response has no choices[0].message: no answer was recorded")
    text, calls = message_output(message, "response.choices[0].message")
    started = parse_time(record.get("startTime"), "startTime")
    ended = parse_time(record.get("endTime"), "endTime")
    latency = elapsed_ms(started, ended, "endTime")
    ttft = None
    if record.get("stream") is True:
        first = parse_time(record.get("completionStartTime"), "completionStartTime")
        ttft = elapsed_ms(started, first, "completionStartTime")
        if ttft is not None and latency is not None and ttft > latency:
            ttft = None
    metadata = maybe_json(record.get("metadata"))
    metadata = metadata if isinstance(metadata, Mapping) else {}
    requester = metadata.get("requester_metadata")
    tag_metadata = dict(requester) if isinstance(requester, Mapping) else {}
    if "task_type" not in tag_metadata and label(metadata.get("task_type")) is not None:
        tag_metadata["task_type"] = metadata["task_type"]
    params = maybe_json(record.get("model_parameters"))
    params = params if isinstance(params, Mapping) else {}
    model = label(record.get("model_group")) or label(record.get("model"))
    return RecordedRow(
        key=label(record.get("id")) or location,
        messages=messages,
        tools=openai_tools(
            params.get("tools") or params.get("functions"), "model_parameters.tools"
        ),
        output_text=text,
        tool_calls=calls,
        task_type="default",
        model=model,
        latency_ms=latency,
        ttft_ms=ttft,
        itl_ms=None,
        prompt_tokens=token_count(record.get("prompt_tokens"), "prompt_tokens"),
        completion_tokens=token_count(record.get("completion_tokens"), "completion_tokens"),
        location=location,
        finish_reason=finish,
        request_fields=request_parameters(params, "model_parameters"),
        captured_at=started,
        response_model=response_model or label(record.get("model")),
        session_id=_session(record, metadata),
        metadata=tag_metadata or None,
        untagged=True,
        route=route,
        cache_hit=_cache_hit(record.get("cache_hit")),
    )


def load_litellm(path: Path, prompts: Path | None, fmt: TableFormat | None) -> LoadResult:
    """Read LiteLLM ``StandardLoggingPayload`` logs (a file or a directory) into rows.

    Every payload is a row or a rejected record (module doc); a line that is not JSON
    is rejected ``invalid_json``; a payload that is not an object ``not_payload``.

    Raises:
        FileNotFoundError: nothing at ``path``.
    """
    collected = RowCollector()
    for document in collected.documents(path):
        for location, record in _payloads(document.value, document.location):
            if not isinstance(record, Mapping):
                collected.reject(location, "not_payload", "not a JSON object", record)
                continue
            collected.add_mapped(
                location, record, functools.partial(_payload_row, record, location)
            )
    return collected.result()


def _cache_hit(value: object) -> bool:
    """``cache_hit`` as a bool: ``StandardLoggingPayload`` has a bool, the spend-log table
    (``LiteLLM_SpendLogs``) the text ``"True"``/``"False"``; anything else is no hit."""
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return value is True

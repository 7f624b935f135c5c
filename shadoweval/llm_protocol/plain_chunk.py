"""The common plain ``chat.completion.chunk``, read straight from its decoded JSON.

Most stream events are one small chunk of one shape: string ``id``/``object``/``model``, an
integer ``created``, no ``usage``, choices with a string delta ``content`` (or
``reasoning_content``) and no tool calls. Validating each into a pydantic
:class:`~shadoweval.llm_protocol.models.ChatCompletionChunk` was most of a stream's parse
cost (``docs/benchmarks.md``). :func:`plain_choices` recognises that shape and gives what
:class:`~shadoweval.llm_protocol.assembler.ChatStreamAssembler` takes from it; anything else
is left to the model. ``tests/core/test_assembler_fast_path.py`` checks both readings agree.
"""

from __future__ import annotations

from typing import Any

PlainChoice = tuple[int, Any, Any, str | None]
"""``(index, delta content, delta reasoning_content, finish_reason)`` of one choice; the
content fields are strings or ``None``."""

_NO_CHOICES: list[Any] = []
_DELTA_STR_FIELDS = frozenset({"role", "content", "name", "tool_call_id", "reasoning_content"})


def plain_choices(payload: dict[str, Any]) -> list[PlainChoice] | None:
    """The choices of a chunk of the plain shape (module doc), or ``None`` when any known
    field has another type, there is a ``usage`` object, a tool call, a ``reasoning``
    delta or a legacy ``text``: such a chunk goes through the model.

    Args:
        payload: the decoded JSON object of one stream event.
    """
    get = payload.get
    choices = get("choices", _NO_CHOICES)
    if type(choices) is not list or get("usage") is not None:
        return None
    for key in ("id", "object", "model"):
        value = get(key)
        if value is not None and type(value) is not str:
            return None
    created = get("created")
    if created is not None and type(created) is not int:
        return None
    parsed: list[PlainChoice] = []
    for choice in choices:
        if type(choice) is not dict:
            return None
        index = choice.get("index", 0)
        finish = choice.get("finish_reason")
        if (
            type(index) is not int
            or (finish is not None and type(finish) is not str)
            or choice.get("text") is not None
        ):
            return None
        delta = choice.get("delta")
        if delta is None:
            parsed.append((index, None, None, finish))
            continue
        if type(delta) is not dict:
            return None
        for key, value in delta.items():  # a delta has few keys: walk those
            if key in _DELTA_STR_FIELDS:
                if value is not None and type(value) is not str:
                    return None
            elif key == "reasoning" or (key == "tool_calls" and value is not None):
                return None
        parsed.append((index, delta.get("content"), delta.get("reasoning_content"), finish))
    return parsed

"""The pairwise judge prompt: one conversation, two answers, a verdict line.

Modelled on the pairwise comparison prompt of MT-Bench (Zheng et al. 2023, "Judging
LLM-as-a-Judge with MT-Bench and Chatbot Arena", NeurIPS Datasets and Benchmarks, §3 and
appendix, the "pair-v2" prompt of FastChat's ``llm_judge``): an impartial judge is shown
the user's conversation and two assistants' answers, told to ignore the order and length
of the answers, asked for a short explanation, and to end with a fixed verdict token. The
wording below is ours; what we keep from MT-Bench is the shape — conversation, Answer A,
Answer B, explanation, then a machine-readable verdict — and its two guards against known
judge biases (position and verbosity). The position guard is completed by asking twice
with the answers swapped (:mod:`shadoweval.judge.pairwise`).

How the judge answers is the *response format* (:data:`ResponseFormat`, the setting
``SHADOWEVAL_JUDGE__RESPONSE_FORMAT``):

* ``text`` (default): free text whose final line is ``VERDICT: A``, ``VERDICT: B`` or
  ``VERDICT: TIE`` (:func:`shadoweval.judge.parse.parse_verdict` reads it). No ``response_format``
  is sent.
* ``json_schema``: the system prompt's closing instruction asks for one JSON object
  ``{"rationale": "...", "verdict": "A" | "B" | "TIE"}`` instead of the verdict line, and
  the request carries OpenAI's structured-output ``response_format`` ``{"type":
  "json_schema", "json_schema": {"name": "pairwise_verdict", "strict": true, "schema":
  VERDICT_SCHEMA}}`` (:func:`response_format_body`). OpenAI, vLLM, SGLang and llama.cpp's
  own ``llama-server`` read this form. The schema has no ``maxLength``: OpenAI's strict
  mode refuses that keyword, so the rationale's length is asked for in the prompt only.
* ``json_object``: the same prompt, and ``{"type": "json_object", "schema": ...}`` — the
  form **llama-cpp-python's** server (``python -m llama_cpp.server``, 0.3.x) reads: its
  request model allows only ``type`` ``text`` / ``json_object`` (0.3.36 answers
  ``json_schema`` with HTTP 500, a pydantic validation error: "Input should be 'text' or
  'json_object'") and turns ``schema`` into a grammar
  (``llama_chat_format._grammar_for_response_format``). llama.cpp's ``llama-server``
  reads it too. Here the rationale has ``maxLength`` :data:`MAX_JSON_RATIONALE_CHARS`,
  which the grammar enforces, so a small model's answer ends in a verdict within
  ``max_tokens``. Not for OpenAI (its ``json_object`` mode takes no schema).

In both JSON formats the server constrains decoding to the schema, so even a tiny local
model answers with a verdict; :func:`shadoweval.judge.parse.parse_json_verdict` reads it (strictly:
an object with a valid ``verdict``; anything else is a failed vote).

What the judge sees is only what the capture stored: the captured request's ``messages``
and ``tools`` (as redacted by the capture sidecar), the live (baseline) answer and the
candidate's replayed answer, each as text plus its tool calls. Long parts are cut at
:data:`MAX_CONVERSATION_CHARS` / :data:`MAX_ANSWER_CHARS` / :data:`MAX_TOOLS_CHARS`
characters with a visible marker. :func:`prompt_sha256` is the SHA-256 of the template,
those limits and — for the JSON formats — the ``response_format`` body sent: the prompt
part of the judge's identity frozen with a run (:attr:`JudgeIdentity.prompt_sha256
<shadoweval.records.JudgeIdentity>`). The three formats have three different hashes
(:data:`PROMPT_SHA256_BY_FORMAT`; :func:`prompt_format` maps a hash back to its format), so
a run judged in one format refuses a judge configured for another.
:data:`PROMPT_SHA256` is the ``text`` format's hash, the same as before the JSON formats
existed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

__all__ = [
    "JSON_SYSTEM_PROMPT",
    "MAX_ANSWER_CHARS",
    "MAX_CONVERSATION_CHARS",
    "MAX_JSON_RATIONALE_CHARS",
    "MAX_TOOLS_CHARS",
    "PROMPT_SHA256",
    "PROMPT_SHA256_BY_FORMAT",
    "PROMPT_VERSION",
    "RESPONSE_FORMATS",
    "SYSTEM_PROMPT",
    "USER_TEMPLATE",
    "VERDICT_SCHEMA",
    "VERDICT_SCHEMA_NAME",
    "Answer",
    "Order",
    "PairText",
    "ResponseFormat",
    "build_messages",
    "prompt_format",
    "prompt_sha256",
    "render_answer",
    "render_conversation",
    "response_format_body",
    "system_prompt",
]

Order = Literal["baseline_first", "candidate_first"]
"""Which side is shown as "Answer A"."""

ResponseFormat = Literal["text", "json_schema", "json_object"]
"""How the judge is asked to answer (module docstring)."""
RESPONSE_FORMATS: tuple[ResponseFormat, ...] = ("text", "json_schema", "json_object")

PROMPT_VERSION = "shadow-eval pairwise judge v1"

_CRITERIA = """\
You are an impartial judge. You will see a conversation between a user and an AI \
assistant, followed by two candidate answers to the user's last message, labelled Answer A \
and Answer B. Decide which answer serves the user better.

Judge, in this order: is the answer correct and free of invented facts; does it do what the \
user asked, completely and directly; does it follow the instructions and any required format \
(for example valid JSON when JSON was asked for); is it clear. When the conversation offers \
tools, a call to the right tool with the right arguments is a good answer; calling a tool \
when the user needed a text answer, or answering in text when a tool call was needed, is a \
worse one. An answer that repeats itself, trails off, is cut short, or contains stray \
template markers is worse for it.

Do not let the order of the answers influence you. Do not prefer an answer for being \
longer. Do not favour any assistant name or style. If the two answers are equally good, or \
equally bad, the verdict is a tie.

"""

SYSTEM_PROMPT = (
    _CRITERIA
    + """\
Explain your decision in at most three sentences. Then end with exactly one line, and \
nothing after it, in one of these forms:
VERDICT: A
VERDICT: B
VERDICT: TIE"""
)
"""The ``text`` format's system prompt: it ends with the three verdict lines."""

MAX_JSON_RATIONALE_CHARS = 200
"""Longest rationale asked for in the JSON formats (``maxLength`` in ``json_object``)."""

JSON_SYSTEM_PROMPT = (
    _CRITERIA
    + f"""\
Answer with one JSON object and nothing else. It has two keys: "rationale", your \
explanation in at most {MAX_JSON_RATIONALE_CHARS} characters, then "verdict", which is "A", \
"B" or "TIE":
{{"rationale": "...", "verdict": "A" | "B" | "TIE"}}"""
)
"""The JSON formats' system prompt: the same criteria, closing with the JSON object."""

VERDICT_SCHEMA_NAME = "pairwise_verdict"
"""The ``json_schema.name`` sent in the ``json_schema`` format."""

VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "rationale": {"type": "string"},
        "verdict": {"type": "string", "enum": ["A", "B", "TIE"]},
    },
    "required": ["rationale", "verdict"],
    "additionalProperties": False,
}
"""The JSON Schema of the judge's answer (within OpenAI's strict subset: every property
required, no additional properties, no length keywords)."""

USER_TEMPLATE = """\
[Conversation]
{conversation}
[End of conversation]
{tools}
[Answer A]
{answer_a}
[End of Answer A]

[Answer B]
{answer_b}
[End of Answer B]"""

MAX_CONVERSATION_CHARS = 16_000
"""Longest conversation shown: the first quarter and the last three quarters are kept."""
MAX_ANSWER_CHARS = 8_000
"""Longest answer shown (its beginning is kept)."""
MAX_TOOLS_CHARS = 6_000
"""Longest tool list shown (compact JSON; its beginning is kept)."""


def _check_format(response_format: str) -> ResponseFormat:
    for known in RESPONSE_FORMATS:
        if response_format == known:
            return known
    raise ValueError(
        f"response_format must be one of {', '.join(RESPONSE_FORMATS)}, got {response_format!r}"
    )


def system_prompt(response_format: ResponseFormat = "text") -> str:
    """The system prompt of ``response_format``: :data:`SYSTEM_PROMPT` for ``text``,
    :data:`JSON_SYSTEM_PROMPT` for ``json_schema`` and ``json_object``.

    Raises:
        ValueError: an unknown ``response_format``.
    """
    return SYSTEM_PROMPT if _check_format(response_format) == "text" else JSON_SYSTEM_PROMPT


def response_format_body(response_format: ResponseFormat) -> dict[str, Any] | None:
    """The request's ``response_format`` member for ``response_format``.

    ``text``: ``None`` (nothing is sent). ``json_schema``: OpenAI's ``{"type":
    "json_schema", "json_schema": {"name": "pairwise_verdict", "strict": true, "schema":
    VERDICT_SCHEMA}}``. ``json_object``: llama-cpp-python's ``{"type": "json_object",
    "schema": VERDICT_SCHEMA}`` with the rationale's ``maxLength``
    :data:`MAX_JSON_RATIONALE_CHARS` (module docstring). A fresh dict on every call.

    Raises:
        ValueError: an unknown ``response_format``.
    """
    checked = _check_format(response_format)
    if checked == "text":
        return None
    schema = orjson.loads(orjson.dumps(VERDICT_SCHEMA))
    if checked == "json_schema":
        return {
            "type": "json_schema",
            "json_schema": {"name": VERDICT_SCHEMA_NAME, "strict": True, "schema": schema},
        }
    schema["properties"]["rationale"]["maxLength"] = MAX_JSON_RATIONALE_CHARS
    return {"type": "json_object", "schema": schema}


def prompt_sha256(response_format: ResponseFormat = "text") -> str:
    """SHA-256 (hex) of the prompt of ``response_format``: the version, the system prompt,
    the user template and the length limits, plus — for the JSON formats — the
    ``response_format`` body sent (sorted-key JSON). The ``text`` hash is
    :data:`PROMPT_SHA256`.

    Raises:
        ValueError: an unknown ``response_format``.
    """
    parts: dict[str, Any] = {
        "version": PROMPT_VERSION,
        "system": system_prompt(response_format),
        "user": USER_TEMPLATE,
        "max_conversation_chars": MAX_CONVERSATION_CHARS,
        "max_answer_chars": MAX_ANSWER_CHARS,
        "max_tools_chars": MAX_TOOLS_CHARS,
    }
    body = response_format_body(response_format)
    if body is not None:  # the text format's canonical form is unchanged
        parts["response_format"] = body
    canonical = orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()


PROMPT_SHA256 = prompt_sha256("text")
"""SHA-256 (hex) of the ``text`` prompt: its template, version and length limits."""

PROMPT_SHA256_BY_FORMAT: dict[ResponseFormat, str] = {
    fmt: prompt_sha256(fmt) for fmt in RESPONSE_FORMATS
}
"""The prompt hash of each response format."""


def prompt_format(sha256: str) -> ResponseFormat | None:
    """The response format whose prompt hash is ``sha256`` (``None``: another prompt, e.g.
    one of an older version)."""
    for fmt, known in PROMPT_SHA256_BY_FORMAT.items():
        if known == sha256:
            return fmt
    return None


@dataclass(frozen=True, slots=True)
class Answer:
    """One side's answer as stored: its text and its tool calls.

    ``tool_calls`` are mappings with ``name`` and ``arguments`` (JSON text), as
    :class:`~shadoweval.records.ToolCall` dumps; ``error`` is set (e.g. ``"http_status"``)
    when the side returned no answer.
    """

    text: str = ""
    tool_calls: Sequence[Mapping[str, Any]] = ()
    error: str | None = None


@dataclass(frozen=True, slots=True)
class PairText:
    """What the judge is shown of one pair.

    ``messages`` and ``tools`` are the captured request's (as stored, redacted by the
    capture); ``baseline`` is the live answer, ``candidate`` the candidate's replayed one.
    ``stratum`` is the divergence stratum the pair was sampled from (stored with the
    judgement).
    """

    run_id: str
    exchange_id: str
    task_type: str
    messages: Sequence[Mapping[str, Any]]
    baseline: Answer
    candidate: Answer
    tools: Sequence[Mapping[str, Any]] | None = None
    stratum: int | None = None


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n…[cut: {len(text) - limit} more characters]"


def _cut_middle(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = limit // 4
    tail = limit - head
    return f"{text[:head]}\n…[cut: {len(text) - limit} characters]…\n{text[-tail:]}"


def _content_text(content: Any) -> str:
    """A message's ``content`` as text: a string, or the text parts of a part list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, Mapping):
                if isinstance(part.get("text"), str):
                    parts.append(part["text"])
                else:
                    parts.append(f"[{part.get('type', 'part')}]")
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return orjson.dumps(content, default=str).decode("utf-8")


def _calls_text(calls: Sequence[Mapping[str, Any]] | Any) -> list[str]:
    lines: list[str] = []
    if not isinstance(calls, Sequence) or isinstance(calls, str):
        return lines
    for call in calls:
        if not isinstance(call, Mapping):
            continue
        function = call.get("function")
        if isinstance(function, Mapping):  # OpenAI request shape
            name, arguments = function.get("name"), function.get("arguments")
        else:  # ToolCall dump
            name, arguments = call.get("name"), call.get("arguments")
        lines.append(f"Tool call: {name}({arguments if arguments is not None else ''})")
    return lines


def render_conversation(messages: Sequence[Mapping[str, Any]]) -> str:
    """The conversation as ``[role]`` blocks, cut to :data:`MAX_CONVERSATION_CHARS`.

    Content part lists become their text parts (other parts as ``[image_url]`` etc.);
    an assistant turn's tool calls are listed as ``Tool call: name(arguments)``; a tool
    result is shown under ``[tool]``.
    """
    blocks: list[str] = []
    for message in messages:
        role = str(message.get("role", "user"))
        lines = [_content_text(message.get("content"))]
        lines.extend(_calls_text(message.get("tool_calls")))
        body = "\n".join(line for line in lines if line)
        blocks.append(f"[{role}]\n{body}")
    return _cut_middle("\n\n".join(blocks), MAX_CONVERSATION_CHARS)


def render_answer(answer: Answer) -> str:
    """One answer as shown: its text, then one ``Tool call: name(arguments)`` line per call.

    An answer with neither is ``(empty answer)``; a side that returned no answer is
    ``(no answer: the request failed: <error>)``. Cut to :data:`MAX_ANSWER_CHARS`.
    """
    if answer.error is not None and not answer.text and not answer.tool_calls:
        return f"(no answer: the request failed: {answer.error})"
    lines = [answer.text] if answer.text else []
    lines.extend(_calls_text(answer.tool_calls))
    text = "\n".join(lines)
    return _cut(text, MAX_ANSWER_CHARS) if text.strip() else "(empty answer)"


def _render_tools(tools: Sequence[Mapping[str, Any]] | None) -> str:
    if not tools:
        return ""
    compact = orjson.dumps(list(tools), default=str).decode("utf-8")
    return f"\n[Tools offered]\n{_cut(compact, MAX_TOOLS_CHARS)}\n[End of tools]\n"


def build_messages(
    pair: PairText,
    order: Order,
    redact: Callable[[str], str] | None = None,
    response_format: ResponseFormat = "text",
) -> list[dict[str, str]]:
    """The chat messages of one judge request: the system prompt and the filled template.

    ``order`` ``baseline_first`` shows the baseline as Answer A and the candidate as
    Answer B; ``candidate_first`` the other way round. ``redact`` (the configured body
    redaction) runs over the filled user message before it is returned, so nothing the
    body rules catch reaches the judge even if the capture stored it.
    ``response_format`` picks the system prompt (:func:`system_prompt`); the user
    message is the same in every format.

    Raises:
        ValueError: an unknown ``order`` or ``response_format``.
    """
    system = system_prompt(response_format)
    if order == "baseline_first":
        first, second = pair.baseline, pair.candidate
    elif order == "candidate_first":
        first, second = pair.candidate, pair.baseline
    else:
        raise ValueError(f"order must be baseline_first or candidate_first, got {order!r}")
    user = USER_TEMPLATE.format(
        conversation=render_conversation(pair.messages),
        tools=_render_tools(pair.tools),
        answer_a=render_answer(first),
        answer_b=render_answer(second),
    )
    if redact is not None:
        user = redact(user)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]

"""The pairwise judge prompt: one conversation, two answers, a verdict line.

Modelled on the pairwise comparison prompt of MT-Bench (Zheng et al. 2023, "Judging
LLM-as-a-Judge with MT-Bench and Chatbot Arena", NeurIPS Datasets and Benchmarks, §3 and
appendix, the "pair-v2" prompt of FastChat's ``llm_judge``): an impartial judge is shown
the user's conversation and two assistants' answers, told to ignore the order and length
of the answers, asked for a short explanation, and to end with a fixed verdict token. The
wording below is ours; what we keep from MT-Bench is the shape — conversation, Answer A,
Answer B, explanation, then a machine-readable verdict — and its two guards against known
judge biases (position and verbosity). The position guard is completed by asking twice
with the answers swapped (:mod:`judge.pairwise`).

The final line must be ``VERDICT: A``, ``VERDICT: B`` or ``VERDICT: TIE``
(:mod:`judge.parse` reads it).

What the judge sees is only what the capture stored: the captured request's ``messages``
and ``tools`` (as redacted by the capture sidecar), the live (baseline) answer and the
candidate's replayed answer, each as text plus its tool calls. Long parts are cut at
:data:`MAX_CONVERSATION_CHARS` / :data:`MAX_ANSWER_CHARS` / :data:`MAX_TOOLS_CHARS`
characters with a visible marker. :data:`PROMPT_SHA256` is the SHA-256 of the template
and those limits: the prompt part of the judge's identity frozen with a run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

__all__ = [
    "MAX_ANSWER_CHARS",
    "MAX_CONVERSATION_CHARS",
    "MAX_TOOLS_CHARS",
    "PROMPT_SHA256",
    "PROMPT_VERSION",
    "SYSTEM_PROMPT",
    "USER_TEMPLATE",
    "Answer",
    "Order",
    "PairText",
    "build_messages",
    "render_answer",
    "render_conversation",
]

Order = Literal["baseline_first", "candidate_first"]
"""Which side is shown as "Answer A"."""

PROMPT_VERSION = "shadow-eval pairwise judge v1"

SYSTEM_PROMPT = """\
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

Explain your decision in at most three sentences. Then end with exactly one line, and \
nothing after it, in one of these forms:
VERDICT: A
VERDICT: B
VERDICT: TIE"""

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


def _prompt_sha256() -> str:
    canonical = orjson.dumps(
        {
            "version": PROMPT_VERSION,
            "system": SYSTEM_PROMPT,
            "user": USER_TEMPLATE,
            "max_conversation_chars": MAX_CONVERSATION_CHARS,
            "max_answer_chars": MAX_ANSWER_CHARS,
            "max_tools_chars": MAX_TOOLS_CHARS,
        },
        option=orjson.OPT_SORT_KEYS,
    )
    return hashlib.sha256(canonical).hexdigest()


PROMPT_SHA256 = _prompt_sha256()
"""SHA-256 (hex) of the prompt template, its version and its length limits."""


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
    pair: PairText, order: Order, redact: Callable[[str], str] | None = None
) -> list[dict[str, str]]:
    """The chat messages of one judge request: the system prompt and the filled template.

    ``order`` ``baseline_first`` shows the baseline as Answer A and the candidate as
    Answer B; ``candidate_first`` the other way round. ``redact`` (the configured body
    redaction) runs over the filled user message before it is returned, so nothing the
    body rules catch reaches the judge even if the capture stored it.

    Raises:
        ValueError: an unknown ``order``.
    """
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
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]

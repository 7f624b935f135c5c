"""What judging costs: a token estimate per pair, and the budget a judge run keeps to.

**The estimate** (before anything is sent). A judge call's prompt is the judge's template
(its system prompt and the frame of the user message) filled with three parts: the captured
request (conversation and tools), the baseline's answer and the candidate's answer
(:func:`shadoweval.judge.prompt.build_messages`). Each part is counted as

* the **captured usage** where the capture stored it: the live response's
  ``usage.prompt_tokens`` for the request, its ``usage.completion_tokens`` for the
  baseline's answer, the replayed response's ``usage.completion_tokens`` for the
  candidate's — unless the prompt shows the part cut (:data:`MAX_CONVERSATION_CHARS
  <shadoweval.judge.prompt.MAX_CONVERSATION_CHARS>` …), when the usage counts more than is sent;
* else **chars/4**: the characters of the part as rendered in the prompt divided by
  :data:`CHARS_PER_TOKEN` (4, OpenAI's rule of thumb for English text; rounded up);

and the template as chars/4 of the system prompt and the empty user frame, plus
:data:`MESSAGE_OVERHEAD_TOKENS` per message (the chat format's role markers). The two
orders of a pair have the same parts, so a pair's prompt estimate is twice one call's.
The completion is bounded by the judge's ``max_tokens`` per call: the estimate uses that
bound (an upper bound, not a guess). Tokens of different tokenizers differ (the captured
usage is the arm's tokenizer, not the judge's): the estimate is a plan, the budget is kept on
what the judge's server reports.

**The budget** (:class:`JudgeBudget`): tokens (prompt + completion as the judge reports them
in ``usage``) and, where prices are given, US dollars. Before a pair is sent its estimated
cost — both calls, completions at ``max_tokens`` — times the calibration
(:attr:`JudgeSpend.calibration`: the judge's reported tokens over the estimates of the calls
that reported them, at least 1) must fit what is left (:mod:`shadoweval.judge.budgeted`); a
call that got an answer without ``usage`` is counted at its estimate, a call that got no
response counts nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import orjson

from shadoweval.judge.prompt import (
    MAX_ANSWER_CHARS,
    MAX_CONVERSATION_CHARS,
    MAX_TOOLS_CHARS,
    USER_TEMPLATE,
    Answer,
    PairText,
    ResponseFormat,
    render_answer,
    render_conversation,
    system_prompt,
)
from shadoweval.records import CapturedTokens, JudgeVote

__all__ = [
    "CHARS_PER_TOKEN",
    "MESSAGE_OVERHEAD_TOKENS",
    "CapturedTokens",
    "JudgeBudget",
    "JudgeSpend",
    "PairEstimate",
    "TokenSource",
    "chars_tokens",
    "estimate_pair",
    "template_tokens",
]

CHARS_PER_TOKEN = 4
"""Characters per token of the chars/4 estimate."""
MESSAGE_OVERHEAD_TOKENS = 4
"""Tokens per chat message for its role markers (OpenAI's cookbook counts 3–4)."""

TokenSource = Literal["captured usage", "chars/4", "mixed"]
"""Where a pair's estimate came from: every part from captured usage, none, or some."""


def chars_tokens(text: str) -> int:
    """``ceil(len(text) / CHARS_PER_TOKEN)``: the chars/4 estimate of ``text``, tokens."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


@dataclass(frozen=True, slots=True)
class PairEstimate:
    """The estimated tokens of judging one pair (both orders).

    Attributes:
        exchange_id: the pair.
        prompt_tokens_per_call: one call's prompt tokens (template + the three parts).
        completion_tokens_per_call: one call's completion bound (the judge's ``max_tokens``).
        source: where the parts' counts came from (:data:`TokenSource`).
    """

    exchange_id: str
    prompt_tokens_per_call: int
    completion_tokens_per_call: int
    source: TokenSource

    @property
    def call_tokens(self) -> int:
        """One call: prompt + completion bound, tokens."""
        return self.prompt_tokens_per_call + self.completion_tokens_per_call

    @property
    def pair_tokens(self) -> int:
        """Both orders: two calls, tokens."""
        return 2 * self.call_tokens


def template_tokens(response_format: ResponseFormat = "text") -> int:
    """The judge template's tokens in one call: chars/4 of the system prompt and of the
    user frame with empty parts, plus :data:`MESSAGE_OVERHEAD_TOKENS` for each of the two
    messages.

    Raises:
        ValueError: an unknown ``response_format``.
    """
    frame = USER_TEMPLATE.format(conversation="", tools="", answer_a="", answer_b="")
    return (
        chars_tokens(system_prompt(response_format))
        + chars_tokens(frame)
        + 2 * (MESSAGE_OVERHEAD_TOKENS)
    )


def _part(rendered: str, cut: bool, captured: int | None) -> tuple[int, bool]:
    """(tokens, from captured usage) of one part: its usage unless the prompt cut it."""
    if captured is not None and captured >= 0 and not cut:
        return captured, True
    return chars_tokens(rendered), False


def estimate_pair(
    pair: PairText,
    captured: CapturedTokens,
    *,
    max_tokens: int,
    response_format: ResponseFormat = "text",
    template: int | None = None,
) -> PairEstimate:
    """The estimated tokens of judging ``pair`` in both orders (module docstring).

    Args:
        pair: what the judge is shown.
        captured: the pair's stored usage counts.
        max_tokens: the judge's completion bound per call.
        response_format: the judge's response format (picks the template).
        template: :func:`template_tokens` when the caller computed it once already.
    """
    conversation = render_conversation(pair.messages)
    tools = "" if not pair.tools else orjson.dumps(list(pair.tools), default=str).decode()
    cut = len(conversation) > MAX_CONVERSATION_CHARS or len(tools) > MAX_TOOLS_CHARS
    shown = conversation + tools[:MAX_TOOLS_CHARS]
    request_tokens, request_used = _part(shown, cut, captured.request_prompt_tokens)
    baseline_tokens, baseline_used = _answer_part(
        pair.baseline, captured.baseline_completion_tokens
    )
    candidate_tokens, candidate_used = _answer_part(
        pair.candidate, captured.candidate_completion_tokens
    )
    used = (request_used, baseline_used, candidate_used)
    source: TokenSource = "captured usage" if all(used) else "mixed" if any(used) else "chars/4"
    fixed = template_tokens(response_format) if template is None else template
    return PairEstimate(
        exchange_id=pair.exchange_id,
        prompt_tokens_per_call=fixed + request_tokens + baseline_tokens + candidate_tokens,
        completion_tokens_per_call=max_tokens,
        source=source,
    )


def _answer_part(answer: Answer, captured: int | None) -> tuple[int, bool]:
    if answer.error is not None and not answer.text and not answer.tool_calls:
        captured = None  # a failed side is shown as a one-line note, not its answer
    rendered = render_answer(answer)
    return _part(rendered, len(rendered) > MAX_ANSWER_CHARS, captured)


@dataclass(frozen=True, slots=True)
class JudgeBudget:
    """What a judge run may spend, and the judge's prices.

    Attributes:
        tokens: prompt + completion tokens (as the judge reports them); ``None``: no cap.
        usd: US dollars, priced with both prices; ``None``: no cap.
        price_per_million_input_tokens, price_per_million_output_tokens: USD per million
            prompt / completion tokens; ``None``: unknown.

    Raises:
        ValueError: ``usd`` without both prices, or a cap that is not positive.
    """

    tokens: int | None = None
    usd: float | None = None
    price_per_million_input_tokens: float | None = None
    price_per_million_output_tokens: float | None = None

    def __post_init__(self) -> None:
        if self.tokens is not None and self.tokens < 1:
            raise ValueError(f"budget tokens must be >= 1, got {self.tokens}")
        if self.usd is not None and not self.usd > 0:
            raise ValueError(f"budget usd must be > 0, got {self.usd}")
        if self.usd is not None and not self.priced:
            raise ValueError("a budget in USD needs both prices per million tokens")

    @property
    def priced(self) -> bool:
        """Both prices are known."""
        return (
            self.price_per_million_input_tokens is not None
            and self.price_per_million_output_tokens is not None
        )

    @property
    def capped(self) -> bool:
        """Some cap is set."""
        return self.tokens is not None or self.usd is not None

    def usd_of(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        """The price of the tokens, USD (``None`` when a price is unknown)."""
        if not self.priced:
            return None
        assert self.price_per_million_input_tokens is not None
        assert self.price_per_million_output_tokens is not None
        return (
            prompt_tokens * self.price_per_million_input_tokens
            + completion_tokens * self.price_per_million_output_tokens
        ) / 1_000_000

    def fits(self, prompt_tokens: int, completion_tokens: int) -> bool:
        """Whether spending this much in total stays within every cap."""
        if self.tokens is not None and prompt_tokens + completion_tokens > self.tokens:
            return False
        if self.usd is not None:
            spent = self.usd_of(prompt_tokens, completion_tokens)
            return spent is not None and spent <= self.usd + 1e-12
        return True

    def describe(self) -> str:
        """``20000 tokens``, ``$0.50``, or ``20000 tokens and $0.50``."""
        parts = []
        if self.tokens is not None:
            parts.append(f"{self.tokens} tokens")
        if self.usd is not None:
            parts.append(f"${self.usd:g}")
        return " and ".join(parts) or "no budget"


_NO_RESPONSE = ("connect:", "timeout:", "HTTP ")
"""Vote errors of calls that got no answer a judge bills: no connection, no complete
response, an error status."""


@dataclass
class JudgeSpend:
    """What a judge run has spent so far, as counted for its budget.

    Attributes:
        calls: judge calls counted (the preflight's included).
        prompt_tokens, completion_tokens: tokens counted: the judge's ``usage`` where it
            reported it, the call's estimate where it answered without ``usage``
            (the preflight's included).
        calls_without_usage: calls that answered without ``usage`` (counted at their
            estimate).
        reported_tokens: the tokens of the calls that reported ``usage``;
            reported_estimate_tokens: those calls' estimates (prompt + ``max_tokens``) —
            the two sides of :attr:`calibration`.
        preflight_tokens: the preflight call's tokens (part of :attr:`tokens`; its vote is
            not stored, so ``judge summary`` and the per-task-type table do not show them).
    """

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls_without_usage: int = 0
    reported_tokens: int = 0
    reported_estimate_tokens: int = 0
    preflight_tokens: int = 0

    @property
    def tokens(self) -> int:
        """Prompt + completion tokens counted (the preflight's included)."""
        return self.prompt_tokens + self.completion_tokens

    @property
    def pair_tokens(self) -> int:
        """:attr:`tokens` less the preflight's: the pairs' tokens, as stored with their votes."""
        return self.tokens - self.preflight_tokens

    @property
    def calibration(self) -> float:
        """How far the estimates undershoot the judge's reported usage: ``max(1,
        reported_tokens / reported_estimate_tokens)``; 1 before any call reported usage.
        The admission multiplies the next estimates by it (:mod:`shadoweval.judge.budgeted`)."""
        if self.reported_estimate_tokens <= 0:
            return 1.0
        return max(1.0, self.reported_tokens / self.reported_estimate_tokens)

    def count(self, vote: JudgeVote, estimate: PairEstimate) -> None:
        """Count one call's vote: its usage, or its estimate when it answered without
        one, or nothing when it got no billable answer (no connection, a timeout, an error
        status)."""
        self.calls += 1
        if vote.prompt_tokens is not None or vote.completion_tokens is not None:
            reported = (vote.prompt_tokens or 0) + (vote.completion_tokens or 0)
            self.prompt_tokens += vote.prompt_tokens or 0
            self.completion_tokens += vote.completion_tokens or 0
            self.reported_tokens += reported
            self.reported_estimate_tokens += estimate.call_tokens
        elif vote.preferred is not None or not (vote.error or "").startswith(_NO_RESPONSE):
            self.calls_without_usage += 1
            self.prompt_tokens += estimate.prompt_tokens_per_call
            self.completion_tokens += estimate.completion_tokens_per_call

    def count_preflight(self, vote: JudgeVote, estimate: PairEstimate) -> None:
        """:meth:`count` the preflight call's vote, and keep its tokens apart in
        :attr:`preflight_tokens`."""
        before = self.tokens
        self.count(vote, estimate)
        self.preflight_tokens += self.tokens - before

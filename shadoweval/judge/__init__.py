"""The pairwise LLM judge stage: is the candidate's answer better, worse or as good?

A stage like ``replay``: it imports the core only, and the application layer
(:mod:`shadoweval.application.judging`) joins it with storage and the gate.

* :mod:`shadoweval.judge.prompt` — the documented pairwise prompt (after MT-Bench's), its response
  formats (``text``: a verdict line; ``json_schema`` / ``json_object``: a JSON verdict
  object the server constrains decoding to) and its hash per format.
* :mod:`shadoweval.judge.parse` — the verdict-line and JSON-verdict parsers (unparseable is a
  failure, never a score).
* :mod:`shadoweval.judge.client` — :class:`JudgeClient`: httpx against any OpenAI-compatible
  ``/v1/chat/completions``, bounded concurrency, connect-only retries, failures as data.
* :mod:`shadoweval.judge.pairwise` — both orders per pair; orders that disagree are a tie.
* :mod:`shadoweval.judge.selection` — the budget: changed pairs only, stratified, at most N per task
  type, a deterministic random sample within each stratum; the sending order.
* :mod:`shadoweval.judge.cost` — the token estimate per pair (captured usage or chars/4), the
  token / USD budget and what a run has spent.
* :mod:`shadoweval.judge.budgeted` — send a pair only when its estimate fits what is left.
* :mod:`shadoweval.judge.arms` — a judge that is an arm is refused; model families and the
  self-preference risk.
"""

from shadoweval.judge.client import (
    JudgeClient,
    JudgeProbe,
    chat_completions_url,
    public_endpoint,
)
from shadoweval.judge.pairwise import combine_votes, judge_pair, judge_pairs, judgement_of
from shadoweval.judge.parse import (
    ParsedVerdict,
    VerdictParseError,
    parse_answer,
    parse_json_verdict,
    parse_verdict,
)
from shadoweval.judge.preflight import JUDGE_TARGET, preflight_judge
from shadoweval.judge.prompt import (
    PROMPT_SHA256,
    PROMPT_SHA256_BY_FORMAT,
    RESPONSE_FORMATS,
    Answer,
    Order,
    PairText,
    ResponseFormat,
    build_messages,
    prompt_format,
    response_format_body,
)
from shadoweval.judge.selection import Selection, TaskTypeSelection, allocate, select_pairs

__all__ = [
    "JUDGE_TARGET",
    "PROMPT_SHA256",
    "PROMPT_SHA256_BY_FORMAT",
    "RESPONSE_FORMATS",
    "Answer",
    "JudgeClient",
    "JudgeProbe",
    "Order",
    "PairText",
    "ParsedVerdict",
    "ResponseFormat",
    "Selection",
    "TaskTypeSelection",
    "VerdictParseError",
    "allocate",
    "build_messages",
    "chat_completions_url",
    "combine_votes",
    "judge_pair",
    "judge_pairs",
    "judgement_of",
    "parse_answer",
    "parse_json_verdict",
    "parse_verdict",
    "preflight_judge",
    "prompt_format",
    "public_endpoint",
    "response_format_body",
    "select_pairs",
]

"""The pairwise LLM judge stage: is the candidate's answer better, worse or as good?

A stage like ``replay``: it imports the core only, and the application layer
(:mod:`application.judging`) joins it with storage and the gate.

* :mod:`judge.prompt` — the documented pairwise prompt (after MT-Bench's) and its hash.
* :mod:`judge.parse` — the verdict-line parser (unparseable is a failure, never a score).
* :mod:`judge.client` — :class:`JudgeClient`: httpx against any OpenAI-compatible
  ``/v1/chat/completions``, bounded concurrency, connect-only retries, failures as data.
* :mod:`judge.pairwise` — both orders per pair; orders that disagree are a tie.
* :mod:`judge.selection` — the budget: changed pairs only, stratified, at most N per task
  type, a deterministic random sample within each stratum.
"""

from judge.client import JudgeClient, chat_completions_url, public_endpoint
from judge.pairwise import combine_votes, judge_pair, judge_pairs, judgement_of
from judge.parse import ParsedVerdict, VerdictParseError, parse_verdict
from judge.prompt import PROMPT_SHA256, Answer, Order, PairText, build_messages
from judge.selection import Selection, TaskTypeSelection, allocate, select_pairs

__all__ = [
    "PROMPT_SHA256",
    "Answer",
    "JudgeClient",
    "Order",
    "PairText",
    "ParsedVerdict",
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
    "parse_verdict",
    "public_endpoint",
    "select_pairs",
]

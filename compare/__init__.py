"""Scorers that compare a baseline output with a candidate output (DESIGN §3 ``compare/``).

Pure modules (numpy, jsonschema and the shared records only; importing this package
loads neither torch nor sentence-transformers):

* :mod:`shadoweval.compare.formats` — JSON strict / fence-stripped / extracted / schema-valid flags.
* :mod:`shadoweval.compare.tool_calls` — tool-call arguments parse, tool offered, schema-valid.
* :mod:`shadoweval.compare.encoders` — the :class:`Encoder` protocol, :class:`MiniLMEncoder` (real
  weights, imports torch lazily) and :class:`HashingEncoder` (no model, not semantic).
* :mod:`shadoweval.compare.similarity` — cosine similarity with long texts chunked, never truncated.
* :mod:`shadoweval.compare.leakage` — chat-template role markers leaked into output.
* :mod:`shadoweval.compare.harms` — directional harm detectors per side (degeneration, runaway
  length, refusal, missing finish reason, template markers, language switch, placeholder
  JSON) and tool-behaviour changes between the sides.
* :mod:`shadoweval.compare.pair` — one :class:`~shadoweval.records.PairScore` per exchange.

Helpers: :mod:`shadoweval.compare.json_parse` (the one strict JSON parser),
:mod:`shadoweval.compare.schemas`
(cached, offline JSON Schema validation), :mod:`shadoweval.compare.chunking` (lossless splitting).
"""

from shadoweval.compare.encoders import Encoder, HashingEncoder, MiniLMEncoder
from shadoweval.compare.formats import json_format_flags
from shadoweval.compare.leakage import template_leaks
from shadoweval.compare.pair import PairInput, score_pairs, side_text
from shadoweval.compare.similarity import SimilarityResult, pairwise_similarity
from shadoweval.compare.tool_calls import tool_call_flags

__all__ = [
    "Encoder",
    "HashingEncoder",
    "MiniLMEncoder",
    "PairInput",
    "SimilarityResult",
    "json_format_flags",
    "pairwise_similarity",
    "score_pairs",
    "side_text",
    "template_leaks",
    "tool_call_flags",
]

"""A judge must not be one of the two arms it judges; one of the same family is a named risk.

LLM judges favour answers they wrote themselves: Zheng et al. 2023 ("Judging LLM-as-a-Judge
with MT-Bench and Chatbot Arena", §3.3 "self-enhancement bias") measured GPT-4 and Claude-v1
favouring themselves by about 10% and 25% win rate; Panickssery et al. 2024 ("LLM
Evaluators Recognize and Favor Their Own Generations") tie the preference to recognising
one's own text. So:

* a judge that **is** an arm — the same model name as the baseline (live) model, the
  candidate or the baseline replica, or the same endpoint (base URL) as one of them — is
  refused (:func:`arm_conflicts`: each conflict names the field and the value). A
  single-model server (vLLM, llama.cpp) answers any model name with its one model, so the
  same URL is the same model whatever the name says;
* a judge that shares a **family** with an arm (:func:`model_family`: ``gpt-4o`` and
  ``gpt-4o-mini``, ``llama-3.1-8b`` and ``llama-3.1-70b``, ``qwen2.5`` and
  ``qwen2.5-coder``) is allowed, and the judge run and ``judge summary`` name the risk
  (:func:`self_preference_risks`).

Model names are compared as :func:`model_names` gives them: case, an organisation prefix
(``Org/`` or, as file-name-safe imports write it, ``Org_``) and packaging suffixes
(quantisation and format tags such as ``-Q4_K_M``, ``-fp16``, ``-awq``, ``.gguf``) do not
count, so ``NousResearch_Hermes-2-Pro-Mistral-7B`` and ``Hermes-2-Pro-Mistral-7B-Q4_K_M.gguf``
are the same model; a tuning word such as ``-instruct`` does count. URLs are compared as
:func:`endpoint_key` gives them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = [
    "SELF_PREFERENCE_SOURCE",
    "Arm",
    "arm_conflicts",
    "endpoint_key",
    "model_family",
    "model_names",
    "normalized_model",
    "self_preference_risks",
]

SELF_PREFERENCE_SOURCE = "Zheng et al. 2023, 'Judging LLM-as-a-Judge', self-enhancement bias"
"""The source named with every self-preference risk."""


@dataclass(frozen=True, slots=True)
class Arm:
    """One side the judge compares, as the run knows it.

    Attributes:
        role: ``baseline``, ``candidate`` or ``baseline replica``.
        model: its model name (``None``: unknown).
        url: its base URL (``None``: unknown, e.g. the live model behind the capture).
    """

    role: str
    model: str | None = None
    url: str | None = None


_SEPARATORS = re.compile(r"[-_:\s]+")
_SIZE = re.compile(r"^(\d+x)?\d+(\.\d+)?[bmk]$|^a\d+(\.\d+)?b$|^e\d+b$")
"""A parameter count: ``8b``, ``0.5b``, ``135m``, ``8x7b``, ``a3b`` (active), ``e4b``."""
_NOT_FAMILY = re.compile(
    r"^(\d{4,}|v\d+(\.\d+)*|q\d\w*|f(p)?(16|32)|bf16|int[48]|awq|gptq|fp8|gguf|\d+k)$"
)
"""Dates, versions ``v0.2``, quantisations, context sizes ``128k``."""
_VARIANTS = frozenset(
    {
        "instruct", "chat", "it", "base", "hf", "coder", "code", "math", "vision", "vl",
        "mini", "nano", "small", "medium", "large", "xl", "pro", "flash", "lite", "turbo",
        "max", "plus", "preview", "latest", "exp", "haiku", "sonnet", "opus", "distill",
        "reasoning", "thinking", "awq", "mlx",
    }
)  # fmt: skip
"""Words that name a size, tuning or release of a family, not the family."""


_PACKAGING = re.compile(
    r"[-_.:](?:q[2-8](?:_k(?:_[sml])?|_[01])?|iq[1-4]_\w+|f16|fp16|bf16|f32|fp32|fp8|int4|int8"
    r"|awq|gptq|gguf|exl2)$"
)
"""A packaging suffix: a quantisation (``-q2_k`` … ``-q8_0``, ``-q4_k_m``, ``-q4_1``,
``-iq4_xs``) or format tag (``-f16``, ``-fp16``, ``-bf16``, ``-fp8``, ``-int4``, ``-int8``,
``-awq``, ``-gptq``, ``-gguf``, ``-exl2``; ``.gguf``), after ``-``, ``_``, ``.`` or ``:``."""


def normalized_model(name: str) -> str:
    """A model name compared as the same model: lower case, without a path prefix
    (``Qwen/Qwen2.5-7B-Instruct`` → ``qwen2.5-7b-instruct``) and without packaging suffixes
    (:data:`_PACKAGING`, stripped repeatedly: ``…-Q4_K_M.gguf`` → ``…``). ``-instruct`` and
    other tuning words stay: a tuned model is another model."""
    text = name.strip().lower().rsplit("/", 1)[-1]
    while (stripped := _PACKAGING.sub("", text)) != text and stripped:
        text = stripped
    return text


def _stops_family(word: str) -> bool:
    """``word`` names a size, variant, release or quantisation, not a family."""
    return bool(_SIZE.match(word) or _NOT_FAMILY.match(word) or word in _VARIANTS)


def model_names(name: str) -> tuple[str, ...]:
    """The names a model goes by: its :func:`normalized_model` name and, when that has an
    organisation prefix written with ``_`` (``nousresearch_hermes-2-pro-mistral-7b``, as an
    import that makes names file-safe writes ``Org/Model``), the part after the first
    ``_`` when that is itself a model name (starts with a letter and its first word is no
    size, variant or quantisation: ``mistral_7b`` keeps its ``7b``) and the prefix could be
    an organisation (starts with a letter, names no size or quantisation). Two models are
    the same when their names share one."""
    text = normalized_model(name)
    org, sep, rest = text.partition("_")
    words = [w for w in _SEPARATORS.split(rest) if w]
    real = org[:1].isalpha() and not _stops_family(org)
    if sep and real and words and rest[0].isalpha() and not _stops_family(words[0]):
        return (text, rest)
    return (text,)


def _same_model(a: str, b: str) -> bool:
    """``a`` and ``b`` name the same model (:func:`model_names` share one)."""
    return not set(model_names(a)).isdisjoint(model_names(b))


def model_family(name: str) -> str:
    """The family of a model name: its leading words up to the first that names a size,
    a variant or a release.

    The :func:`model_names` name without an organisation prefix is split at ``-``, ``_``,
    ``:`` and spaces; the family is the words before the first parameter count (``8b``,
    ``0.5b``, ``135m``, ``8x7b``), variant (``instruct``, ``chat``, ``it``, ``coder``,
    ``mini``, ``pro``, ``flash``, ``sonnet``, …), date or version (``20241022``, ``v0.2``) or
    quantisation (``q4_k_m``, ``fp16``), joined by ``-``. ``gpt-4o-mini`` → ``gpt-4o``;
    ``llama-3.1-70b-instruct`` → ``llama-3.1``; ``Qwen/Qwen2.5-Coder-7B`` → ``qwen2.5``;
    ``gemini-1.5-pro`` → ``gemini-1.5``; ``claude-3-5-sonnet-20241022`` → ``claude-3-5``;
    ``NousResearch_Hermes-2-Pro-Mistral-7B`` → ``hermes-2``. A name whose first word already
    stops the family is its own family.
    """
    model = model_names(name)[-1]
    family: list[str] = []
    for word in (w for w in _SEPARATORS.split(model) if w):
        if _stops_family(word):
            break
        family.append(word)
    return "-".join(family) or model


_LOOPBACK = {"localhost": "127.0.0.1", "::1": "127.0.0.1", "0.0.0.0": "127.0.0.1"}
_DEFAULT_PORTS = {"http": 80, "https": 443}


def endpoint_key(url: str) -> str | None:
    """A base URL compared as the same server: scheme, host (loopback names as
    ``127.0.0.1``), port (the scheme's default filled in) and path without a trailing
    ``/v1`` or ``/chat/completions``; credentials, query and fragment dropped. ``None``
    for a string that is not an ``http(s)`` URL with a host."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    host = _LOOPBACK.get(parts.hostname.lower(), parts.hostname.lower())
    path = parts.path.rstrip("/")
    for suffix in ("/chat/completions", "/v1"):
        path = path.removesuffix(suffix)
    return f"{parts.scheme}://{host}:{port or _DEFAULT_PORTS[parts.scheme]}{path}"


def arm_conflicts(
    judge_model: str, judge_url: str | None, arms: Sequence[Arm]
) -> list[tuple[str, str, str]]:
    """Why this judge is one of the arms: ``(field, value, reason)`` per conflict.

    ``field`` is ``model`` or ``url``; ``value`` the judge's; ``reason`` says which arm has
    it (``the candidate model 'qwen2.5-7b'``). Empty when the judge is no arm.
    """
    found: list[tuple[str, str, str]] = []
    for arm in arms:
        if arm.model and _same_model(judge_model, arm.model):
            found.append(("model", judge_model, f"the {arm.role} model {arm.model!r}"))
    key = None if judge_url is None else endpoint_key(judge_url)
    if key is not None:
        for arm in arms:
            if arm.url and endpoint_key(arm.url) == key:
                found.append(("url", judge_url or "", f"the {arm.role} URL {arm.url!r}"))
    return found


def self_preference_risks(judge_model: str, arms: Sequence[Arm]) -> list[str]:
    """One line per arm whose model shares the judge's family (:func:`model_family`):
    ``self-preference risk: judge 'gpt-4o' shares family 'gpt-4o' with the candidate
    'gpt-4o-mini' (Zheng et al. 2023, …)``. Every such arm is named, each in its role (the
    baseline and its replica both, though they run one model); an arm that is the judge's
    very model (:func:`model_names`) is a conflict (:func:`arm_conflicts`), not a risk."""
    family = model_family(judge_model)
    return [
        f"self-preference risk: judge {judge_model!r} shares family {family!r} with "
        f"the {arm.role} {arm.model!r} ({SELF_PREFERENCE_SOURCE})"
        for arm in arms
        if arm.model
        and not _same_model(judge_model, arm.model)
        and model_family(arm.model) == family
    ]

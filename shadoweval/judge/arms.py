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

Model names are compared as :func:`normalized_model` gives them (case, an organisation
prefix and a ``.gguf`` suffix do not count); URLs as :func:`endpoint_key` gives them.
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


def normalized_model(name: str) -> str:
    """A model name compared as the same model: lower case, without an organisation or
    path prefix (``Qwen/Qwen2.5-7B-Instruct`` → ``qwen2.5-7b-instruct``) or a ``.gguf``
    suffix."""
    text = name.strip().lower().rsplit("/", 1)[-1]
    return text.removesuffix(".gguf")


def model_family(name: str) -> str:
    """The family of a model name: its leading words up to the first that names a size,
    a variant or a release.

    The :func:`normalized_model` name is split at ``-``, ``_``, ``:`` and spaces; the family
    is the words before the first parameter count (``8b``, ``0.5b``, ``135m``, ``8x7b``), variant
    (``instruct``, ``chat``, ``it``, ``coder``, ``mini``, ``pro``, ``flash``, ``sonnet``, …),
    date or version (``20241022``, ``v0.2``) or quantisation (``q4_k_m``, ``fp16``), joined by
    ``-``. ``gpt-4o-mini`` → ``gpt-4o``; ``llama-3.1-70b-instruct`` → ``llama-3.1``;
    ``Qwen/Qwen2.5-Coder-7B`` → ``qwen2.5``; ``gemini-1.5-pro`` → ``gemini-1.5``;
    ``claude-3-5-sonnet-20241022`` → ``claude-3-5``. A name whose first word already stops
    the family is its own family.
    """
    words = [w for w in _SEPARATORS.split(normalized_model(name)) if w]
    family: list[str] = []
    for word in words:
        if _SIZE.match(word) or _NOT_FAMILY.match(word) or word in _VARIANTS:
            break
        family.append(word)
    return "-".join(family) or normalized_model(name)


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
    judge = normalized_model(judge_model)
    for arm in arms:
        if arm.model and normalized_model(arm.model) == judge:
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
    'gpt-4o-mini' (Zheng et al. 2023, …)``. An arm of the very same name is a conflict
    (:func:`arm_conflicts`), not a risk; each arm model is named once."""
    family = model_family(judge_model)
    judge = normalized_model(judge_model)
    lines: list[str] = []
    seen: set[str] = set()
    for arm in arms:
        if not arm.model or arm.model in seen or normalized_model(arm.model) == judge:
            continue
        seen.add(arm.model)
        if model_family(arm.model) == family:
            lines.append(
                f"self-preference risk: judge {judge_model!r} shares family {family!r} with "
                f"the {arm.role} {arm.model!r} ({SELF_PREFERENCE_SOURCE})"
            )
    return lines

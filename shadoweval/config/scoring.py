"""Settings of scoring: the compare stage's scorers and encoder, and the pairwise LLM judge."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, field_validator


class CompareSettings(BaseModel):
    """How pairs are scored. ``encoder`` is ``minilm`` (the bundled all-MiniLM-L6-v2).

    ``refusal_patterns``: the refusal detector's case-insensitive Python regular
    expressions, searched in the first 300 characters of each answer
    (``SHADOWEVAL_COMPARE__REFUSAL_PATTERNS``, a JSON list); ``None`` (default) uses
    ``shadoweval.compare.harms.DEFAULT_REFUSAL_PATTERNS``, an empty list turns the detector off. A
    blank pattern, one that does not compile or one that matches the empty text is
    refused, naming the pattern.

    ``model_path``: a local sentence-transformers model directory to embed with instead of
    the bundled all-MiniLM-L6-v2 (``SHADOWEVAL_COMPARE__MODEL_PATH``; loaded from disk only,
    never from the network). ``model_scripts``: the scripts that model covers (Unicode
    script names as :func:`shadoweval.text.dominant_script` gives them: ``Latin``, ``Han``,
    ``Kana``, ``Hangul``, ``Cyrillic``, ``Arabic`` …; ``["*"]`` any). The default is
    ``["Latin"]``: all-MiniLM-L6-v2 was trained on English. A pair with an answer in
    another script gets ``uncovered_scripts`` and the verdict's reasons warn about it;
    declare the scripts of a multilingual model here when you configure one.
    ``embedding_cache`` (``SHADOWEVAL_COMPARE__EMBEDDING_CACHE``, default true): keep
    pooled text embeddings in the results database, keyed by the encoder's identity and
    the text's SHA-256, so no text is embedded twice (``compare run
    --no-embedding-cache`` turns it off for one pass). ``workers``
    (``SHADOWEVAL_COMPARE__WORKERS``, default 1): compare processes on one machine
    (``compare run --workers``), each with ``max(1, cores // workers)`` torch threads.
    ``backend`` (``SHADOWEVAL_COMPARE__BACKEND``, default ``auto``): the MiniLM inference
    backend, one of ``auto``, ``torch-fp32``, ``torch-bf16``, ``torch-fp16``, ``onnx-fp32``,
    ``onnx-int8`` (``shadoweval.compare.backends``; ``auto`` measures the available ones once per
    machine and keeps the fastest that agrees with fp32, DESIGN §6). ``cache_dir``
    (``SHADOWEVAL_COMPARE__CACHE_DIR``; default ``$XDG_CACHE_HOME/shadow-eval`` or
    ``~/.cache/shadow-eval``): where ONNX exports and the ``auto`` choice are kept.
    ``poll_interval_s`` (``SHADOWEVAL_COMPARE__POLL_INTERVAL_S``, default 2.0, > 0): how
    long a follow worker (``compare run --follow``) waits after a poll that found nothing.
    ``metrics_port`` (``SHADOWEVAL_COMPARE__METRICS_PORT``, default none): where a follow
    worker serves ``/metrics``, ``/healthz`` and ``/readyz``.
    """

    encoder: str = "minilm"
    device: str = "cpu"
    batch_size: int = Field(default=64, ge=1)
    structured_task_types: tuple[str, ...] = ()
    refusal_patterns: tuple[str, ...] | None = None
    model_path: Path | None = None
    model_scripts: tuple[str, ...] = ("Latin",)

    @field_validator("model_scripts")
    @classmethod
    def _scripts_named(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError('list at least one script (["Latin"], or ["*"] for any)')
        for script in value:
            if script != "*" and (not script.strip() or not script.isalpha()):
                raise ValueError(
                    f"script {script!r} is not a Unicode script name (Latin, Han, Cyrillic …)"
                )
        return value

    def covered_scripts(self) -> frozenset[str] | None:
        """The declared ``model_scripts`` as a set, ``None`` when ``*`` (any) is listed."""
        return None if "*" in self.model_scripts else frozenset(self.model_scripts)

    embedding_cache: bool = True
    workers: int = Field(default=1, ge=1)
    backend: str = "auto"
    cache_dir: Path | None = None
    poll_interval_s: float = Field(default=2.0, gt=0)
    metrics_port: int | None = Field(default=None, ge=0, le=65535)

    @field_validator("backend")
    @classmethod
    def _backend_known(cls, value: str) -> str:
        known = ("auto", "torch-fp32", "torch-bf16", "torch-fp16", "onnx-fp32", "onnx-int8")
        if value not in known:
            raise ValueError(f"backend {value!r} is not known: use one of {', '.join(known)}")
        return value

    @field_validator("refusal_patterns")
    @classmethod
    def _patterns_compile(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for pattern in value or ():
            if not pattern.strip():
                raise ValueError("a refusal pattern is blank; it would match every answer")
            try:
                regex = re.compile(pattern, re.IGNORECASE)
            except re.error as exc:
                raise ValueError(
                    f"refusal pattern {pattern!r} is not a valid regular expression: {exc}"
                ) from None
            if regex.search("") is not None:
                raise ValueError(
                    f"refusal pattern {pattern!r} matches the empty text, so it would flag "
                    "every answer"
                )
        return value


class JudgeSettings(BaseModel):
    """The pairwise LLM judge (``shadow-eval judge run``): any OpenAI-compatible endpoint.

    ``url``: the judge's base URL, ``http://host:port`` (``/v1/chat/completions`` is
    appended) or a URL ending in ``/v1`` (``/chat/completions`` is appended); ``model``:
    the model name sent; ``api_key``: the judge's own credential (sent as a bearer token;
    the replay's key is never used). ``send_pairs``: sending captured pairs to a judge is
    an explicit decision and never a default — ``judge run`` refuses unless this is true
    (``SHADOWEVAL_JUDGE__SEND_PAIRS=true``) or ``--send-pairs`` is given. ``concurrency``:
    judge requests in flight; ``timeout_s``: limit on one whole judge request;
    ``connect_timeout_s``: limit on establishing a connection; ``retries``: retries after
    a connection could not be established (the only failure retried), exponential backoff
    from ``backoff_s``. ``temperature``, ``max_tokens``, ``seed``: sampling sent with
    every judge request (frozen with the run in its judge identity). ``preflight``: before
    sending pairs, send the first one once and stop (exit 3) naming the URL requested, the
    status and the body when no connection or a configuration status (401/403/404/405/407)
    fails it (:mod:`shadoweval.judge.preflight`); off for a judge that meters requests.

    ``response_format``: how the judge answers (:mod:`shadoweval.judge.prompt`). ``text`` (default):
    free text ending in a ``VERDICT: A|B|TIE`` line; no ``response_format`` is sent.
    ``json_schema``: the prompt asks for a JSON object ``{"rationale", "verdict"}`` and the
    request carries OpenAI's ``{"type": "json_schema", "json_schema": {"name":
    "pairwise_verdict", "strict": true, "schema": ...}}`` — for OpenAI, vLLM, SGLang and
    llama.cpp's ``llama-server``, which constrain decoding to the schema. ``json_object``:
    the same prompt with ``{"type": "json_object", "schema": ...}`` (the rationale capped
    by ``maxLength``) — the dialect of **llama-cpp-python's** server (``python -m
    llama_cpp.server``), which refuses ``json_schema`` (0.3.36: HTTP 500, a validation
    error) but turns this schema into a grammar; llama-server reads it too, OpenAI does
    not. In the JSON formats an answer that is not such an object is a failed vote. The
    format is part of the judge identity frozen with a run: each has its own prompt hash
    (``prompt_sha256``), so a run judged in one format refuses a judge configured for
    another.
    """

    url: str | None = None
    model: str = ""
    api_key: SecretStr | None = None
    send_pairs: bool = False
    concurrency: int = Field(default=4, ge=1, le=256)
    timeout_s: float = Field(default=120.0, gt=0)
    connect_timeout_s: float = Field(default=10.0, gt=0)
    retries: int = Field(default=3, ge=0, le=20)
    backoff_s: float = Field(default=0.5, ge=0)
    temperature: float = Field(default=0.0, ge=0, le=2)
    max_tokens: int = Field(default=512, ge=16, le=32_768)
    seed: int | None = None
    response_format: Literal["text", "json_schema", "json_object"] = "text"
    preflight: bool = True

    @field_validator("url")
    @classmethod
    def _judge_url(cls, value: str | None) -> str | None:
        from urllib.parse import urlsplit

        if value is None or not value.strip():
            return None
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("expected http://HOST[:PORT][/v1] or https://HOST[:PORT][/v1]")
        return value.strip()

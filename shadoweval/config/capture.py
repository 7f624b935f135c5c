"""Settings of the capture sidecar: its live port, task types, redaction and sinks."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator

from shadoweval.config.cache_hit_rules import DEFAULT_CACHE_HIT_RULES, CacheHitRule
from shadoweval.config.kafka import SpoolSettings
from shadoweval.config.urls import http_origin
from shadoweval.ports import CAPTURE_ADMIN_PORT, LIVE_PORT


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
    (default) or a thread. ``builder_nice``: the worker processes' niceness increment (0-19,
    default 10; ``nice(2)``): on a busy host the relay loop, which the live path waits on,
    gets the CPU before the builder, which nothing waits on (a builder that falls behind
    fills the bounded queue, whose overflow is dropped and counted). ``batch_linger_s``: when
    the builder is idle, captures wait up to this long (seconds, default 0.1) so that several
    share one hand-off to the builder process (the relay's CPU per hand-off is paid per
    batch); they reach the sinks that much later, nothing on the live path waits. ``sinks``: any of
    ``kafka``, ``file``. ``cache_hit_rules``:
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
    port: int = Field(default=LIVE_PORT, ge=0, le=65535)
    admin_port: int = Field(default=CAPTURE_ADMIN_PORT, ge=0, le=65535)
    routes: tuple[str, ...] = (
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/responses",
        "/v1/messages",
    )
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
    builder_nice: int = Field(default=10, ge=0, le=19)
    batch_linger_s: float = Field(default=0.1, ge=0, le=5)
    sinks: tuple[Literal["kafka", "file"], ...] = ("file",)
    file_sink_directory: str = ".shadoweval/capture"
    file_sink_compress: bool = False
    spool: SpoolSettings = SpoolSettings()
    cache_hit_rules: tuple[CacheHitRule, ...] = DEFAULT_CACHE_HIT_RULES

    @field_validator("upstream_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        return http_origin(value)

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

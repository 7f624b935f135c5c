"""Settings of the replay: how replays are sent, and the Kafka worker that feeds them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, SecretStr, field_validator

from shadoweval.config.cache_hit_rules import DEFAULT_CACHE_HIT_RULES, CacheHitRule
from shadoweval.llm_protocol.messages_request import TRANSLATIONS


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
    ``preflight``: before a capture-log replay, send one real request (the log's first
    replayable one) to each target and stop with a :class:`~shadoweval.errors.PreflightError`
    naming the URL, status and body when the environment fails it
    (:mod:`shadoweval.replay.preflight`); off (``--no-preflight``) for a server that meters
    requests.
    ``candidate_translate``: captured route → the route the *candidate* speaks instead,
    for a candidate that does not serve the captured API; only ``/v1/messages`` →
    ``/v1/chat/completions`` is known (an Anthropic Messages baseline against an
    OpenAI-compatible candidate; :mod:`shadoweval.llm_protocol.messages_request` says what
    the translation drops, which each replay lists in its ``missing_params``). Empty by
    default: every request is replayed in the API it was captured in. A JSON object in
    ``SHADOWEVAL_REPLAY__CANDIDATE_TRANSLATE``, or ``FROM=TO`` strings
    (``--candidate-translate``). A baseline replica always gets the captured API.
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
    preflight: bool = True
    candidate_translate: dict[str, str] = Field(default_factory=dict)

    @field_validator("candidate_translate", mode="before")
    @classmethod
    def _translate_pairs(cls, value: object) -> object:
        """``["FROM=TO", …]`` → ``{FROM: TO}``; every pair must be a known translation."""
        if isinstance(value, list | tuple):
            pairs = {}
            for item in value:
                source, sep, target = str(item).partition("=")
                if not sep:
                    raise ValueError(f"candidate_translate: {item!r} is not FROM=TO")
                pairs[source.strip()] = target.strip()
            value = pairs
        if isinstance(value, dict):
            for source, target in value.items():
                if (source, target) not in TRANSLATIONS:
                    known = ", ".join(f"{a}={b}" for a, b in sorted(TRANSLATIONS))
                    raise ValueError(
                        f"candidate_translate: {source}={target} is not a known translation "
                        f"(known: {known})"
                    )
        return value


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

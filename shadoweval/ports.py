"""The default port of every listener shadow-eval starts, in one place, all distinct.

Each setting or command-line option that binds a port takes its default from here, so two
listeners started with their defaults on one machine never collide (a test collects the
defaults from the settings and the commands and checks they are distinct). The README,
docs/capture.md and docs/deploy.md name these ports.

Listeners that serve nothing unless asked (a replay worker's and a follow compare's
``/metrics``) have no default in their settings; the port here is the one the docs and the
deploy files give them, and :class:`shadoweval.replay.metrics.MetricsServer`'s default.
"""

from __future__ import annotations

from types import MappingProxyType

LIVE_PORT = 8080
"""The live port clients talk to: the sidecar's (``capture serve``) or Envoy's
(``capture envoy``); one setting, ``capture.port``, since the two front ends are
alternatives for the same place in front of the model."""
CAPTURE_ADMIN_PORT = 9464
"""The capture front end's ``/healthz``, ``/readyz``, ``/metrics`` (``capture.admin_port``)."""
EXT_PROC_PORT = 9465
"""The capture service's gRPC port behind Envoy (``envoy.ext_proc_port``)."""
CANARY_ROUTER_PORT = 9466
"""The canary split's session router, gRPC (``envoy.canary.router_port``)."""
REPLAY_METRICS_PORT = 9470
"""A Kafka replay worker's ``/metrics`` (``replay run --metrics-port``)."""
COMPARE_METRICS_PORT = 9471
"""A following ``compare run --follow``'s ``/metrics`` (``--metrics-port``)."""
ENVOY_ADMIN_PORT = 9901
"""Envoy's own admin listener, loopback only (``envoy.admin_port``)."""
API_PORT = 8787
"""The HTTP API (``api serve``, ``api.port``)."""
DASHBOARD_PORT = 8501
"""The dashboard (``dashboard --port``)."""
MOCK_LLM_PORT = 8000
"""The mock LLM server (``mock-llm --port``); also the port of the default
``capture.upstream_url``, which it stands in for."""

DEFAULT_PORTS = MappingProxyType(
    {
        "live": LIVE_PORT,
        "capture_admin": CAPTURE_ADMIN_PORT,
        "ext_proc": EXT_PROC_PORT,
        "canary_router": CANARY_ROUTER_PORT,
        "replay_metrics": REPLAY_METRICS_PORT,
        "compare_metrics": COMPARE_METRICS_PORT,
        "envoy_admin": ENVOY_ADMIN_PORT,
        "api": API_PORT,
        "dashboard": DASHBOARD_PORT,
        "mock_llm": MOCK_LLM_PORT,
    }
)
"""Every listener's default port by listener name (read-only)."""

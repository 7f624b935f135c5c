"""Capture inside an Envoy you already run: ``shadow-eval capture envoy-config --fragment``.

:func:`render_envoy_fragment` writes only what an operator adds to an existing Envoy (a
mesh sidecar, a gateway, a hand-written bootstrap), not a whole bootstrap:

* ``http_filters``: the capture ext_proc filter, **the same entry** the front end's own
  bootstrap has (:func:`shadoweval.capture.envoy_config.capture_filter`): observability
  mode (Envoy sends an asynchronous copy of each part and never waits), ``failure_mode_allow:
  true`` (a capture service that is down never fails a request), request and response
  bodies ``STREAMED``, trailers sent, ``deferred_close_timeout``, the attributes
  ``request.time`` and ``response.code_details``; plus a ``message_timeout``
  (``message_timeout_ms``), which bounds the wait only if someone turns observability mode
  off (in observability mode Envoy waits for nothing). It goes into each
  ``HttpConnectionManager`` that serves the model, **before** ``envoy.filters.http.router``
  (the router must stay last);
* ``clusters``: the capture service's gRPC cluster :data:`CAPTURE_CLUSTER` (HTTP/2,
  circuit breakers at ``max_capture_streams``), the same entry as the bootstrap's; it goes
  under ``static_resources.clusters``.

What the fragment does not carry, and why: the bootstrap's per-route
``ExtProcPerRoute.disabled`` (your routes are yours: every request through that connection
manager opens a processor stream, and the service closes at once the ones it does not
capture — ``POST`` to ``capture.routes`` without ``x-shadow-eval``, sampled); its
listener, routes, buffer filter and live-port limits (your Envoy's own apply).

Source: Envoy's API reference for ``ext_proc.v3.ExternalProcessor``
(envoyproxy.io/docs/envoy/v1.40.0); tested by merging the fragment into a config of the
shape a control plane generates and running the real Envoy 1.40
(``tests/capture/test_envoy_fragment.py``).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Literal

import yaml

from shadoweval.capture.envoy_config import (
    CAPTURE_CLUSTER,
    EXT_PROC_FILTER,
    EnvoyConfigSpec,
    capture_filter,
    envoy_duration,
    service_cluster,
)
from shadoweval.errors import ConfigError

FragmentFormat = Literal["yaml", "json"]
FRAGMENT_FORMATS: tuple[FragmentFormat, ...] = ("yaml", "json")

DEFAULT_MESSAGE_TIMEOUT_MS = 200
"""The fragment's ext_proc ``message_timeout`` (Envoy's own default, 200 ms)."""

ROUTER_FILTER_NAME = "envoy.filters.http.router"
"""The HTTP filter the capture filter goes right before (the last one of a chain)."""


def fragment_parts(
    spec: EnvoyConfigSpec, message_timeout_ms: int = DEFAULT_MESSAGE_TIMEOUT_MS
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(http_filter, cluster)``: the capture filter entry and the capture service's
    cluster for an existing Envoy (see the module docstring). Uses ``spec``'s
    ``ext_proc_host``, ``ext_proc_port``, ``deferred_close_timeout_s`` and
    ``max_capture_streams``; the upstream and listener fields are not used.

    Raises:
        ConfigError: ``envoy.ext_proc_port`` not in 1-65535, or ``message_timeout_ms``
            not in 1-60000 (the message names the option and the value).
    """
    port = spec.ext_proc_port
    if not 1 <= port <= 65535:
        raise ConfigError(
            f"--ext-proc-port = {port!r}: expected a port in 1-65535 (the capture "
            "service's gRPC port your Envoy connects to)",
            field="envoy.ext_proc_port",
            value=port,
        )
    if not 1 <= message_timeout_ms <= 60_000:
        raise ConfigError(
            f"--message-timeout-ms = {message_timeout_ms!r}: expected 1-60000 milliseconds",
            field="message_timeout_ms",
            value=message_timeout_ms,
        )
    # no canary: the fragment captures, it does not split
    http_filter = capture_filter(dataclasses.replace(spec, canary=None))
    http_filter["typed_config"]["message_timeout"] = envoy_duration(message_timeout_ms / 1000)
    cluster = service_cluster(CAPTURE_CLUSTER, spec.ext_proc_host, port, spec.max_capture_streams)
    return http_filter, cluster


def render_envoy_fragment(
    spec: EnvoyConfigSpec,
    *,
    message_timeout_ms: int = DEFAULT_MESSAGE_TIMEOUT_MS,
    output_format: str = "yaml",
) -> str:
    """The fragment as text: ``{"http_filters": [filter], "clusters": [cluster]}`` in YAML
    (with a comment header saying where each part goes) or JSON (no comments: JSON has
    none). Deterministic: same arguments, same text.

    Raises:
        ConfigError: an unknown ``output_format`` (``--format``), or what
            :func:`fragment_parts` raises.
    """
    if output_format not in FRAGMENT_FORMATS:
        raise ConfigError(
            f"--format = {output_format!r}: expected one of {', '.join(FRAGMENT_FORMATS)}",
            field="format",
            value=output_format,
        )
    http_filter, cluster = fragment_parts(spec, message_timeout_ms)
    fragment = {"http_filters": [http_filter], "clusters": [cluster]}
    if output_format == "json":
        return json.dumps(fragment, indent=2) + "\n"
    header = (
        "# shadow-eval capture for an Envoy you already run\n"
        "# (generated by `shadow-eval capture envoy-config --fragment`).\n"
        "# http_filters: add this entry to the http_filters of each HttpConnectionManager\n"
        "#   (envoy.filters.network.http_connection_manager) that serves the model, right\n"
        f"#   BEFORE {ROUTER_FILTER_NAME} (the router stays last).\n"
        "# clusters: add this entry under static_resources.clusters: cluster\n"
        f"#   {CAPTURE_CLUSTER}, the capture service's gRPC port\n"
        f"#   {spec.ext_proc_host}:{spec.ext_proc_port} (run it with\n"
        "#   `shadow-eval capture envoy --no-launch`).\n"
        f"# Live path: {EXT_PROC_FILTER} in observability_mode (Envoy never waits for the\n"
        "#   service) with failure_mode_allow: true (a service that is down or slow never\n"
        '#   fails or slows a request). docs/capture.md, "Capture inside an Envoy you run".\n'
    )
    return header + yaml.safe_dump(fragment, sort_keys=False, default_flow_style=False)

"""The HTTP API's Prometheus metrics (one registry per application), served at ``/metrics``.

* ``shadoweval_api_auth_failures_total{reason}`` — requests refused by bearer
  authentication: ``missing`` (no ``Authorization`` header), ``malformed`` (a header that
  is not ``Bearer <token>``), ``invalid`` (a wrong token), ``query_token`` (no header, but a
  credential-like query parameter: tokens in URLs are refused, they end up in logs).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from shadoweval.probes import MetricSet, counter

AUTH_FAILURE_REASONS: tuple[str, ...] = ("missing", "malformed", "invalid", "query_token")
"""The ``reason`` label values of ``shadoweval_api_auth_failures_total``."""


class ApiMetrics(MetricSet):
    """The API's metrics, registered in ``registry`` (a fresh one by default)."""

    auth_failures = counter(
        "shadoweval_api_auth_failures_total",
        "Requests refused by bearer authentication, by reason (missing, malformed, "
        "invalid, query_token).",
        "reason",
    )

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__(registry)
        for reason in AUTH_FAILURE_REASONS:  # every reason shows, at 0, from the start
            self.auth_failures.labels(reason=reason)

"""How long a pod that serves an LLM needs to stop without cutting a response.

A streamed chat completion that started just before shutdown may run for TTFT plus
``max_tokens`` decode steps. The pod must keep the model and the capture sidecar up that
long after it leaves the Service's endpoints, then give the sidecar time to flush what it
captured. The numbers come from the serving latency an operator measures (TTFT p99 and
TPOT p99, e.g. from LLMPerf or vLLM's ``/metrics``), never from guesses.

Kubernetes' order (the pod termination documentation, "Termination of Pods"): the pod is
removed from the endpoints while each container's ``preStop`` hook runs; each container gets
SIGTERM after its own hook; everything still running is killed
``terminationGracePeriodSeconds`` after the deletion began.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shadoweval.errors import ConfigError

__all__ = ["DrainBudget", "drain_budget"]


@dataclass(frozen=True, slots=True)
class DrainBudget:
    """The shutdown timings of a pod with a model container and the capture sidecar.

    All values are seconds. ``stream_bound_s`` = (TTFT p99 + max_tokens × TPOT p99) / 1000:
    the longest a response that started before shutdown may still run.
    ``sidecar_grace_period_s`` (``capture … --grace-period``) = ⌈stream_bound_s⌉: in-flight
    responses may finish after the sidecar's SIGTERM. ``sidecar_pre_stop_s`` =
    endpoint_drain_s: the sidecar keeps accepting while the endpoints drop the pod.
    ``model_pre_stop_s`` = endpoint_drain_s + sidecar_grace_period_s: the model gets SIGTERM
    only once the sidecar's last response has ended. ``termination_grace_period_s`` =
    ⌈endpoint_drain_s + stream_bound_s + flush_deadline_s⌉ (the pod's
    ``terminationGracePeriodSeconds``), so the sidecar's flush to Kafka or the spool is not
    killed.
    """

    stream_bound_s: float
    sidecar_grace_period_s: int
    sidecar_pre_stop_s: int
    model_pre_stop_s: int
    termination_grace_period_s: int


def drain_budget(
    *,
    ttft_p99_ms: float,
    tpot_p99_ms: float,
    max_tokens: int,
    endpoint_drain_s: int = 5,
    flush_deadline_s: float = 15.0,
) -> DrainBudget:
    """The pod's shutdown timings for a model that answers within the given latencies.

    Args:
        ttft_p99_ms: time to first token, 99th percentile, milliseconds (> 0).
        tpot_p99_ms: time per output token after the first, 99th percentile, milliseconds
            (> 0). LLMPerf's per-request inter-token latency is a usable, slightly
            pessimistic stand-in (it includes the first-token wait).
        max_tokens: the largest ``max_tokens`` (or ``max_completion_tokens``) the service
            allows, tokens (≥ 1).
        endpoint_drain_s: seconds for the endpoints and load balancers to stop sending new
            connections (≥ 0; 5 is common for kube-proxy and ingress controllers).
        flush_deadline_s: the sidecar's ``capture.flush_deadline_s``, seconds (≥ 0).

    Returns:
        The :class:`DrainBudget`.

    Raises:
        ConfigError: a value is out of range; the message names the argument and value.
    """
    checks: tuple[tuple[str, float, bool], ...] = (
        ("ttft_p99_ms", ttft_p99_ms, ttft_p99_ms > 0),
        ("tpot_p99_ms", tpot_p99_ms, tpot_p99_ms > 0),
        ("max_tokens", max_tokens, max_tokens >= 1),
        ("endpoint_drain_s", endpoint_drain_s, endpoint_drain_s >= 0),
        ("flush_deadline_s", flush_deadline_s, flush_deadline_s >= 0),
    )
    for name, value, ok in checks:
        if not ok or not math.isfinite(value):
            raise ConfigError(f"{name} = {value!r}: out of range", field=name, value=value)
    stream_bound_s = (ttft_p99_ms + max_tokens * tpot_p99_ms) / 1000.0
    grace = math.ceil(stream_bound_s)
    return DrainBudget(
        stream_bound_s=stream_bound_s,
        sidecar_grace_period_s=grace,
        sidecar_pre_stop_s=endpoint_drain_s,
        model_pre_stop_s=endpoint_drain_s + grace,
        termination_grace_period_s=math.ceil(endpoint_drain_s + stream_bound_s + flush_deadline_s),
    )
